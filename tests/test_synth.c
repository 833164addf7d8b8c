/* Synthetic Llama GGUF models: parameter validation, llama.cpp key/tensor naming and shapes,
 * weight scales, the vocabulary, and determinism in the seed. */
#include "sdtest.h"
#include "sdtest_models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "specdec/gguf.h"
#include "specdec/synth.h"
#include "specdec/types.h"

static sd_synth_params tiny(void) {
    sd_synth_params p = sd_synth_default_params();
    p.dim = 32;
    p.n_layers = 2;
    p.n_heads = 4;
    p.n_kv_heads = 2;
    p.hidden_dim = 64;
    p.vocab_size = 300;
    p.ctx_len = 64;
    p.seed = 7;
    return p;
}

static void expect_invalid(sd_synth_params p, const char *msg_part) {
    sd_gguf_writer *w = (sd_gguf_writer *)&w;
    sd_status st = sd_synth_build(&p, &w);
    if (st != SD_ERR_INVALID_ARG || !strstr(sd_last_error(), msg_part))
        print_error("status %d, message '%s'; wanted '%s'\n", st, sd_last_error(), msg_part);
    assert_int_equal(st, SD_ERR_INVALID_ARG);
    assert_null(w);
    assert_non_null(strstr(sd_last_error(), msg_part));
}

static void test_params_validation(void **state) {
    (void)state;
    sd_synth_params d = sd_synth_default_params();
    assert_int_equal(sd_synth_validate(&d), SD_OK);
    assert_int_equal(sd_synth_validate(NULL), SD_ERR_INVALID_ARG);
    sd_synth_params p;
    p = tiny(), p.dim = 30;
    expect_invalid(p, "synth: dim 30 is not divisible by n_heads 4");
    p = tiny(), p.n_kv_heads = 3;
    expect_invalid(p, "synth: n_heads 4 is not divisible by n_kv_heads 3");
    p = tiny(), p.dim = 12;
    expect_invalid(p, "synth: head_dim 3 (dim 12 / n_heads 4) must be even");
    p = tiny(), p.head_dim = 7;
    expect_invalid(p, "synth: head_dim 7 must be even for RoPE");
    p = tiny(), p.arch = "gpt2";
    expect_invalid(p, "synth: unknown arch 'gpt2' (llama, qwen2, qwen3)");
    p = tiny(), p.n_layers = 0;
    expect_invalid(p, "synth: n_layers = 0 must be in [1, ");
    p = tiny(), p.hidden_dim = -5;
    expect_invalid(p, "synth: hidden_dim = -5");
    p = tiny(), p.ctx_len = 0;
    expect_invalid(p, "ctx_len = 0");
    p = tiny(), p.vocab_size = 2;
    expect_invalid(p, "vocab_size 2 must be >= 3");
    p = tiny(), p.wtype = SD_TYPE_Q2_K;
    expect_invalid(p, "wtype 10 (q2_K) not supported");
    p = tiny(), p.rope_theta = NAN;
    expect_invalid(p, "rope_theta");
    p = tiny(), p.norm_eps = 0;
    expect_invalid(p, "norm_eps 0 must be finite and > 0");
    p = tiny(), p.weight_scale = -1;
    expect_invalid(p, "weight_scale -1");
    p = tiny();
    assert_int_equal(sd_synth_build(&p, NULL), SD_ERR_INVALID_ARG);
}

static double std_of(const sd_gguf_tensor *t) {
    size_t n = (size_t)(t->ne[0] * t->ne[1]);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        double v;
        if (t->type == SD_TYPE_F16) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)t->data + 2 * i, 2);
            v = sd_fp16_to_fp32(h);
        } else {
            float f;
            memcpy(&f, (const uint8_t *)t->data + 4 * i, 4);
            v = f;
        }
        s += v;
        s2 += v * v;
    }
    double mean = s / (double)n;
    return sqrt(s2 / (double)n - mean * mean);
}

static void check_shape(const sd_gguf *g, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1) {
    const sd_gguf_tensor *t = sd_gguf_find_tensor(g, name);
    if (!t) print_error("missing tensor %s\n", name);
    assert_non_null(t);
    assert_int_equal(t->type, type);
    assert_int_equal(t->n_dims, ne1 ? 2 : 1);
    assert_int_equal(t->ne[0], ne0);
    assert_int_equal(t->ne[1], ne1 ? ne1 : 1);
}

