/* Unit tests of the Jinja engine (src/text/jinja.h): the language features
 * chat templates use, each checked against what Python's Jinja2 3.1 prints
 * for the same template in Hugging Face's environment (trim_blocks,
 * lstrip_blocks, loop controls; the expected strings below were produced
 * by it), and the errors and limits: messages with the template position,
 * step budget, nesting and recursion caps, output and memory caps, and
 * every prefix of a real template parsed and rendered without a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testdata.h"
#include "text/chat_template.h"
#include "text/jinja.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Variables shared by the cases that ask for them. */
static const char *const g_vars_json =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Hi\"},"
    " {\"role\": \"assistant\", \"content\": \" ok \"}], \"n\": null, \"d\": {\"b\": 1, \"a\": [1, 2]},"
    " \"s\": \"h\303\251llo w\303\266rld\", \"xs\": [3, 1, 2], \"t\": true, \"f\": 1.5}";

typedef struct render_case {
    const char *name;
    const char *tmpl;
    bool use_vars;
    const char *want;
} render_case;

/* Expected outputs are Jinja2's, except methods_mutate: Hugging Face's
 * immutable sandbox refuses list.append/dict.update, this engine allows
 * them (see jinja_methods.c), so that row holds Python's plain result. */
static const render_case g_cases[] = {
    {"text",
     "plain text",
     false,
     "plain text"},
    {"trailing_newline_dropped",
     "a\n",
     false,
     "a"},
    {"only_one_trailing_newline_dropped",
     "a\n\n",
     false,
     "a\n"},
    {"crlf_normalized",
     "a\r\nb",
     false,
     "a\nb"},
    {"trim_blocks",
     "{% if true %}\nx\n{% endif %}\ny",
     false,
     "x\ny"},
    {"lstrip_blocks",
     "a\n    {% if true %}b{% endif %}\n",
     false,
     "a\nb"},
    {"lstrip_not_after_text",
     "{{ 'x' }}  {% if true %}y{% endif %}",
     false,
     "x  y"},
    {"lstrip_plus_disables",
     "x\n  {%+ if true %}y{% endif %}",
     false,
     "x\n  y"},
    {"trim_plus_disables",
     "{% if true +%}\ny{% endif %}",
     false,
     "\ny"},
    {"minus_strips_both_sides",
     "a  \n {%- if true -%} \n b {%- endif %}",
     false,
     "ab"},
    {"var_minus",
     "a  {{- 'b' -}}  c",
     false,
     "abc"},
    {"var_no_trim_blocks",
     "{{ 'a' }}\nb",
     false,
     "a\nb"},
    {"comment",
     "a {# c #}\nb\n  {# d #}\nc",
     false,
     "a b\nc"},
    {"comment_minus",
     "a {#- c -#} b",
     false,
     "ab"},
    {"raw",
     "{% raw %}{{ x }}{% if %}{% endraw %}",
     false,
     "{{ x }}{% if %}"},
    {"raw_minus",
     "{% raw -%}   a   {%- endraw %}",
     false,
     "a"},
    {"string_escapes",
     "{{ \"a\\tb\\u00e9\\x41\\101\\\\\" 'c' }}",
     false,
     "a\tb\303\251AA\\c"},
    {"string_quotes",
     "{{ 'it\\'s' ~ \"\\\"q\\\"\" }}",
     false,
     "it's\"q\""},
    {"numbers",
     "{{ 1_000 }} {{ 1.5e3 }} {{ 0x1F }} {{ 10 / 4 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
     false,
     "1000 1500.0 31 2.5 2 -4 2 1.5 1024 0.5"},
    {"float_repr",
     "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }} {{ 1/3 }} {{ 123456789.123 }}",
     false,
     "1.0 0.30000000000000004 1e+16 1000000000000000.0 0.0001 1e-05 -0.0 0.3333333333333333 123456789.123"},
    {"python_str",
     "{{ none }} {{ true }} {{ false }} {{ [1, 'a', none, true, 1.5] }} {{ {'a': \"b'c\"} }} {{ (1,) }} {{ (1, 2) }} {{ () }}",
     false,
     "None True False [1, 'a', None, True, 1.5] {'a': \"b'c\"} (1,) (1, 2) ()"},
    {"repr_escapes",
     "{{ ['a\\nb', \"it's\", 'q\"', '\303\251'] }}",
     false,
     "['a\\nb', \"it's\", 'q\"', '\303\251']"},
    {"concat_tilde",
     "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ u }}",
     false,
     "a1NoneTrue1.5"},
    {"str_mul",
     "{{ 'ab' * 3 }}|{{ 2 * 'c' }}|{{ 'x' * 0 }}|{{ [1] * 3 }}",
     false,
     "ababab|cc||[1, 1, 1]"},
    {"list_add",
     "{{ [1] + [2, 3] }}{{ 'a' + 'b' }}",
     false,
     "[1, 2, 3]ab"},
    {"bool_is_int",
     "{{ true + 1 }} {{ true == 1 }} {{ 1 == 1.0 }} {{ 'a' == 1 }}",
     false,
     "2 True True False"},
    {"compare_chain",
     "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }}",
     false,
     "True False True True True True"},
    {"in_operator",
     "{{ 'a' in 'cat' }} {{ 'x' not in ['a'] }} {{ 'a' in {'a': 1} }} {{ 2 in [1, 2] }} {{ 'b' in d }}",
     true,
     "True True True True True"},
    {"logic_values",
     "{{ 0 or 'x' }}|{{ '' and 'y' }}|{{ not [] }}|{{ 1 and 2 }}|{{ none or none }}",
     false,
     "x||True|2|None"},
    {"ternary",
     "{{ 'y' if t else 'n' }}{{ 'y' if n else 'n' }}{{ 'z' if false }}|",
     true,
     "yn|"},
    {"precedence_filter_binds_tight",
     "{{ 'a ' + ' b ' | trim + ' c' }}|{{ -1 | abs }}|{{ not 'x' is string }}",
     false,
     "a b c|1|False"},
    {"attr_and_item",
     "{{ messages[0].content }}{{ messages[1]['role'] }}{{ messages[-1].content }}{{ messages.0.role }}{{ d.a[1] }}",
     true,
     "Suser ok system2"},
    {"missing_is_undefined",
     "[{{ messages[0].nope }}][{{ d['zz'] }}][{{ xs[10] }}][{{ n.x }}]{{ messages[0].nope is defined }}{{ xs[10] is undefined }}",
     true,
     "[][][][]FalseTrue"},
    {"dict_method_wins_over_key",
     "{{ {'items': 5}['items'] }} {{ {'items': 5}.get('items') }}",
     false,
     "5 5"},
    {"slicing",
     "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ s[1:4] }} {{ s[::-1] }} {{ s[-3:] }} {{ 'abc'[5:] }}",
     true,
     "[1, 2] [3, 1] [2, 1, 3] [3, 2] \303\251ll dlr\303\266w oll\303\251h rld "},
    {"string_index",
     "{{ s[1] }}{{ s[-1] }}{{ s|length }}{{ s|first }}{{ s|last }}",
     true,
     "\303\251d11hd"},
    {"tests",
     "{{ 'a' is string }}{{ 1 is number }}{{ true is number }}{{ {} is mapping }}{{ [] is iterable }}{{ 'x' is sequence }}{{ {} is sequence }}{{ true is boolean }}{{ 1 is integer }}{{ 1.0 is float }}{{ 1 is float }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ none is none }}{{ false is false }}{{ true is true }}{{ 1 is true }}{{ u is undefined }}{{ n is not none }}{{ 'a' is equalto 'a' }}{{ 2 is eq 2 }}{{ 3 is gt 2 }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ range is callable }}",
     true,
     "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueFalseTrueTrueTrueFalseTrueFalseTrueTrueTrueTrueTrueTrue"},
    {"filters_strings",
     "{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hello wORLD they\\'re'|title }}|{{ 'hELLO'|capitalize }}|{{ 'a-b-c'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'a b  c'|wordcount }}",
     false,
     "x|a|ABC|abc|Hello World They're|Hello|a+b+c|bba|3"},
    {"filters_unicode_case",
     "{{ s|upper }} {{ s|title }} {{ s|length }}",
     true,
     "H\303\211LLO W\303\226RLD H\303\251llo W\303\266rld 11"},
    {"filters_lists",
     "{{ xs|sort }}{{ xs|sort(reverse=true) }}{{ ['b','A','c']|sort }}{{ ['b','A','c']|sort(case_sensitive=true) }}{{ xs|first }}{{ xs|last }}{{ xs|length }}{{ xs|count }}{{ xs|reverse|list }}{{ [1,1,2,1]|unique|list }}{{ ['A','a','b']|unique|list }}{{ xs|sum }}{{ xs|min }}{{ xs|max }}{{ xs|join(', ') }}{{ xs|join }}",
     true,
     "[1, 2, 3][3, 2, 1]['A', 'b', 'c']['A', 'b', 'c']3233[2, 1, 3][1, 2]['A', 'b']6133, 1, 2312"},
    {"filter_default",
     "{{ u|default('d') }}|{{ ''|default('e') }}|{{ ''|default('e', true) }}|{{ none|default('f') }}|{{ u|d('g') }}|{{ 0|default(5, boolean=true) }}",
     false,
     "d||e|None|g|5"},
    {"filter_numbers",
     "{{ 1.7|int }} {{ '12'|int }} {{ ' 42 '|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '3.9'|int }} {{ '3.5'|float }} {{ 3|float }} {{ 'q'|float }} {{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ -3|abs }} {{ -2.5|abs }} {{ '%s-%d'|format('a', 3) }}",
     false,
     "1 12 42 0 7 3 3.5 3.0 0.0 2.0 4.0 3.14 3.0 3 2.5 a-3"},
    {"filter_items_dictsort",
     "{{ d|items|list }}{{ d|dictsort }}{{ {'b': 1, 'A': 2, 'a': 3}|dictsort }}{{ {'x': 2, 'y': 1}|dictsort(by='value') }}",
     true,
     "[('b', 1), ('a', [1, 2])][('a', [1, 2]), ('b', 1)][('A', 2), ('a', 3), ('b', 1)][('y', 1), ('x', 2)]"},
    {"filter_select_map",
     "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}{{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }}{{ [{'a': 1}, {'b': 3}]|selectattr('a')|list }}{{ [{'a': 1}, {'b': 3}]|selectattr('a', 'defined')|list }}{{ [1, 2, 3, 4]|select('odd')|list }}{{ [1, 2, 3, 4]|reject('even')|list }}{{ ['a', 'B']|map('upper')|list }}{{ [{'a': {'b': 5}}]|map(attribute='a.b')|list }}{{ [{'x': 1}, {}]|map(attribute='x', default=0)|list }}",
     true,
     "['Hi']system,assistant[{'a': 1}][{'a': 1}][1, 3][1, 3]['A', 'B'][5][1, 0]"},
    {"filter_tojson",
     "{{ d|tojson }}|{{ [1, '\303\251', none, true, 1.0, 'q\"\\n\\u0001']|tojson }}|{{ d|tojson(indent=2) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ '\303\251'|tojson(ensure_ascii=true) }}|{{ {'a': 1}|tojson(separators=(',', ':')) }}|{{ [] | tojson(indent=2) }}",
     true,
     "{\"b\": 1, \"a\": [1, 2]}|[1, \"\303\251\", null, true, 1.0, \"q\\\"\\n\\u0001\"]|{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2\n  ]\n}|{\"a\": 2, \"b\": 1}|\"\\u00e9\"|{\"a\":1}|[]"},
    {"blocks_have_their_own_scope",
     "{% set q = 0 %}{% set b %}{{ q }}{% set q = 1 %}{{ q }}{% endset %}[{{ q }}{{ b }}]"
     "{% filter upper %}{% set r = 1 %}{% endfilter %}[{{ r }}]"
     "{% generation %}{{ q }}{% set q = 2 %}{{ q }}{% endgeneration %}[{{ q }}]",
     false,
     "[001][]02[0]"},
    {"filter_tojson_positional",
     "{{ ['\303\251']|tojson(true) }}|{{ [1]|tojson(false, 1) }}",
     false,
     "[\"\\u00e9\"]|[\n 1\n]"},
    {"loop_depth_is_one_without_recursion",
     "{% for a in [1] %}{% for b in [2] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}{% endfor %}",
     false,
     "10"},
    {"filter_indent",
     "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}",
     false,
     "a\n  b\n\n  c|  a\n  b|a\n  \n  b|x\n> y"},
    {"filter_misc",
     "{{ [1, 2, 3, 4, 5]|batch(2)|list }}{{ [1, 2, 3]|batch(2, 0)|list }}{{ 'a<b>&\"\\''|e }}{{ 'x'|safe }}{{ 5|string ~ 1 }}{{ 'ab'|list }}{{ d|list }}{{ 'hi'|center(6) }}|",
     true,
     "[[1, 2], [3, 4], [5]][[1, 2], [3, 0]]a&lt;b&gt;&amp;&#34;&#39;x51['a', 'b']['b', 'a']  hi  |"},
    {"markup_plus_escapes",
     "{{ '<'|safe + '<' }}{{ '<' + '>'|safe }}{{ '<'|safe ~ '<' }}{{ ('a'|safe) is escaped }}",
     false,
     "<&lt;&lt;><<True"},
    {"methods_str",
     "{{ '  a  '.strip() }}|{{ 'xay'.strip('xy') }}|{{ '  a  '.lstrip() }}|{{ '  a  '.rstrip() }}|{{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ ' a b c '.split(none, 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'Hello'.startswith(('x', 'H')) }}|{{ 'x.py'.endswith('.py') }}|{{ 'abcabc'.count('b') }}|{{ 'abc'.find('c') }}|{{ 'abc'.find('z') }}|{{ 'a-b'.replace('-', '+') }}|{{ 'hello world'.title() }}|{{ 'x'.upper() }}{{ 'Y'.lower() }}|{{ ', '.join(['a', 'b']) }}|{{ 'a\\nb'.splitlines() }}|{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}|{{ '{} and {}'.format('x', 'y') }}|{{ 'prefix_x'.removeprefix('prefix_') }}",
     false,
     "a|a|a  |  a|['a', 'b', 'c']|['a', 'b', '', 'c']|['a', 'b,c']|['a', 'b c ']|['a,b', 'c']|True|True|2|2|-1|a+b|Hello World|Xy|a, b|['a', 'b']|TrueTrue|x and y|x"},
    {"methods_dict_list",
     "{{ d.get('b') }}{{ d.get('z') }}{{ d.get('z', 'dflt') }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ xs.index(1) }}{{ xs.count(3) }}",
     true,
     "1Nonedflt['b', 'a'][1, [1, 2]][('b', 1), ('a', [1, 2])]b=1;a=[1, 2];11"},
    {"methods_mutate",
     "{% set l = [1] %}{% set _ = l.append(2) %}{{ l }}{{ l.pop() }}{{ l }}{% set dd = {'a': 1} %}{% set _ = dd.update({'b': 2}) %}{{ dd }}{{ dd.pop('a') }}{{ dd }}",
     false,
     "[1, 2]2[1]{'a': 1, 'b': 2}1{'b': 2}"},
    {"for_loop_vars",
     "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('a', 'b') }};{% endfor %}",
     true,
     "1032TrueFalse3[|1]a;2121FalseFalse3[3|2]b;3210FalseTrue3[1|]a;"},
    {"for_filter_else",
     "{% for x in [1, 2, 3, 4] if x is even %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}|{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1] if x > 5 %}a{% else %}filtered{% endfor %}",
     false,
     "2:1/2 4:2/2 |empty|filtered"},
    {"for_unpack_and_dict",
     "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for c in 'ab' %}{{ c }}.{% endfor %}{% for x in u %}never{% endfor %}",
     true,
     "3,7,baa.b."},
    {"for_nested_loop",
     "{% for i in [1, 2] %}{% for j in 'ab' %}{{ loop.index }}{{ j }}{% endfor %}{{ loop.index }}|{% endfor %}",
     false,
     "1a2b1|1a2b2|"},
    {"break_continue",
     "{% for i in range(10) %}{% if i == 5 %}{% break %}{% endif %}{% if i is odd %}{% continue %}{% endif %}{{ i }}{% endfor %}",
     false,
     "024"},
    {"scoping_loop",
     "{% set z = 0 %}{% for i in [1, 2, 3] %}{{ z }}{% set z = i %}{{ z }},{% endfor %}|{{ z }}|{% for i in [1, 2] %}{% set q = i %}{% endfor %}{{ q is defined }}",
     false,
     "01,02,03,|0|False"},
    {"scoping_if_shares",
     "{% if true %}{% set w = 5 %}{% endif %}{{ w }}",
     false,
     "5"},
    {"namespace",
     "{% set ns = namespace(a=1, found=false) %}{% for i in [1, 2, 3] %}{% set ns.a = ns.a + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.a }} {{ ns.found }} {{ ns }}",
     false,
     "7 True <Namespace {'a': 7, 'found': True}>"},
    {"set_tuple_and_block",
     "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set blk %}  hi {{ a }}  {% endset %}[{{ blk }}]{% set t | upper %}up{% endset %}{{ t }}",
     false,
     "12[  hi 1  ]UP"},
    {"macro",
     "{% macro m(a, b=2, c='x') %}[{{ a }},{{ b }},{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(b=5, a=0) }}{{ m() }}{{ m(1, c=none) }}",
     false,
     "[1,2,x][1,3,x][0,5,x][,2,x][1,2,None]"},
    {"macro_sees_top_level_at_call",
     "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}{% for y in [1] %}{% macro n() %}{{ y }}{% endmacro %}{% endfor %}",
     false,
     "2"},
    {"macro_not_caller_locals",
     "{% macro m() %}[{{ y }}]{% endmacro %}{% for y in [1, 2] %}{{ m() }}{% endfor %}",
     false,
     "[][]"},
    {"macro_recursion",
     "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1)|int) }}{% endif %}{% endmacro %}{{ fact(10) }}",
     false,
     "3628800"},
    {"macro_default_sees_args",
     "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}",
     false,
     "3,6"},
    {"call_block",
     "{% macro box(t) %}<{{ t }}:{{ caller() }}>{% endmacro %}{% call box('x') %}inner{% endcall %}{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}({{ item }}){% endcall %}",
     false,
     "<x:inner>(1)(2)"},
    {"filter_block",
     "{% filter upper %}abc {{ 'd' }}{% endfilter %}|{% filter trim|upper %}  x  {% endfilter %}",
     false,
     "ABC D|X"},
    {"with_block",
     "{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}",
     false,
     "211"},
    {"generation_block",
     "{% generation %}gen{% endgeneration %}",
     false,
     "gen"},
    {"range_dict",
     "{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ dict(a=1, b='x') }}{{ dict([['k', 'v']]) }}",
     false,
     "[0, 1, 2][1, 4, 7][5, 3, 1]{'a': 1, 'b': 'x'}{'k': 'v'}"},
    {"strftime_now",
     "{{ strftime_now('%Y-%m-%d %d %B %b %A %a %j %H:%M') }}|{{ strftime_now('%-d %e') }}",
     false,
     "2026-11-30 30 November Nov Monday Mon 334 00:00|30 30"},
    {"undefined_prints_empty",
     "[{{ u }}][{{ u|string }}][{{ u|trim }}][{{ u|length }}][{{ u|list }}]{{ u == u }}{{ 1 in u }}{{ not u }}",
     false,
     "[][][][0][[]]TrueFalseTrue"},
    {"percent_format",
     "{{ '%s and %s' % ('a', 'b') }} {{ '%d%%' % 50 }} {{ '%r' % 'x' }}",
     false,
     "a and b 50% 'x'"},
    {"whitespace_in_tags",
     "{%-\nif\ntrue\n-%}\n ok \n{%- endif -%}",
     false,
     "ok"},
    {"gt_braces_in_var",
     "{{ {'a': {'b': 1}}}}",
     false,
     "{'a': {'b': 1}}"},
    {"loop_over_messages",
     "{% for m in messages %}{{ '<|' + m.role + '|>' + m.content | trim + '\\n' }}{% endfor %}{% if add_generation_prompt is defined %}G{% endif %}",
     true,
     "<|system|>S\n<|user|>Hi\n<|assistant|>ok\n"},
};

