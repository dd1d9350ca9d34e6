/* Reasoning in model output (reasoning.h): the THINK block and gpt-oss's
 * harmony messages, split from the answer, with the settled part of a
 * growing output for streaming. */
#define _GNU_SOURCE /* memmem */
#include "serve/reasoning.h"
#include "serve/textgen.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"
#define BRACKET_OPEN "[THINK]"
#define BRACKET_CLOSE "[/THINK]"

#define H_START "<|start|>"
#define H_CHANNEL "<|channel|>"
#define H_MESSAGE "<|message|>"
#define H_END "<|end|>"
#define H_RETURN "<|return|>"
#define H_CALL "<|call|>"
#define H_FUNCTIONS "functions."

#define R_SEP ">>>"
#define R_ALL "all"

reasoning_format reasoning_detect(const char *tmpl)
{
    if (tmpl == NULL) return REASONING_NONE;
    if (strstr(tmpl, H_CHANNEL) != NULL) return REASONING_HARMONY;
    if (strstr(tmpl, R_SEP R_ALL) != NULL) return REASONING_RECIPIENTS;
    if (strstr(tmpl, THINK_OPEN) != NULL || strstr(tmpl, THINK_CLOSE) != NULL) return REASONING_THINK;
    if (strstr(tmpl, BRACKET_OPEN) != NULL && strstr(tmpl, BRACKET_CLOSE) != NULL) {
        return REASONING_THINK_BRACKET;
    }
    return REASONING_NONE;
}

