/* Internals of the Jinja engine shared by its files: tokens, the syntax
 * tree, the value model and the runtime state of one render.
 *
 * Pipeline: jinja_lex.c turns the source into tokens (applying the
 * whitespace rules: `-` markers, trim_blocks, lstrip_blocks, raw blocks,
 * comments); jinja_parse.c builds a tree of jnode in the template's arena;
 * jinja_eval.c walks the tree for one render, with values from
 * jinja_value.c, operators from jinja_ops.c, filters and tests from
 * jinja_filters.c, methods and global functions from jinja_methods.c,
 * text helpers from jinja_str.c and JSON from jinja_json.c.
 *
 * Values follow Python's semantics where templates depend on them. Heap
 * values are reference counted and every live one is also linked into its
 * render's heap, so the render frees whatever is left at the end (reference
 * cycles made through namespaces or lists included) and can cap the bytes
 * that are live at once. Errors are values: functions return 0 or a
 * negative STRATA_E* code after calling jrt_fail, which records the message
 * and the template position of the node being evaluated. */
#ifndef STRATA_TEXT_JINJA_INTERNAL_H
#define STRATA_TEXT_JINJA_INTERNAL_H

#include "base/arena.h"
#include "base/err.h"
#include "text/jinja.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ */
/* tokens                                                              */

enum jtok_type {
    JT_EOF = 0,
    JT_TEXT,        /* template data, already trimmed; s/len (may hold NUL) */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,        /* s is NUL-terminated */
    JT_STRING,      /* s/len decoded, NUL-terminated */
    JT_INT,         /* i */
    JT_FLOAT,       /* f */
    JT_OP,          /* op */
};

enum jop {
    JOP_NONE = 0,
    JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_TILDE,
    JOP_LPAREN, JOP_RPAREN, JOP_LBRACKET, JOP_RBRACKET, JOP_LBRACE, JOP_RBRACE,
    JOP_COMMA, JOP_DOT, JOP_COLON, JOP_PIPE, JOP_ASSIGN,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE,
    /* not produced by the lexer: operators of the tree only */
    JOP_IN, JOP_NOTIN, JOP_NEG, JOP_POS,
};

typedef struct jtok {
    uint8_t type;
    uint8_t op;
    uint32_t line, col; /* 1-based */
    const char *s;
    size_t len;
    int64_t i;
    double f;
} jtok;

/* Tokenizes src (len bytes) into an array allocated in arena. Returns 0, or
 * STRATA_EFORMAT with "line:col: reason" in err. */
int jinja_lex(strata_arena *arena, const char *src, size_t len, jtok **out, size_t *n_out,
              strata_err *err);

/* ------------------------------------------------------------------ */
/* values                                                              */

enum jv_kind {
    JV_UNDEFINED = 0,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STRING,
    JV_LIST,      /* also tuples (is_tuple) */
    JV_DICT,      /* insertion-ordered */
    JV_NAMESPACE, /* a dict whose entries are attributes */
    JV_CALLABLE,  /* macro, caller, global function, bound loop.cycle */
    JV_LOOP,      /* the `loop` variable of a for */
};

typedef struct jv_obj jv_obj;

/* A value. Scalars live in the struct; strings, lists, dicts and the rest
 * point at a reference-counted object. An undefined value may carry the
 * name that was looked up (a NUL-terminated string of the tree) for its
 * error messages. */
typedef struct jv {
    uint8_t kind;
    union {
        bool b;
        int64_t i;
        double f;
        jv_obj *o;
        const char *name;
    } u;
} jv;

typedef struct jinja_heap {
    jv_obj *live;      /* every object of the render, doubly linked */
    size_t n_bytes;    /* bytes of the live objects */
    size_t max_bytes;
} jinja_heap;

#define JV_RC_IMMORTAL UINT32_MAX /* constants of the tree: never freed */

struct jv_obj {
    uint32_t rc;
    uint8_t kind;
    jinja_heap *heap; /* NULL for immortal objects */
    jv_obj *prev, *next;
    size_t n_bytes;   /* counted against heap->max_bytes */
};

typedef struct jv_str {
    jv_obj h;
    size_t len;
    bool markup; /* a Markup string (from safe/escape): `+` escapes the other side */
    char s[];    /* len bytes + NUL */
} jv_str;

typedef struct jv_list {
    jv_obj h;
    bool is_tuple;
    size_t n, cap;
    jv *items;
} jv_list;

typedef struct jv_dict {
    jv_obj h;
    size_t n, cap;
    jv *keys, *vals;
    uint32_t *slots;  /* open addressing: 0 empty, else index + 1 */
    size_t n_slots;   /* 0 or a power of two >= 2 * cap */
} jv_dict;

struct jnode;
struct jscope;