static json_t *shared_vars(void)
{
    json_error_t je;
    json_t *v = json_loads(g_vars_json, 0, &je);
    if (v == NULL) fail_msg("bad test variables: %s", je.text);
    return v;
}

/* Parses and renders tmpl with vars (may be NULL) and limits (may be NULL). */
static int render(const char *tmpl, size_t len, const json_t *vars, const jinja_limits *lim,
                  char **out, size_t *out_len, strata_err *err)
{
    jinja_template *t;
    *out = NULL;
    *out_len = 0;
    int rc = jinja_template_parse(&t, tmpl, len, err);
    if (rc != 0) return rc;
    jinja_render_opts o = {.vars = vars, .year = 2026, .month = 11, .day = 30};
    if (lim != NULL) o.limits = *lim;
    rc = jinja_render(t, &o, out, out_len, err);
    jinja_template_free(t);
    return rc;
}

static void test_language_matches_jinja2(void **state)
{
    (void)state;
    json_t *vars = shared_vars();
    size_t n_fail = 0, n = sizeof(g_cases) / sizeof(g_cases[0]);
    for (size_t i = 0; i < n; i++) {
        const render_case *c = &g_cases[i];
        strata_err err = {0};
        char *out;
        size_t len;
        int rc = render(c->tmpl, strlen(c->tmpl), c->use_vars ? vars : NULL, NULL, &out, &len, &err);
        if (rc != 0) {
            print_message("%s: error %d: %s\n", c->name, rc, err.msg);
            n_fail++;
        } else if (len != strlen(c->want) || memcmp(out, c->want, len) != 0) {
            print_message("%s:\n  want [%s]\n  got  [%.*s]\n", c->name, c->want, (int)len, out);
            n_fail++;
        }
        free(out);
    }
    json_decref(vars);
    if (n_fail > 0) fail_msg("%zu of %zu cases differ from Jinja2", n_fail, n);
}

