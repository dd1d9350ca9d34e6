/* Tool-call syntaxes of model families (tool_calls.h): detection from a
 * chat template's text, parsing of a finished output, the plain-text prefix
 * of a growing one, and the GBNF that forces a call. The parsers walk the
 * output with explicit positions and take each call's JSON with jansson
 * (stopping after the value), so a truncated or malformed output is simply
 * "no call". */
#define _GNU_SOURCE /* memmem, strndup */
#include "serve/tool_calls.h"
#include "serve/json_schema.h"
#include "serve/textgen.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HERMES_OPEN "<tool_call>"
#define HERMES_CLOSE "</tool_call>"
#define LLAMA3_TAG "<|python_tag|>"
#define MISTRAL_TAG "[TOOL_CALLS]"
#define MISTRAL_ARGS "[ARGS]"
#define MISTRAL_CALL_ID "[CALL_ID]"
#define FUNC_OPEN "<function="
#define FUNC_CLOSE "</function>"
#define FIRE_TAG "functools["
#define DS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"

/* The longest function name taken from output. */
#define TOOL_MAX_NAME 256

tool_format tool_format_detect(const char *tmpl, const char **family)
{
    const char *fam = "hermes";
    tool_format f = TOOL_FORMAT_HERMES;
    if (tmpl == NULL) {
        /* ChatML */
    } else if (strstr(tmpl, "<|channel|>") != NULL) {
        fam = "harmony";
        f = TOOL_FORMAT_HARMONY;
    } else if (strstr(tmpl, "<|tool_calls_section_begin|>") != NULL) {
        fam = "kimi";
        f = TOOL_FORMAT_UNSUPPORTED;
    } else if (strstr(tmpl, "<arg_key>") != NULL) {
        fam = "glm";
        f = TOOL_FORMAT_UNSUPPORTED;
    } else if (strstr(tmpl, "<invoke name=") != NULL) {
        fam = "minimax";
        f = TOOL_FORMAT_UNSUPPORTED;
    } else if (strstr(tmpl, "<seed:tool_call>") != NULL) {
        fam = "seed-oss";
        f = TOOL_FORMAT_UNSUPPORTED;
    } else if (strstr(tmpl, "<function=") != NULL && strstr(tmpl, "<parameter=") != NULL &&
               strstr(tmpl, HERMES_OPEN) != NULL) {
        fam = "qwen3-xml";
        f = TOOL_FORMAT_XML;
    } else if (strstr(tmpl, "<function=") != NULL) {
        fam = "functionary";
        f = TOOL_FORMAT_FUNCTIONARY;
    } else if (strstr(tmpl, FIRE_TAG) != NULL) {
        fam = "firefunction";
        f = TOOL_FORMAT_FIREFUNCTION;
    } else if (strstr(tmpl, ">>>all") != NULL) {
        fam = "functionary-v3.2";
        f = TOOL_FORMAT_RECIPIENTS;
    } else if (strstr(tmpl, MISTRAL_TAG) != NULL) {
        fam = "mistral";
        f = TOOL_FORMAT_MISTRAL;
    } else if (strstr(tmpl, "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin") != NULL) {
        fam = "deepseek";
        f = TOOL_FORMAT_DEEPSEEK;
    } else if (strstr(tmpl, HERMES_OPEN) != NULL) {
        /* before Llama 3: Hermes 2/3 on Llama 3 use this syntax */
    } else if (strstr(tmpl, LLAMA3_TAG) != NULL ||
               (strstr(tmpl, "<|start_header_id|>") != NULL && strstr(tmpl, "parameters") != NULL)) {
        fam = "llama3";
        f = TOOL_FORMAT_LLAMA3;
    }
    if (family != NULL) *family = fam;
    return f;
}

const char *const *tool_calls_markers(tool_format f, size_t *n)
{
    static const char *const hermes[] = {HERMES_OPEN, HERMES_CLOSE};
    static const char *const llama3[] = {LLAMA3_TAG};
    static const char *const mistral[] = {MISTRAL_TAG, MISTRAL_ARGS, MISTRAL_CALL_ID};
    static const char *const deepseek[] = {DS_BEGIN, DS_END, DS_CALL, DS_CALL_END, DS_SEP};
    switch (f) {
    case TOOL_FORMAT_HERMES:
    case TOOL_FORMAT_XML: *n = 2; return hermes;
    case TOOL_FORMAT_LLAMA3: *n = 1; return llama3;
    case TOOL_FORMAT_MISTRAL: *n = 3; return mistral;
    case TOOL_FORMAT_DEEPSEEK: *n = 5; return deepseek;
    default: *n = 0; return NULL;
    }
}