const char *const *reasoning_markers(reasoning_format f, size_t *n)
{
    static const char *const think[] = {THINK_OPEN, THINK_CLOSE};
    static const char *const bracket[] = {BRACKET_OPEN, BRACKET_CLOSE};
    static const char *const harmony[] = {H_START, H_CHANNEL, H_MESSAGE, H_END,
                                          H_RETURN, H_CALL, "<|constrain|>"};
    switch (f) {
    case REASONING_THINK: *n = 2; return think;
    case REASONING_THINK_BRACKET: *n = 2; return bracket;
    case REASONING_HARMONY: *n = sizeof(harmony) / sizeof(harmony[0]); return harmony;
    default: *n = 0; return NULL;
    }
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* Whether prompt[0..n) ends with marker m and optional whitespace. */
static bool prompt_ends_with(const char *prompt, size_t n, const char *m)
{
    while (n > 0 && is_ws(prompt[n - 1])) n--;
    size_t k = strlen(m);
    return n >= k && memcmp(prompt + n - k, m, k) == 0;
}

bool reasoning_prompt_open(const char *prompt, size_t n)
{
    return prompt_ends_with(prompt, n, THINK_OPEN);
}

bool reasoning_prompt_closed(const char *prompt, size_t n)
{
    return prompt_ends_with(prompt, n, THINK_CLOSE);
}

/* Text up to and including the first "</think>", as states of a matcher:
 * rsn-K has matched the marker's first K bytes. A byte that continues the
 * marker advances, '<' (its first byte, found nowhere else in it) restarts
 * at 1, any other byte goes back to 0; the marker's last byte ends the
 * text. Right recursion only, so a parse's stack does not grow with the
 * text. */
static const char k_think_text[] =
    "rsn-0 ::= [^<] rsn-0 | \"<\" rsn-1\n"
    "rsn-1 ::= \"/\" rsn-2 | \"<\" rsn-1 | [^/<] rsn-0\n"
    "rsn-2 ::= \"t\" rsn-3 | \"<\" rsn-1 | [^t<] rsn-0\n"
    "rsn-3 ::= \"h\" rsn-4 | \"<\" rsn-1 | [^h<] rsn-0\n"
    "rsn-4 ::= \"i\" rsn-5 | \"<\" rsn-1 | [^i<] rsn-0\n"
    "rsn-5 ::= \"n\" rsn-6 | \"<\" rsn-1 | [^n<] rsn-0\n"
    "rsn-6 ::= \"k\" rsn-7 | \"<\" rsn-1 | [^k<] rsn-0\n"
    "rsn-7 ::= \">\" | \"<\" rsn-1 | [^><] rsn-0\n"
    "rsn-ws ::= [ \\t\\r\\n]{0,8}\n";

int reasoning_grammar(const char *answer, bool open, char **out)
{
    sbuf b = {0};
    int rc = sbuf_printf(&b, "root ::= %s ans-root\n", open ? "rsn-0 rsn-ws" : "(\"" THINK_OPEN "\" rsn-0 rsn-ws)?");
    if (rc == 0) rc = sbuf_append(&b, k_think_text, sizeof(k_think_text) - 1);
    if (rc == 0) rc = gbnf_append_renamed(&b, answer, "ans-");
    if (rc == 0 && b.len > 0 && b.data[b.len - 1] != '\n') rc = sbuf_append(&b, "\n", 1);
    if (rc != 0) {
        sbuf_free(&b);
        *out = NULL;
        return -1;
    }
    *out = b.data;
    return 0;
}

/* Whether s[0..n) is a proper prefix of marker m (n < strlen(m)). */
static bool proper_prefix(const char *s, size_t n, const char *m)
{
    size_t k = strlen(m);
    return n < k && memcmp(s, m, n) == 0;
}

/* The length of the longest tail of s[0..n) that is a proper prefix of
 * one of markers[0..nm): what a growing output must hold back. */
static size_t partial_tail(const char *s, size_t n, const char *const *markers, size_t nm)
{
    size_t best = 0;
    for (size_t i = 0; i < nm; i++) {
        size_t k = strlen(markers[i]);
        for (size_t t = k - 1 < n ? k - 1 : n; t > best; t--) {
            if (memcmp(s + n - t, markers[i], t) == 0) {
                best = t;
                break;
            }
        }
    }
    return best;
}

/* Whether marker m starts at t[p..n). */
static bool at(const char *t, size_t n, size_t p, const char *m)
{
    size_t k = strlen(m);
    return p <= n && n - p >= k && memcmp(t + p, m, k) == 0;
}

static const char *find(const char *s, size_t n, const char *m)
{
    return memmem(s, n, m, strlen(m));
}

typedef struct parts_buf {
    sbuf reasoning, content;
    tool_call *calls;
    size_t n_calls;
    bool oom;
} parts_buf;

static void put(parts_buf *b, sbuf *to, const char *s, size_t n)
{
    if (n > 0 && sbuf_append(to, s, n) != 0) b->oom = true;
}

/* THINK from text[p..n) inside the block that close ends. */
static void think_block(parts_buf *b, const char *t, size_t p, size_t n, bool final,
                        const char *close_m)
{
    while (p < n && is_ws(t[p])) p++;
    const char *close = find(t + p, n - p, close_m);
    if (close == NULL) {
        size_t e = n;
        if (!final) {
            const char *m[] = {close_m};
            e -= partial_tail(t + p, n - p, m, 1);
        }
        /* trailing whitespace is held: it is trimmed if the block ends */
        while (e > p && is_ws(t[e - 1])) e--;
        put(b, &b->reasoning, t + p, e - p);
        return;
    }
    size_t e = (size_t)(close - t);
    while (e > p && is_ws(t[e - 1])) e--;
    put(b, &b->reasoning, t + p, e - p);
    size_t q = (size_t)(close - t) + strlen(close_m);
    while (q < n && is_ws(t[q])) q++;
    put(b, &b->content, t + q, n - q);
}

static void split_think(parts_buf *b, bool open, const char *t, size_t n, bool final,
                        const char *open_m, const char *close_m)
{
    if (open) {
        think_block(b, t, 0, n, final, close_m);
        return;
    }
    size_t q = 0;
    while (q < n && is_ws(t[q])) q++;
    size_t k = strlen(open_m);
    if (n - q >= k && memcmp(t + q, open_m, k) == 0) {
        think_block(b, t, q + k, n, final, close_m);
        return;
    }
    /* only whitespace or the start of the opening marker so far: undecided */
    if (!final && proper_prefix(t + q, n - q, open_m)) return;
    put(b, &b->content, t, n);
}

/* --- harmony --- */

static const char *const k_h_markers[] = {H_START, H_CHANNEL, H_MESSAGE, H_END, H_RETURN, H_CALL};
#define N_H_MARKERS (sizeof(k_h_markers) / sizeof(k_h_markers[0]))

/* The first marker that ends a message body in s[0..n), or NULL. */
static const char *body_end(const char *s, size_t n)
{
    const char *first = NULL;
    const char *const ends[] = {H_START, H_CHANNEL, H_END, H_RETURN, H_CALL};
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
        const char *e = find(s, n, ends[i]);
        if (e != NULL && (first == NULL || e < first)) first = e;
    }
    return first;
}

