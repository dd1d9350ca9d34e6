/* Chat templates (chat_template.h): the variables a chat template is
 * rendered with, and the template and special-token texts of a GGUF. */
#include "text/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int chat_template_render_parsed(const jinja_template *t, const json_t *messages,
                                const chat_template_opts *o, char **out, size_t *out_len,
                                strata_err *err)
{
    *out = NULL;
    *out_len = 0;
    chat_template_opts defaults = {0};
    if (o == NULL) o = &defaults;
    if (messages == NULL || !json_is_array(messages))
        return strata_err_set(err, STRATA_EINVAL, "chat template: messages must be a JSON array");
    if (o->extra != NULL && !json_is_object(o->extra))
        return strata_err_set(err, STRATA_EINVAL, "chat template: extra variables must be a JSON object");

    json_t *vars = json_object();
    if (vars == NULL) return strata_err_set(err, STRATA_ENOMEM, "chat template: out of memory");
    int bad = 0;
    if (o->extra != NULL) bad |= json_object_update(vars, (json_t *)o->extra);
    bad |= json_object_set(vars, "messages", (json_t *)messages);
    bad |= json_object_set_new(vars, "add_generation_prompt", json_boolean(o->add_generation_prompt));
    bad |= json_object_set_new(vars, "bos_token", json_string(o->bos_token ? o->bos_token : ""));
    bad |= json_object_set_new(vars, "eos_token", json_string(o->eos_token ? o->eos_token : ""));
    if (o->tools != NULL) bad |= json_object_set(vars, "tools", (json_t *)o->tools);
    else json_object_del(vars, "tools");
    if (bad) {
        json_decref(vars);
        /* json_string refuses invalid UTF-8 */
        return strata_err_set(err, STRATA_EINVAL,
                              "chat template: could not build the variables (BOS/EOS text must be UTF-8)");
    }
    jinja_render_opts ro = {.vars = vars, .year = o->year, .month = o->month, .day = o->day,
                            .limits = o->limits};
    int rc = jinja_render(t, &ro, out, out_len, err);
    json_decref(vars);
    return rc;
}

int chat_template_render(const char *tmpl, size_t len, const json_t *messages,
                         const chat_template_opts *o, char **out, size_t *out_len,
                         strata_err *err)
{
    *out = NULL;
    *out_len = 0;
    jinja_template *t;
    int rc = jinja_template_parse(&t, tmpl, len, err);
    if (rc != 0) return rc;
    rc = chat_template_render_parsed(t, messages, o, out, out_len, err);
    jinja_template_free(t);
    return rc;
}

static char *dup_bytes(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p == NULL) return NULL;
    if (n > 0) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

/* The text of the token whose id is at key, or "" when there is none. */
static int token_text(const gguf *g, const char *key, char **out, strata_err *err)
{
    int64_t id;
    *out = NULL;
    int rc = gguf_get_int(g, key, &id, err);
    const gguf_value *tokens = NULL;
    if (rc == 0) {
        rc = gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens, err);
        if (rc == 0 && tokens->v.arr.elem_type != GGUF_VTYPE_STRING) {
            return strata_err_set(err, STRATA_EFORMAT, "tokenizer.ggml.tokens is not an array of strings");
        }
    }
    if (rc == STRATA_ENOTFOUND || (rc == 0 && (id < 0 || (uint64_t)id >= tokens->v.arr.n))) {
        strata_err_clear(err);
        *out = dup_bytes("", 0);
    } else if (rc != 0) {
        return rc;
    } else {
        gguf_str s = gguf_arr_str(tokens, (uint64_t)id);
        *out = dup_bytes(s.ptr, (size_t)s.len);
    }
    if (*out == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    return 0;
}

int chat_template_from_gguf(const gguf *g, const char *name, chat_template_src *out,
                            strata_err *err)
{
    memset(out, 0, sizeof(*out));
    char key[256];
    if (name != NULL) snprintf(key, sizeof(key), "tokenizer.chat_template.%s", name);
    else snprintf(key, sizeof(key), "tokenizer.chat_template");
    gguf_str s;
    int rc = gguf_get_str(g, key, &s, err);
    if (rc == STRATA_ENOTFOUND)
        return strata_err_set(err, STRATA_ENOTFOUND, "the model has no chat template (%s)", key);
    if (rc != 0) return rc;
    out->tmpl = dup_bytes(s.ptr, (size_t)s.len);
    out->tmpl_len = (size_t)s.len;
    if (out->tmpl == NULL) rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
    if (rc == 0) rc = token_text(g, "tokenizer.ggml.bos_token_id", &out->bos, err);
    if (rc == 0) rc = token_text(g, "tokenizer.ggml.eos_token_id", &out->eos, err);
    if (rc != 0) chat_template_src_free(out);
    return rc;
}

void chat_template_src_free(chat_template_src *s)
{
    if (s == NULL) return;
    free(s->tmpl);
    free(s->bos);
    free(s->eos);
    memset(s, 0, sizeof(*s));
}
