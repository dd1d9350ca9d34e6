/* A JSON grammar for tests and benchmarks: any JSON value, whitespace
 * bounded so outputs stay compact. */
#ifndef STRATA_TESTS_JSON_GBNF_H
#define STRATA_TESTS_JSON_GBNF_H

static const char json_gbnf[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( member ( \",\" ws member )* )? \"}\" ws\n"
    "member ::= string \":\" ws value\n"
    "array  ::= \"[\" ws ( value ( \",\" ws value )* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\" ws\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ws\n"
    "ws     ::= [ \\t\\n]{0,2}\n";

#endif
