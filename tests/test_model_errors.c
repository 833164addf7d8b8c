/* Bad model files and bad requests: each fails with its own status and a message that names
 * the problem; nothing crashes, nothing is half-loaded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sdtest.h"
#include "sdtest_models.h"
#include "specdec/gguf.h"
#include "specdec/kv.h"
#include "specdec/spec.h"
#include "specdec/tokenizer.h"
#include "specdec/types.h"

static void expect_load_error(const char *path, sd_status want, const char *needle) {
    sd_model *m = (sd_model *)0x1;
    sd_status st = sd_model_load(path, NULL, &m);
    printf("  %s -> %s: %s\n", path, sd_status_str(st), sd_last_error());
    assert_int_equal(st, want);
    assert_null(m);
    if (!strstr(sd_last_error(), needle)) fail_msg("message '%s' lacks '%s'", sd_last_error(), needle);
}

static void write_bytes(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* A tiny valid llama GGUF in memory, built by the synthetic writer. */
static void *tiny_gguf(size_t *len) {
    sd_synth_params p = sd_synth_default_params();
    p.dim = 32; p.n_layers = 1; p.n_heads = 4; p.n_kv_heads = 2; p.hidden_dim = 64;
    p.vocab_size = 300; p.ctx_len = 64;
    void *buf = NULL;
    assert_int_equal(sd_synth_write_mem(&p, &buf, len), SD_OK);
    return buf;
}

/* A minimal llama GGUF built by hand so single fields can be made wrong. */
typedef struct {
    uint32_t dim, heads, kv_heads, hidden, vocab;
    const char *arch;
    uint32_t q_type;     /* type of blk.0.attn_q.weight */
    uint64_t q_rows;     /* rows of blk.0.attn_q.weight (dim when consistent) */
    uint32_t rope_dim;   /* llama.rope.dimension_count; 0 leaves it out */
    uint32_t key_length; /* <arch>.attention.key_length; 0 leaves it out (head_dim = dim / heads) */
    int biases;          /* q/k/v biases (Qwen2) */
    /* one extra key of each kind (the name after "<arch>."; NULL: none) and extra f32 vectors */
    const char *str_key, *str_val;
    const char *u32_key;
    uint32_t u32_val;
    const char *f32_key;
    float f32_val;
    struct { const char *name; uint64_t n; } vec[3];
} hand_spec;

static hand_spec hand_default(void) {
    hand_spec h = {256, 4, 4, 256, 260, "llama", SD_TYPE_F32, 256, 0, 0, 0, NULL, NULL, NULL, 0, NULL, 0, {{NULL, 0}}};
    return h;
}

static void set_u32(sd_gguf_writer *w, const char *arch, const char *key, uint32_t v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    assert_int_equal(sd_gguf_set_u32(w, k, v), SD_OK);
}

