/* Cost twins: a large-shape model built from a small trained one computes the small one's
 * function (logits within a float-rounding tolerance, identical greedy text), F32 and after
 * quantisation (error comparable to the small model's own quantised copy); the layout a
 * quantiser relies on; GQA and rotate-half sources; and every refused shape with its message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model_internal.h"
#include "sdtest.h"
#include "sdtest_models.h"
#include "specdec/convert.h"
#include "specdec/twin.h"

/* The twin sums the same products in another order, with exact zeros in between, and its
 * weights carry the irrational factors sqrt(D/d) and sqrt(HS/hs): float rounding only. */
#define TOL_TWIN_LOGITS 1e-4

#define S260 "models/stories260K/stories260K.bin"
#define TOK512 "models/stories260K/tok512.bin"
#define DRAFT "models/stories-draft/stories-draft.bin"
#define TS656 "models/tinystories-656k"

static const int32_t k_prompt[5] = {1, 403, 407, 261, 378}; /* <s> Once upon a time */
#define N_GREEDY 64

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static sd_model *load_and_unlink(const char *path) {
    sd_model *m = NULL;
    if (sd_model_load(path, NULL, &m) != SD_OK) fail_msg("load %s: %s", path, sd_last_error());
    remove(path); /* the mapping stays valid; hundreds of MB need not linger in /tmp */
    return m;
}

static sd_model *make_twin(const sd_model *small, const sd_twin_params *p, const char *file) {
    const char *path = sdtest_tmp_path(file);
    if (sd_twin_write_file(small, p, path) != SD_OK) fail_msg("twin %s: %s", file, sd_last_error());
    return load_and_unlink(path);
}

static sd_model *convert(const sd_model *m, sd_type t, const char *file) {
    sd_convert_params cp = {t, NULL, NULL};
    sd_gguf_writer *w = NULL;
    if (sd_model_to_gguf(m, &cp, &w) != SD_OK) fail_msg("convert %s: %s", file, sd_last_error());
    const char *path = sdtest_tmp_path(file);
    assert_int_equal(sd_gguf_write_file(w, path), SD_OK);
    sd_gguf_writer_free(w);
    return load_and_unlink(path);
}

static sd_twin_params shape(const char *name) {
    sd_twin_params p = sd_twin_default_params();
    assert_int_equal(sd_twin_shape(name, &p), SD_OK);
    return p;
}

/* What the small model does, computed once: its greedy continuation of the prompt, and its
 * logits (decode steps) at every position of prompt + continuation, the trajectory that
 * generation follows. */
typedef struct {
    sd_model *m;
    int32_t tok[5 + N_GREEDY];
    int n;          /* positions compared (the last token's logits are not needed) */
    int vocab;
    float *logits;  /* [n][vocab] */
    int32_t *greedy; /* [N_GREEDY] */
} reference;

static void reference_make(sd_model *small, reference *r) {
    r->m = small;
    r->greedy = sdtest_greedy(small, NULL, k_prompt, 5, N_GREEDY, NULL);
    memcpy(r->tok, k_prompt, sizeof k_prompt);
    memcpy(r->tok + 5, r->greedy, N_GREEDY * sizeof *r->tok);
    r->n = 5 + N_GREEDY - 1;
    r->vocab = sd_model_hparams(small)->vocab_size;
    r->logits = sdtest_stepwise_logits(small, r->tok, r->n);
}

static void reference_free(reference *r) {
    free(r->logits);
    free(r->greedy);
}

/* Largest and root-mean-square |logit difference| of m from the reference. */
static void logit_errors(const reference *r, sd_model *m, double *max, double *rms) {
    assert_int_equal(sd_model_hparams(m)->vocab_size, r->vocab);
    float *l = sdtest_stepwise_logits(m, r->tok, r->n);
    double ss = 0;
    *max = 0;
    for (size_t i = 0; i < (size_t)r->n * r->vocab; i++) {
        const double d = fabs((double)l[i] - r->logits[i]);
        ss += d * d;
        if (d > *max) *max = d;
    }
    *rms = sqrt(ss / ((double)r->n * r->vocab));
    free(l);
}

/* Tokens of greedy generation on which m agrees with the reference, from the start. */
static int greedy_agreement(const reference *r, sd_model *m) {
    int32_t *g = sdtest_greedy(m, NULL, k_prompt, 5, N_GREEDY, NULL);
    int same = 0;
    while (same < N_GREEDY && g[same] == r->greedy[same]) same++;
    free(g);
    return same;
}