/* --- parsing --- */

typedef struct cursor {
    const char *s;
    size_t n, p;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->n && (c->s[c->p] == ' ' || c->s[c->p] == '\n' || c->s[c->p] == '\t' ||
                           c->s[c->p] == '\r')) {
        c->p++;
    }
}

static bool at(const cursor *c, const char *lit)
{
    size_t k = strlen(lit);
    return c->n - c->p >= k && memcmp(c->s + c->p, lit, k) == 0;
}

static bool eat(cursor *c, const char *lit)
{
    if (!at(c, lit)) return false;
    c->p += strlen(lit);
    return true;
}

/* The first occurrence of lit in s[0..n), or n. */
static size_t find(const char *s, size_t n, const char *lit)
{
    const char *q = memmem(s, n, lit, strlen(lit));
    return q ? (size_t)(q - s) : n;
}

/* One JSON value at the cursor (an object or an array; NULL if none). */
static json_t *take_json(cursor *c)
{
    if (c->p >= c->n || (c->s[c->p] != '{' && c->s[c->p] != '[')) return NULL;
    json_error_t je;
    json_t *j = json_loadb(c->s + c->p, c->n - c->p, JSON_DISABLE_EOF_CHECK, &je);
    if (j == NULL) return NULL;
    c->p += je.position;
    return j;
}

static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > TOOL_MAX_NAME) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= ' ' || ch == '"' || ch == '\\' || ch == '<' || ch == '[') return false;
    }
    return true;
}

typedef struct calls {
    tool_call *v;
    size_t n, cap;
    bool oom;
} calls;

void tool_calls_free(tool_call *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].arguments);
    }
    free(v);
}

static void calls_free(calls *cs)
{
    tool_calls_free(cs->v, cs->n);
    memset(cs, 0, sizeof(*cs));
}

/* Appends a call of name[0..n_name) with args (an object, or a string that
 * holds one); false when args is neither (or memory ran out: cs->oom). */
static bool calls_add(calls *cs, const char *name, size_t n_name, const json_t *args)
{
    json_t *parsed = NULL;
    if (json_is_string(args)) {
        parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
        args = parsed;
    }
    if (!json_is_object(args) || !name_ok(name, n_name)) {
        json_decref(parsed);
        return false;
    }
    if (cs->n == cs->cap) {
        size_t cap = cs->cap ? cs->cap * 2 : 4;
        tool_call *v = realloc(cs->v, cap * sizeof(*v));
        if (v == NULL) {
            cs->oom = true;
            json_decref(parsed);
            return false;
        }
        cs->v = v;
        cs->cap = cap;
    }
    tool_call *t = &cs->v[cs->n];
    t->name = strndup(name, n_name);
    t->arguments = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(parsed);
    if (t->name == NULL || t->arguments == NULL) {
        free(t->name);
        free(t->arguments);
        cs->oom = true;
        return false;
    }
    cs->n++;
    return true;
}

/* {"name": N, "arguments"|"parameters": {...}} */
static bool add_object(calls *cs, const json_t *o)
{
    const json_t *name = json_object_get(o, "name");
    const json_t *args = json_object_get(o, "arguments");
    if (args == NULL) args = json_object_get(o, "parameters");
    if (!json_is_string(name)) return false;
    return calls_add(cs, json_string_value(name), json_string_length(name), args);
}

static bool take_object_call(cursor *c, calls *cs)
{
    json_t *o = take_json(c);
    bool ok = json_is_object(o) && add_object(cs, o);
    json_decref(o);
    return ok;
}

/* Each parser: the calls at the cursor (at the first marker) into cs, the
 * cursor left after the last; false when one is malformed or cut short. */
static bool parse_hermes(cursor *c, calls *cs)
{
    while (eat(c, HERMES_OPEN)) {
        skip_ws(c);
        if (!take_object_call(c, cs)) return false;
        skip_ws(c);
        if (!eat(c, HERMES_CLOSE)) return false;
        size_t after = c->p;
        skip_ws(c);
        if (!at(c, HERMES_OPEN)) c->p = after;
    }
    return cs->n > 0;
}

/* The JSON Schema type the tool `name` gives its parameter key[0..nk)
 * ("string", "integer", ...), or NULL when tools do not say. */
