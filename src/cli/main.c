/* `strata`: one binary, many subcommands. This file dispatches, and holds
 * the few helpers the subcommands share. */
#define _GNU_SOURCE
#include "cli.h"

#include "base/err.h"
#include "model/kv_cache.h"

#include <stdbool.h>

#include <sched.h>
#include <stdio.h>
#include <string.h>

#define STRATA_VERSION "0.1.0"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command g_commands[] = {
    {"info", cmd_info, "describe a GGUF model: architecture, hyper-parameters, tensors"},
    {"mkmodel", cmd_mkmodel, "write a random-weight model of a known shape (tests, benchmarks)"},
    {"template", cmd_template, "render a chat template for a list of messages"},
    {"tokenize", cmd_tokenize, "print the token ids (and pieces) a model's tokenizer gives a text"},
    {"eval", cmd_eval, "evaluate a token sequence and write the logits of every position"},
    {"run", cmd_run, "generate text from a prompt, or chat (--chat), in the terminal"},
    {"serve", cmd_serve, "the OpenAI-compatible HTTP server over engine replicas"},
    {"engine", cmd_engine, "serve one model over the engine protocol on stdin/stdout"},
    {"bench", cmd_bench, "prompt and decode speed of a model (a table like llama-bench's)"},
};

int cli_default_threads(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    return 1;
}

int cli_kv_type_option(const char *cmd, const char *a, const char *v, uint32_t *k_type,
                       uint32_t *v_type)
{
    bool keys = strcmp(a, "-ctk") == 0 || strcmp(a, "--cache-type-k") == 0;
    bool values = strcmp(a, "-ctv") == 0 || strcmp(a, "--cache-type-v") == 0;
    if (strcmp(a, "--kv-type") == 0) keys = values = true;
    if (!keys && !values) return 0;
    uint32_t t;
    strata_err err;
    if (kv_type_parse(v, &t, &err) != 0) {
        fprintf(stderr, "strata %s: %s: %s\n", cmd, a, err.msg);
        return -1;
    }
    if (keys) *k_type = t;
    if (values) *v_type = t;
    return 1;
}

static void usage(FILE *f)
{
    fprintf(f, "strata %s - an LLM inference server for GGUF models\n\n"
               "usage: strata COMMAND [ARGS...]\n\ncommands:\n", STRATA_VERSION);
    for (size_t i = 0; i < sizeof(g_commands) / sizeof(g_commands[0]); i++) {
        fprintf(f, "  %-10s %s\n", g_commands[i].name, g_commands[i].summary);
    }
    fprintf(f, "\nrun 'strata COMMAND --help' for a command's options\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("strata %s\n", STRATA_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof(g_commands) / sizeof(g_commands[0]); i++) {
        if (strcmp(name, g_commands[i].name) == 0) return g_commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "strata: unknown command '%s'\n\n", name);
    usage(stderr);
    return 2;
}