/* The twin computes small's function: logits within TOL_TWIN_LOGITS along small's greedy
 * trajectory, the same greedy tokens, small's vocabulary, and the metadata saying so. */
static void check_same_function(const reference *r, sd_model *twin, const sd_twin_params *p, const char *what) {
    const sd_hparams *h = sd_model_hparams(twin), *s = sd_model_hparams(r->m);
    assert_true(h->dim == p->dim && h->n_layers == p->n_layers && h->n_heads == p->n_heads &&
                h->n_kv_heads == p->n_kv_heads && h->hidden_dim == p->hidden_dim);
    assert_true(h->vocab_size == s->vocab_size && h->ctx_len == s->ctx_len && h->rope_theta == s->rope_theta &&
                h->norm_eps == s->norm_eps);
    assert_int_equal(sd_tokenizer_check_compatible(sd_model_tokenizer(r->m), sd_model_tokenizer(twin)), SD_OK);
    char desc[1024];
    assert_int_equal(sd_model_twin_of(twin, desc, sizeof desc), 1);
    assert_non_null(strstr(desc, "same function"));
    assert_int_equal(sd_model_twin_of(r->m, desc, sizeof desc), 0);
    double d, rms;
    logit_errors(r, twin, &d, &rms);
    const int same = greedy_agreement(r, twin);
    printf("  %s: max |logit diff| %.3g over %d positions (tolerance %g); greedy identical for %d of %d tokens\n", what,
           d, r->n, TOL_TWIN_LOGITS, same, N_GREEDY);
    assert_true(d <= TOL_TWIN_LOGITS);
    assert_int_equal(same, N_GREEDY);
}

/* Quantising the twin costs about what quantising the small model costs. The small model's own
 * copy is not quantised everywhere: rows that do not divide into 32-blocks stay F16
 * (stories-draft's 48-wide stream: every matrix but ffn_down; stories260K's 172-wide
 * ffn_down), while the twin's 288/768/2048-wide rows all quantise; measured, the twin's
 * largest logit error was 0.9-1.4x the copy's for stories260K and 1.7-2.5x for stories-draft. */
#define Q_ERR_FACTOR 3.0
/* Where a quantised model's greedy text first flips is chaotic (one near-tie decides it). */
#define Q_GREEDY_FRACTION 0.75

static void check_quantised(const reference *r, sd_model *twin, const char *tag) {
    static const sd_type ts[] = {SD_TYPE_Q8_0, SD_TYPE_Q4_0};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) {
        const char *tn = sd_type_info(ts[i])->name;
        char file[96];
        snprintf(file, sizeof file, "%s-small-%s.gguf", tag, tn);
        sd_model *sq = convert(r->m, ts[i], file);
        snprintf(file, sizeof file, "%s-twin-%s.gguf", tag, tn);
        sd_model *tq = convert(twin, ts[i], file);
        double es, et, rs, rt;
        logit_errors(r, sq, &es, &rs);
        logit_errors(r, tq, &et, &rt);
        const int gs = greedy_agreement(r, sq), gt = greedy_agreement(r, tq);
        printf("  %s %s: |logit error| max/rms: small's own copy %.3f/%.4f, twin %.3f/%.4f (%.2fx/%.2fx); greedy "
               "agrees with F32 for %d (copy) and %d (twin) of %d tokens\n",
               tag, tn, es, rs, et, rt, et / es, rt / rs, gs, gt, N_GREEDY);
        assert_true(et <= Q_ERR_FACTOR * es && rt <= Q_ERR_FACTOR * rs);
        assert_true(gt >= Q_GREEDY_FRACTION * gs);
        sd_model_free(sq);
        sd_model_free(tq);
    }
}

static void test_twin_stories260k_110m(void **state) {
    (void)state;
    sd_model *small = sdtest_shared_model(S260, TOK512);
    const sd_twin_params p = shape("stories110M");
    double t = now();
    sd_model *twin = make_twin(small, &p, "t260-110M.gguf");
    printf("  stories260K -> stories110M shape: %.0f MB of F32 weights written and loaded in %.1f s\n",
           sd_model_weight_bytes(twin) / 1e6, now() - t);
    reference r;
    reference_make(small, &r);
    check_same_function(&r, twin, &p, "stories260K twin at stories110M");
    check_quantised(&r, twin, "t260-110M");
    reference_free(&r);
    sd_model_free(twin);
    sd_model_free(small);
}