static const char *param_type(const json_t *tools, const char *name, size_t nn, const char *key,
                              size_t nk)
{
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *f = json_object_get(t, "function");
        const json_t *fn = json_object_get(f, "name");
        if (!json_is_string(fn) || json_string_length(fn) != nn || memcmp(json_string_value(fn), name, nn) != 0) {
            continue;
        }
        const json_t *props = json_object_get(json_object_get(f, "parameters"), "properties");
        const json_t *p = json_object_getn(props, key, nk);
        const char *type = json_string_value(json_object_get(p, "type"));
        /* an enum of strings alone is a string (the forcing grammar writes
         * its values as text) */
        const json_t *en = json_object_get(p, "enum");
        bool strs = type == NULL && json_is_array(en) && json_array_size(en) > 0;
        size_t k;
        const json_t *v;
        json_array_foreach(en, k, v) strs = strs && json_is_string(v);
        return strs ? "string" : type;
    }
    return NULL;
}

/* <tool_call> <function=N> (<parameter=K>V</parameter>)* </function>
 * </tool_call>, repeated. */
static bool parse_xml(cursor *c, calls *cs, const json_t *tools)
{
    while (eat(c, HERMES_OPEN)) {
        skip_ws(c);
        if (!eat(c, "<function=")) return false;
        size_t n0 = c->p, n1 = find(c->s + n0, c->n - n0, ">") + n0;
        if (n1 >= c->n) return false;
        c->p = n1 + 1;
        json_t *args = json_object();
        if (args == NULL) {
            cs->oom = true;
            return false;
        }
        bool ok = true;
        for (;;) {
            skip_ws(c);
            if (eat(c, "</function>")) break;
            size_t k0 = c->p + strlen("<parameter="), k1, v0, v1;
            if (!eat(c, "<parameter=") || (k1 = find(c->s + k0, c->n - k0, ">") + k0) >= c->n ||
                (v1 = find(c->s + k1, c->n - k1, "</parameter>") + k1) >= c->n) {
                ok = false;
                break;
            }
            v0 = k1 + 1;
            if (v0 < v1 && c->s[v0] == '\n') v0++;
            if (v1 > v0 && c->s[v1 - 1] == '\n') v1--;
            const char *type = param_type(tools, c->s + n0, n1 - n0, c->s + k0, k1 - k0);
            json_t *v = NULL;
            if (type == NULL || strcmp(type, "string") != 0) {
                v = json_loadb(c->s + v0, v1 - v0, JSON_DECODE_ANY, NULL);
            }
            /* NULL: not UTF-8, or a NUL in it (which no JSON reader takes back) */
            if (v == NULL && memchr(c->s + v0, '\0', v1 - v0) == NULL) v = json_stringn(c->s + v0, v1 - v0);
            char *key = strndup(c->s + k0, k1 - k0);
            if (key == NULL) cs->oom = true;
            /* a key that is not UTF-8 (or holds a NUL) makes the call malformed */
            if (key == NULL || v == NULL || strlen(key) != k1 - k0 ||
                json_object_set_new(args, key, v) != 0) {
                if (key == NULL || strlen(key) != k1 - k0) json_decref(v);
                free(key);
                ok = false;
                break;
            }
            free(key);
            c->p = find(c->s + k1, c->n - k1, "</parameter>") + k1 + strlen("</parameter>");
        }
        skip_ws(c);
        ok = ok && eat(c, HERMES_CLOSE) && calls_add(cs, c->s + n0, n1 - n0, args);
        json_decref(args);
        if (!ok) return false;
        size_t after = c->p;
        skip_ws(c);
        if (!at(c, HERMES_OPEN)) c->p = after;
    }
    return cs->n > 0;
}

/* <function=N>{...}</function>, repeated; the last closing tag may be
 * missing when nothing but blanks follows (a model may end the turn
 * there). */
static bool parse_functionary(cursor *c, calls *cs)
{
    while (eat(c, FUNC_OPEN)) {
        size_t n0 = c->p, k = find(c->s + n0, c->n - n0, ">");
        if (n0 + k >= c->n) return false;
        c->p = n0 + k + 1;
        skip_ws(c);
        json_t *o = take_json(c);
        bool ok = json_is_object(o) && calls_add(cs, c->s + n0, k, o);
        json_decref(o);
        if (!ok) return false;
        skip_ws(c);
        if (!eat(c, FUNC_CLOSE) && c->p < c->n) return false;
        size_t after = c->p;
        skip_ws(c);
        if (!at(c, FUNC_OPEN)) c->p = after;
    }
    return cs->n > 0;
}

