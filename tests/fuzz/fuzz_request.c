/* libFuzzer target for the OpenAI request bodies the server parses
 * (src/serve/api.c): any bytes become the body of a /v1/completions,
 * /v1/chat/completions or /v1/embeddings request, parsed with a real vocab
 * (stories260K's SentencePiece) and, for chat, ChatML or a real template
 * from the reference data. Checked on every input:
 *   - a refused body gets a 4xx status (never a 500: bad input is the
 *     client's), a code and a message, and its error body is JSON;
 *   - an accepted body has 1..API_MAX_CHOICES choices and, for completions
 *     and chat, a prompt of 1..n_ctx-1 ids in the vocab with max_tokens
 *     within the rest of the context; for embeddings 1..API_MAX_EMBED_INPUTS
 *     inputs of 1..n_ctx ids in the vocab;
 *   - a grammar the server compiled (JSON Schema, vLLM's regex and choice,
 *     forced calls) is one the engine's GBNF parser accepts;
 *   - every engine request it makes (each choice, each input) is a line the
 *     engine's decoder accepts, so an accepted request can never be a
 *     protocol fault that kills an engine.
 * A crash, a sanitizer report or a failed check (a trap) is a finding.
 *
 * The first input byte chooses the endpoint (bits 0-1), the context size
 * (bit 2: 64 tokens, else 2048) and the chat template (bit 3: the data's
 * Llama 3 template, else ChatML); the rest is the body. The data comes from
 * $STRATA_TEST_DATA, else ../shared/data beside the project. */
#include "sample/grammar.h"
#include "serve/anthropic.h"
#include "serve/api.h"
#include "serve/request.h"
#include "serve/responses.h"
#include "serve/wire.h"
#include "text/tokenizer.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vocab *g_voc;
static char *g_template; /* a real chat template, or NULL when missing */

static void check(int ok)
{
    if (!ok) __builtin_trap();
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = (n + 4096 + 1) * 2;
            char *b = realloc(buf, cap);
            if (b == NULL) break;
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    if (buf != NULL) buf[n] = '\0';
    return buf;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char dir[4096];
    const char *env = getenv("STRATA_TEST_DATA");
    if (env != NULL && env[0] != '\0') {
        snprintf(dir, sizeof(dir), "%s", env);
    } else {
        const char *file = __FILE__, *slash = strrchr(file, '/');
        /* this file is tests/fuzz/fuzz_request.c under the project */
        snprintf(dir, sizeof(dir), "%.*s/../../../shared/data", slash ? (int)(slash - file) : 1,
                 slash ? file : ".");
    }
    char path[4300];
    strata_err err;
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", dir);
    if (vocab_open(&g_voc, path, &err) != 0) {
        fprintf(stderr, "fuzz_request: %s (set STRATA_TEST_DATA)\n", err.msg);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/chat-templates/llama.cpp-jinja/meta-llama-Llama-3.1-8B-Instruct.jinja",
             dir);
    g_template = read_all(path);
    return 0;
}

static bool ids_in_vocab(const int32_t *ids, size_t n)
{
    int64_t n_vocab = (int64_t)vocab_n_tokens(g_voc);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab) return false;
    }
    return true;
}