static void test_twin_draft_15m(void **state) {
    (void)state;
    sd_model *small = sdtest_shared_model(DRAFT, TOK512);
    const sd_twin_params p = shape("stories15M");
    sd_model *twin = make_twin(small, &p, "draft-15M.gguf");
    reference r;
    reference_make(small, &r);
    check_same_function(&r, twin, &p, "stories-draft twin at stories15M");
    check_quantised(&r, twin, "draft-15M");
    reference_free(&r);
    sd_model_free(twin);
    sd_model_free(small);
}

/* A twin of a model at its own shape is the model (c = 1, no head dims added). */
static void test_twin_same_shape(void **state) {
    (void)state;
    sd_model *small = sdtest_shared_model(S260, TOK512);
    const sd_hparams *h = sd_model_hparams(small);
    sd_twin_params p = sd_twin_default_params();
    p.dim = h->dim, p.n_layers = h->n_layers, p.n_heads = h->n_heads, p.n_kv_heads = h->n_kv_heads;
    p.hidden_dim = h->hidden_dim;
    sd_model *twin = make_twin(small, &p, "t260-same.gguf");
    reference r;
    reference_make(small, &r);
    check_same_function(&r, twin, &p, "stories260K twin at its own shape");
    reference_free(&r);
    sd_model_free(twin);
    sd_model_free(small);
}

/* A Hugging Face source (rotate-half RoPE, GQA 8:4, tied, eps 1e-6): its Q/K rows are reordered
 * into GGUF's pairs; GQA -> GQA keeps the groups, and MHA copies each kv head. */
static void test_twin_rotate_half_gqa(void **state) {
    (void)state;
    char *cfg = sdtest_shared_or_skip(TS656 "/config.json");
    cfg[strlen(cfg) - strlen("/config.json")] = 0;
    sd_model *small = NULL;
    if (sd_model_load(cfg, NULL, &small) != SD_OK) fail_msg("load %s: %s", cfg, sd_last_error());
    free(cfg);
    static const struct {
        int dim, layers, heads, kv, hidden;
        const char *what;
    } shapes[] = {
        {256, 3, 16, 8, 768, "tinystories-656k twin, 16 heads / 8 kv (GQA -> GQA, same head size)"},
        {256, 2, 8, 8, 512, "tinystories-656k twin, 8 heads / 8 kv (head size 16 -> 32, kv heads copied)"},
    };
    reference r;
    reference_make(small, &r);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        sd_twin_params p = sd_twin_default_params();
        p.dim = shapes[i].dim, p.n_layers = shapes[i].layers, p.n_heads = shapes[i].heads;
        p.n_kv_heads = shapes[i].kv, p.hidden_dim = shapes[i].hidden;
        sd_model *twin = make_twin(small, &p, "ts656-twin.gguf");
        check_same_function(&r, twin, &p, shapes[i].what);
        sd_model_free(twin);
    }
    reference_free(&r);
    sd_model_free(small);
}

/* ------------------------------------------------------------------ without shared data */

static sd_model *tiny_small(void) {
    sd_synth_params s = sdtest_synth_shape(64, 2, 8, 4, 96, 512, 128, 5); /* head size 8, GQA 8:4 */
    return sdtest_synth_model(&s);
}

/* A random small model (it needs no test data) and its twin: the same function. */
static void test_twin_synthetic(void **state) {
    (void)state;
    sd_model *small = tiny_small();
    sd_twin_params p = sd_twin_default_params();
    p.dim = 192, p.n_layers = 3, p.n_heads = 12, p.n_kv_heads = 6, p.hidden_dim = 160; /* head size 16, GQA 12:6 */
    sd_model *twin = make_twin(small, &p, "tiny-twin.gguf");
    reference r;
    reference_make(small, &r);
    check_same_function(&r, twin, &p, "random 64-dim model twin at 192 dims, GQA 12:6");
    reference_free(&r);
    sd_model_free(twin);
    sd_model_free(small);
}

/* Element (r, c) of an F32 tensor of a parsed twin. */
static float at(const sd_gguf *g, const char *name, int64_t r, int64_t c) {
    const sd_gguf_tensor *t = sd_gguf_find_tensor(g, name);
    if (!t) fail_msg("no tensor %s", name);
    assert_int_equal(t->type, SD_TYPE_F32);
    assert_true(r < (int64_t)t->ne[1] && c < (int64_t)t->ne[0]);
    return ((const float *)t->data)[r * (int64_t)t->ne[0] + c];
}