/* A JSON list of {"name", "arguments"} objects at the cursor, each a call. */
static bool take_call_list(cursor *c, calls *cs)
{
    json_t *a = take_json(c);
    bool ok = json_is_array(a) && json_array_size(a) > 0;
    size_t i;
    json_t *o;
    json_array_foreach(a, i, o) {
        if (ok && !(json_is_object(o) && add_object(cs, o))) ok = false;
    }
    json_decref(a);
    return ok;
}

/* functools[{...}, ...]: one list of calls */
static bool parse_firefunction(cursor *c, calls *cs)
{
    return eat(c, "functools") && take_call_list(c, cs);
}

static bool parse_llama3(cursor *c, calls *cs)
{
    eat(c, LLAMA3_TAG);
    for (;;) {
        skip_ws(c);
        if (!take_object_call(c, cs)) return false;
        skip_ws(c);
        if (!eat(c, ";")) break;
    }
    /* the output is the calls and nothing else */
    return c->p == c->n;
}

static bool parse_mistral(cursor *c, calls *cs)
{
    while (eat(c, MISTRAL_TAG)) {
        skip_ws(c);
        if (at(c, "[")) {
            if (!take_call_list(c, cs)) return false;
        } else {
            /* name[ARGS]{...} (name[CALL_ID]id[ARGS]{...} in some
             * versions); each call has its own [TOOL_CALLS] */
            size_t k = find(c->s + c->p, c->n - c->p, MISTRAL_ARGS);
            if (k == c->n - c->p) return false;
            const char *name = c->s + c->p;
            size_t n_name = find(name, k, MISTRAL_CALL_ID);
            c->p += k + strlen(MISTRAL_ARGS);
            skip_ws(c);
            json_t *o = take_json(c);
            bool ok = calls_add(cs, name, n_name, o);
            json_decref(o);
            if (!ok) return false;
        }
        size_t after = c->p;
        skip_ws(c);
        if (!at(c, MISTRAL_TAG)) c->p = after;
    }
    return cs->n > 0;
}

static bool parse_deepseek(cursor *c, calls *cs)
{
    if (!eat(c, DS_BEGIN)) return false;
    skip_ws(c);
    while (eat(c, DS_CALL)) {
        size_t k = find(c->s + c->p, c->n - c->p, DS_SEP);
        if (k == c->n - c->p) return false;
        const char *head = c->s + c->p;
        c->p += k + strlen(DS_SEP);
        const char *name = head;
        size_t n_name = k;
        bool fenced = false;
        if (k == 8 && memcmp(head, "function", 8) == 0) {
            /* R1: function<sep>NAME\n```json\n{...}\n``` */
            size_t nl = find(c->s + c->p, c->n - c->p, "\n");
            if (nl == c->n - c->p) return false;
            name = c->s + c->p;
            n_name = nl;
            c->p += nl;
            skip_ws(c);
            if (!eat(c, "```json")) return false;
            fenced = true;
        }
        skip_ws(c);
        json_t *o = take_json(c);
        bool ok = calls_add(cs, name, n_name, o);
        json_decref(o);
        if (!ok) return false;
        skip_ws(c);
        if (fenced && !eat(c, "```")) return false;
        skip_ws(c);
        if (!eat(c, DS_CALL_END)) return false;
        skip_ws(c);
    }
    return eat(c, DS_END) && cs->n > 0;
}

/* Where the calls begin (the marker), or n. */
static size_t calls_start(tool_format f, const char *text, size_t n)
{
    switch (f) {
    case TOOL_FORMAT_HERMES:
    case TOOL_FORMAT_XML: return find(text, n, HERMES_OPEN);
    case TOOL_FORMAT_MISTRAL: return find(text, n, MISTRAL_TAG);
    case TOOL_FORMAT_DEEPSEEK: return find(text, n, DS_BEGIN);
    case TOOL_FORMAT_FUNCTIONARY: return find(text, n, FUNC_OPEN);
    case TOOL_FORMAT_FIREFUNCTION: return find(text, n, FIRE_TAG);
    case TOOL_FORMAT_LLAMA3: {
        size_t tag = find(text, n, LLAMA3_TAG);
        if (tag < n) return tag;
        size_t i = 0;
        while (i < n && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) i++;
        return i < n && text[i] == '{' ? 0 : n;
    }
    default: return n;
    }
}

int tool_calls_parse(tool_format f, const char *text, size_t n, tool_parsed *out)
{
    return tool_calls_parse_typed(f, text, n, NULL, out);
}

