/* Text helpers of the Jinja engine, with Python's str semantics on UTF-8:
 * lengths and indexes count code points, whitespace is str.isspace()'s,
 * case mappings come from utf8proc. Invalid UTF-8 is never rejected: each
 * bad byte counts as one character and is copied through unchanged. */
#include "text/jinja_internal.h"

#include <string.h>
#include <utf8proc.h>

/* Decodes the code point at s[i] (i < len); sets *n to its byte length.
 * Returns -1 for an invalid sequence (then *n is 1). */
static int32_t utf8_at(const char *s, size_t len, size_t i, size_t *n)
{
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                          (utf8proc_ssize_t)(len - i), &cp);
    if (k <= 0) {
        *n = 1;
        return -1;
    }
    *n = (size_t)k;
    return cp;
}

static bool py_isspace(int32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 ||
           cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool jstr_is_space_at(const char *s, size_t len, size_t i, size_t *n_bytes)
{
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) {
        *n_bytes = 1;
        return py_isspace(c);
    }
    int32_t cp = utf8_at(s, len, i, n_bytes);
    return cp >= 0 && py_isspace(cp);
}

size_t jstr_n_chars(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            i++;
        } else {
            size_t k;
            utf8_at(s, len, i, &k);
            i += k;
        }
        n++;
    }
    return n;
}

size_t jstr_char_offset(const char *s, size_t len, size_t idx)
{
    size_t i = 0;
    for (size_t n = 0; n < idx && i < len; n++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            i++;
        } else {
            size_t k;
            utf8_at(s, len, i, &k);
            i += k;
        }
    }
    return i;
}

static int put_cp(jrt *rt, jbuf *b, int32_t cp)
{
    utf8proc_uint8_t tmp[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, tmp);
    return jbuf_put(rt, b, (const char *)tmp, (size_t)k);
}

static bool is_cased(int32_t cp)
{
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

/* Jinja's title filter starts a word after whitespace, '-' and opening
 * brackets. */
static bool is_jinja_word_sep(int32_t cp)
{
    return py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
}

int jstr_case(jrt *rt, jbuf *b, const char *s, size_t len, char mode)
{
    bool prev_cased = false, at_start = true;
    for (size_t i = 0; i < len;) {
        size_t k;
        int32_t cp = utf8_at(s, len, i, &k);
        int rc;
        if (cp < 0) {
            rc = jbuf_put(rt, b, s + i, 1);
            prev_cased = false;
            at_start = false;
        } else {
            int32_t m = cp;
            switch (mode) {
            case 'u': m = utf8proc_toupper(cp); break;
            case 'l': m = utf8proc_tolower(cp); break;
            case 'c': m = at_start ? utf8proc_totitle(cp) : utf8proc_tolower(cp); break;
            case 't': /* str.title() */
                if (is_cased(cp)) m = prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
                prev_cased = is_cased(cp);
                break;
            case 'T': /* the title filter */
                m = at_start ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
                break;
            default: break;
            }
            rc = put_cp(rt, b, m);
            at_start = mode == 'T' ? is_jinja_word_sep(cp) : false;
        }
        if (rc != 0) return rc;
        i += k;
    }
    return 0;
}

static bool in_chars(int32_t cp, const char *chars, size_t n_chars)
{
    for (size_t i = 0; i < n_chars;) {
        size_t k;
        int32_t c = utf8_at(chars, n_chars, i, &k);
        if (c == cp && cp >= 0) return true;
        i += k;
    }
    return false;
}

/* Start of the code point that ends at s[end-1]. */
static size_t prev_start(const char *s, size_t start, size_t end)
{
    size_t i = end - 1;
    while (i > start && ((unsigned char)s[i] & 0xC0) == 0x80 && end - i < 4) i--;
    size_t k;
    utf8_at(s, end, i, &k);
    if (i + k != end) return end - 1; /* not a whole character: one byte */
    return i;
}

void jstr_strip(const char *s, size_t len, const char *chars, size_t n_chars, char which,
                size_t *start, size_t *end)
{
    size_t a = 0, e = len;
    if (which == 'l' || which == 'b') {
        while (a < e) {
            size_t k;
            int32_t cp = utf8_at(s, e, a, &k);
            bool strip = chars ? in_chars(cp, chars, n_chars) : (cp >= 0 && py_isspace(cp));
            if (!strip) break;
            a += k;
        }
    }
    if (which == 'r' || which == 'b') {
        while (e > a) {
            size_t p = prev_start(s, a, e), k;
            int32_t cp = utf8_at(s, e, p, &k);
            bool strip = chars ? in_chars(cp, chars, n_chars) : (cp >= 0 && py_isspace(cp));
            if (!strip) break;
            e = p;
        }
    }
    *start = a;
    *end = e;
}

const char *jstr_find(const char *hay, size_t hay_len, const char *needle, size_t needle_len)
{
    if (needle_len == 0) return hay;
    if (needle_len > hay_len) return NULL;
    const char *end = hay + (hay_len - needle_len) + 1;
    for (const char *p = hay; p < end;) {
        p = memchr(p, needle[0], (size_t)(end - p));
        if (p == NULL) return NULL;
        if (memcmp(p, needle, needle_len) == 0) return p;
        p++;
    }
    return NULL;
}

int jstr_escape_html(jrt *rt, jbuf *b, const char *s, size_t len)
{
    size_t from = 0;
    for (size_t i = 0; i < len; i++) {
        const char *rep = NULL;
        switch (s[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&#34;"; break;
        case '\'': rep = "&#39;"; break;
        default: break;
        }
        if (rep == NULL) continue;
        int rc = jbuf_put(rt, b, s + from, i - from);
        if (rc == 0) rc = jbuf_put(rt, b, rep, strlen(rep));
        if (rc != 0) return rc;
        from = i + 1;
    }
    return jbuf_put(rt, b, s + from, len - from);
}