/* The word after key in header h[0..n) (up to a space, '<' or the end),
 * or NULL. */
static const char *header_word(const char *h, size_t n, const char *key, size_t *len)
{
    const char *k = find(h, n, key);
    if (k == NULL) return NULL;
    const char *w = k + strlen(key);
    while (w < h + n && *w == ' ') w++;
    const char *e = w;
    while (e < h + n && *e != ' ' && *e != '<' && !is_ws(*e)) e++;
    *len = (size_t)(e - w);
    return w;
}

/* A finished message to functions.NAME: a call when NAME is a function
 * name and its body a JSON object (kept compact), else false. */
/* Whether s[0..n) holds only bytes of a function's name as the API
 * declares them ([A-Za-z0-9_-]), at most 64 (a name is 1 to 64 of them;
 * a recipient being written may still be empty). */
static bool name_bytes_ok(const char *s, size_t n)
{
    if (n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) {
            return false;
        }
    }
    return true;
}

static bool add_call(parts_buf *b, const char *name, size_t n_name, const char *body, size_t n_body)
{
    if (n_name == 0 || !name_bytes_ok(name, n_name)) return false;
    json_error_t je;
    json_t *args = json_loadb(body, n_body, 0, &je);
    if (!json_is_object(args)) {
        json_decref(args);
        return false;
    }
    char *a = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    tool_call *nc = realloc(b->calls, (b->n_calls + 1) * sizeof(*nc));
    char *nm = strndup(name, n_name);
    if (a == NULL || nc == NULL || nm == NULL) {
        free(a);
        free(nm);
        if (nc != NULL) b->calls = nc;
        b->oom = true;
        return true;
    }
    b->calls = nc;
    b->calls[b->n_calls++] = (tool_call){.name = nm, .arguments = a};
    return true;
}

static void split_harmony(parts_buf *b, const char *t, size_t n, bool final)
{
    size_t p = 0;
    while (p < n) {
        const char *s = t + p;
        size_t left = n - p;
        size_t h0;
        if (at(t, n, p, H_START)) {
            h0 = p + strlen(H_START);
        } else if (at(t, n, p, H_CHANNEL)) {
            h0 = p;
        } else {
            /* text outside a message: content up to the next marker */
            const char *e = body_end(s, left);
            const char *m = find(s, left, H_MESSAGE);
            if (m != NULL && (e == NULL || m < e)) e = m;
            size_t len = e ? (size_t)(e - s) : left;
            size_t keep = len;
            if (e == NULL && !final) keep -= partial_tail(s, left, k_h_markers, N_H_MARKERS);
            /* whitespace between messages is no content (while more may
             * come, it is held) */
            bool blank = true;
            for (size_t i = 0; i < keep && blank; i++) blank = is_ws(s[i]);
            if (!blank) put(b, &b->content, s, keep);
            if (e == NULL) return;
            p += len;
            /* a stray end marker (or <|message|> without a header) is skipped */
            if (!at(t, n, p, H_START) && !at(t, n, p, H_CHANNEL)) {
                for (size_t i = 0; i < N_H_MARKERS; i++) {
                    if (at(t, n, p, k_h_markers[i])) {
                        p += strlen(k_h_markers[i]);
                        break;
                    }
                }
            }
            continue;
        }
        /* a header runs to <|message|>; until then the message is unknown */
        const char *m = find(t + h0, n - h0, H_MESSAGE);
        if (m == NULL) return;
        const char *h = t + h0;
        size_t hn = (size_t)(m - h);
        size_t n_ch = 0, n_to = 0;
        const char *ch = header_word(h, hn, H_CHANNEL, &n_ch);
        const char *to = header_word(h, hn, "to=", &n_to);
        if (n_to == 0) to = NULL; /* no recipient named */
        size_t b0 = (size_t)(m - t) + strlen(H_MESSAGE);
        const char *e = body_end(t + b0, n - b0);
        size_t b1 = e ? (size_t)(e - t) : n;
        bool done = e != NULL || final;
        if (to != NULL) {
            /* a call comes whole with the finished output */
            if (!final) return;
            const char *name = to;
            size_t nn = n_to;
            if (nn > strlen(H_FUNCTIONS) && memcmp(name, H_FUNCTIONS, strlen(H_FUNCTIONS)) == 0) {
                name += strlen(H_FUNCTIONS);
                nn -= strlen(H_FUNCTIONS);
            }
            if (!add_call(b, name, nn, t + b0, b1 - b0)) put(b, &b->content, t + b0, b1 - b0);
        } else {
            size_t len = b1 - b0;
            if (!done) len -= partial_tail(t + b0, len, k_h_markers, N_H_MARKERS);
            bool analysis = ch != NULL && n_ch == strlen("analysis") && memcmp(ch, "analysis", n_ch) == 0;
            put(b, analysis ? &b->reasoning : &b->content, t + b0, len);
        }
        if (!done) return;
        p = b1;
        /* the end marker; <|start|> and <|channel|> begin the next message */
        for (size_t i = 3; i < N_H_MARKERS; i++) {
            if (at(t, n, p, k_h_markers[i])) {
                p += strlen(k_h_markers[i]);
                break;
            }
        }
    }
}