int tool_calls_parse_typed(tool_format f, const char *text, size_t n, const json_t *tools,
                           tool_parsed *out)
{
    memset(out, 0, sizeof(*out));
    calls cs = {0};
    size_t start = calls_start(f, text, n), end = n;
    bool ok = false;
    if (start < n) {
        cursor c = {text, n, start};
        switch (f) {
        case TOOL_FORMAT_HERMES: ok = parse_hermes(&c, &cs); break;
        case TOOL_FORMAT_LLAMA3: ok = parse_llama3(&c, &cs); break;
        case TOOL_FORMAT_MISTRAL: ok = parse_mistral(&c, &cs); break;
        case TOOL_FORMAT_DEEPSEEK: ok = parse_deepseek(&c, &cs); break;
        case TOOL_FORMAT_XML: ok = parse_xml(&c, &cs, tools); break;
        case TOOL_FORMAT_FUNCTIONARY: ok = parse_functionary(&c, &cs); break;
        case TOOL_FORMAT_FIREFUNCTION: ok = parse_firefunction(&c, &cs); break;
        default: break;
        }
        end = c.p;
    }
    if (cs.oom) {
        calls_free(&cs);
        return -1;
    }
    if (!ok) {
        calls_free(&cs);
        start = end = n;
    }
    /* content: before the calls, then what follows them unless it is blank */
    size_t tail = end;
    while (tail < n && (text[tail] == ' ' || text[tail] == '\n' || text[tail] == '\t' || text[tail] == '\r')) tail++;
    if (tail == n) end = n;
    size_t n_content = start + (n - end);
    out->content = malloc(n_content + 1);
    if (out->content == NULL) {
        calls_free(&cs);
        return -1;
    }
    memcpy(out->content, text, start);
    memcpy(out->content + start, text + end, n - end);
    out->content[n_content] = '\0';
    out->n_content = n_content;
    out->calls = cs.v;
    out->n_calls = cs.n;
    return 0;
}

void tool_parsed_free(tool_parsed *p)
{
    tool_calls_free(p->calls, p->n_calls);
    free(p->content);
    memset(p, 0, sizeof(*p));
}

static const char *marker_of(tool_format f)
{
    switch (f) {
    case TOOL_FORMAT_HERMES:
    case TOOL_FORMAT_XML: return HERMES_OPEN;
    case TOOL_FORMAT_LLAMA3: return LLAMA3_TAG;
    case TOOL_FORMAT_MISTRAL: return MISTRAL_TAG;
    case TOOL_FORMAT_DEEPSEEK: return DS_BEGIN;
    case TOOL_FORMAT_FUNCTIONARY: return FUNC_OPEN;
    case TOOL_FORMAT_FIREFUNCTION: return FIRE_TAG;
    default: return NULL;
    }
}

size_t tool_calls_text_prefix(tool_format f, const char *text, size_t n)
{
    const char *m = marker_of(f);
    if (m == NULL) return n;
    if (f == TOOL_FORMAT_LLAMA3) {
        size_t i = 0;
        while (i < n && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) i++;
        if (i == n || text[i] == '{') return 0; /* may yet be a bare JSON call */
    }
    size_t at_m = find(text, n, m);
    if (at_m < n) return at_m;
    /* a tail that is the start of the marker is held */
    size_t lm = strlen(m);
    for (size_t k = lm - 1; k > 0; k--) {
        if (k <= n && memcmp(text + n - k, m, k) == 0) return n - k;
    }
    return n;
}

/* --- grammar --- */

int gbnf_append_renamed(sbuf *b, const char *gbnf, const char *pre)
{
    size_t lp = strlen(pre);
    int rc = 0;
    for (const char *p = gbnf; *p && rc == 0;) {
        const char *q = p;
        if (*p == '"' || *p == '[') {
            char close = *p == '"' ? '"' : ']';
            q++;
            while (*q && *q != close) q += q[0] == '\\' && q[1] ? 2 : 1;
            if (*q) q++;
        } else if (*p == '#') {
            while (*q && *q != '\n') q++;
        } else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) {
            while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
                   *q == '-' || *q == '_') {
                q++;
            }
            rc = sbuf_append(b, pre, lp);
        } else {
            q++;
        }
        if (rc == 0) rc = sbuf_append(b, p, (size_t)(q - p));
        p = q;
    }
    return rc;
}

/* A GBNF string literal of s (names are checked by the caller; the
 * literals here hold only quotes, backslashes and newlines to escape). */
static int append_lit(sbuf *b, const char *s)
{
    int rc = sbuf_append(b, "\"", 1);
    for (; *s && rc == 0; s++) {
        if (*s == '"') rc = sbuf_append(b, "\\\"", 2);
        else if (*s == '\\') rc = sbuf_append(b, "\\\\", 2);
        else if (*s == '\n') rc = sbuf_append(b, "\\n", 2);
        else rc = sbuf_append(b, s, 1);
    }
    if (rc == 0) rc = sbuf_append(b, "\"", 1);
    return rc;
}