static void check_u32(const sd_gguf *g, const char *key, uint32_t want) {
    uint32_t v = 0;
    assert_int_equal(sd_gguf_get_u32(g, key, &v), SD_OK);
    if (v != want) print_error("%s = %u, want %u\n", key, v, want);
    assert_int_equal(v, want);
}

/* Parses the model built from p and checks every key and tensor llama.cpp would look for. */
static void check_model(const sd_synth_params *p) {
    void *buf;
    size_t len;
    assert_int_equal(sd_synth_write_mem(p, &buf, &len), SD_OK);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(buf, len, "synth", &g), SD_OK);

    sd_str s;
    assert_int_equal(sd_gguf_get_str(g, "general.architecture", &s), SD_OK);
    assert_true(sd_str_eq(s, "llama"));
    assert_int_equal(sd_gguf_get_str(g, "general.name", &s), SD_OK);
    int head_dim = p->dim / p->n_heads;
    check_u32(g, "llama.context_length", (uint32_t)p->ctx_len);
    check_u32(g, "llama.embedding_length", (uint32_t)p->dim);
    check_u32(g, "llama.block_count", (uint32_t)p->n_layers);
    check_u32(g, "llama.feed_forward_length", (uint32_t)p->hidden_dim);
    check_u32(g, "llama.attention.head_count", (uint32_t)p->n_heads);
    check_u32(g, "llama.attention.head_count_kv", (uint32_t)p->n_kv_heads);
    check_u32(g, "llama.rope.dimension_count", (uint32_t)head_dim);
    check_u32(g, "llama.vocab_size", (uint32_t)p->vocab_size);
    float f;
    assert_int_equal(sd_gguf_get_f32(g, "llama.rope.freq_base", &f), SD_OK);
    assert_true(f == p->rope_theta);
    assert_int_equal(sd_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f), SD_OK);
    assert_true(f == p->norm_eps);

    /* Tokenizer metadata. */
    assert_int_equal(sd_gguf_get_str(g, "tokenizer.ggml.model", &s), SD_OK);
    assert_true(sd_str_eq(s, "llama"));
    const sd_gguf_kv *toks, *scores, *types;
    assert_int_equal(sd_gguf_get_arr(g, "tokenizer.ggml.tokens", SD_GGUF_STRING, &toks), SD_OK);
    assert_int_equal(sd_gguf_get_arr(g, "tokenizer.ggml.scores", SD_GGUF_FLOAT32, &scores), SD_OK);
    assert_int_equal(sd_gguf_get_arr(g, "tokenizer.ggml.token_type", SD_GGUF_INT32, &types), SD_OK);
    assert_int_equal(toks->arr_n, (uint64_t)p->vocab_size);
    assert_int_equal(scores->arr_n, (uint64_t)p->vocab_size);
    assert_int_equal(types->arr_n, (uint64_t)p->vocab_size);
    assert_true(sd_str_eq(toks->arr_strs[0], "<unk>"));
    assert_true(sd_str_eq(toks->arr_strs[1], "<s>"));
    assert_true(sd_str_eq(toks->arr_strs[2], "</s>"));
    check_u32(g, "tokenizer.ggml.bos_token_id", 1);
    check_u32(g, "tokenizer.ggml.eos_token_id", 2);
    check_u32(g, "tokenizer.ggml.unknown_token_id", 0);
    int b;
    assert_int_equal(sd_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b), SD_OK);
    assert_true(b);
    assert_int_equal(sd_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b), SD_OK);
    assert_true(b);

    /* Tensors, named and shaped as llama.cpp's llama loader expects. */
    uint32_t wt = p->wtype;
    uint64_t dim = (uint64_t)p->dim, hid = (uint64_t)p->hidden_dim, voc = (uint64_t)p->vocab_size;
    uint64_t q_dim = (uint64_t)(p->n_heads * head_dim), kv_dim = (uint64_t)(p->n_kv_heads * head_dim);
    check_shape(g, "token_embd.weight", wt, dim, voc);
    check_shape(g, "output_norm.weight", SD_TYPE_F32, dim, 0);
    for (int l = 0; l < p->n_layers; l++) {
        char n[64];
#define AT(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, l), n)
        check_shape(g, AT("attn_norm.weight"), SD_TYPE_F32, dim, 0);
        check_shape(g, AT("attn_q.weight"), wt, dim, q_dim);
        check_shape(g, AT("attn_k.weight"), wt, dim, kv_dim);
        check_shape(g, AT("attn_v.weight"), wt, dim, kv_dim);
        check_shape(g, AT("attn_output.weight"), wt, q_dim, dim);
        check_shape(g, AT("ffn_norm.weight"), SD_TYPE_F32, dim, 0);
        check_shape(g, AT("ffn_gate.weight"), wt, dim, hid);
        check_shape(g, AT("ffn_up.weight"), wt, dim, hid);
        check_shape(g, AT("ffn_down.weight"), wt, hid, dim);
#undef AT
    }
    int64_t want_tensors = 2 + 9 * p->n_layers + (p->tied_output ? 0 : 1);
    assert_int_equal(sd_gguf_n_tensors(g), want_tensors);
    if (p->tied_output) assert_null(sd_gguf_find_tensor(g, "output.weight"));
    else check_shape(g, "output.weight", wt, dim, voc);

    /* Scales: matrices ~1/sqrt(cols), norms ~1 with small noise. */
    double sq = std_of(sd_gguf_find_tensor(g, "blk.0.attn_q.weight"));
    assert_true(fabs(sq - 1.0 / sqrt((double)dim)) < 0.15 / sqrt((double)dim));
    double sd = std_of(sd_gguf_find_tensor(g, "blk.1.ffn_down.weight"));
    assert_true(fabs(sd - 1.0 / sqrt((double)hid)) < 0.15 / sqrt((double)hid));
    const sd_gguf_tensor *norm = sd_gguf_find_tensor(g, "output_norm.weight");
    for (uint64_t i = 0; i < dim; i++) {
        float v;
        memcpy(&v, (const uint8_t *)norm->data + 4 * i, 4);
        assert_true(v > 0.9f && v < 1.1f);
    }
    sd_gguf_free(g);
    free(buf);
}

