/* `strata mkmodel` as a user runs it: the files it writes load, have the
 * preset's shapes and the asked type, hold weights of the documented
 * distribution, depend only on the seed (not the thread count), and carry
 * the vocabulary asked for. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "model/mkmodel.h"
#include "model/model.h"
#include "tensor/pack.h"
#include "run.h"
#include "tensor/quant.h"
#include "testdata.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void scratch(char *out, size_t n, const char *name)
{
    const char *dir = testdata_scratch_dir();
    assert_non_null(dir);
    snprintf(out, n, "%s/%s", dir, name);
}

static run_result mkmodel(const char *type, const char *seed, const char *threads,
                          const char *vocab_from, const char *out)
{
    const char *argv[16];
    int n = 0;
    argv[n++] = STRATA_BIN;
    argv[n++] = "mkmodel";
    argv[n++] = "--preset";
    argv[n++] = "tiny";
    argv[n++] = "--type";
    argv[n++] = type;
    argv[n++] = "--seed";
    argv[n++] = seed;
    argv[n++] = "-t";
    argv[n++] = threads;
    if (vocab_from != NULL) {
        argv[n++] = "--vocab-from";
        argv[n++] = vocab_from;
    }
    argv[n++] = "-o";
    argv[n++] = out;
    argv[n] = NULL;
    run_result r;
    assert_int_equal(run_capture(argv, &r), 0);
    return r;
}

static gguf *open_ok(const char *path)
{
    gguf *g = NULL;
    strata_err err;
    if (gguf_open(&g, path, &err) != 0) fail_msg("%s", err.msg);
    return g;
}

static void test_tiny_shapes_types_and_weights(void **state)
{
    (void)state;
    static const char *types[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0",
                                  "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
                                  "IQ4_XS"};
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        char path[4200];
        scratch(path, sizeof(path), "tiny.gguf");
        run_result r = mkmodel(types[k], "7", "2", NULL, path);
        if (r.status != 0) fail_msg("mkmodel --type %s: %s", types[k], r.err);
        run_result_free(&r);

        gguf *g = open_ok(path);
        gguf_str arch = gguf_arch(g);
        assert_int_equal(arch.len, 5);
        assert_memory_equal(arch.ptr, "llama", 5);
        int64_t v;
        assert_int_equal(gguf_get_int(g, "llama.embedding_length", &v, NULL), 0);
        assert_int_equal(v, 256);
        assert_int_equal(gguf_get_int(g, "llama.block_count", &v, NULL), 0);
        assert_int_equal(v, 2);
        assert_int_equal(gguf_get_int(g, "llama.attention.head_count_kv", &v, NULL), 0);
        assert_int_equal(v, 2);
        /* token_embd, output_norm, output, and 9 per layer */
        assert_int_equal(g->n_tensors, 3 + 2 * 9);

        const gguf_tensor *wk = gguf_find_tensor(g, "blk.1.attn_k.weight");
        assert_non_null(wk);
        assert_int_equal(wk->ne[0], 256);
        assert_int_equal(wk->ne[1], 2 * 64); /* KV heads × head dim */
        assert_int_equal(wk->type, strata_type_from_name(types[k]));
        const gguf_tensor *norm = gguf_find_tensor(g, "blk.0.ffn_norm.weight");
        assert_non_null(norm);
        assert_int_equal(norm->type, STRATA_TYPE_F32);

        /* The FFN matrix dequantizes to N(0, 0.02) within what the type
         * can represent: mean ~0, standard deviation within 15%. */
        const gguf_tensor *up = gguf_find_tensor(g, "blk.0.ffn_up.weight");
        assert_non_null(up);
        int64_t n = up->n_elems;
        float *x = malloc((size_t)n * sizeof(float));
        assert_non_null(x);
        assert_int_equal(tensor_dequantize_row(up->type, up->data, x, n), 0);
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < n; i++) {
            assert_true(isfinite(x[i]));
            sum += x[i];
            sq += (double)x[i] * x[i];
        }
        double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
        if (fabs(mean) > 0.002 || sd < 0.017 || sd > 0.023) {
            fail_msg("%s: mean %g sd %g, expected ~0 and ~0.02", types[k], mean, sd);
        }
        free(x);
        gguf_close(g);
    }
}