/* The syntax of a list of calls: open, then calls separated by sep, then
 * close; a call is before + name + mid + arguments + after. */
typedef struct call_syntax {
    const char *open, *sep, *close, *before, *mid, *after;
} call_syntax;

static const call_syntax k_syntax[] = {
    [TOOL_FORMAT_HERMES] = {"", "\n", "", HERMES_OPEN "\n{\"name\": \"", "\", \"arguments\": ",
                            "}\n" HERMES_CLOSE},
    [TOOL_FORMAT_LLAMA3] = {"", "; ", "", "{\"name\": \"", "\", \"parameters\": ", "}"},
    [TOOL_FORMAT_MISTRAL] = {MISTRAL_TAG "[", ", ", "]", "{\"name\": \"", "\", \"arguments\": ", "}"},
    [TOOL_FORMAT_DEEPSEEK] = {DS_BEGIN, "\n", DS_END, DS_CALL "function" DS_SEP, "\n```json\n",
                              "\n```" DS_CALL_END},
    [TOOL_FORMAT_XML] = {"", "\n", "", "", "", ""}, /* calls: xml_tool_rules */
    [TOOL_FORMAT_FUNCTIONARY] = {"", "", "", FUNC_OPEN, ">", FUNC_CLOSE},
    /* after the prompt's ">>>": NAME\n{...}, joined by ">>>" */
    [TOOL_FORMAT_RECIPIENTS] = {"", ">>>", "", "", "\n", ""},
    [TOOL_FORMAT_FIREFUNCTION] = {FIRE_TAG, ", ", "]", "{\"name\": \"", "\", \"arguments\": ", "}"},
    /* one call a turn (it ends with <|call|>, an end-of-generation token) */
    [TOOL_FORMAT_HARMONY] = {"", "", "", "<|channel|>commentary to=functions.",
                             " <|constrain|>json<|message|>", ""},
};

/* Functionary v3.2: the text message that may come before the calls (its
 * text without '>', so that it cannot open another message early). */
#define RECIPIENTS_TEXT "text ::= \"all\\n\" [^>]* \">>>\"\n"

/* Harmony: the analysis message that may come before the call (its text
 * without '<', so that it cannot open another message early). */
#define HARMONY_ANALYSIS \
    "analysis ::= \"<|channel|>analysis<|message|>\" [^<]* \"<|end|><|start|>assistant\"\n"

/* The XML syntax's shared rules: a string value's text, and a parameter of
 * a tool whose schema names none. */
#define XML_RULES                                                                              \
    "xml-text ::= [^<]*\n"                                                                     \
    "xml-any ::= \"<parameter=\" [A-Za-z0-9_-]+ \">\\n\" xml-text \"\\n</parameter>\\n\"\n"

/* Compiles schema (one parameter's) into b as rules prefixed pre ("t0-p1-"),
 * the value's rule being pre + "root". */
static int append_schema(sbuf *b, const json_t *schema, const char *pre, const char *tool,
                         strata_err *err)
{
    char *g = NULL;
    strata_err e2 = {0};
    int r2 = schema != NULL ? json_schema_to_gbnf(schema, &g, &e2)
                            : ((g = json_schema_any_object_gbnf()) ? 0 : STRATA_ENOMEM);
    if (r2 == STRATA_ENOMEM) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    if (r2 != 0) return strata_err_set(err, STRATA_EINVAL, "tool `%s` parameters: %s", tool, e2.msg);
    int rc = gbnf_append_renamed(b, g, pre);
    if (rc == 0 && b->len > 0 && b->data[b->len - 1] != '\n') rc = sbuf_append(b, "\n", 1);
    free(g);
    return rc != 0 ? strata_err_set(err, STRATA_ENOMEM, "out of memory") : 0;
}

/* The XML syntax's call of tool i: <tool_call>\n<function=N>\n, then each
 * property of its `parameters` in their order (the required ones always,
 * the others optional) as <parameter=K>\nV\n</parameter>\n, where V is the
 * text of a string (without '<', within its minLength and maxLength), one
 * of a string enum's values, or else
 * the JSON its schema allows; then </function>\n</tool_call>. Without
 * properties, any parameters with text values. */