/* What llama.cpp loads (standard names and keys only, plus specdec.twin_of), and the layout the
 * construction promises: zero writes into the extra dims, zero outputs of extra units and
 * layers, zero extras in blocks shared with small weights, random ones elsewhere. */
static void test_twin_layout(void **state) {
    (void)state;
    sd_model *small = tiny_small(); /* dim 64, 2 layers, 8 heads / 4 kv, hidden 96 */
    sd_twin_params p = sd_twin_default_params();
    p.dim = 320, p.n_layers = 3, p.n_heads = 10, p.n_kv_heads = 10, p.hidden_dim = 160, p.name = "tiny";
    sd_gguf_writer *w = NULL;
    assert_int_equal(sd_twin_build(small, &p, &w), SD_OK);
    void *buf = NULL;
    size_t len = 0;
    assert_int_equal(sd_gguf_write_mem(w, &buf, &len), SD_OK);
    sd_gguf_writer_free(w);
    sd_gguf *g = NULL;
    assert_int_equal(sd_gguf_parse(buf, len, "twin", &g), SD_OK);
    assert_int_equal(sd_gguf_n_tensors(g), 3 + 9 * 3);
    for (int64_t i = 0; i < sd_gguf_n_kv(g); i++) {
        const sd_gguf_kv *kv = sd_gguf_kv_at(g, i);
        const int std_key = (kv->key.len > 8 && !memcmp(kv->key.ptr, "general.", 8)) ||
                            (kv->key.len > 6 && !memcmp(kv->key.ptr, "llama.", 6)) ||
                            (kv->key.len > 16 && !memcmp(kv->key.ptr, "tokenizer.ggml.", 15)) ||
                            sd_str_eq(kv->key, "specdec.twin_of");
        if (!std_key) fail_msg("unexpected key %.*s", (int)kv->key.len, kv->key.ptr);
    }
    uint32_t ctx = 0, rope = 0;
    assert_int_equal(sd_gguf_get_u32(g, "llama.context_length", &ctx), SD_OK);
    assert_int_equal(sd_gguf_get_u32(g, "llama.rope.dimension_count", &rope), SD_OK);
    assert_int_equal(ctx, 128);
    assert_int_equal(rope, 32); /* head size 8 -> 32: every pair keeps its frequency */
    sd_str desc;
    assert_int_equal(sd_gguf_get_str(g, "specdec.twin_of", &desc), SD_OK);
    assert_true(desc.len > 5 && !memcmp(desc.ptr, "tiny ", 5)); /* named as asked */

    const int d = 64, D = 320, hid = 96, H = 160, HS = 32;
    int nonzero_extra_q = 0;
    for (int64_t c = 0; c < D; c++) {
        /* real Q row (head 0, dim 0): zeros from d to the 256-column block's end, random after */
        const float q = at(g, "blk.0.attn_q.weight", 0, c);
        if (c >= d && c < 256) assert_true(q == 0.0f);
        if (c >= 256 && q != 0.0f) nonzero_extra_q++;
        if (c >= d) assert_true(at(g, "token_embd.weight", 7, c) == 0.0f); /* no writes into extra dims */
    }
    assert_true(nonzero_extra_q > (D - 256) / 2);
    for (int64_t r = 0; r < D; r++) {
        for (int64_t c = 0; c < 10 * HS; c++) {
            const float o = at(g, "blk.1.attn_output.weight", r, c);
            /* small column (head h, dim j) lands at h*HS + (j/2)*2*4 + j%2: the others are zero */
            const int h = (int)(c / HS), i = (int)(c % HS), mapped = h < 8 && (i / 2) % 4 == 0;
            if (r >= d || !mapped) assert_true(o == 0.0f);
            assert_true(at(g, "blk.2.attn_output.weight", r, c) == 0.0f); /* extra layer */
        }
        for (int64_t c = 0; c < H; c++) {
            if (r >= d || c >= hid) assert_true(at(g, "blk.1.ffn_down.weight", r, c) == 0.0f);
            assert_true(at(g, "blk.2.ffn_down.weight", r, c) == 0.0f); /* extra layer */
        }
    }
    /* K rows of a copied head's extra dims are zero (q.k unchanged); Q/V rows there are random. */
    assert_true(at(g, "blk.0.attn_k.weight", 2, 300) == 0.0f && at(g, "blk.0.attn_k.weight", 2, 5) == 0.0f);
    assert_true(at(g, "blk.0.attn_q.weight", 2, 5) != 0.0f && at(g, "blk.0.attn_v.weight", 2, 5) != 0.0f);
    sd_gguf_free(g);
    free(buf);
    sd_model_free(small);
}