/* The engine request for choice or input i is a line the engine accepts. */
static void check_engine_line(const api_gen *g, size_t i, bool embed)
{
    sreq *r = sreq_new(1, embed);
    check(r != NULL);
    check(api_gen_copy_to(g, i, r) == 0);
    /* never past the context: its prompt and max_tokens fit */
    check(embed || (r->gen.max_tokens >= 0 && (int64_t)r->gen.n_tokens + r->gen.max_tokens <= g->n_ctx));
    char *line = wire_encode_request(r, 7);
    check(line != NULL);
    size_t len = strlen(line);
    check(len > 0 && line[len - 1] == '\n');
    proto_msg m;
    proto_error pe;
    check(proto_decode(line, len - 1, PROTO_DIR_TO_ENGINE, &m, &pe) == 0);
    check(m.op == (embed ? PROTO_OP_EMBED : PROTO_OP_GEN));
    proto_msg_free(&m);
    free(line);
    sreq_release(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const enum api_kind kinds[4] = {API_COMPLETION, API_CHAT, API_EMBEDDING, API_CHAT};
    enum api_kind kind = kinds[data[0] & 3];
    if (kind == API_COMPLETION && (data[0] & 16)) kind = API_NATIVE; /* llama-server's /completion */
    api_env env = {
        .voc = g_voc,
        .chat_template = (data[0] & 8) ? g_template : NULL,
        .bos = "<s>",
        .eos = "</s>",
        .model_name = "fuzz",
        .n_ctx = (data[0] & 4) ? 64 : 2048,
    };
    api_gen g;
    api_error e;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    char *chat = NULL;
    if (kind == API_COMPLETION && (data[0] & 32)) {
        /* OpenAI's /v1/responses: translated into a chat body first */
        kind = API_CHAT;
        if (responses_to_chat(body, len, &chat, &e) != 0) {
            check(e.status == 400 && e.message[0] != '\0' && chat == NULL);
            return 0;
        }
        body = chat;
        len = strlen(chat);
    } else if (kind == API_CHAT && (data[0] & 16)) {
        /* Anthropic's /v1/messages: translated first; a refusal is a 400
         * with Anthropic's error body */
        if (anthropic_to_chat(body, len, (data[0] & 32) != 0, &chat, &e) != 0) {
            check(e.status == 400 && e.message[0] != '\0' && chat == NULL);
            char *eb = anthropic_error_body(&e);
            json_t *j = eb ? json_loads(eb, 0, NULL) : NULL;
            check(j != NULL && json_is_object(json_object_get(j, "error")));
            json_decref(j);
            free(eb);
            return 0;
        }
        body = chat;
        len = strlen(chat);
    }
    int parsed = api_parse_gen(&env, kind, body, len, &g, &e);
    free(chat);
    if (parsed != 0) {
        check(e.status >= 400 && e.status < 500);
        check(e.code[0] != '\0' && e.message[0] != '\0');
        char *eb = api_error_body(&e);
        check(eb != NULL);
        json_error_t je;
        json_t *j = json_loads(eb, 0, &je);
        check(j != NULL && json_is_object(json_object_get(j, "error")));
        json_decref(j);
        free(eb);
        return 0;
    }
    check(g.n_choices >= 1 && g.n_choices <= API_MAX_CHOICES);
    if (kind == API_EMBEDDING) {
        check(g.n_inputs >= 1 && g.n_inputs <= API_MAX_EMBED_INPUTS);
        for (size_t i = 0; i < g.n_inputs; i++) {
            check(g.inputs[i].n >= 1 && (int64_t)g.inputs[i].n <= env.n_ctx);
            check(ids_in_vocab(g.inputs[i].ids, g.inputs[i].n));
        }
        /* a long batch is checked on its first and last input */
        check_engine_line(&g, 0, true);
        if (g.n_inputs > 1) check_engine_line(&g, g.n_inputs - 1, true);
    } else {
        check(g.n_prompts >= 1 && api_gen_n_requests(&g) <= API_MAX_PROMPT_CHOICES);
        check(kind == API_COMPLETION || kind == API_NATIVE || g.n_prompts == 1);
        for (size_t p = 0; p < g.n_prompts; p++) {
            size_t n;
            const int32_t *ids = api_gen_prompt(&g, p, &n);
            check(n >= 1 && (int64_t)n < env.n_ctx);
            check(ids_in_vocab(ids, n));
        }
        check(g.max_tokens >= 0);
        check(g.n_stops <= TEXTGEN_MAX_STOPS);
        /* a grammar the server compiled (a schema's, a regex's, a forced
         * call's, with a reasoning block in front) always parses */
        if (g.grammar != NULL && !g.grammar_given) {
            grammar *gr = NULL;
            strata_err gerr = {0};
            check(grammar_parse(&gr, g.grammar, strlen(g.grammar), &gerr) == 0);
            grammar_free(gr);
        }
        /* every choice of the first prompt, and the last request of a batch */
        for (size_t i = 0; i < g.n_choices; i++) check_engine_line(&g, i, false);
        if (g.n_prompts > 1) check_engine_line(&g, api_gen_n_requests(&g) - 1, false);
    }
    api_gen_free(&g);
    return 0;
}