enum jcall_kind {
    JCALL_MACRO,   /* node: the macro statement */
    JCALL_CALLER,  /* node: the call block; scope: where it stands (NULL once it ended) */
    JCALL_BUILTIN, /* builtin: index of a global function */
    JCALL_CYCLE,   /* self: the loop whose cycle() this is */
    JCALL_METHOD,  /* self.method: a method taken without calling it */
};

typedef struct jv_callable {
    jv_obj h;
    uint8_t call_kind;
    int builtin;
    const struct jnode *node;
    struct jscope *scope;
    jv self;
    const char *method; /* JCALL_METHOD: its name (static, from jm_method_name) */
} jv_callable;

typedef struct jv_loop {
    jv_obj h;
    jv items;      /* a list */
    size_t index0; /* current position */
    int depth0;
} jv_loop;

#define JV_STR(v) ((jv_str *)(v).u.o)
#define JV_LIST_(v) ((jv_list *)(v).u.o)
#define JV_DICT_(v) ((jv_dict *)(v).u.o)

static inline jv jv_undefined(const char *name)
{
    jv v = {.kind = JV_UNDEFINED};
    v.u.name = name;
    return v;
}
static inline jv jv_none(void) { return (jv){.kind = JV_NONE}; }
static inline jv jv_bool(bool b) { jv v = {.kind = JV_BOOL}; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {.kind = JV_INT}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.kind = JV_FLOAT}; v.u.f = f; return v; }
static inline bool jv_is_obj(jv v) { return v.kind >= JV_STRING; }
static inline bool jv_is_str(jv v) { return v.kind == JV_STRING; }
static inline bool jv_is_number(jv v)
{
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}
static inline bool jv_is_dict(jv v) { return v.kind == JV_DICT || v.kind == JV_NAMESPACE; }

/* ------------------------------------------------------------------ */
/* syntax tree                                                         */

enum jnode_kind {
    /* expressions */
    JN_LITERAL = 1, /* lit */
    JN_NAME,        /* name */
    JN_ATTR,        /* a.name */
    JN_ITEM,        /* a[b] */
    JN_SLICE,       /* a[b:c:d], each of b c d may be NULL */
    JN_CALL,        /* a(kids..., kwnames/kw...) */
    JN_FILTER,      /* a | name(kids..., kw...); a is NULL inside a filter block */
    JN_TEST,        /* a is [not] name(kids...); op = 1 when negated */
    JN_UNARY,       /* op a: JOP_NEG, JOP_POS */
    JN_NOT,         /* not a */
    JN_BINARY,      /* a op b: arithmetic, ~ */
    JN_AND,
    JN_OR,
    JN_COMPARE,     /* a (ops[i] kids[i])... : a chain */
    JN_COND,        /* b if a else c (c may be NULL) */
    JN_LIST,        /* [kids...] */
    JN_TUPLE,       /* (kids...) */
    JN_DICT,        /* {kids[2i]: kids[2i+1]} */
    /* statements */
    JN_TEXT,        /* name/len: the text */
    JN_OUTPUT,      /* {{ a }} */
    JN_IF,          /* if a: kids, else: kids2 */
    JN_FOR,         /* for b in a [if c]: kids, else: kids2 */
    JN_SET,         /* set b = a (b: NAME, ATTR of a namespace, or TUPLE of NAME) */
    JN_SETBLOCK,    /* set b: kids, then the filters in c (a FILTER chain on NULL) */
    JN_MACRO,       /* name(params: kwnames, defaults: kw (NULL: none)): kids */
    JN_CALLBLOCK,   /* call(params) a: kids; a is the JN_CALL */
    JN_FILTERBLOCK, /* filter c: kids */
    JN_WITH,        /* with kwnames = kw: kids */
    JN_BREAK,
    JN_CONTINUE,
    JN_BODY,        /* kids: a plain sequence (generation blocks) */
};

typedef struct jnode {
    uint8_t kind;
    uint8_t op;
    uint32_t line, col;
    const char *name; /* NUL-terminated */
    size_t len;       /* of name */
    struct jnode *a, *b, *c;
    struct jnode **kids;
    size_t n_kids;
    struct jnode **kids2;
    size_t n_kids2;
    const char **kwnames;
    struct jnode **kw; /* parallel to kwnames; an entry may be NULL */
    size_t n_kw;
    uint8_t *ops;      /* JN_COMPARE: one per kid */
    jv lit;            /* JN_LITERAL: a scalar or an immortal string */
} jnode;

struct jinja_template {
    strata_arena arena;
    jnode *root; /* a JN_BODY */
};

/* Parses tokens into a tree allocated in arena. Returns 0 or
 * STRATA_EFORMAT / STRATA_EUNSUPPORTED with "line:col: reason" in err. */