typedef struct error_case {
    const char *tmpl;
    int code;
    const char *want; /* a substring of the message */
} error_case;

static const error_case g_errors[] = {
    /* an undefined from a runtime key must not point into the freed key */
    {"{{ {}['a' ~ 'b'] + 1 }}", STRATA_EINVAL, "undefined"},
    {"{% set k = 'na' ~ 'me' %}{{ ({} | attr(k ~ '2')) + 1 }}", STRATA_EINVAL, "undefined"},
    {"hello\n{{ x | nofilter }}", STRATA_EINVAL, "template 2:8: no filter named 'nofilter'"},
    {"a\n{% if true %}\nb", STRATA_EFORMAT, "unclosed 'if' block (opened at 2:1)"},
    {"{% for x in xs %}{% endif %}", STRATA_EFORMAT, "template 1:21: unexpected 'endif'"},
    {"{% endfor %}", STRATA_EFORMAT, "unexpected 'endfor' (no block is open)"},
    {"x\n  {{ raise_exception('Bad role: ' ~ 'tool') }}", STRATA_EINVAL, "template 2:6: Bad role: tool"},
    {"{{ 1 + }}", STRATA_EFORMAT, "template 1:8: expected an expression, got '}}'"},
    {"{{ 'abc }}", STRATA_EFORMAT, "template 1:4: unterminated string literal"},
    {"ok {{ x }", STRATA_EFORMAT, "template 1:9: unexpected '}'"},
    {"ok {{ x ", STRATA_EFORMAT, "template 1:4: unclosed variable tag"},
    {"{# note", STRATA_EFORMAT, "template 1:1: unclosed comment"},
    {"{% raw %}x", STRATA_EFORMAT, "template 1:1: unclosed raw block"},
    {"{% include 'x.jinja' %}", STRATA_EUNSUPPORTED, "template 1:4: the 'include' tag is not supported"},
    {"{% extends 'base' %}", STRATA_EUNSUPPORTED, "'extends' tag is not supported"},
    {"{% frobnicate %}", STRATA_EFORMAT, "template 1:4: unknown tag 'frobnicate'"},
    {"{% break %}", STRATA_EFORMAT, "template 1:4: 'break' outside a loop"},
    {"{% for x in [1] recursive %}{% endfor %}", STRATA_EUNSUPPORTED, "recursive loops are not supported"},
    {"{{ f(*a) }}", STRATA_EUNSUPPORTED, "not supported"},
    {"{{ foo.bar }}", STRATA_EINVAL, "template 1:7: 'foo' is undefined"},
    {"{{ foo() }}", STRATA_EINVAL, "template 1:4: 'foo' is undefined"},
    {"{{ foo + 1 }}", STRATA_EINVAL, "'foo' is undefined"},
    {"{{ [1] + 1 }}", STRATA_EINVAL, "unsupported operand type(s) for +: 'list' and 'int'"},
    {"{{ 'a' + 1 }}", STRATA_EINVAL, "can only concatenate str (not \"int\") to str"},
    {"{{ 1 / 0 }}", STRATA_EINVAL, "division by zero"},
    {"{{ 1 // 0 }}", STRATA_EINVAL, "integer division or modulo by zero"},
    {"{{ u | tojson }}", STRATA_EINVAL, "Object of type Undefined is not JSON serializable"},
    {"{{ namespace() | tojson }}", STRATA_EINVAL, "Object of type Namespace is not JSON serializable"},
    {"{% set x = 1 %}{% set x.y = 2 %}", STRATA_EINVAL, "can only set attributes of a namespace"},
    {"{{ 'a' < 1 }}", STRATA_EINVAL, "'<' not supported between instances of 'str' and 'int'"},
    {"{{ none | length }}", STRATA_EINVAL, "object of type 'NoneType' has no len()"},
    {"{% for x in 5 %}{% endfor %}", STRATA_EINVAL, "'int' object is not iterable"},
    {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", STRATA_EINVAL, "macro 'm' takes not more than 1 argument(s)"},
    {"{% macro m(a) %}{% endmacro %}{{ m(b=2) }}", STRATA_EINVAL, "macro 'm' has no argument named 'b'"},
    {"{{ 'x' is frob }}", STRATA_EINVAL, "no test named 'frob'"},
    {"{% for a, b in [[1, 2, 3]] %}{% endfor %}", STRATA_EINVAL, "too many values to unpack (expected 2, got 3)"},
    {"{% for a, b in ['xyz'] %}{% endfor %}", STRATA_EINVAL, "too many values to unpack (expected 2, got 3)"},
    {"{% set a, b = 'x' %}", STRATA_EINVAL, "not enough values to unpack (expected 2, got 1)"},
    {"{{ 'a'.nomethod() }}", STRATA_EINVAL, "'str' object has no attribute 'nomethod'"},
    {"{{ 2 ** 100 }}", STRATA_ERANGE, "integer overflow"},
    {"{{ range(1, 2, 0) }}", STRATA_EINVAL, "must not be zero"},
    {"{{ [].pop() }}", STRATA_EINVAL, "pop from empty list"},
    {"{{ 'x'.split('') }}", STRATA_EINVAL, "empty separator"},
    {"{{ {}[[1]] }}", STRATA_EINVAL, "unhashable type: 'list'"},
    {"{{ strftime_now(1) }}", STRATA_EINVAL, "strftime_now() takes one format string"},
    {"{% if %}{% endif %}", STRATA_EFORMAT, "template 1:7: expected an expression, got '%}'"},
    {"{{ (1 }}", STRATA_EFORMAT, "template 1:7: unexpected '}', expected ')'"},
    {"{{ x) }}", STRATA_EFORMAT, "template 1:5: unexpected ')'"},
    {"{% if (x %}{% endif %}", STRATA_EFORMAT, "template 1:10: expected ')', got '%}'"},
    {"{% if x ", STRATA_EFORMAT, "template 1:1: unclosed block tag"},
    {"{% set %}", STRATA_EFORMAT, "expected a variable name"},
    {"{{ a b }}", STRATA_EFORMAT, "expected end of print statement"},
    {"{{ $ }}", STRATA_EFORMAT, "unexpected character '$'"},
};

static void test_errors_carry_position(void **state)
{
    (void)state;
    size_t n_fail = 0, n = sizeof(g_errors) / sizeof(g_errors[0]);
    for (size_t i = 0; i < n; i++) {
        const error_case *c = &g_errors[i];
        strata_err err = {0};
        char *out;
        size_t len;
        int rc = render(c->tmpl, strlen(c->tmpl), NULL, NULL, &out, &len, &err);
        if (rc != c->code || strstr(err.msg, c->want) == NULL || strncmp(err.msg, "template", 8) != 0) {
            print_message("[%s]: want %d '%s', got %d '%s'\n", c->tmpl, c->code, c->want, rc, err.msg);
            n_fail++;
        }
        free(out);
    }
    if (n_fail > 0) fail_msg("%zu of %zu error cases wrong", n_fail, n);
}

static void expect_limit(const char *tmpl, const jinja_limits *lim, const char *want)
{
    strata_err err = {0};
    char *out;
    size_t len;
    int rc = render(tmpl, strlen(tmpl), NULL, lim, &out, &len, &err);
    free(out);
    if (rc != STRATA_ERANGE || strstr(err.msg, want) == NULL)
        fail_msg("[%.60s]: want ERANGE '%s', got %d '%s'", tmpl, want, rc, err.msg);
}

static void test_step_budget(void **state)
{
    (void)state;
    expect_limit("{% for i in range(100000000) %}{% endfor %}", NULL, "budget");
    expect_limit("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
                 NULL, "budget");
    jinja_limits small = {.max_steps = 10000};
    expect_limit("{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}"
                 "{% endfor %}{% endfor %}{% endfor %}", &small, "budget of 10000 steps");
    /* one huge string costs in proportion to its bytes */
    expect_limit("{% for i in range(100) %}{{ ('x' * 100000)|length }}{% endfor %}", &small, "budget");
    expect_limit("{{ [0] * 100000000 }}", &small, "budget");
}

static char *repeat(const char *head, const char *unit, size_t n, const char *mid, const char *unit2,
                    const char *tail)
{
    size_t len = strlen(head) + n * (strlen(unit) + strlen(unit2)) + strlen(mid) + strlen(tail) + 1;
    char *s = malloc(len), *p = s;
    assert_non_null(s);
    p += sprintf(p, "%s", head);
    for (size_t i = 0; i < n; i++) p += sprintf(p, "%s", unit);
    p += sprintf(p, "%s", mid);
    for (size_t i = 0; i < n; i++) p += sprintf(p, "%s", unit2);
    sprintf(p, "%s", tail);
    return s;
}

static void expect_error(char *tmpl, int code, const char *want)
{
    strata_err err = {0};
    char *out;
    size_t len;
    int rc = render(tmpl, strlen(tmpl), NULL, NULL, &out, &len, &err);
    free(out);
    if (rc != code || strstr(err.msg, want) == NULL)
        fail_msg("[%.50s...]: want %d '%s', got %d '%s'", tmpl, code, want, rc, err.msg);
    free(tmpl);
}

static void test_deep_nesting_is_an_error(void **state)
{
    (void)state;
    const size_t deep = 100000;
    expect_error(repeat("{{ ", "(", deep, "1", ")", " }}"), STRATA_EFORMAT, "too deeply");
    expect_error(repeat("{{ ", "[", deep, "1", "]", " }}"), STRATA_EFORMAT, "too deeply");
    expect_error(repeat("{{ ", "{'a': ", deep, "1", "}", " }}"), STRATA_EFORMAT, "too deeply");
    expect_error(repeat("{{ ", "not ", deep, "1", "", " }}"), STRATA_EFORMAT, "too deeply");
    expect_error(repeat("{{ ", "-", deep, "1", "", " }}"), STRATA_EFORMAT, "too deeply");
    expect_error(repeat("", "{% if true %}", 20000, "x", "{% endif %}", ""), STRATA_EFORMAT, "too deeply");
    expect_error(repeat("", "{% for x in [1] %}", 5000, "x", "{% endfor %}", ""), STRATA_EFORMAT, "too deeply");
    /* long flat chains parse, and evaluating them deeper than the cap fails cleanly */
    expect_error(repeat("{{ 1", " + 1", deep, "", "", " }}"), STRATA_ERANGE, "deeper than");
    expect_error(repeat("{{ 'x'", "|trim", deep, "", "", " }}"), STRATA_ERANGE, "deeper than");
    expect_error(repeat("{{ x", ".a", deep, "", "", " }}"), STRATA_ERANGE, "deeper than");
    /* unbounded recursion */
    expect_error(strdup("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}"), STRATA_ERANGE, "deeper than");
    /* a chain of 150 is fine */
    char *ok = repeat("{{ 0", " + 1", 150, "", "", " }}");
    strata_err err = {0};
    char *out;
    size_t len;
    assert_int_equal(render(ok, strlen(ok), NULL, NULL, &out, &len, &err), 0);
    assert_string_equal(out, "150");
    free(out);
    free(ok);
}

static void test_output_and_memory_caps(void **state)
{
    (void)state;
    jinja_limits out_cap = {.max_output_bytes = 1000};
    expect_limit("{% for i in range(100) %}{{ 'xxxxxxxxxx' * 10 }}{% endfor %}", &out_cap, "output exceeds 1000 bytes");
    jinja_limits mem = {.max_memory_bytes = 1 << 20};
    expect_limit("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                 &mem, "memory");
    expect_limit("{% set l = [] %}{% for i in range(1000000) %}{% set _ = l.append(i) %}{% endfor %}", &mem, "memory");
    expect_limit("{{ 'x' * 10000000000 }}", &mem, "memory");
    expect_limit("{% set ns = namespace(d={}) %}{% for i in range(100000) %}{% set _ = ns.d.update({i: i}) %}{% endfor %}",
                 &mem, "memory");
    /* reference cycles are freed with the render (ASan would report a leak) */
    strata_err err = {0};
    char *out;
    size_t len;
    const char *cyc = "{% set ns = namespace(l=[]) %}{% set _ = ns.l.append(ns) %}{% set _ = ns.l.append(ns.l) %}ok";
    assert_int_equal(render(cyc, strlen(cyc), NULL, NULL, &out, &len, &err), 0);
    assert_string_equal(out, "ok");
    free(out);
    /* printing a self-containing list stops at the nesting cap */
    const char *self = "{% set l = [] %}{% set _ = l.append(l) %}{{ l }}";
    assert_int_equal(render(self, strlen(self), NULL, NULL, &out, &len, &err), STRATA_ERANGE);
    free(out);
}

static void test_render_many_times(void **state)
{
    (void)state;
    const char *src = "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}{{ n }}";
    jinja_template *t;
    strata_err err = {0};
    assert_int_equal(jinja_template_parse(&t, src, strlen(src), &err), 0);
    for (int i = 0; i < 3; i++) {
        char vars_text[128];
        snprintf(vars_text, sizeof(vars_text),
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"m%d\"}], \"n\": %d}", i, i);
        json_t *vars = json_loads(vars_text, 0, NULL);
        jinja_render_opts o = {.vars = vars, .year = 2026, .month = 1, .day = 2};
        char *out, want[64];
        size_t len;
        assert_int_equal(jinja_render(t, &o, &out, &len, &err), 0);
        snprintf(want, sizeof(want), "user:m%d;%d", i, i);
        assert_string_equal(out, want);
        assert_int_equal(len, strlen(want));
        free(out);
        json_decref(vars);
    }
    jinja_template_free(t);
    /* vars must be an object */
    json_t *arr = json_array();
    jinja_render_opts bad = {.vars = arr};
    char *out;
    size_t len;
    assert_int_equal(jinja_template_parse(&t, "x", 1, &err), 0);
    assert_int_equal(jinja_render(t, &bad, &out, &len, &err), STRATA_EINVAL);
    jinja_template_free(t);
    json_decref(arr);
    /* a date strftime_now could not print is refused */
    jinja_render_opts bad_date = {.year = 2026, .month = 13, .day = 1};
    assert_int_equal(jinja_template_parse(&t, "x", 1, &err), 0);
    assert_int_equal(jinja_render(t, &bad_date, &out, &len, &err), STRATA_EINVAL);
    jinja_template_free(t);
    /* the source itself is bounded */
    size_t big = JINJA_MAX_SOURCE + 1;
    char *huge = malloc(big);
    assert_non_null(huge);
    memset(huge, 'x', big);
    assert_int_equal(jinja_template_parse(&t, huge, big, &err), STRATA_ERANGE);
    free(huge);
}

static void test_output_may_hold_nul(void **state)
{
    (void)state;
    strata_err err = {0};
    char *out;
    size_t len;
    const char *src = "a{{ s }}b";
    json_t *vars = json_loads("{\"s\": \"x\\u0000y\"}", JSON_ALLOW_NUL, NULL);
    assert_non_null(vars);
    assert_int_equal(render(src, strlen(src), vars, NULL, &out, &len, &err), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(out, "ax\0yb", 5);
    free(out);
    json_decref(vars);
    /* a NUL in the template text is text too */
    assert_int_equal(render("p\0q", 3, NULL, NULL, &out, &len, &err), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(out, "p\0q", 3);
    free(out);
}

static void test_hostile_json_vars(void **state)
{
    (void)state;
    /* nesting deeper than the engine takes, built without the parser's limit */
    json_t *root = json_array(), *cur = root;
    for (int i = 0; i < 1000; i++) {
        json_t *next = json_array();
        json_array_append_new(cur, next);
        cur = next;
    }
    json_t *vars = json_object();
    json_object_set_new(vars, "deep", root);
    strata_err err = {0};
    char *out;
    size_t len;
    const char *src = "{{ deep|length }}";
    assert_int_equal(render(src, strlen(src), vars, NULL, &out, &len, &err), STRATA_ERANGE);
    assert_non_null(strstr(err.msg, "nested too deeply"));
    free(out);
    json_decref(vars);
}

/* Parses and, when that works, renders src[0:n) with one byte cut at
 * `cut` (n: none); counts what worked. Errors must carry a message. */
static void parse_render_cut(const char *src, size_t n, size_t cut, const json_t *vars,
                             size_t *n_parsed, size_t *n_rendered)
{
    size_t len = cut < n ? n - 1 : n;
    char *copy = malloc(len + 1); /* exactly sized, so ASan sees overreads */
    assert_non_null(copy);
    if (cut < n) {
        memcpy(copy, src, cut);
        memcpy(copy + cut, src + cut + 1, n - cut - 1);
    } else {
        memcpy(copy, src, n);
    }
    jinja_template *t;
    strata_err err = {0};
    int rc = jinja_template_parse(&t, copy, len, &err);
    if (rc == 0) {
        (*n_parsed)++;
        jinja_limits lim = {.max_steps = 200000};
        jinja_render_opts o = {.vars = vars, .year = 2026, .month = 11, .day = 30, .limits = lim};
        char *out;
        size_t out_len;
        rc = jinja_render(t, &o, &out, &out_len, &err);
        if (rc == 0) (*n_rendered)++;
        else if (strncmp(err.msg, "template", 8) != 0) fail_msg("render error without a position: %s", err.msg);
        free(out);
        jinja_template_free(t);
    } else if (strncmp(err.msg, "template", 8) != 0) {
        fail_msg("parse error without a position: %s", err.msg);
    }
    free(copy);
}

/* Every prefix of a real template, and the template with each single byte
 * cut out, parse or fail cleanly, and what parses renders or fails cleanly
 * (ASan checks memory). */
static void test_every_split_point_of_a_real_template(void **state)
{
    (void)state;
    char path[4096], conv[4096];
    TESTDATA_FILE(path, "chat-templates/llama.cpp-jinja/Qwen-Qwen2.5-7B-Instruct.jinja");
    TESTDATA_FILE(conv, "golden/templates/conversation.json");
    size_t n;
    char *src = testdata_read_file(path, &n);
    assert_non_null(src);
    json_t *vars = json_load_file(conv, 0, NULL);
    assert_non_null(vars);
    json_object_set_new(vars, "tools", json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                                                  "\"parameters\": {\"type\": \"object\"}}}]", 0, NULL));
    size_t prefix_parsed = 0, prefix_rendered = 0, cut_parsed = 0, cut_rendered = 0;
    for (size_t k = 0; k <= n; k++) parse_render_cut(src, k, k, vars, &prefix_parsed, &prefix_rendered);
    for (size_t k = 0; k < n; k++) parse_render_cut(src, n, k, vars, &cut_parsed, &cut_rendered);
    print_message("%zu prefixes: %zu parse, %zu render; %zu cuts: %zu parse, %zu render\n", n + 1,
                  prefix_parsed, prefix_rendered, n, cut_parsed, cut_rendered);
    assert_true(prefix_parsed >= 1 && cut_parsed > n / 2 && cut_rendered > n / 4);
    json_decref(vars);
    free(src);
}

/* Random sequences of Jinja's pieces: never a crash, always 0 or an error
 * with a message. */
static void test_random_token_soup(void **state)
{
    (void)state;
    static const char *const pieces[] = {
        "{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "(", ")", "[", "]", "{", "}", ",", ".", ":",
        "|", "=", "==", "'s'", "\"t\"", "1", "2.5", "x", "messages", "loop", "ns", "if", "else",
        "elif", "endif", "for", "in", "endfor", "set", "endset", "macro", "endmacro", "call",
        "endcall", "raw", "endraw", "not", "and", "or", "is", "defined", "none", "true", "trim",
        "tojson", "namespace", "range", "join", "items", "~", "*", "**", "/", "//", "%", " ",
        "\n", "caller", "filter", "endfilter", "break", "continue", "with", "endwith", "selectattr",
        "map", "default", "length", "upper", "split", "strip", "get", "append", "'\\n'", "0",
    };
    const size_t n_pieces = sizeof(pieces) / sizeof(pieces[0]);
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    json_t *vars = shared_vars();
    jinja_limits lim = {.max_steps = 100000, .max_output_bytes = 1 << 16, .max_memory_bytes = 8 << 20};
    char buf[2048];
    int n_ok = 0;
    for (int iter = 0; iter < 4000; iter++) {
        size_t len = 0;
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        int count = (int)((seed >> 33) % 40);
        for (int k = 0; k < count; k++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            const char *p = pieces[(seed >> 33) % n_pieces];
            size_t pl = strlen(p);
            if (len + pl + 1 >= sizeof(buf)) break;
            memcpy(buf + len, p, pl);
            len += pl;
        }
        strata_err err = {0};
        char *out;
        size_t out_len;
        int rc = render(buf, len, vars, &lim, &out, &out_len, &err);
        if (rc == 0) n_ok++;
        else if (strncmp(err.msg, "template", 8) != 0) fail_msg("[%.*s]: error without a message: %s", (int)len, buf, err.msg);
        free(out);
    }
    print_message("%d of 4000 random templates rendered\n", n_ok);
    json_decref(vars);
}

static void test_chat_template_api(void **state)
{
    (void)state;
    const char *src = "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                      "{% if add_generation_prompt %}[assistant]{% endif %}{{ eos_token }}"
                      "|tools={{ tools is defined }}{% if tools is defined %}:{{ tools|length }}{% endif %}"
                      "|think={{ enable_thinking is defined and enable_thinking }}|{{ strftime_now('%d %b %Y') }}";
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
    json_t *tools = json_loads("[{\"type\": \"function\"}]", 0, NULL);
    json_t *extra = json_loads("{\"enable_thinking\": true, \"bos_token\": \"ignored\"}", 0, NULL);
    strata_err err = {0};
    char *out;
    size_t len;
    chat_template_opts o = {.add_generation_prompt = true, .bos_token = "<s>", .eos_token = "</s>",
                            .year = 2026, .month = 2, .day = 3};
    assert_int_equal(chat_template_render(src, strlen(src), msgs, &o, &out, &len, &err), 0);
    assert_string_equal(out, "<s>[user]hi[assistant]</s>|tools=False|think=False|03 Feb 2026");
    free(out);
    o = (chat_template_opts){.tools = tools, .extra = extra, .year = 2026, .month = 2, .day = 3};
    assert_int_equal(chat_template_render(src, strlen(src), msgs, &o, &out, &len, &err), 0);
    assert_string_equal(out, "[user]hi|tools=True:1|think=True|03 Feb 2026");
    free(out);
    /* messages must be an array */
    assert_int_equal(chat_template_render(src, strlen(src), extra, &o, &out, &len, &err),
                     STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "messages must be a JSON array"));
    /* a template that raises */
    const char *raises = "{% if messages[0].role == 'user' %}{{ raise_exception('no users here') }}{% endif %}";
    assert_int_equal(chat_template_render(raises, strlen(raises), msgs, NULL, &out, &len, &err), STRATA_EINVAL);
    assert_string_equal(err.msg, "template 1:39: no users here");
    assert_null(out);
    json_decref(msgs);
    json_decref(tools);
    json_decref(extra);
}

static void test_template_from_gguf(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-phi-3.gguf");
    gguf *g;
    strata_err err = {0};
    assert_int_equal(gguf_open(&g, path, &err), 0);
    chat_template_src src;
    assert_int_equal(chat_template_from_gguf(g, NULL, &src, &err), 0);
    assert_non_null(strstr(src.tmpl, "{{ bos_token }}{% for message in messages %}"));
    assert_int_equal(src.tmpl_len, strlen(src.tmpl));
    assert_string_equal(src.bos, "<s>");
    assert_string_equal(src.eos, "<|endoftext|>");
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"Hello\"}]", 0, NULL);
    chat_template_opts o = {.add_generation_prompt = true, .bos_token = src.bos, .eos_token = src.eos};
    char *out;
    size_t len;
    assert_int_equal(chat_template_render(src.tmpl, src.tmpl_len, msgs, &o, &out, &len, &err), 0);
    assert_string_equal(out, "<s><|user|>\nHello<|end|>\n<|assistant|>\n");
    free(out);
    json_decref(msgs);
    chat_template_src_free(&src);
    assert_int_equal(chat_template_from_gguf(g, "tool_use", &src, &err), STRATA_ENOTFOUND);
    gguf_close(g);

    TESTDATA_FILE(path, "models/stories260K.gguf");
    assert_int_equal(gguf_open(&g, path, &err), 0);
    assert_int_equal(chat_template_from_gguf(g, NULL, &src, &err), STRATA_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no chat template"));
    gguf_close(g);
    chat_template_src_free(&src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_language_matches_jinja2),
        cmocka_unit_test(test_errors_carry_position),
        cmocka_unit_test(test_step_budget),
        cmocka_unit_test(test_deep_nesting_is_an_error),
        cmocka_unit_test(test_output_and_memory_caps),
        cmocka_unit_test(test_render_many_times),
        cmocka_unit_test(test_output_may_hold_nul),
        cmocka_unit_test(test_hostile_json_vars),
        cmocka_unit_test(test_every_split_point_of_a_real_template),
        cmocka_unit_test(test_random_token_soup),
        cmocka_unit_test(test_chat_template_api),
        cmocka_unit_test(test_template_from_gguf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