static void test_tiny_f32(void **state) {
    (void)state;
    sd_synth_params p = tiny();
    check_model(&p);
}

static void test_tiny_f16(void **state) {
    (void)state;
    sd_synth_params p = tiny();
    p.wtype = SD_TYPE_F16;
    check_model(&p);
    void *buf;
    size_t len;
    assert_int_equal(sd_synth_write_mem(&p, &buf, &len), SD_OK);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(buf, len, "synth", &g), SD_OK);
    uint32_t ft;
    assert_int_equal(sd_gguf_get_u32(g, "general.file_type", &ft), SD_OK);
    assert_int_equal(ft, 1);
    sd_gguf_free(g);
    free(buf);
}

static void test_tiny_tied(void **state) {
    (void)state;
    sd_synth_params p = tiny();
    p.tied_output = 1;
    check_model(&p);
    p.n_kv_heads = p.n_heads; /* plain multi-head attention too */
    p.vocab_size = 40;        /* below the byte tokens */
    check_model(&p);
}

static void test_determinism(void **state) {
    (void)state;
    sd_synth_params p = tiny();
    void *a, *b, *c;
    size_t la, lb, lc;
    assert_int_equal(sd_synth_write_mem(&p, &a, &la), SD_OK);
    assert_int_equal(sd_synth_write_mem(&p, &b, &lb), SD_OK);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    p.seed = 8;
    assert_int_equal(sd_synth_write_mem(&p, &c, &lc), SD_OK);
    assert_int_equal(la, lc);
    assert_true(memcmp(a, c, la) != 0);

    /* The file writer produces the same bytes. */
    p.seed = 7;
    const char *path = sdtest_tmp_path("synth.gguf");
    assert_int_equal(sd_synth_write_file(&p, path), SD_OK);
    size_t lf;
    void *f = sdtest_read_file(path, &lf);
    assert_non_null(f);
    assert_int_equal(lf, la);
    assert_memory_equal(f, a, la);
    free(f);
    free(a);
    free(b);
    free(c);
}

/* A caller extends or overrides the built writer before writing it. */
static void test_build_and_override(void **state) {
    (void)state;
    sd_synth_params p = tiny();
    sd_gguf_writer *w;
    assert_int_equal(sd_synth_build(&p, &w), SD_OK);
    assert_int_equal(sd_gguf_set_u32(w, "llama.context_length", 4096), SD_OK);
    assert_int_equal(sd_gguf_set_str(w, "general.name", "custom"), SD_OK);
    void *buf;
    size_t len;
    assert_int_equal(sd_gguf_write_mem(w, &buf, &len), SD_OK);
    sd_gguf_writer_free(w);
    sd_gguf *g;
    assert_int_equal(sd_gguf_parse(buf, len, "synth", &g), SD_OK);
    check_u32(g, "llama.context_length", 4096);
    sd_str s;
    assert_int_equal(sd_gguf_get_str(g, "general.name", &s), SD_OK);
    assert_true(sd_str_eq(s, "custom"));
    sd_gguf_free(g);
    free(buf);
}

