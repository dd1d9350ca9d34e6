/* `strata template (-m MODEL | --template-file F.jinja) --messages M.json
 * [--bos S] [--eos S] [--date YYYY-MM-DD] [--no-generation-prompt]`:
 * renders a chat template and prints the prompt exactly, with no newline
 * added. The rendering is src/text/chat_template.h's; this file only reads
 * the inputs.
 *
 * M.json is a JSON array of messages, or an object with a `messages` array
 * (as ../shared/data/golden/templates/conversation.json). In the object
 * form, `tools` is passed as the template's tools; `bos_token`,
 * `eos_token`, `add_generation_prompt` and `strftime_now_date` are used
 * when no option gives them; any other key becomes a template variable
 * (`enable_thinking`, `documents`, ...). Options win over the file, the file
 * over the model's own BOS/EOS texts. */
#include "cli.h"

#include "base/err.h"
#include "gguf/gguf.h"
#include "text/chat_template.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEMPLATE_MAX_MESSAGES_FILE (256u << 20)

static void template_usage(FILE *f)
{
    fprintf(f, "usage: strata template (-m MODEL.gguf | --template-file F.jinja) --messages M.json\n"
               "                       [--bos S] [--eos S] [--date YYYY-MM-DD] [--no-generation-prompt]\n\n"
               "Prints the prompt the chat template makes of the messages, byte for byte.\n\n"
               "  -m MODEL.gguf           the model's tokenizer.chat_template and BOS/EOS texts\n"
               "  --template-file F       a Jinja template file instead\n"
               "  --template-name NAME    with -m: tokenizer.chat_template.NAME (e.g. tool_use)\n"
               "  --messages M.json       an array of messages, or an object with `messages`\n"
               "                          (and optionally `tools` and other variables)\n"
               "  --bos S, --eos S        the bos_token / eos_token texts\n"
               "  --date YYYY-MM-DD       the date strftime_now sees (default: today)\n"
               "  --no-generation-prompt  add_generation_prompt = false (default true)\n");
}