static void test_seed_decides_bytes_not_threads(void **state)
{
    (void)state;
    char a[4200], b[4200], c[4200];
    scratch(a, sizeof(a), "s1t1.gguf");
    scratch(b, sizeof(b), "s1t3.gguf");
    scratch(c, sizeof(c), "s2t1.gguf");
    run_result r = mkmodel("Q4_K", "1", "1", NULL, a);
    assert_int_equal(r.status, 0);
    run_result_free(&r);
    r = mkmodel("Q4_K", "1", "3", NULL, b);
    assert_int_equal(r.status, 0);
    run_result_free(&r);
    r = mkmodel("Q4_K", "2", "1", NULL, c);
    assert_int_equal(r.status, 0);
    run_result_free(&r);
    size_t na, nb, nc;
    void *da = testdata_read_file(a, &na), *db = testdata_read_file(b, &nb);
    void *dc = testdata_read_file(c, &nc);
    assert_non_null(da);
    assert_non_null(db);
    assert_non_null(dc);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    assert_int_equal(na, nc);
    assert_memory_not_equal(da, dc, na);
    free(da);
    free(db);
    free(dc);
}

static void test_builtin_and_copied_vocabulary(void **state)
{
    (void)state;
    char path[4200];
    scratch(path, sizeof(path), "vocab.gguf");
    run_result r = mkmodel("Q8_0", "1", "1", NULL, path);
    assert_int_equal(r.status, 0);
    run_result_free(&r);
    gguf *g = open_ok(path);
    const gguf_value *tokens;
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens, NULL), 0);
    assert_int_equal(tokens->v.arr.n, 512);
    gguf_str t = gguf_arr_str(tokens, 'A'); /* printable bytes spell themselves */
    assert_int_equal(t.len, 1);
    assert_int_equal(t.ptr[0], 'A');
    t = gguf_arr_str(tokens, ' '); /* a space is spelled U+0120 'Ġ' */
    assert_int_equal(t.len, 2);
    assert_memory_equal(t.ptr, "\xc4\xa0", 2);
    int64_t bos;
    assert_int_equal(gguf_get_int(g, "tokenizer.ggml.bos_token_id", &bos, NULL), 0);
    t = gguf_arr_str(tokens, (uint64_t)bos);
    assert_int_equal(t.len, strlen("<|begin_of_text|>"));
    gguf_close(g);

    char src[4096];
    TESTDATA_FILE(src, "models/llama-2-tiny-random.gguf");
    r = mkmodel("Q8_0", "1", "1", src, path);
    if (r.status != 0) fail_msg("%s", r.err);
    run_result_free(&r);
    g = open_ok(path);
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens, NULL), 0);
    assert_int_equal(tokens->v.arr.n, 32000);
    t = gguf_arr_str(tokens, 1);
    assert_int_equal(t.len, 3);
    assert_memory_equal(t.ptr, "<s>", 3);
    const gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    assert_int_equal(emb->ne[1], 32000); /* the embedding follows the vocabulary */
    gguf_close(g);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    char path[4200];
    scratch(path, sizeof(path), "bad.gguf");
    run_result r = mkmodel("Q9_9", "1", "1", NULL, path);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "Q9_9"));
    run_result_free(&r);
    r = mkmodel("Q4_0", "1", "1", "/nonexistent/vocab.gguf", path);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "/nonexistent/vocab.gguf"));
    run_result_free(&r);
    const char *argv[] = {STRATA_BIN, "mkmodel", "--preset", "huge", "--type", "Q4_0", "-o",
                          path, NULL};
    assert_int_equal(run_capture(argv, &r), 0);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "unknown preset"));
    run_result_free(&r);
}

static void test_presets_are_the_documented_shapes(void **state)
{
    (void)state;
    const model_preset *p = model_preset_find("llama-1b");
    assert_non_null(p);
    assert_int_equal(p->n_embd, 2048);
    assert_int_equal(p->n_layer, 16);
    assert_int_equal(p->n_head, 32);
    assert_int_equal(p->n_head_kv, 8);
    assert_int_equal(p->n_ff, 8192);
    p = model_preset_find("qwen-0.5b");
    assert_non_null(p);
    assert_int_equal(p->n_embd, 896);
    assert_int_equal(p->n_layer, 24);
    assert_int_equal(p->n_head, 14);
    assert_int_equal(p->n_head_kv, 2);
    assert_int_equal(p->n_ff, 4864);
    assert_true(p->qkv_bias);
    p = model_preset_find("moe-1b-7b");
    assert_non_null(p);
    assert_string_equal(p->arch, "qwen3moe");
    assert_int_equal(p->n_embd, 2048);
    assert_int_equal(p->n_layer, 16);
    assert_int_equal(p->n_expert, 64);
    assert_int_equal(p->n_expert_used, 8);
    assert_int_equal(p->n_ff_exp, 1024);
    assert_true(p->qk_norm);
    assert_null(model_preset_find("nope"));
}

