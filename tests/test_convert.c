/* Model conversion: llama2.c -> GGUF round trips (f32 bit-identical, other types load and
 * generate), the GGUF written for llama.cpp (metadata, names, types, tokenizer), the tensor
 * accessor, rotate-half Q/K reordering, in-memory quantised drafts (self-speculation), and
 * batched == token-by-token bit for bit on quantised models built by the writer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "model/model_internal.h"
#include "sdtest.h"
#include "sdtest_models.h"
#include "specdec/convert.h"
#include "specdec/spec.h"

/* Rotate-half and interleaved RoPE rotate the same pairs, but attention sums q.k over the
 * head's dimensions in a different order: float rounding only. */
#define TOL_ROPE_ORDER 1e-5
#define BIN "models/stories260K/stories260K.bin"
#define TOKBIN "models/stories260K/tok512.bin"

static sd_model *load_path(const char *path) {
    sd_model *m = NULL;
    if (sd_model_load(path, NULL, &m) != SD_OK) fail_msg("load %s: %s", path, sd_last_error());
    return m;
}

static const char *convert_to_file(sd_model *m, sd_type t, const char *name) {
    sd_convert_params cp = {t, NULL, NULL};
    sd_gguf_writer *w = NULL;
    if (sd_model_to_gguf(m, &cp, &w) != SD_OK) fail_msg("convert to %s: %s", sd_type_info(t)->name, sd_last_error());
    const char *path = sdtest_tmp_path(name);
    assert_int_equal(sd_gguf_write_file(w, path), SD_OK);
    sd_gguf_writer_free(w);
    return path;
}

typedef struct {
    int32_t *out;
    int n;
} collect;

static int collect_cb(int32_t t, void *u) {
    collect *c = u;
    c->out[c->n++] = t;
    return 0;
}

/* Greedy tokens after prompt ids, with an optional draft. */
static int32_t *greedy(sd_model *m, sd_model *draft, const int32_t *prompt, int np, int n, sd_spec_stats *st) {
    sd_spec_params p = sd_spec_default_params();
    p.draft_mode = SD_DRAFT_FIXED; /* every round drafts: the speculative path is what is tested */
    p.n_predict = n;
    p.stop_at_eos = 0;
    sd_spec *s = NULL;
    assert_int_equal(sd_spec_create(m, draft, &p, &s), SD_OK);
    collect c = {calloc((size_t)n, sizeof(int32_t)), 0};
    assert_int_equal(sd_spec_generate(s, prompt, np, collect_cb, &c, st), SD_OK);
    assert_int_equal(c.n, n);
    sd_spec_free(s);
    return c.out;
}

static const int32_t k_prompt[5] = {1, 403, 407, 261, 378}; /* <s> Once upon a time */

/* ------------------------------------------------------------------ round trips */