/* --- recipients (functionary v3.2) --- */

static void split_recipients(parts_buf *b, const char *t, size_t n, bool final)
{
    size_t p = 0;
    const char *const sep[] = {R_SEP};
    /* blanks before the first recipient (a tokenizer's leading space) */
    while (p < n && is_ws(t[p])) p++;
    while (p < n) {
        const char *nl = memchr(t + p, '\n', n - p);
        size_t hn = nl ? (size_t)(nl - (t + p)) : n - p;
        if (hn == 0 || !name_bytes_ok(t + p, hn)) {
            /* no recipient: the rest is plain content (an empty first
             * line too: the model ignored the framing) */
            if (nl == NULL && hn == 0 && !final) return;
            put(b, &b->content, t + p, n - p);
            return;
        }
        if (nl == NULL) {
            /* a recipient still being written, or a reply of one word */
            if (final && !(hn == strlen(R_ALL) && memcmp(t + p, R_ALL, hn) == 0)) {
                put(b, &b->content, t + p, hn);
            }
            return;
        }
        size_t b0 = p + hn + 1;
        const char *e = find(t + b0, n - b0, R_SEP);
        size_t b1 = e ? (size_t)(e - t) : n;
        bool done = e != NULL || final;
        bool all = hn == strlen(R_ALL) && memcmp(t + p, R_ALL, hn) == 0;
        if (all) {
            size_t end = b1;
            if (!done) end -= partial_tail(t + b0, b1 - b0, sep, 1);
            /* trailing whitespace is held while the message may go on,
             * and trimmed once it ends */
            while (end > b0 && is_ws(t[end - 1])) end--;
            put(b, &b->content, t + b0, end - b0);
        } else {
            /* a call comes whole with the finished output */
            if (!final) return;
            if (!add_call(b, t + p, hn, t + b0, b1 - b0)) put(b, &b->content, t + b0, b1 - b0);
        }
        if (!done) return;
        p = e ? b1 + strlen(R_SEP) : n;
    }
}

int reasoning_split(reasoning_format f, bool open, const char *text, size_t n, bool final,
                    reasoning_parts *out)
{
    memset(out, 0, sizeof(*out));
    parts_buf b = {0};
    if (text == NULL) n = 0;
    switch (f) {
    case REASONING_THINK: split_think(&b, open, text, n, final, THINK_OPEN, THINK_CLOSE); break;
    case REASONING_THINK_BRACKET:
        split_think(&b, false, text, n, final, BRACKET_OPEN, BRACKET_CLOSE);
        break;
    case REASONING_HARMONY: split_harmony(&b, text, n, final); break;
    case REASONING_RECIPIENTS: split_recipients(&b, text, n, final); break;
    default: put(&b, &b.content, text, n); break;
    }
    /* empty strings are allocated too: the caller may take both */
    if (!b.oom && b.reasoning.data == NULL && sbuf_append(&b.reasoning, "", 0) != 0) b.oom = true;
    if (!b.oom && b.content.data == NULL && sbuf_append(&b.content, "", 0) != 0) b.oom = true;
    *out = (reasoning_parts){.reasoning = b.reasoning.data, .n_reasoning = b.reasoning.len,
                             .content = b.content.data, .n_content = b.content.len,
                             .calls = b.calls, .n_calls = b.n_calls};
    if (b.oom) {
        reasoning_parts_free(out);
        return -1;
    }
    return 0;
}

void reasoning_parts_free(reasoning_parts *p)
{
    tool_calls_free(p->calls, p->n_calls);
    free(p->reasoning);
    free(p->content);
    memset(p, 0, sizeof(*p));
}