static int xml_tool_rules(sbuf *b, size_t i, const tool_decl *t, strata_err *err)
{
    const json_t *props = json_object_get(t->parameters, "properties");
    const json_t *req = json_object_get(t->parameters, "required");
    sbuf head = {0};
    int rc = sbuf_printf(&head, HERMES_OPEN "\n<function=%s>\n", t->name);
    if (rc == 0) rc = sbuf_printf(b, "tool%zu ::= ", i);
    if (rc == 0) rc = append_lit(b, head.data);
    sbuf_free(&head);
    if (rc == 0 && !json_is_object(props)) rc = sbuf_printf(b, " xml-any*");
    const char *key;
    const json_t *ps;
    size_t j = 0;
    if (json_is_object(props)) {
        json_object_foreach((json_t *)props, key, ps) {
            bool required = false;
            size_t k;
            const json_t *r;
            json_array_foreach(req, k, r) required = required || (json_is_string(r) && !strcmp(json_string_value(r), key));
            if (rc == 0) rc = sbuf_printf(b, " t%zu-p%zu%s", i, j, required ? "" : "?");
            j++;
        }
    }
    if (rc == 0) rc = sbuf_append(b, " ", 1);
    if (rc == 0) rc = append_lit(b, "</function>\n" HERMES_CLOSE);
    if (rc == 0) rc = sbuf_append(b, "\n", 1);
    if (rc != 0) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    j = 0;
    if (!json_is_object(props)) return 0;
    json_object_foreach((json_t *)props, key, ps) {
        char pre[48], open[160];
        snprintf(pre, sizeof(pre), "t%zu-p%zu-", i, j);
        if (strlen(key) > 64 || strpbrk(key, "<>\n") != NULL) {
            return strata_err_set(err, STRATA_EINVAL, "tool `%s`: parameter name \"%.64s\" cannot be written as XML", t->name, key);
        }
        snprintf(open, sizeof(open), "<parameter=%s>\n", key);
        rc = sbuf_printf(b, "t%zu-p%zu ::= ", i, j);
        if (rc == 0) rc = append_lit(b, open);
        const json_t *type = json_object_get(ps, "type"), *en = json_object_get(ps, "enum");
        bool str = json_is_string(type) && !strcmp(json_string_value(type), "string");
        bool str_enum = json_is_array(en) && json_array_size(en) > 0;
        size_t k;
        const json_t *v;
        json_array_foreach(en, k, v) str_enum = str_enum && json_is_string(v) && strchr(json_string_value(v), '<') == NULL;
        if (rc == 0 && str_enum) {
            rc = sbuf_append(b, " (", 2);
            json_array_foreach(en, k, v) {
                if (rc == 0 && k > 0) rc = sbuf_append(b, " | ", 3);
                if (rc == 0) rc = append_lit(b, json_string_value(v));
            }
            if (rc == 0) rc = sbuf_append(b, ")", 1);
        } else if (rc == 0 && str) {
            /* its length bounds, when given, as a bounded repetition */
            const json_t *lo = json_object_get(ps, "minLength"), *hi = json_object_get(ps, "maxLength");
            json_int_t l = json_is_integer(lo) ? json_integer_value(lo) : 0;
            json_int_t h = json_is_integer(hi) ? json_integer_value(hi) : -1;
            if (l < 0 || l > JSON_SCHEMA_MAX_COUNT || h > JSON_SCHEMA_MAX_COUNT || (h >= 0 && h < l)) {
                return strata_err_set(err, STRATA_EINVAL, "tool `%s`: parameter \"%s\": bad minLength/maxLength",
                                      t->name, key);
            }
            if (h >= 0) rc = sbuf_printf(b, " [^<]{%lld,%lld}", (long long)l, (long long)h);
            else if (l > 0) rc = sbuf_printf(b, " [^<]{%lld,}", (long long)l);
            else rc = sbuf_append(b, " xml-text", 9);
        } else if (rc == 0) {
            rc = sbuf_printf(b, " %sroot", pre);
        }
        if (rc == 0) rc = sbuf_append(b, " ", 1);
        if (rc == 0) rc = append_lit(b, "\n</parameter>\n");
        if (rc == 0) rc = sbuf_append(b, "\n", 1);
        if (rc != 0) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
        if (!str_enum && !str && (rc = append_schema(b, ps, pre, t->name, err)) != 0) return rc;
        j++;
    }
    return 0;
}