/* Reads a whole file (at most max bytes) into a malloc'd NUL-terminated buffer. */
static char *read_file(const char *path, size_t max, size_t *len, strata_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        strata_err_set(err, STRATA_EIO, "%s: cannot open", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf != NULL) {
        if (n == cap) {
            if (cap >= max) {
                strata_err_set(err, STRATA_ERANGE, "%s: larger than %zu bytes", path, max);
                free(buf);
                buf = NULL;
                break;
            }
            cap *= 2;
            char *p = realloc(buf, cap + 1);
            if (p == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = p;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) {
            if (ferror(f)) {
                strata_err_set(err, STRATA_EIO, "%s: read error", path);
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    if (buf == NULL && err->code == 0) strata_err_set(err, STRATA_ENOMEM, "out of memory");
    fclose(f);
    if (buf != NULL) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

static bool parse_date(const char *s, int *y, int *m, int *d)
{
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    char tail;
    if (strlen(s) != 10 || sscanf(s, "%4d-%2d-%2d%c", y, m, d, &tail) != 3) return false;
    if (*y < 1 || *m < 1 || *m > 12 || *d < 1 || *d > mdays[*m - 1]) return false;
    bool leap = (*y % 4 == 0 && *y % 100 != 0) || *y % 400 == 0;
    return !(*m == 2 && *d == 29 && !leap);
}

typedef struct template_args {
    const char *model, *template_file, *template_name, *messages;
    const char *bos, *eos, *date;
    int generation_prompt; /* -1: not given */
} template_args;

static int parse_args(int argc, char **argv, template_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            template_usage(stdout);
            return 0;
        }
        if (!strcmp(o, "--no-generation-prompt")) {
            a->generation_prompt = 0;
            continue;
        }
        const char **dst = !strcmp(o, "-m") || !strcmp(o, "--model") ? &a->model
                         : !strcmp(o, "--template-file") ? &a->template_file
                         : !strcmp(o, "--template-name") ? &a->template_name
                         : !strcmp(o, "--messages") ? &a->messages
                         : !strcmp(o, "--bos") ? &a->bos
                         : !strcmp(o, "--eos") ? &a->eos
                         : !strcmp(o, "--date") ? &a->date : NULL;
        if (dst == NULL) {
            fprintf(stderr, "strata template: unknown option '%s'\n", o);
            template_usage(stderr);
            return 2;
        }
        if (v == NULL) {
            fprintf(stderr, "strata template: '%s' needs a value\n", o);
            return 2;
        }
        *dst = v;
        i++;
    }
    if (a->template_name != NULL && a->model == NULL) {
        fprintf(stderr, "strata template: --template-name needs -m MODEL\n");
        return 2;
    }
    if ((a->model == NULL) == (a->template_file == NULL) || a->messages == NULL) {
        fprintf(stderr, "strata template: give -m MODEL or --template-file F, and --messages M.json\n");
        template_usage(stderr);
        return 2;
    }
    return -1; /* go on */
}

static const char *json_str_or(const json_t *obj, const char *key, const char *dflt)
{
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : dflt;
}

int cmd_template(int argc, char **argv)
{
    template_args a = {.generation_prompt = -1};
    int status = parse_args(argc, argv, &a);
    if (status >= 0) return status;

    strata_err err = {0};
    chat_template_src src = {0};
    char *tmpl = NULL;
    size_t tmpl_len = 0;
    json_t *doc = NULL, *extra = NULL;
    char *out = NULL;
    size_t out_len = 0;
    int rc = 0;

    if (a.model != NULL) {
        gguf *g;
        rc = gguf_open(&g, a.model, &err);
        if (rc == 0) {
            rc = chat_template_from_gguf(g, a.template_name, &src, &err);
            gguf_close(g);
        }
        if (rc == 0) {
            tmpl = src.tmpl;
            tmpl_len = src.tmpl_len;
        }
    } else {
        tmpl = read_file(a.template_file, JINJA_MAX_SOURCE, &tmpl_len, &err);
        if (tmpl == NULL) rc = err.code ? err.code : STRATA_EIO;
    }

    const json_t *messages = NULL, *tools = NULL;
    if (rc == 0) {
        size_t n;
        char *text = read_file(a.messages, TEMPLATE_MAX_MESSAGES_FILE, &n, &err);
        if (text == NULL) {
            rc = err.code ? err.code : STRATA_EIO;
        } else {
            json_error_t je;
            doc = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
            free(text);
            if (doc == NULL)
                rc = strata_err_set(&err, STRATA_EFORMAT, "%s:%d:%d: %s", a.messages, je.line, je.column, je.text);
        }
    }
    const json_t *obj = NULL;
    if (rc == 0) {
        if (json_is_array(doc)) {
            messages = doc;
        } else if (json_is_object(doc) && json_is_array(json_object_get(doc, "messages"))) {
            obj = doc;
            messages = json_object_get(doc, "messages");
            tools = json_object_get(doc, "tools");
            extra = json_deep_copy(doc);
            static const char *const consumed[] = {"messages", "tools", "bos_token", "eos_token",
                                                   "add_generation_prompt", "strftime_now_date"};
            for (size_t i = 0; extra && i < sizeof(consumed) / sizeof(consumed[0]); i++)
                json_object_del(extra, consumed[i]);
            if (extra == NULL) rc = strata_err_set(&err, STRATA_ENOMEM, "out of memory");
        } else {
            rc = strata_err_set(&err, STRATA_EFORMAT,
                                "%s: expected a JSON array of messages or an object with a \"messages\" array",
                                a.messages);
        }
    }

    chat_template_opts o = {.tools = tools, .extra = extra};
    if (rc == 0) {
        o.bos_token = a.bos ? a.bos : json_str_or(obj, "bos_token", src.bos ? src.bos : "");
        o.eos_token = a.eos ? a.eos : json_str_or(obj, "eos_token", src.eos ? src.eos : "");
        const json_t *agp = obj ? json_object_get(obj, "add_generation_prompt") : NULL;
        o.add_generation_prompt = a.generation_prompt >= 0 ? a.generation_prompt != 0
                                : json_is_boolean(agp) ? json_is_true(agp) : true;
        const char *date = a.date ? a.date : json_str_or(obj, "strftime_now_date", NULL);
        if (date != NULL && !parse_date(date, &o.year, &o.month, &o.day)) {
            rc = strata_err_set(&err, STRATA_EINVAL, "bad date '%s' (want YYYY-MM-DD)", date);
        }
    }
    if (rc == 0) rc = chat_template_render(tmpl, tmpl_len, messages, &o, &out, &out_len, &err);
    if (rc == 0) {
        if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout) != 0) {
            rc = strata_err_set(&err, STRATA_EIO, "cannot write the output");
        }
    }
    if (rc != 0) fprintf(stderr, "strata template: %s\n", err.msg);

    free(out);
    json_decref(extra);
    json_decref(doc);
    if (a.model != NULL) chat_template_src_free(&src);
    else free(tmpl);
    return rc == 0 ? 0 : 1;
}
