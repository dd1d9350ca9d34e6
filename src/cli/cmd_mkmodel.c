/* `strata mkmodel --preset NAME --type TYPE [--expert-type TYPE]
 * [--vocab-from FILE] [--seed S] -o OUT.gguf`: writes a random-weight model (see src/model/mkmodel.h). */
#include "cli.h"

#include "base/err.h"
#include "gguf/types.h"
#include "model/mkmodel.h"
#include "tensor/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void mkmodel_usage(FILE *f)
{
    size_t n;
    const model_preset *p = model_preset_list(&n);
    fprintf(f, "usage: strata mkmodel --preset NAME --type TYPE [--expert-type TYPE] "
               "[--vocab-from FILE] [--seed S] [-t N] -o OUT.gguf\n\npresets:\n");
    for (size_t i = 0; i < n; i++) fprintf(f, "  %-13s %s\n", p[i].name, p[i].about);
    fprintf(f, "\ntypes:");
    for (uint32_t t = 0; t < STRATA_TYPE_COUNT; t++) {
        if (tensor_type_supported(t) && t != STRATA_TYPE_Q8_1 && t != STRATA_TYPE_Q8_K) {
            fprintf(f, " %s", strata_type_name(t));
        }
    }
    fprintf(f, "\n\n  --expert-type TYPE the experts' type in a mixture of experts (default: --type;\n"
               "                     gpt-oss files hold them in MXFP4)\n"
               "  --vocab-from FILE  copy the tokenizer of another GGUF (and its vocabulary size)\n"
               "  --seed S           seed of the weights (default 1)\n"
               "  -t, --threads N    threads that draw and quantize (default: the CPUs)\n"
               "  --quiet            no progress on stderr\n");
}

int cmd_mkmodel(int argc, char **argv)
{
    model_make_opts o = {.seed = 1, .type = STRATA_TYPE_COUNT, .n_threads = cli_default_threads()};
    const char *preset = NULL, *type = NULL, *expert_type = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            mkmodel_usage(stdout);
            return 0;
        } else if (strcmp(a, "--quiet") == 0) {
            o.quiet = true;
        } else if (v == NULL) {
            fprintf(stderr, "strata mkmodel: '%s' needs a value or is unknown\n", a);
            return 2;
        } else if (strcmp(a, "--preset") == 0) {
            preset = argv[++i];
        } else if (strcmp(a, "--type") == 0) {
            type = argv[++i];
        } else if (strcmp(a, "--expert-type") == 0) {
            expert_type = argv[++i];
        } else if (strcmp(a, "--vocab-from") == 0) {
            o.vocab_from = argv[++i];
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            o.seed = strtoull(argv[++i], &end, 10);
            if (*end != '\0') {
                fprintf(stderr, "strata mkmodel: --seed wants a number, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            o.n_threads = atoi(argv[++i]);
            if (o.n_threads < 1 || o.n_threads > 512) {
                fprintf(stderr, "strata mkmodel: -t wants 1 to 512 threads\n");
                return 2;
            }
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            o.out_path = argv[++i];
        } else {
            fprintf(stderr, "strata mkmodel: unknown option '%s'\n", a);
            mkmodel_usage(stderr);
            return 2;
        }
    }
    if (preset == NULL || type == NULL || o.out_path == NULL) {
        mkmodel_usage(stderr);
        return 2;
    }
    o.preset = model_preset_find(preset);
    if (o.preset == NULL) {
        fprintf(stderr, "strata mkmodel: unknown preset '%s'\n", preset);
        mkmodel_usage(stderr);
        return 2;
    }
    for (int k = 0; k < 2; k++) {
        const char *name = k == 0 ? type : expert_type;
        if (name == NULL) continue;
        int t = strata_type_from_name(name);
        if (t < 0 || !tensor_type_supported((uint32_t)t) || t == STRATA_TYPE_Q8_1 ||
            t == STRATA_TYPE_Q8_K) {
            fprintf(stderr, "strata mkmodel: type '%s' cannot be written (see --help)\n", name);
            return 2;
        }
        if (k == 0) o.type = (uint32_t)t;
        else o.expert_type = (uint32_t)t;
    }
    o.has_expert_type = expert_type != NULL;
    if (o.has_expert_type && o.preset->n_expert == 0) {
        fprintf(stderr, "strata mkmodel: --expert-type: preset '%s' has no experts\n", preset);
        return 2;
    }
    strata_err err;
    if (model_make(&o, &err) != 0) {
        fprintf(stderr, "strata mkmodel: %s\n", err.msg);
        return 1;
    }
    return 0;
}