int tool_calls_grammar(tool_format f, const tool_decl *tools, size_t n, bool parallel, char **out,
                       strata_err *err)
{
    *out = NULL;
    if (f == TOOL_FORMAT_UNSUPPORTED || f < 0 || n == 0) {
        return strata_err_set(err, STRATA_EINVAL, "no call syntax to force for this model");
    }
    const call_syntax *sx = &k_syntax[f];
    bool harmony = f == TOOL_FORMAT_HARMONY;
    if (harmony) parallel = false;
    sbuf b = {0};
    int rc = sbuf_append(&b, "root ::= ", 9);
    if (rc == 0 && harmony) rc = sbuf_append(&b, "analysis? ", 10);
    if (rc == 0 && f == TOOL_FORMAT_RECIPIENTS) rc = sbuf_append(&b, "text? ", 6);
    if (rc == 0) rc = append_lit(&b, sx->open);
    if (rc == 0) rc = sbuf_printf(&b, " call");
    if (rc == 0 && parallel) {
        rc = sbuf_append(&b, " (", 2);
        if (rc == 0) rc = append_lit(&b, sx->sep);
        if (rc == 0) rc = sbuf_append(&b, " call)*", 7);
    }
    if (rc == 0) rc = sbuf_append(&b, " ", 1);
    if (rc == 0) rc = append_lit(&b, sx->close);
    if (rc == 0) rc = sbuf_append(&b, "\n", 1);
    if (rc == 0 && harmony) rc = sbuf_append(&b, HARMONY_ANALYSIS, strlen(HARMONY_ANALYSIS));
    if (rc == 0 && f == TOOL_FORMAT_RECIPIENTS) rc = sbuf_append(&b, RECIPIENTS_TEXT, strlen(RECIPIENTS_TEXT));
    if (rc == 0 && f == TOOL_FORMAT_XML) {
        rc = sbuf_append(&b, XML_RULES, strlen(XML_RULES));
    }
    if (rc == 0) rc = sbuf_append(&b, "call ::=", 8);
    for (size_t i = 0; i < n && rc == 0; i++) rc = sbuf_printf(&b, "%s tool%zu", i ? " |" : "", i);
    if (rc == 0) rc = sbuf_append(&b, "\n", 1);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!name_ok(tools[i].name, strlen(tools[i].name))) {
            sbuf_free(&b);
            return strata_err_set(err, STRATA_EINVAL, "tool %zu: bad function name", i);
        }
        if (f == TOOL_FORMAT_XML) {
            int rx = xml_tool_rules(&b, i, &tools[i], err);
            if (rx != 0) {
                sbuf_free(&b);
                return rx;
            }
            if (b.len > JSON_SCHEMA_MAX_GBNF * 4) {
                sbuf_free(&b);
                return strata_err_set(err, STRATA_EINVAL, "the tools' grammar is over %d bytes",
                                      JSON_SCHEMA_MAX_GBNF * 4);
            }
            continue;
        }
        char *g = NULL;
        strata_err e2 = {0};
        int r2 = tools[i].parameters != NULL ? json_schema_to_gbnf(tools[i].parameters, &g, &e2)
                                             : ((g = json_schema_any_object_gbnf()) ? 0 : STRATA_ENOMEM);
        if (r2 != 0) {
            sbuf_free(&b);
            if (r2 == STRATA_ENOMEM) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
            return strata_err_set(err, STRATA_EINVAL, "tool %zu (`%s`) parameters: %s", i,
                                  tools[i].name, e2.msg);
        }
        char pre[32];
        snprintf(pre, sizeof(pre), "t%zu-", i);
        sbuf line = {0};
        rc = sbuf_printf(&b, "tool%zu ::= ", i);
        if (rc == 0) rc = sbuf_append(&line, sx->before, strlen(sx->before));
        if (rc == 0) rc = sbuf_append(&line, tools[i].name, strlen(tools[i].name));
        if (rc == 0) rc = sbuf_append(&line, sx->mid, strlen(sx->mid));
        if (rc == 0) rc = append_lit(&b, line.data);
        if (rc == 0) rc = sbuf_printf(&b, " %sroot ", pre);
        if (rc == 0) rc = append_lit(&b, sx->after);
        if (rc == 0) rc = sbuf_append(&b, "\n", 1);
        if (rc == 0) rc = gbnf_append_renamed(&b, g, pre);
        if (rc == 0 && b.len > 0 && b.data[b.len - 1] != '\n') rc = sbuf_append(&b, "\n", 1);
        sbuf_free(&line);
        free(g);
        if (rc == 0 && b.len > JSON_SCHEMA_MAX_GBNF * 4) {
            sbuf_free(&b);
            return strata_err_set(err, STRATA_EINVAL, "the tools' grammar is over %d bytes",
                                  JSON_SCHEMA_MAX_GBNF * 4);
        }
    }
    if (rc != 0) {
        sbuf_free(&b);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    *out = b.data;
    return 0;
}