static void test_bin_to_gguf_f32_identical(void **state) {
    (void)state;
    sd_model *a = sdtest_shared_model(BIN, TOKBIN);
    sd_model *b = load_path(convert_to_file(a, SD_TYPE_F32, "s260-f32.gguf"));
    int32_t tok[24];
    for (int i = 0; i < 24; i++) tok[i] = i ? (int32_t)((i * 37 + 11) % 512) : 1;
    float *la = sdtest_stepwise_logits(a, tok, 24), *lb = sdtest_stepwise_logits(b, tok, 24);
    assert_memory_equal(la, lb, 24 * 512 * sizeof(float));
    free(la);
    free(lb);
    /* The vocabulary survives: same pieces, types and specials; same encoding. */
    assert_int_equal(sd_tokenizer_check_compatible(sd_model_tokenizer(a), sd_model_tokenizer(b)), SD_OK);
    const char *text = "Once upon a time, Lily's dog said \"hi\" 42 times.\n";
    int32_t ia[64], ib[64];
    int na = 0, nb = 0;
    assert_int_equal(sd_tokenizer_encode(sd_model_tokenizer(a), text, strlen(text), 1, ia, 64, &na), SD_OK);
    assert_int_equal(sd_tokenizer_encode(sd_model_tokenizer(b), text, strlen(text), 1, ib, 64, &nb), SD_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(ia, ib, (size_t)na * sizeof(int32_t));
    const sd_hparams *ha = sd_model_hparams(a), *hb = sd_model_hparams(b);
    assert_int_equal(ha->ctx_len, hb->ctx_len);
    assert_int_equal(ha->rope_dim, hb->rope_dim);
    assert_true(ha->norm_eps == hb->norm_eps && ha->rope_theta == hb->rope_theta);
    sd_model_free(a);
    sd_model_free(b);
}

/* What llama.cpp's loader reads is there, with llama.cpp's types per tensor. */
static void test_written_gguf_layout(void **state) {
    (void)state;
    sd_model *a = sdtest_shared_model(BIN, TOKBIN);
    const char *path = convert_to_file(a, SD_TYPE_Q4_0, "s260-q4_0-layout.gguf");
    size_t len;
    void *buf = sdtest_read_file(path, &len);
    sd_gguf *g = NULL;
    assert_int_equal(sd_gguf_parse(buf, len, path, &g), SD_OK);
    static const char *const keys[] = {
        "general.architecture", "general.name", "general.file_type", "general.quantization_version",
        "llama.context_length", "llama.embedding_length", "llama.block_count", "llama.feed_forward_length",
        "llama.attention.head_count", "llama.attention.head_count_kv", "llama.rope.dimension_count",
        "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.model",
        "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!sd_gguf_find_kv(g, keys[i])) fail_msg("missing %s", keys[i]);
    uint32_t ft = 0;
    assert_int_equal(sd_gguf_get_u32(g, "general.file_type", &ft), SD_OK);
    assert_int_equal(ft, 2); /* LLAMA_FTYPE_MOSTLY_Q4_0 */
    /* tied classifier in the .bin: no output.weight, as llama.cpp expects for tied models */
    assert_null(sd_gguf_find_tensor(g, "output.weight"));
    assert_int_equal(sd_gguf_n_tensors(g), 2 + 9 * 5);
    for (int64_t i = 0; i < sd_gguf_n_tensors(g); i++) {
        const sd_gguf_tensor *t = sd_gguf_tensor_at(g, i);
        char name[96];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        uint32_t want = strstr(name, "norm") ? SD_TYPE_F32 : strstr(name, "ffn_down") ? SD_TYPE_F16 : SD_TYPE_Q4_0;
        if (t->type != want) fail_msg("%s: type %u, expected %u", name, t->type, want);
        if (strstr(name, "norm")) assert_int_equal(t->n_dims, 1);
        else assert_int_equal(t->n_dims, 2);
    }
    sd_gguf_free(g);
    free(buf);
    sd_model_free(a);
}

static void test_types_load_and_generate(void **state) {
    (void)state;
    sd_model *a = sdtest_shared_model(BIN, TOKBIN);
    int32_t *ref = greedy(a, NULL, k_prompt, 5, 32, NULL);
    static const sd_type ts[] = {SD_TYPE_F16, SD_TYPE_BF16, SD_TYPE_Q8_0, SD_TYPE_Q4_0, SD_TYPE_Q5_0,
                                 SD_TYPE_Q4_K, SD_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
        char name[64];
        snprintf(name, sizeof name, "s260-%s.gguf", sd_type_info(ts[i])->name);
        sd_model *b = load_path(convert_to_file(a, ts[i], name));
        int32_t *got = greedy(b, NULL, k_prompt, 5, 32, NULL);
        int same = 0;
        while (same < 32 && got[same] == ref[same]) same++;
        printf("  %-5s: greedy agrees with f32 for %d of 32 tokens\n", sd_type_info(ts[i])->name, same);
        /* f16/bf16/8-bit agree throughout on this model; 4/5-bit ones at least for a while */
        const int agree = ts[i] == SD_TYPE_F16 || ts[i] == SD_TYPE_BF16 || ts[i] == SD_TYPE_Q8_0 ? 32
                          : ts[i] == SD_TYPE_Q4_0                                                ? 8
                                                                                                 : 16;
        if (same < agree)
            fail_msg("%s: greedy agrees with f32 for %d of 32 tokens, expected at least %d", sd_type_info(ts[i])->name,
                     same, agree);
        free(got);
        sd_model_free(b);
    }
    free(ref);
    sd_model_free(a);
}

/* The .bin converted to q8_0 is llama.cpp's stories260K-Q8_0-mix in all but names of the
 * tied classifier, so it must produce llama.cpp's greedy text. */
static void test_converted_q8_0_matches_llama_cpp(void **state) {
    (void)state;
    sd_model *a = sdtest_shared_model(BIN, TOKBIN);
    sd_model *b = load_path(convert_to_file(a, SD_TYPE_Q8_0, "s260-q8_0-text.gguf"));
    sd_model *c = sdtest_shared_model("models/stories260K/llama.cpp-quantized/stories260K-Q8_0-mix.gguf", NULL);
    int32_t *gb = greedy(b, NULL, k_prompt, 5, 64, NULL), *gc = greedy(c, NULL, k_prompt, 5, 64, NULL);
    assert_memory_equal(gb, gc, 64 * sizeof(int32_t));
    free(gb);
    free(gc);
    sd_model_free(a);
    sd_model_free(b);
    sd_model_free(c);
}

/* ------------------------------------------------------------------ accessor */

static void test_tensor_accessor(void **state) {
    (void)state;
    sd_model *a = sdtest_shared_model(BIN, TOKBIN);
    assert_int_equal(sd_model_n_tensors(a), 47); /* tied: no output.weight */
    char name[64];
    sd_tensor v;
    assert_int_equal(sd_model_tensor(a, 0, name, sizeof name, &v), SD_OK);
    assert_string_equal(name, "token_embd.weight");
    assert_true(v.rows == 512 && v.cols == 64 && v.type == SD_TYPE_F32);
    assert_int_equal(sd_model_tensor(a, 1 + 9 * 2 + 7, name, sizeof name, &v), SD_OK);
    assert_string_equal(name, "blk.2.ffn_down.weight");
    assert_true(v.rows == 64 && v.cols == 172);
    assert_int_equal(sd_model_tensor(a, 46, name, sizeof name, &v), SD_OK);
    assert_string_equal(name, "output_norm.weight");
    assert_true(v.rows == 1 && v.cols == 64 && v.type == SD_TYPE_F32 && v.data);
    assert_int_equal(sd_model_tensor(a, 47, name, sizeof name, &v), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_model_tensor(a, -1, name, sizeof name, &v), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_model_tensor(a, 5, name, 8, &v), SD_ERR_INVALID_ARG); /* name does not fit */
    sd_model_free(a);
    /* An untied GGUF has output.weight last. */
    sd_model *g = sdtest_shared_model("models/stories260K/stories260K.gguf", NULL);
    assert_int_equal(sd_model_n_tensors(g), 48);
    assert_int_equal(sd_model_tensor(g, 47, name, sizeof name, &v), SD_OK);
    assert_string_equal(name, "output.weight");
    sd_model_free(g);
    /* Converting to a type the writer lacks is refused. */
    sd_convert_params cp = {SD_TYPE_Q2_K, NULL, NULL};
    sd_gguf_writer *w = (sd_gguf_writer *)&cp;
    sd_model *m = sdtest_tiny_model(32, 1, 4, 4, 64, 260, 1);
    assert_int_equal(sd_model_to_gguf(m, &cp, &w), SD_ERR_UNSUPPORTED);
    assert_null(w);
    sd_model_free(m);
}

/* ------------------------------------------------------------------ rotate-half models */

/* A model whose Q/K rows are in Hugging Face order with rotate-half RoPE computes the same
 * function as the GGUF one, and converting it reorders the rows back exactly. */
static void test_rotate_half_reordered(void **state) {
    (void)state;
    sd_synth_params p = sd_synth_default_params();
    p.dim = 64, p.n_layers = 2, p.n_heads = 4, p.n_kv_heads = 2, p.hidden_dim = 96, p.vocab_size = 300;
    p.ctx_len = 64, p.seed = 7;
    sd_model *a = sdtest_synth_model(&p), *b = sdtest_synth_model(&p);
    const int hd = 16;
    float *owned[4] = {0};
    for (int l = 0; l < 2; l++) {
        sd_tensor *ts[2] = {&b->layers[l].w[SD_W_ATTN_Q - SD_W_LAYER0], &b->layers[l].w[SD_W_ATTN_K - SD_W_LAYER0]};
        for (int k = 0; k < 2; k++) {
            const sd_tensor *t = ts[k];
            float *hf = malloc((size_t)t->rows * t->cols * sizeof(float));
            for (int64_t r = 0; r < t->rows; r++) {
                const int64_t h = r / hd, i = r % hd; /* HF row (h, s*hd/2 + j) = GGUF row (h, 2j + s) */
                const int64_t s = i / (hd / 2), j = i % (hd / 2);
                memcpy(hf + r * t->cols, (const float *)t->data + (h * hd + 2 * j + s) * t->cols,
                       (size_t)t->cols * sizeof(float));
            }
            ts[k]->data = hf;
            ts[k]->packed = NULL; /* the kernels' copy made at load holds the old rows */
            owned[2 * l + k] = hf;
        }
    }
    b->hp.rope_style = SD_ROPE_HALF;
    int32_t tok[12] = {1, 5, 77, 123, 9, 250, 31, 31, 8, 200, 45, 6};
    float *la = sdtest_stepwise_logits(a, tok, 12), *lb = sdtest_stepwise_logits(b, tok, 12);
    assert_true(sdtest_max_abs_diff(la, lb, 12 * 300) <= TOL_ROPE_ORDER);
    sd_model *c = load_path(convert_to_file(b, SD_TYPE_F32, "rope-half.gguf"));
    float *lc = sdtest_stepwise_logits(c, tok, 12);
    assert_memory_equal(la, lc, 12 * 300 * sizeof(float));
    free(la);
    free(lb);
    free(lc);
    sd_model_free(a);
    sd_model_free(b);
    sd_model_free(c);
    for (int i = 0; i < 4; i++) free(owned[i]);
}

/* ------------------------------------------------------------------ in-memory quantised draft */

static void test_self_speculation_quantised_draft(void **state) {
    (void)state;
    sd_model *t = sdtest_shared_model(BIN, TOKBIN);
    static const sd_type ts[] = {SD_TYPE_Q4_0, SD_TYPE_Q8_0};
    int32_t *plain = greedy(t, NULL, k_prompt, 5, 96, NULL);
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
        sd_model *d = NULL;
        assert_int_equal(sd_model_quantize(t, ts[i], &d), SD_OK);
        assert_int_equal(sd_model_hparams(d)->vocab_size, 512);
        /* the copy names its source's tokenizer file (a llama2.c draft of another file falls back to it) */
        assert_non_null(sd_model_tokenizer_path(d));
        assert_string_equal(sd_model_tokenizer_path(d), sd_model_tokenizer_path(t));
        sd_spec_stats st;
        int32_t *spec = greedy(t, d, k_prompt, 5, 96, &st);
        assert_memory_equal(plain, spec, 96 * sizeof(int32_t)); /* greedy speculative == plain */
        double acc = st.n_drafted ? (double)st.n_accepted / st.n_drafted : 0;
        printf("  %s self-draft: acceptance %.1f%% over %d passes\n", sd_type_info(ts[i])->name, 100 * acc, st.n_verify);
        assert_true(acc > (ts[i] == SD_TYPE_Q8_0 ? 0.9 : 0.5));
        free(spec);
        sd_model_free(d);
    }
    free(plain);
    sd_model *d = (sd_model *)t;
    assert_int_equal(sd_model_quantize(t, SD_TYPE_Q2_K, &d), SD_ERR_UNSUPPORTED);
    assert_null(d);
    sd_model_free(t);
}

/* ------------------------------------------------------------------ batched == stepwise */

static void test_batched_quantised_models(void **state) {
    (void)state;
    static const sd_type ts[] = {SD_TYPE_Q8_0, SD_TYPE_Q4_0, SD_TYPE_Q5_0, SD_TYPE_Q4_K, SD_TYPE_Q6_K, SD_TYPE_BF16};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
        sd_synth_params p = sd_synth_default_params();
        const int k = ts[i] == SD_TYPE_Q4_K || ts[i] == SD_TYPE_Q6_K;
        /* 32-block types: dim 96 (3 blocks: a pair and an odd one), GQA 2:1, hidden 160 (5 blocks);
         * k-quants: dim 256, hidden 512 (wo and w2 rows of 256 and 512). */
        p.dim = k ? 256 : 96, p.n_layers = 2, p.n_heads = k ? 8 : 6, p.n_kv_heads = k ? 4 : 3;
        p.hidden_dim = k ? 512 : 160, p.vocab_size = 320, p.ctx_len = 128, p.seed = 11 + i;
        p.wtype = ts[i];
        sd_model *m = sdtest_synth_model(&p);
        char name[64];
        sd_tensor v;
        assert_int_equal(sd_model_tensor(m, 2, name, sizeof name, &v), SD_OK); /* blk.0.attn_q */
        assert_int_equal(v.type, ts[i]);
        sdtest_check_batched(m, sd_quant_has_dot(ts[i])); /* integer kernels: every n */
        sd_model_free(m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bin_to_gguf_f32_identical),
        cmocka_unit_test(test_written_gguf_layout),
        cmocka_unit_test(test_types_load_and_generate),
        cmocka_unit_test(test_converted_q8_0_matches_llama_cpp),
        cmocka_unit_test(test_tensor_accessor),
        cmocka_unit_test(test_rotate_half_reordered),
        cmocka_unit_test(test_self_speculation_quantised_draft),
        cmocka_unit_test(test_batched_quantised_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