static const char *hand_gguf(const hand_spec *h, const char *name) {
    sd_gguf_writer *w = sd_gguf_writer_create();
    assert_non_null(w);
    const char *a = h->arch;
    sd_gguf_set_str(w, "general.architecture", a);
    set_u32(w, a, "embedding_length", h->dim);
    set_u32(w, a, "block_count", 1);
    set_u32(w, a, "feed_forward_length", h->hidden);
    set_u32(w, a, "attention.head_count", h->heads);
    set_u32(w, a, "attention.head_count_kv", h->kv_heads);
    set_u32(w, a, "context_length", 64);
    if (h->rope_dim) set_u32(w, a, "rope.dimension_count", h->rope_dim);
    if (h->key_length) set_u32(w, a, "attention.key_length", h->key_length);
    if (h->u32_key) set_u32(w, a, h->u32_key, h->u32_val);
    char k[128];
    if (h->str_key) {
        snprintf(k, sizeof k, "%s.%s", a, h->str_key);
        assert_int_equal(sd_gguf_set_str(w, k, h->str_val), SD_OK);
    }
    if (h->f32_key) {
        snprintf(k, sizeof k, "%s.%s", a, h->f32_key);
        assert_int_equal(sd_gguf_set_f32(w, k, h->f32_val), SD_OK);
    }
    assert_int_equal(sd_synth_add_tokenizer(w, (int)h->vocab), SD_OK);
    size_t big = (size_t)h->dim * (h->vocab > h->hidden ? h->vocab : h->hidden) * 4;
    if ((size_t)h->dim * h->q_rows * 4 > big) big = (size_t)h->dim * h->q_rows * 4;
    float *zeros = calloc(1, big), ones[1024];
    for (int i = 0; i < 1024; i++) ones[i] = 1; /* extra vectors: norms and rope_freqs factors of 1 */
    uint32_t kvd = h->key_length ? h->key_length * h->kv_heads : h->heads ? h->dim / h->heads * h->kv_heads : 0;
    struct { const char *n; uint32_t type; uint64_t ne0, ne1; } t[] = {
        {"token_embd.weight", SD_TYPE_F32, h->dim, h->vocab},
        {"output_norm.weight", SD_TYPE_F32, h->dim, 1},
        {"blk.0.attn_norm.weight", SD_TYPE_F32, h->dim, 1},
        {"blk.0.ffn_norm.weight", SD_TYPE_F32, h->dim, 1},
        {"blk.0.attn_q.weight", h->q_type, h->dim, h->q_rows},
        {"blk.0.attn_k.weight", SD_TYPE_F32, h->dim, kvd},
        {"blk.0.attn_v.weight", SD_TYPE_F32, h->dim, kvd},
        {"blk.0.attn_output.weight", SD_TYPE_F32, h->q_rows, h->dim},
        {"blk.0.ffn_gate.weight", SD_TYPE_F32, h->dim, h->hidden},
        {"blk.0.ffn_up.weight", SD_TYPE_F32, h->dim, h->hidden},
        {"blk.0.ffn_down.weight", SD_TYPE_F32, h->hidden, h->dim},
        {h->biases ? "blk.0.attn_q.bias" : NULL, SD_TYPE_F32, h->q_rows, 1},
        {h->biases ? "blk.0.attn_k.bias" : NULL, SD_TYPE_F32, kvd, 1},
        {h->biases ? "blk.0.attn_v.bias" : NULL, SD_TYPE_F32, kvd, 1},
        {h->vec[0].name, SD_TYPE_F32, h->vec[0].n, 1},
        {h->vec[1].name, SD_TYPE_F32, h->vec[1].n, 1},
        {h->vec[2].name, SD_TYPE_F32, h->vec[2].n, 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (!t[i].n) continue;
        uint64_t ne[2] = {t[i].ne0, t[i].ne1};
        size_t nb = sd_type_row_bytes(t[i].type, (int64_t)ne[0]) * ne[1];
        const void *data = i >= sizeof t / sizeof t[0] - 3 ? (const void *)ones : zeros;
        assert_true(data == zeros || nb <= sizeof ones);
        assert_int_equal(sd_gguf_add_tensor(w, t[i].n, t[i].type, ne[1] == 1 ? 1 : 2, ne, data, nb), SD_OK);
    }
    const char *path = sdtest_tmp_path(name);
    assert_int_equal(sd_gguf_write_file(w, path), SD_OK);
    sd_gguf_writer_free(w);
    free(zeros);
    return path;
}

static void test_missing_file(void **state) {
    (void)state;
    expect_load_error("/nonexistent/model.gguf", SD_ERR_IO, "No such file");
}

static void test_truncated_gguf(void **state) {
    (void)state;
    size_t len;
    void *buf = tiny_gguf(&len);
    const char *path = sdtest_tmp_path("trunc.gguf");
    write_bytes(path, buf, 40); /* inside the metadata */
    expect_load_error(path, SD_ERR_FORMAT, "trunc.gguf");
    free(buf);
}

static void test_tensor_data_outside_file(void **state) {
    (void)state;
    size_t len;
    void *buf = tiny_gguf(&len);
    const char *path = sdtest_tmp_path("short.gguf");
    write_bytes(path, buf, len - 64); /* headers intact, the last tensor's data cut */
    expect_load_error(path, SD_ERR_FORMAT, "outside file");
    free(buf);
}

static void test_truncated_llama2c(void **state) {
    (void)state;
    char *src = sdtest_shared_or_skip("models/stories260K/stories260K.bin");
    size_t len;
    void *buf = sdtest_read_file(src, &len);
    const char *path = sdtest_tmp_path("trunc.bin");
    write_bytes(path, buf, len / 2);
    expect_load_error(path, SD_ERR_FORMAT, "truncated llama2.c checkpoint");
    free(buf);
    free(src);
}

static void test_wrong_magic(void **state) {
    (void)state;
    const char junk[64] = "this is not a model file at all, just some text.....";
    const char *path = sdtest_tmp_path("junk.gguf");
    write_bytes(path, junk, sizeof junk);
    expect_load_error(path, SD_ERR_FORMAT, "bad magic");
}

static void test_unsupported_version(void **state) {
    (void)state;
    size_t len;
    uint8_t *buf = tiny_gguf(&len);
    buf[4] = 1; /* version 1: a GGUF of the past */
    const char *path = sdtest_tmp_path("v1.gguf");
    write_bytes(path, buf, len);
    expect_load_error(path, SD_ERR_UNSUPPORTED, "version 1");
    free(buf);
}

static void test_unknown_architecture(void **state) {
    (void)state;
    hand_spec h = hand_default();
    h.arch = "gpt2";
    expect_load_error(hand_gguf(&h, "gpt2.gguf"), SD_ERR_UNSUPPORTED, "unknown architecture 'gpt2'");
}

static void test_unsupported_tensor_type(void **state) {
    (void)state;
    hand_spec h = hand_default();
    h.q_type = SD_TYPE_Q2_K; /* a valid ggml type without a kernel here */
    expect_load_error(hand_gguf(&h, "q2k.gguf"), SD_ERR_UNSUPPORTED, "blk.0.attn_q.weight has type q2_K");
}

static void test_inconsistent_shape(void **state) {
    (void)state;
    hand_spec h = hand_default();
    h.q_rows = 128;
    expect_load_error(hand_gguf(&h, "shape.gguf"), SD_ERR_FORMAT, "blk.0.attn_q.weight has shape [256, 128");
}

static void test_heads_not_dividing_dim(void **state) {
    (void)state;
    hand_spec h = hand_default();
    h.heads = 7;
    h.kv_heads = 7;
    expect_load_error(hand_gguf(&h, "heads.gguf"), SD_ERR_FORMAT, "head_count=7 does not divide");
}

static void test_kv_heads_not_dividing_heads(void **state) {
    (void)state;
    hand_spec h = hand_default();
    h.kv_heads = 3; /* 4 query heads cannot be shared out among 3 kv heads */
    expect_load_error(hand_gguf(&h, "kvheads.gguf"), SD_ERR_FORMAT,
                      "llama.attention.head_count_kv=3 does not divide head_count=4");
}

/* RoPE rotates pairs: an odd head_dim (36 / 4 = 9) or an odd rope.dimension_count is a
 * format error at load, never a rotation that runs past the head. */
static void test_odd_head_dim(void **state) {
    (void)state;
    hand_spec h = hand_default();
    h.dim = 36;
    h.q_rows = 36;
    expect_load_error(hand_gguf(&h, "hd9.gguf"), SD_ERR_FORMAT, "RoPE dimension 9 must be even and in 2..head_dim=9");
    h = hand_default();
    h.rope_dim = 63;
    expect_load_error(hand_gguf(&h, "rope63.gguf"), SD_ERR_FORMAT, "RoPE dimension 63 must be even and in 2..head_dim=64");
}

static void expect_loads(const hand_spec *h, const char *name) {
    sd_model *m = NULL;
    const char *path = hand_gguf(h, name);
    sd_status st = sd_model_load(path, NULL, &m);
    if (st != SD_OK) fail_msg("%s: %s", name, sd_last_error());
    sd_model_free(m);
}

/* The tensors each family needs, and nothing else: a Qwen3 q/k norm of the wrong length, a
 * Llama 3 rope_freqs of the wrong length, a Qwen2 without its biases or a Llama with a tensor
 * of another family each fail naming the tensor; the same files made right load (so the
 * failures are these tensors, not the hand-built file). */
static void test_family_tensors(void **state) {
    (void)state;
    const int hd = 64; /* 256 / 4 heads */
    hand_spec h = hand_default();
    h.arch = "qwen3";
    h.vec[0].name = "blk.0.attn_q_norm.weight", h.vec[0].n = hd;
    h.vec[1].name = "blk.0.attn_k_norm.weight", h.vec[1].n = hd;
    expect_loads(&h, "qwen3-ok.gguf");
    h.vec[0].n = 256;
    expect_load_error(hand_gguf(&h, "qwen3-qnorm.gguf"), SD_ERR_FORMAT,
                      "tensor blk.0.attn_q_norm.weight has shape [256, 1, 1, 1], expected [64] from the hyperparameters");
    h.vec[0].name = NULL;
    expect_load_error(hand_gguf(&h, "qwen3-nonorm.gguf"), SD_ERR_FORMAT, "missing tensor blk.0.attn_q_norm.weight");

    h = hand_default();
    h.arch = "qwen2";
    h.biases = 1;
    expect_loads(&h, "qwen2-ok.gguf");
    h.biases = 0;
    expect_load_error(hand_gguf(&h, "qwen2-nobias.gguf"), SD_ERR_FORMAT, "missing tensor blk.0.attn_q.bias");

    h = hand_default();
    h.vec[0].name = "rope_freqs.weight", h.vec[0].n = hd / 2;
    expect_loads(&h, "llama3-freqs-ok.gguf");
    h.vec[0].n = 10;
    expect_load_error(hand_gguf(&h, "llama3-freqs.gguf"), SD_ERR_FORMAT,
                      "tensor rope_freqs.weight has shape [10, 1, 1, 1], expected [32]");
    h = hand_default();
    h.vec[0].name = "blk.0.attn_q_norm.weight", h.vec[0].n = hd;
    expect_load_error(hand_gguf(&h, "llama-qnorm.gguf"), SD_ERR_UNSUPPORTED,
                      "tensor blk.0.attn_q_norm.weight (query norm) is not part of a 'llama' model as specdec computes it");
}

/* Metadata that changes the computation: an explicit head size the matrices do not have, value
 * heads of another size, RoPE scaling other than linear, a non-positive factor, and keys of
 * features specdec does not compute are each refused naming the key and its value. */
static void test_family_metadata(void **state) {
    (void)state;
    hand_spec h = hand_default();
    h.key_length = 48; /* q has 4 x 64 rows, not 4 x 48 */
    expect_load_error(hand_gguf(&h, "klen.gguf"), SD_ERR_FORMAT,
                      "tensor blk.0.attn_q.weight has shape [256, 256, 1, 1], expected [256, 192]");
    h.q_rows = 192; /* the Qwen3 way: heads x key_length need not be the embedding width */
    expect_loads(&h, "klen-ok.gguf");
    h = hand_default();
    h.u32_key = "attention.key_length", h.u32_val = 0;
    expect_load_error(hand_gguf(&h, "klen0.gguf"), SD_ERR_FORMAT,
                      "llama.attention.key_length=0 is not a plausible head size for 4 heads");
    h = hand_default();
    h.u32_key = "attention.value_length", h.u32_val = 32;
    expect_load_error(hand_gguf(&h, "vlen.gguf"), SD_ERR_UNSUPPORTED,
                      "llama.attention.value_length=32 differs from key_length=64");
    h = hand_default();
    h.str_key = "rope.scaling.type", h.str_val = "yarn";
    expect_load_error(hand_gguf(&h, "yarn.gguf"), SD_ERR_UNSUPPORTED,
                      "llama.rope.scaling.type = 'yarn' is not implemented by specdec (supported: none, linear)");
    h.str_val = "linear";
    h.f32_key = "rope.scaling.factor", h.f32_val = -2;
    expect_load_error(hand_gguf(&h, "factor.gguf"), SD_ERR_FORMAT, "llama.rope.scaling.factor = -2 is not a positive factor");
    h.f32_val = 4;
    expect_loads(&h, "linear-ok.gguf");
    h = hand_default();
    h.u32_key = "expert_count", h.u32_val = 8;
    expect_load_error(hand_gguf(&h, "moe.gguf"), SD_ERR_UNSUPPORTED,
                      "llama.expert_count = 8 (mixture of experts) is not implemented by specdec");
    h.u32_val = 0; /* the neutral value says nothing: it loads */
    expect_loads(&h, "moe0.gguf");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* llama2.c headers with absurd sizes fail from the 28 header bytes alone: no allocation
 * sized by them (ASan would report a giant one), well under a second. */
static void test_llama2c_absurd_header(void **state) {
    (void)state;
    struct { int32_t h[7]; const char *needle; } cases[] = {
        {{1 << 30, 64, 1, 4, 4, 32, 64}, "not a plausible llama2.c header (read as one: dim=1073741824 hidden=64 layers=1"},
        {{64, 64, -1, 4, 4, 32, 64}, "not a plausible llama2.c header (read as one: dim=64 hidden=64 layers=-1"},
        {{64, 64, 1, 4, 4, 32, -5}, "seq_len=-5)"},
        /* plausible each, 4096 layers of 2^20: checked against the file size, not allocated */
        {{1 << 20, 1 << 20, 4096, 16, 16, 32, 64}, "truncated llama2.c checkpoint: header implies"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t buf[256] = {0};
        memcpy(buf, cases[i].h, sizeof cases[i].h);
        const char *path = sdtest_tmp_path("absurd.bin");
        write_bytes(path, buf, sizeof buf);
        double t0 = now_s();
        expect_load_error(path, SD_ERR_FORMAT, cases[i].needle);
        double dt = now_s() - t0;
        if (dt > 0.5) fail_msg("case %zu took %.3f s", i, dt);
    }
}

/* A KV cache larger than the machine is refused before malloc, with the bytes it needs; so
 * is one whose size overflows size_t. */
static void test_kv_too_large(void **state) {
    (void)state;
    sd_kv *kv = (sd_kv *)0x1;
    assert_int_equal(sd_kv_create(4096, 1 << 20, 1 << 16, SD_TYPE_F32, 1, &kv), SD_ERR_NOMEM);
    assert_null(kv);
    printf("  %s\n", sd_last_error());
    assert_non_null(strstr(sd_last_error(), "kv cache: 4096 layers x 1048576 positions x 65536 floats (K and V) need 2251799813685248 bytes, more than the machine's"));
    kv = (sd_kv *)0x1;
    assert_int_equal(sd_kv_create(0x7fffffff, 0x7fffffff, 0x7fffffff, SD_TYPE_F32, 1, &kv), SD_ERR_NOMEM);
    assert_null(kv);
    assert_non_null(strstr(sd_last_error(), "bytes, more than the machine's"));
    assert_int_equal(sd_kv_create(2, 16, 8, SD_TYPE_F32, 1, &kv), SD_OK); /* the control */
    sd_kv_free(kv);
}

static sd_context *ctx_of(sd_model *m, int n_ctx) {
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = n_ctx;
    sd_context *c = NULL;
    assert_int_equal(sd_context_create(m, &cp, &c), SD_OK);
    return c;
}

/* Ids outside [0, n_vocab) are refused by decode (-1, nothing written) and by forward. */
static void test_vocab_ids_out_of_range(void **state) {
    (void)state;
    sd_model *m = sdtest_tiny_model(32, 1, 4, 2, 64, 300, 9);
    const sd_tokenizer *t = sd_model_tokenizer(m);
    const int n = sd_tokenizer_n_vocab(t);
    char buf[64];
    memset(buf, 'x', sizeof buf);
    assert_int_equal(sd_tokenizer_decode(t, -1, -1, buf, sizeof buf), -1);
    assert_int_equal(sd_tokenizer_decode(t, -1, n, buf, sizeof buf), -1);
    assert_int_equal(sd_tokenizer_decode(t, -1, INT32_MAX, buf, sizeof buf), -1);
    assert_int_equal(sd_tokenizer_decode(t, -1, INT32_MIN, buf, sizeof buf), -1);
    assert_int_equal(buf[0], 'x');
    assert_true(sd_tokenizer_decode(t, -1, n - 1, buf, sizeof buf) >= 0);
    assert_true(sd_tokenizer_decode(t, 5, 5, buf, sizeof buf) >= 0);
    sd_context *kv = ctx_of(m, 8);
    int32_t bad[2] = {-1, 300};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(sd_context_forward(kv, 0, &bad[i], 1, NULL, 0), SD_ERR_INVALID_ARG);
        assert_non_null(strstr(sd_last_error(), "outside vocabulary"));
        assert_int_equal(sd_context_seq_len(kv, 0), 0);
    }
    sd_context_free(kv);
    sd_model_free(m);
}

static void test_hand_model_loads(void **state) {
    (void)state; /* the control: the hand-built file is valid when nothing is changed */
    hand_spec h = hand_default();
    sd_model *m = NULL;
    assert_int_equal(sd_model_load(hand_gguf(&h, "ok.gguf"), NULL, &m), SD_OK);
    sd_model_free(m);
    sd_model_free(NULL);
}

static void test_prompt_longer_than_context(void **state) {
    (void)state;
    sd_model *m = sdtest_tiny_model(32, 1, 4, 2, 64, 300, 9);
    sd_spec_params p = sd_spec_default_params();
    p.n_ctx = 16;
    sd_spec *s = NULL;
    assert_int_equal(sd_spec_create(m, NULL, &p, &s), SD_OK);
    int32_t prompt[16] = {1};
    for (int i = 1; i < 16; i++) prompt[i] = 10 + i;
    assert_int_equal(sd_spec_generate(s, prompt, 16, NULL, NULL, NULL), SD_ERR_CONTEXT_FULL);
    assert_non_null(strstr(sd_last_error(), "prompt of 16 tokens does not fit the context of 16"));
    /* one position fewer fits */
    sd_spec_stats st;
    assert_int_equal(sd_spec_generate(s, prompt, 15, NULL, NULL, &st), SD_OK);
    assert_int_equal(st.stop_reason, SD_STOP_CONTEXT);
    assert_int_equal(st.n_generated, 1);
    sd_spec_free(s);
    sd_model_free(m);
}

static void test_forward_bad_requests(void **state) {
    (void)state;
    sd_model *m = sdtest_tiny_model(32, 1, 4, 2, 64, 300, 9);
    sd_context *kv = ctx_of(m, 8);
    int32_t tok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    assert_int_equal(sd_context_forward(kv, 0, tok, 9, NULL, 0), SD_ERR_CONTEXT_FULL);
    assert_int_equal(sd_context_seq_len(kv, 0), 0);
    int32_t bad = 300;
    assert_int_equal(sd_context_forward(kv, 0, &bad, 1, NULL, 0), SD_ERR_INVALID_ARG);
    assert_non_null(strstr(sd_last_error(), "outside vocabulary"));
    assert_int_equal(sd_context_forward(kv, 0, tok, 0, NULL, 0), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_context_forward(kv, 0, tok, 8, NULL, 0), SD_OK);
    assert_int_equal(sd_context_forward(kv, 0, tok, 1, NULL, 0), SD_ERR_CONTEXT_FULL);
    assert_int_equal(sd_context_seq_len(kv, 0), 8);
    sd_context_free(kv);
    sd_model_free(m);
}

/* A NaN in blk.0's weights is reported as a numeric error naming layer 0, not as
 * garbage logits; the cache is left as it was. */
static void test_nan_weights_named(void **state) {
    (void)state;
    size_t len;
    uint8_t *buf = tiny_gguf(&len);
    sd_gguf *g = NULL;
    assert_int_equal(sd_gguf_parse(buf, len, "nan", &g), SD_OK);
    const sd_gguf_tensor *t = sd_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    assert_non_null(t);
    float nan = NAN;
    memcpy((uint8_t *)buf + ((const uint8_t *)t->data - buf) + 8, &nan, sizeof nan);
    sd_gguf_free(g);
    sd_model *m = NULL;
    assert_int_equal(sd_model_load_gguf_mem(buf, len, "nan.gguf", NULL, &m), SD_OK);
    sd_context *kv = ctx_of(m, 0);
    int32_t tok[3] = {1, 5, 9};
    float logits[300];
    assert_int_equal(sd_context_forward(kv, 0, tok, 3, logits, 0), SD_ERR_NUMERIC);
    printf("  %s\n", sd_last_error());
    assert_non_null(strstr(sd_last_error(), "layer 0 produced a non-finite activation"));
    assert_int_equal(sd_context_seq_len(kv, 0), 0);
    sd_context_free(kv);
    sd_model_free(m);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_truncated_gguf),
        cmocka_unit_test(test_tensor_data_outside_file),
        cmocka_unit_test(test_truncated_llama2c),
        cmocka_unit_test(test_wrong_magic),
        cmocka_unit_test(test_unsupported_version),
        cmocka_unit_test(test_unknown_architecture),
        cmocka_unit_test(test_unsupported_tensor_type),
        cmocka_unit_test(test_inconsistent_shape),
        cmocka_unit_test(test_heads_not_dividing_dim),
        cmocka_unit_test(test_kv_heads_not_dividing_heads),
        cmocka_unit_test(test_odd_head_dim),
        cmocka_unit_test(test_family_tensors),
        cmocka_unit_test(test_family_metadata),
        cmocka_unit_test(test_llama2c_absurd_header),
        cmocka_unit_test(test_kv_too_large),
        cmocka_unit_test(test_vocab_ids_out_of_range),
        cmocka_unit_test(test_hand_model_loads),
        cmocka_unit_test(test_prompt_longer_than_context),
        cmocka_unit_test(test_forward_bad_requests),
        cmocka_unit_test(test_nan_weights_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