/* A mixture of experts as moe-1b-7b's code path writes it, in a small
 * shape: 3-D expert tensors in the asked type, an F32 router, q/k norms and
 * the expert keys, which Strata loads (the experts repacked) and runs; and
 * `strata bench` counts only the used experts in a step's bytes. */
static void test_moe_file(void **state)
{
    (void)state;
    model_preset p = *model_preset_find("moe-1b-7b");
    p.name = "moe-small";
    p.n_embd = 256;
    p.n_layer = 2;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_vocab = 512;
    p.n_expert = 8;
    p.n_expert_used = 2;
    p.n_ff_exp = 128;
    p.n_ff = 128;
    char path[4200];
    scratch(path, sizeof(path), "moe-small.gguf");
    model_make_opts o = {.preset = &p, .type = STRATA_TYPE_Q8_0, .seed = 3, .out_path = path,
                         .quiet = true, .n_threads = 2};
    strata_err err;
    if (model_make(&o, &err) != 0) fail_msg("model_make: %s", err.msg);

    gguf *g = open_ok(path);
    int64_t v;
    assert_int_equal(gguf_get_int(g, "qwen3moe.expert_count", &v, NULL), 0);
    assert_int_equal(v, 8);
    assert_int_equal(gguf_get_int(g, "qwen3moe.expert_used_count", &v, NULL), 0);
    assert_int_equal(v, 2);
    const gguf_tensor *up = gguf_find_tensor(g, "blk.1.ffn_up_exps.weight");
    assert_non_null(up);
    assert_int_equal(up->n_dims, 3);
    assert_int_equal(up->ne[0], 256);
    assert_int_equal(up->ne[1], 128);
    assert_int_equal(up->ne[2], 8);
    assert_int_equal(up->type, STRATA_TYPE_Q8_0);
    const gguf_tensor *down = gguf_find_tensor(g, "blk.0.ffn_down_exps.weight");
    assert_non_null(down);
    assert_int_equal(down->ne[0], 128);
    assert_int_equal(down->ne[1], 256);
    const gguf_tensor *router = gguf_find_tensor(g, "blk.0.ffn_gate_inp.weight");
    assert_non_null(router);
    assert_int_equal(router->type, STRATA_TYPE_F32);
    assert_non_null(gguf_find_tensor(g, "blk.0.attn_k_norm.weight"));
    assert_null(gguf_find_tensor(g, "blk.0.ffn_up.weight"));
    /* the last expert's rows are drawn too */
    const char *last = (const char *)up->data + up->n_bytes - 34;
    bool any = false;
    for (int i = 0; i < 34; i++) any |= last[i] != 0;
    assert_true(any);
    uint64_t expert_bytes = 0, embd_bytes = gguf_find_tensor(g, "token_embd.weight")->n_bytes;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (strstr(g->tensors[i].name, "_exps.") != NULL) expert_bytes += g->tensors[i].n_bytes;
    gguf_close(g);

    model *m = NULL;
    if (model_open(&m, path, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(m->hp.n_expert, 8);
    assert_true((m->layers[1].experts[7 * 3 + 2].type & TENSOR_PACKED) != 0);
    model_close(m);

    const char *argv[] = {STRATA_BIN, "bench", "-m", path, "-p", "0", "-n", "2", "-r", "1",
                          "--json", NULL};
    run_result r;
    assert_int_equal(run_capture(argv, &r), 0);
    if (r.status != 0) fail_msg("bench failed: %s", r.err);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    if (j == NULL) fail_msg("not one JSON object: %s\n%s", je.text, r.out);
    const uint64_t size = (uint64_t)json_integer_value(json_object_get(j, "size_bytes"));
    const uint64_t step = (uint64_t)json_integer_value(json_object_get(j, "decode_bytes"));
    /* all but the embedding table and 6 of each layer's 8 experts */
    assert_int_equal(step, size - embd_bytes - expert_bytes / 8 * 6);
    json_decref(j);
    run_result_free(&r);
}

/* The presets of the other architectures, at test size: each file loads
 * with its arch's features on (windows, soft-caps, YaRN and the query
 * temperature, the missing rope, sinks and biases, experts in their own
 * type), and `strata bench` runs its prefill and decode. */
static void test_arch_presets(void **state)
{
    (void)state;
    static const char *names[] = {"gemma2-2b", "smollm3-3b", "ministral3-3b", "mixtral-8x1b",
                                  "gpt-oss-20b"};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        const model_preset *real = model_preset_find(names[k]);
        assert_non_null(real);
        model_preset p = *real;
        p.n_embd = 256;
        p.n_layer = 4;
        p.n_head = 4;
        p.n_head_kv = 2;
        p.head_dim = p.head_dim > 0 ? 64 : 0;
        p.n_ff = 128;
        p.n_vocab = 512;
        if (p.n_expert > 0) {
            p.n_expert = 4;
            p.n_expert_used = 2;
            p.n_ff_exp = 128;
        }
        if (p.n_swa > 0) p.n_swa = 8;
        if (p.yarn_factor > 0) p.yarn_orig_ctx = 64;
        char path[4200];
        scratch(path, sizeof(path), "arch-preset.gguf");
        const bool mxfp4 = p.gpt_oss_tensors;
        model_make_opts o = {.preset = &p, .type = STRATA_TYPE_Q8_0, .seed = 5, .out_path = path,
                             .quiet = true, .n_threads = 2, .has_expert_type = mxfp4,
                             .expert_type = STRATA_TYPE_MXFP4};
        strata_err err;
        if (model_make(&o, &err) != 0) fail_msg("%s: model_make: %s", names[k], err.msg);

        gguf *g = open_ok(path);
        gguf_str arch = gguf_arch(g);
        assert_int_equal(arch.len, strlen(p.arch));
        assert_memory_equal(arch.ptr, p.arch, arch.len);
        if (p.n_expert > 0) {
            const gguf_tensor *up = gguf_find_tensor(g, "blk.3.ffn_up_exps.weight");
            assert_non_null(up);
            assert_int_equal(up->type, mxfp4 ? STRATA_TYPE_MXFP4 : STRATA_TYPE_Q8_0);
            assert_int_equal(up->ne[2], 4);
        }
        gguf_close(g);

        model *m = NULL;
        if (model_open(&m, path, &err) != 0) fail_msg("%s: %s", names[k], err.msg);
        const model_hparams *hp = &m->hp;
        assert_int_equal(hp->n_layer, 4);
        assert_int_equal(hp->n_expert, p.n_expert);
        switch (k) {
        case 0: /* gemma2: the window and both soft-caps by default */
            assert_int_equal(hp->n_swa, 8);
            assert_true(hp->attn_softcap == 50.0f && hp->final_softcap == 30.0f);
            break;
        case 1:
            assert_int_equal(hp->no_rope_step, 4);
            break;
        case 2:
            assert_true(hp->rope_yarn);
            assert_int_equal(hp->n_ctx_orig, 64);
            assert_true(fabsf(hp->attn_temp_scale - 0.1f) < 1e-7f);
            break;
        case 4: /* gpt-oss */
            assert_int_equal(hp->n_swa, 8);
            assert_true(hp->rope_yarn);
            assert_non_null(m->layers[0].sinks);
            assert_non_null(m->layers[0].bo);
            assert_non_null(m->layers[0].ffn_gate_inp_b);
            break;
        default:
            break;
        }
        model_close(m);

        const char *argv[] = {STRATA_BIN, "bench", "-m", path, "-p", "16", "-n", "4", "-r", "1",
                              "--json", NULL};
        run_result r;
        assert_int_equal(run_capture(argv, &r), 0);
        if (r.status != 0) fail_msg("%s: bench failed: %s", names[k], r.err);
        run_result_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_shapes_types_and_weights),
        cmocka_unit_test(test_seed_decides_bytes_not_threads),
        cmocka_unit_test(test_builtin_and_copied_vocabulary),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_presets_are_the_documented_shapes),
        cmocka_unit_test(test_moe_file),
        cmocka_unit_test(test_arch_presets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