/* Every refused shape fails with its message, leaving *out NULL. */
static void test_twin_bad_shapes(void **state) {
    (void)state;
    sd_model *small = tiny_small(); /* dim 64, 2 layers, 8 heads / 4 kv, hidden 96, head size 8 */
    static const struct {
        int dim, layers, heads, kv, hidden, wtype;
        sd_status st;
        const char *msg;
    } cases[] = {
        {32, 2, 8, 8, 96, 0, SD_ERR_INVALID_ARG,
         "twin: dim 32 is smaller than tiny's 64 (a twin is at least the small model in every size)"},
        {128, 1, 8, 8, 96, 0, SD_ERR_INVALID_ARG,
         "twin: layers 1 is smaller than tiny's 2 (a twin is at least the small model in every size)"},
        {128, 2, 4, 4, 96, 0, SD_ERR_INVALID_ARG,
         "twin: heads 4 is smaller than tiny's 8 (a twin is at least the small model in every size)"},
        {128, 2, 8, 8, 64, 0, SD_ERR_INVALID_ARG,
         "twin: hidden 64 is smaller than tiny's 96 (a twin is at least the small model in every size)"},
        {120, 2, 10, 10, 96, 0, SD_ERR_INVALID_ARG,
         "twin: head size 12 (dim 120 / 10 heads) is not a multiple of tiny's head size 8, so its RoPE pairs cannot "
         "keep their frequencies"},
        {130, 2, 12, 12, 96, 0, SD_ERR_INVALID_ARG, "twin: dim 130 is not divisible by heads 12"},
        {192, 2, 12, 5, 96, 0, SD_ERR_INVALID_ARG, "twin: heads 12 is not divisible by kv_heads 5"},
        {192, 2, 12, 4, 96, 0, SD_ERR_INVALID_ARG,
         "twin: kv_heads 4 does not fit tiny's grouped-query attention: twin kv head 0 would serve q heads 1 and 2, "
         "which use tiny's kv heads 0 and 1 (each group of 3 q heads must lie within one of tiny's groups of 2; "
         "n_kv_heads = n_heads always works)"},
        {128, 2, 8, 8, 96, SD_TYPE_Q2_K, SD_ERR_INVALID_ARG,
         "twin: wtype 10 (q2_K) not supported (use f32, f16, bf16, q8_0, q4_0, q5_0, q4_K or q6_K)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sd_twin_params p = sd_twin_default_params();
        p.dim = cases[i].dim, p.n_layers = cases[i].layers, p.n_heads = cases[i].heads;
        p.n_kv_heads = cases[i].kv, p.hidden_dim = cases[i].hidden, p.wtype = (sd_type)cases[i].wtype;
        p.name = "tiny";
        sd_gguf_writer *w = (sd_gguf_writer *)&p;
        assert_int_equal(sd_twin_build(small, &p, &w), cases[i].st);
        assert_null(w);
        assert_string_equal(sd_last_error(), cases[i].msg);
        assert_int_equal(sd_twin_check(small, &p), cases[i].st);
    }
    /* a source a llama GGUF cannot express */
    sd_twin_params p = sd_twin_default_params();
    p.name = "tiny";
    static const float bias[64];
    sd_tensor *bk = &small->layers[1].w[SD_W_ATTN_K_B - SD_W_LAYER0];
    bk->data = bias;
    assert_int_equal(sd_twin_check(small, &p), SD_ERR_UNSUPPORTED);
    assert_string_equal(sd_last_error(), "twin: tiny (llama) has a key bias, which the twin writer does not carry over "
                                         "(llama models without biases, q/k norms or RoPE factors only)");
    bk->data = NULL;
    assert_int_equal(sd_twin_check(small, &p), SD_OK);
    assert_int_equal(sd_twin_check(NULL, &p), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_twin_build(small, &p, NULL), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_twin_shape("stories1B", &p), SD_ERR_INVALID_ARG);
    assert_int_equal(sd_twin_write_file(small, &p, "/nonexistent-dir/x.gguf"), SD_ERR_IO);
    sd_model_free(small);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_twin_synthetic),
        cmocka_unit_test(test_twin_layout),
        cmocka_unit_test(test_twin_bad_shapes),
        cmocka_unit_test(test_twin_same_shape),
        cmocka_unit_test(test_twin_rotate_half_gqa),
        cmocka_unit_test(test_twin_draft_15m),
        cmocka_unit_test(test_twin_stories260k_110m),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