static void check_vocab(int n) {
    sd_synth_vocab v;
    assert_int_equal(sd_synth_vocab_build(n, &v), SD_OK);
    assert_int_equal(v.n, n);
    assert_int_equal(v.types[0], 2);
    assert_int_equal(v.types[1], 3);
    assert_int_equal(v.types[2], 3);
    int first_normal = n >= 259 ? 259 : 3;
    if (n >= 259) {
        assert_string_equal(v.pieces[3], "<0x00>");
        assert_string_equal(v.pieces[3 + 0x0A], "<0x0A>");
        assert_string_equal(v.pieces[258], "<0xFF>");
        for (int i = 3; i < 259; i++) assert_int_equal(v.types[i], 6);
    }
    if (n > first_normal) assert_string_equal(v.pieces[first_normal], "\xe2\x96\x81");
    for (int i = first_normal; i < n; i++) {
        assert_int_equal(v.types[i], 1);
        if (i > first_normal) assert_true(v.scores[i] < v.scores[i - 1]);
    }
    /* Every piece distinct (quadratic, but the vocabularies here are small). */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(v.pieces[i], v.pieces[j]) == 0) {
                print_error("pieces %d and %d are both '%s'\n", i, j, v.pieces[i]);
                fail();
            }
    sd_synth_vocab_free(&v);
    assert_null(v.pieces);
}

static void test_vocab(void **state) {
    (void)state;
    check_vocab(3);
    check_vocab(50);
    check_vocab(258);
    check_vocab(259);
    check_vocab(1000);
    sd_synth_vocab v;
    assert_int_equal(sd_synth_vocab_build(2, &v), SD_ERR_INVALID_ARG);
    sd_synth_vocab_free(NULL);
    /* The piece list is built so an SPM tokenizer can reach "▁the" by merges. */
    assert_int_equal(sd_synth_vocab_build(1000, &v), SD_OK);
    int found = 0;
    for (int i = 0; i < v.n; i++) found += strcmp(v.pieces[i], "\xe2\x96\x81the") == 0;
    assert_int_equal(found, 1);
    sd_synth_vocab_free(&v);
}

/* Every family the table knows: the file holds exactly the tensors the family requires (qwen2's
 * biases, qwen3's q/k norms of head_dim, which need not be dim / heads), loads as that family,
 * and computes batched == stepwise. */
static void test_archs(void **state) {
    (void)state;
    static const struct {
        const char *arch;
        int head_dim, per_layer; /* tensors per layer */
    } cases[] = {{"llama", 0, 9}, {"qwen2", 0, 12}, {"qwen3", 16, 11}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sd_synth_params p = tiny();
        p.arch = cases[i].arch;
        p.head_dim = cases[i].head_dim; /* qwen3: 4 heads x 16 = 64 wide attention on dim 32 */
        p.ctx_len = 128;                /* room for the batched check (30 + 48 tokens) */
        void *buf = NULL;
        size_t len = 0;
        assert_int_equal(sd_synth_write_mem(&p, &buf, &len), SD_OK);
        sd_model *m = NULL;
        sd_status st = sd_model_load_gguf_mem(buf, len, cases[i].arch, NULL, &m);
        if (st != SD_OK) fail_msg("%s: %s", cases[i].arch, sd_last_error());
        assert_string_equal(sd_model_arch(m), cases[i].arch);
        const sd_hparams *hp = sd_model_hparams(m);
        assert_int_equal(hp->head_dim, cases[i].head_dim ? cases[i].head_dim : p.dim / p.n_heads);
        /* token_embd, output_norm, output + the layers */
        assert_int_equal(sd_model_n_tensors(m), 3 + p.n_layers * cases[i].per_layer);
        printf("  %s: %d tensors, head_dim %d\n", cases[i].arch, sd_model_n_tensors(m), hp->head_dim);
        sdtest_check_batched(m, 0);
        sd_model_free(m);
        free(buf);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params_validation), cmocka_unit_test(test_tiny_f32),
        cmocka_unit_test(test_tiny_f16),          cmocka_unit_test(test_tiny_tied),
        cmocka_unit_test(test_determinism),       cmocka_unit_test(test_build_and_override),
        cmocka_unit_test(test_vocab),             cmocka_unit_test(test_archs),
    };
    return cmocka_run_group_tests_name("synth", tests, NULL, NULL);
}