int jinja_parse_tokens(strata_arena *arena, const jtok *toks, size_t n_toks, jnode **root,
                       strata_err *err);

/* ------------------------------------------------------------------ */
/* runtime                                                             */

typedef struct jbuf {
    char *p;
    size_t len, cap;
    jinja_heap *heap; /* charged for cap bytes; set by the first put */
} jbuf;

typedef struct jscope {
    struct jscope *parent;
    size_t n, cap;
    const char **names;
    jv *vals;
} jscope;

typedef struct jrt {
    jinja_heap heap;
    jscope *root;       /* the template's top level */
    jscope *scope;      /* innermost */
    jbuf *out;          /* where output goes now */
    size_t out_total;   /* bytes written to every buffer, for the output cap */
    size_t max_output;
    uint64_t steps, max_steps;
    int depth, max_depth;
    int loop_ctl;       /* 0, JRT_BREAK or JRT_CONTINUE while unwinding */
    const jnode *at;    /* node whose position errors carry */
    int year, month, day;
    strata_err *err;
    bool failed;
    int code;           /* the first error's code once failed */
} jrt;

#define JRT_BREAK 1
#define JRT_CONTINUE 2

/* Records an error at rt->at's position (first error wins) and returns code. */
int jrt_fail(jrt *rt, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* One unit of work against the step budget. */
int jrt_step(jrt *rt);

/* --- heap values (jinja_value.c) --- */
void jv_incref(jv v);
void jv_decref(jv v);
static inline jv jv_dup(jv v) { jv_incref(v); return v; }

/* Each returns 0, or fails rt (memory cap) and returns its code. jv_new_str
 * with s NULL leaves the len bytes zeroed for the caller to fill. */
int jv_new_str(jrt *rt, const char *s, size_t len, jv *out);
int jv_new_list(jrt *rt, size_t cap, jv *out);
int jv_new_dict(jrt *rt, size_t cap, int kind, jv *out);
/* Appends v to list, taking the reference (also on failure). */
int jv_list_push(jrt *rt, jv list, jv v);
/* dict[key] = val, taking both references (also on failure). */
int jv_dict_set(jrt *rt, jv dict, jv key, jv val);
/* Borrowed value for key or NULL. */
jv *jv_dict_get(jv dict, jv key);
jv *jv_dict_get_str(jv dict, const char *key, size_t len);
/* Removes key; returns true when it was present (its value into *out, owned). */
bool jv_dict_remove(jv dict, jv key, jv *out);
int jv_new_callable(jrt *rt, int call_kind, jv *out);
int jv_new_loop(jrt *rt, jv items, jv *out);
/* A string of the tree (immortal, allocated in arena). NULL when out of memory. */
jv_str *jv_const_str(strata_arena *arena, const char *s, size_t len);

/* Grows a string builder; fails rt past the memory cap. */
int jbuf_put(jrt *rt, jbuf *b, const char *s, size_t n);
/* Builds a string value from the buffer (the buffer is reset and freed). */
int jbuf_to_value(jrt *rt, jbuf *b, jv *out);
void jbuf_free(jbuf *b);

void jinja_heap_release_all(jinja_heap *h);

/* --- semantics (jinja_value.c) --- */
bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
/* Python ordering for sort and < >: *cmp < 0, 0, > 0. Fails rt for
 * unorderable types. casefold compares strings case-insensitively. */
int jv_compare(jrt *rt, jv a, jv b, bool casefold, int *cmp);
/* Python's type name: "str", "int", "dict"... */
const char *jv_type_name(jv v);
/* str(v) as Python prints it (Undefined prints as ""), appended to b. */
int jv_write_str(jrt *rt, jbuf *b, jv v);
/* repr(v) as Python prints it, appended to b. */
int jv_write_repr(jrt *rt, jbuf *b, jv v, int depth);
/* str(v) as a new string value (a string returns itself). */
int jv_to_str(jrt *rt, jv v, jv *out);
void jv_format_float(double f, char *buf, size_t n); /* Python repr of a float */
/* Python len(); fails for unsized values. */
int jv_length(jrt *rt, jv v, int64_t *n);
/* Fills *items with a list of the elements iteration yields (keys of a
 * dict, characters of a string); undefined yields nothing. */
int jv_iterate(jrt *rt, jv v, jv *items);

/* --- JSON (jinja_json.c) --- */
int jv_from_json(jrt *rt, const json_t *j, jv *out, int depth);
/* json.dumps(v, ensure_ascii, indent=indent (NULL: None; the text
 * of one level), separators=(item_sep, key_sep), sort_keys) appended to b. */
int jv_write_json(jrt *rt, jbuf *b, jv v, const char *indent, bool sort_keys,
                  bool ensure_ascii, const char *item_sep, const char *key_sep, int depth);

/* --- strings (jinja_str.c) --- */
/* Number of code points (invalid bytes count one each). */
size_t jstr_n_chars(const char *s, size_t len);
/* Byte offset of code point i (i <= n_chars). */
size_t jstr_char_offset(const char *s, size_t len, size_t i);
bool jstr_is_space_at(const char *s, size_t len, size_t i, size_t *n_bytes);
/* Case mappings into b: mode 'u' upper, 'l' lower, 't' title, 'c' capitalize. */
int jstr_case(jrt *rt, jbuf *b, const char *s, size_t len, char mode);
/* Python str.strip/lstrip/rstrip: which 'l' 'r' 'b'; chars NULL: whitespace. */
void jstr_strip(const char *s, size_t len, const char *chars, size_t n_chars, char which,
                size_t *start, size_t *end);
/* memmem: the first occurrence of needle in hay, or NULL. */
const char *jstr_find(const char *hay, size_t hay_len, const char *needle, size_t needle_len);
/* Appends s with HTML escapes (& < > " ') to b. */
int jstr_escape_html(jrt *rt, jbuf *b, const char *s, size_t len);

/* --- evaluation (jinja_eval.c) --- */
int jx_eval(jrt *rt, const jnode *n, jv *out);
/* Calls a callable value with evaluated arguments (borrowed). */
int jx_call_value(jrt *rt, jv fn, const jv *args, size_t n_args, const char **kwnames,
                  const jv *kw, size_t n_kw, jv *out);
/* Attribute (a.name) and item (a[key]) access with Jinja's fallbacks:
 * missing entries give undefined, access on undefined fails. An undefined
 * result keeps `name` to report it, so jx_getattr's name must live as long
 * as the render (a name of the template's syntax tree). A name held by a
 * runtime string (a subscript key, the attr filter's argument), which may
 * be freed before the undefined is reported, goes through
 * jx_getattr_runtime, whose undefined carries no name. */
int jx_getattr(jrt *rt, jv obj, const char *name, size_t len, jv *out);
int jx_getattr_runtime(jrt *rt, jv obj, const jv_str *name, jv *out);
int jx_getitem(jrt *rt, jv obj, jv key, jv *out);
/* Fails rt with "'name' is undefined" for an undefined value. */
int jrt_undefined(jrt *rt, jv v);

/* --- operators (jinja_ops.c) --- */
/* a op b for JOP_ADD SUB MUL DIV FLOORDIV MOD POW TILDE. */
int jx_arith(jrt *rt, int op, jv a, jv b, jv *out);
/* a op b for JOP_EQ NE LT LE GT GE IN NOTIN. */
int jx_compare(jrt *rt, int op, jv a, jv b, bool *out);
/* obj[a:b:c] of a list or string (each bound may be none/undefined). */
int jx_slice(jrt *rt, jv obj, jv a, jv b, jv c, jv *out);
/* Python's `fmt % args` for %s %r %d %i %f %% (args: a tuple or one value). */
int jx_percent_format(jrt *rt, jv fmt, jv args, jv *out);

/* --- filters, tests (jinja_filters.c) --- */
typedef struct jargs {
    const jv *pos;
    size_t n_pos;
    const char **kwnames;
    const jv *kw;
    size_t n_kw;
} jargs;

/* Argument i of args by position, else by keyword name; *out borrowed.
 * Returns false when absent. */
bool jargs_get(const jargs *a, size_t i, const char *name, jv *out);
/* Fails when args has more positional arguments than max or a keyword not
 * in names (NULL-terminated). */
int jargs_check(jrt *rt, const jargs *a, const char *what, size_t max_pos,
                const char *const *names);

int jf_filter(jrt *rt, const char *name, jv input, const jargs *args, jv *out);
int jf_test(jrt *rt, const char *name, jv input, const jargs *args, bool *out);
bool jf_has_filter(const char *name);

/* --- methods and global functions (jinja_methods.c) --- */
/* obj.name(args): returns 1 when obj has no such method (nothing is set). */
int jm_call_method(jrt *rt, jv obj, const char *name, const jargs *args, jv *out);
/* The method table's own copy of name when obj has a method of that name
 * (for attribute access without a call), else NULL. */
const char *jm_method_name(jv obj, const char *name, size_t len);
/* The global functions: range, dict, namespace, raise_exception, strftime_now. */
int jm_global_lookup(const char *name);
const char *jm_global_name(int id);
int jm_call_global(jrt *rt, int id, const jargs *args, jv *out);
/* loop.cycle(args) */
int jm_loop_cycle(jrt *rt, jv loop, const jargs *args, jv *out);

#endif
