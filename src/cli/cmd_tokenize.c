/* `strata tokenize -m MODEL [--file F | TEXT] [--no-add-special]
 *  [--no-parse-special] [--ids]`: the ids a model's tokenizer gives a text.
 *
 * Only the model's metadata is read (a vocab-only GGUF is enough). By
 * default BOS/EOS are added as the model does and special-token text in the
 * input ("<s>", "<|im_end|>") becomes the special ids.
 *
 * Output, on stdout:
 *   --ids     the ids on one line, separated by single spaces, then "\n"
 *             (an empty line for no ids);
 *   default   one line per token: the id, a tab, and the token's piece (the
 *             bytes it stands for, special tokens as their text), with
 *             backslash escapes so that every piece fits on its line: \\,
 *             \n, \t, \r, and \xNN for other control bytes and for bytes
 *             that are not a complete UTF-8 character within the piece
 *             (a <0xE6> byte token prints as \xe6).
 * Exit status: 0, 1 when the model or the file cannot be read or the text
 * cannot be tokenized, 2 for bad usage. */
#include "cli.h"

#include "text/tokenizer.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tokenize_usage(FILE *f)
{
    fprintf(f, "usage: strata tokenize -m MODEL.gguf [--file F | TEXT] [--no-add-special]\n"
               "                       [--no-parse-special] [--ids]\n\n"
               "  -m, --model F        the model (its tokenizer metadata is all that is read)\n"
               "  --file F             tokenize the bytes of F ('-': standard input)\n"
               "  --no-add-special     do not add BOS/EOS ([CLS]/[SEP])\n"
               "  --no-parse-special   special-token text in the input is plain text\n"
               "  --ids                print the ids on one line, space-separated\n\n"
               "Without --ids each line is ID<TAB>PIECE, the piece escaped with \\\\, \\n, \\t,\n"
               "\\r and \\xNN (control bytes, bytes of an incomplete UTF-8 character).\n");
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
        if (n == cap) {
            if (cap > TOK_MAX_INPUT_BYTES) break; /* tok_tokenize refuses it with a message */
            char *b = realloc(buf, cap * 2);
            if (b == NULL) {
                free(buf);
                return NULL;
            }
            buf = b;
            cap *= 2;
        }
    }
    if (buf != NULL && ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Prints piece[0..n) escaped as the header describes. */
static void print_piece(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c < 0x80) {
            if (c == '\\') fputs("\\\\", stdout);
            else if (c == '\n') fputs("\\n", stdout);
            else if (c == '\t') fputs("\\t", stdout);
            else if (c == '\r') fputs("\\r", stdout);
            else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
            else putchar(c);
            i++;
            continue;
        }
        /* A complete, valid UTF-8 character is printed as it is. */
        size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) ok = (p[i + k] & 0xC0) == 0x80;
        if (ok && len == 3) {
            ok = !(c == 0xE0 && p[i + 1] < 0xA0) && !(c == 0xED && p[i + 1] > 0x9F);
        }
        if (ok && len == 4) {
            ok = !(c == 0xF0 && p[i + 1] < 0x90) && !(c == 0xF4 && p[i + 1] > 0x8F);
        }
        if (ok) {
            fwrite(p + i, 1, len, stdout);
            i += len;
        } else {
            printf("\\x%02x", c);
            i++;
        }
    }
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *text = NULL;
    bool add_special = true, parse_special = true, ids_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) && i + 1 < argc) {
            model = argv[++i];
        } else if (strcmp(a, "--file") == 0 && i + 1 < argc) {
            file = argv[++i];
        } else if (strcmp(a, "--no-add-special") == 0) {
            add_special = false;
        } else if (strcmp(a, "--no-parse-special") == 0) {
            parse_special = false;
        } else if (strcmp(a, "--ids") == 0) {
            ids_only = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            tokenize_usage(stdout);
            return 0;
        } else if (strcmp(a, "--") == 0 && i + 1 < argc && text == NULL) {
            text = argv[++i]; /* a text that starts with '-' */
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "strata tokenize: unknown option '%s'\n", a);
            tokenize_usage(stderr);
            return 2;
        } else if (text == NULL) {
            text = a;
        } else {
            fprintf(stderr, "strata tokenize: one TEXT at a time (quote it)\n");
            return 2;
        }
    }
    if (model == NULL || (file == NULL) == (text == NULL)) {
        fprintf(stderr, "strata tokenize: %s\n",
                model == NULL ? "-m MODEL is required" : "give either --file F or TEXT");
        tokenize_usage(stderr);
        return 2;
    }

    char *input = NULL;
    size_t len = 0;
    if (file != NULL) {
        FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
        if (f == NULL) {
            fprintf(stderr, "strata tokenize: cannot open %s\n", file);
            return 1;
        }
        input = read_all(f, &len);
        if (f != stdin) fclose(f);
        if (input == NULL) {
            fprintf(stderr, "strata tokenize: cannot read %s\n", file);
            return 1;
        }
    }

    vocab *v;
    strata_err err;
    if (vocab_open(&v, model, &err) != 0) {
        fprintf(stderr, "strata tokenize: %s\n", err.msg);
        free(input);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = tok_tokenize_alloc(v, input ? input : text, input ? len : strlen(text), add_special, parse_special,
                                &ids, &n_ids, &err);
    free(input);
    if (rc != 0) {
        fprintf(stderr, "strata tokenize: %s\n", err.msg);
        vocab_free(v);
        return 1;
    }
    if (ids_only) {
        for (size_t i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    } else {
        char *piece = malloc(TOK_MAX_PIECE_BYTES);
        for (size_t i = 0; piece != NULL && i < n_ids; i++) {
            size_t n;
            if (tok_token_to_piece(v, ids[i], true, piece, TOK_MAX_PIECE_BYTES, &n, &err) != 0) n = 0;
            printf("%d\t", ids[i]);
            print_piece((const unsigned char *)piece, n);
            putchar('\n');
        }
        if (piece == NULL) rc = 1;
        free(piece);
    }
    free(ids);
    vocab_free(v);
    if (fflush(stdout) != 0) rc = 1;
    return rc != 0;
}
