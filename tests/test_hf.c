/* HF checkpoints: TinyStories-656K against its PyTorch reference, tiny Llama/Mistral/Qwen2
 * models written here against a naive double forward, and malformed config/safetensors. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sdtest.h"
#include "sdtest_models.h"
#include "sdtest_ref.h"
#include "kernels/kernels.h"
#include "specdec/spec.h"

#define TS_DIR "models/tinystories-656k"
/* The reference is PyTorch float32 with a different summation order. */
#define TOL_REFERENCE_LOGITS 1e-4

/* ---- TinyStories-656K --------------------------------------------------------------------- */

static sd_model *load_ok(const char *path) {
    sd_model *m = NULL;
    sd_status st = sd_model_load(path, NULL, &m);
    if (st != SD_OK) fail_msg("%s: %s", path, sd_last_error());
    return m;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void test_tinystories_reference(void **state) {
    (void)state;
    cJSON *ref = sdtest_load_reference("reference/tinystories-656k.json");
    char *dir = sdtest_shared_or_skip(TS_DIR "/config.json");
    dir[strlen(dir) - strlen("/config.json")] = '\0';
    sd_model *m = load_ok(dir);
    assert_string_equal(sd_model_format(m), "hf");
    const sd_hparams *hp = sd_model_hparams(m);
    assert_int_equal(hp->rope_style, SD_ROPE_HALF);
    assert_int_equal(hp->n_kv_heads, 4);
    const int V = hp->vocab_size;
    assert_int_equal(V, 2048);

    sdtest_check_reference_logits(m, ref, "tinystories-656k", TOL_REFERENCE_LOGITS);

    /* Greedy continuation from BOS, token for token, by plain decode steps. */
    const cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "greedy"), 0);
    int np, ng;
    int32_t *prompt = sdtest_json_ints(cJSON_GetObjectItem(g, "prompt_tokens"), &np);
    int32_t *greedy = sdtest_json_ints(cJSON_GetObjectItem(g, "greedy_tokens"), &ng);
    /* the tokenizer gives the reference prompt: BOS from empty text */
    int32_t ids[4];
    int nid = 0;
    assert_int_equal(sd_tokenizer_encode(sd_model_tokenizer(m), "", 0, 1, ids, 4, &nid), SD_OK);
    assert_int_equal(nid, np);
    assert_memory_equal(ids, prompt, (size_t)np * sizeof(int32_t));
    sd_context *c = NULL;
    assert_int_equal(sd_context_create(m, NULL, &c), SD_OK);
    float *lg = malloc((size_t)V * sizeof(float));
    assert_int_equal(sd_context_forward(c, 0, prompt, np, lg, 0), SD_OK);
    for (int i = 0; i < ng; i++) {
        int32_t t = argmax(lg, V);
        if (t != greedy[i]) fail_msg("greedy token %d: got %d, reference %d", i, (int)t, (int)greedy[i]);
        assert_int_equal(sd_context_forward(c, 0, &t, 1, lg, 0), SD_OK);
    }
    /* and the speculative loop with the model drafting for itself (BPE pair check) */
    sd_spec_params sp = sd_spec_default_params();
    sp.n_predict = ng;
    sp.stop_at_eos = 0;
    sd_spec *s = NULL;
    assert_int_equal(sd_spec_create(m, m, &sp, &s), SD_OK);
    assert_int_equal(sd_spec_generate(s, prompt, np, NULL, NULL, NULL), SD_OK);
    int nt = 0;
    const int32_t *all = sd_spec_tokens(s, &nt);
    assert_int_equal(nt, np + ng);
    assert_memory_equal(all + np, greedy, (size_t)ng * sizeof(int32_t));
    sd_spec_free(s);

    sd_context_free(c);
    free(lg);
    free(prompt);
    free(greedy);
    sd_model_free(m);
    free(dir);
    cJSON_Delete(ref);
}

/* The directory, its config.json and its model.safetensors name the same model. */
static void test_tinystories_paths(void **state) {
    (void)state;
    char *cfg = sdtest_shared_or_skip(TS_DIR "/config.json");
    char *st = sdtest_shared_or_skip(TS_DIR "/model.safetensors");
    sd_model *a = load_ok(cfg), *b = load_ok(st);
    int32_t tok[6] = {1, 147, 201, 282, 215, 286};
    float *la = sdtest_batched_logits(a, tok, 6), *lb = sdtest_batched_logits(b, tok, 6);
    assert_true(sdtest_max_abs_diff(la, lb, 6 * 2048) == 0);
    assert_int_equal(sd_tokenizer_check_compatible(sd_model_tokenizer(a), sd_model_tokenizer(b)), SD_OK);
    free(la);
    free(lb);
    sd_model_free(a);
    sd_model_free(b);
    free(cfg);
    free(st);
}

/* ---- tiny checkpoints written here ------------------------------------------------------- */

typedef struct {
    const char *arch;
    int dim, layers, heads, kv_heads, head_dim, hidden, vocab, ctx;
    int tied, bias, head_dim_key;
    const char *dtype; /* "F32", "F16", "BF16" */
    int shards;        /* 1: model.safetensors; 2: two shards and an index */
    uint64_t seed;
    /* defects */
    const char *drop_key;      /* config.json key left out */
    const char *extra_cfg;     /* more config.json members, raw JSON */
    const char *bad_tensor;    /* the tensor the next three apply to */
    const char *bad_dtype;     /* its dtype string */
    int bad_rows;              /* its first dimension instead of the right one (data to match) */
    int bad_end;               /* its data_offsets end past the data */
    long long header_delta;    /* added to the stored header length */
    int no_tokenizer;
} hf_spec;

static hf_spec tiny_spec(void) {
    hf_spec s;
    memset(&s, 0, sizeof s);
    s.arch = "LlamaForCausalLM";
    s.dim = 32;
    s.layers = 2;
    s.heads = 4;
    s.kv_heads = 2;
    s.head_dim = 8;
    s.hidden = 48;
    s.vocab = 40;
    s.ctx = 64;
    s.dtype = "F32";
    s.shards = 1;
    s.seed = 1;
    return s;
}

/* The weights as floats, by tensor name, for the naive forward. */
typedef struct {
    char name[96];
    int rows, cols; /* cols 0: a vector of rows */
    float *v;
} tw;

typedef struct {
    tw t[64];
    int n;
} tiny_weights;

static const float *wget(const tiny_weights *w, const char *name) {
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0) return w->t[i].v;
    return NULL;
}

static void free_weights(tiny_weights *w) {
    for (int i = 0; i < w->n; i++) free(w->t[i].v);
    w->n = 0;
}

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* Multiples of 1/64 in [-1, 1): exact in F32, F16 and BF16 alike, so every storage type
 * holds the same model. Norm weights sit near 1. */
static void add_tensor(tiny_weights *w, const char *name, int rows, int cols, uint64_t *rng, int is_norm) {
    tw *t = &w->t[w->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    size_t n = (size_t)rows * (size_t)(cols ? cols : 1);
    t->v = malloc(n * sizeof(float));
    assert_non_null(t->v);
    for (size_t i = 0; i < n; i++) {
        float r = (float)((int)(rng_next(rng) % 128) - 64) / 64.0f;
        t->v[i] = is_norm ? 1.0f + r / 2 : r * 0.5f; /* 1 + k/128: 7 mantissa bits, as BF16 has */
    }
}

static void make_weights(const hf_spec *s, tiny_weights *w) {
    uint64_t rng = s->seed;
    const int q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim;
    char name[96];
    w->n = 0;
    add_tensor(w, "model.embed_tokens.weight", s->vocab, s->dim, &rng, 0);
    if (!s->tied) add_tensor(w, "lm_head.weight", s->vocab, s->dim, &rng, 0);
    add_tensor(w, "model.norm.weight", s->dim, 0, &rng, 1);
    for (int l = 0; l < s->layers; l++) {
#define T(suffix, r, c, norm)                                              \
    snprintf(name, sizeof name, "model.layers.%d." suffix, l);             \
    add_tensor(w, name, r, c, &rng, norm);
        T("self_attn.q_proj.weight", q, s->dim, 0)
        T("self_attn.k_proj.weight", kv, s->dim, 0)
        T("self_attn.v_proj.weight", kv, s->dim, 0)
        T("self_attn.o_proj.weight", s->dim, q, 0)
        T("mlp.gate_proj.weight", s->hidden, s->dim, 0)
        T("mlp.up_proj.weight", s->hidden, s->dim, 0)
        T("mlp.down_proj.weight", s->dim, s->hidden, 0)
        T("input_layernorm.weight", s->dim, 0, 1)
        T("post_attention_layernorm.weight", s->dim, 0, 1)
        if (s->bias) {
            T("self_attn.q_proj.bias", q, 0, 0)
            T("self_attn.k_proj.bias", kv, 0, 0)
            T("self_attn.v_proj.bias", kv, 0, 0)
        }
#undef T
    }
}

static void put_elem(FILE *f, const char *dtype, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if (strcmp(dtype, "BF16") == 0) {
        uint16_t h = (uint16_t)(u >> 16); /* exact: the values have few mantissa bits */
        fwrite(&h, 2, 1, f);
    } else if (strcmp(dtype, "F16") == 0) {
        /* |v| < 2, a multiple of 2^-8: a normal half with the same mantissa bits */
        uint16_t h = 0;
        if (v != 0) {
            int e = (int)((u >> 23) & 0xff) - 127;
            h = (uint16_t)((u >> 16 & 0x8000) | (uint32_t)(e + 15) << 10 | (u >> 13 & 0x3ff));
        }
        fwrite(&h, 2, 1, f);
    } else {
        fwrite(&v, 4, 1, f);
    }
}

/* Writes tensors [from, to) of w as one safetensors file, applying the spec's defects. */
static void write_safetensors(const char *path, const hf_spec *s, const tiny_weights *w, int from, int to) {
    const size_t esz = strcmp(s->dtype, "F32") == 0 ? 4 : 2;
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(h, "__metadata__"), "format", "pt");
    size_t off = 0;
    for (int i = from; i < to; i++) {
        const tw *t = &w->t[i];
        int bad = s->bad_tensor && strcmp(s->bad_tensor, t->name) == 0;
        int rows = bad && s->bad_rows ? s->bad_rows : t->rows;
        size_t n = (size_t)rows * (size_t)(t->cols ? t->cols : 1);
        cJSON *e = cJSON_AddObjectToObject(h, t->name);
        cJSON_AddStringToObject(e, "dtype", bad && s->bad_dtype ? s->bad_dtype : s->dtype);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        cJSON_AddItemToArray(shape, cJSON_CreateNumber(rows));
        if (t->cols) cJSON_AddItemToArray(shape, cJSON_CreateNumber(t->cols));
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + n * esz + (bad && s->bad_end ? 1000000 : 0))));
        off += n * esz;
    }
    char *txt = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t hl = strlen(txt), padded = (hl + 7) & ~(size_t)7;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t stored = (uint64_t)((long long)padded + s->header_delta);
    fwrite(&stored, 8, 1, f);
    fwrite(txt, 1, hl, f);
    for (size_t i = hl; i < padded; i++) fputc(' ', f);
    for (int i = from; i < to; i++) {
        const tw *t = &w->t[i];
        int bad = s->bad_tensor && strcmp(s->bad_tensor, t->name) == 0;
        int rows = bad && s->bad_rows ? s->bad_rows : t->rows;
        size_t n = (size_t)rows * (size_t)(t->cols ? t->cols : 1), have = (size_t)t->rows * (size_t)(t->cols ? t->cols : 1);
        for (size_t k = 0; k < n; k++) put_elem(f, s->dtype, k < have ? t->v[k] : 0.0f);
    }
    fclose(f);
    free(txt);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A fresh directory holding config.json, the weights and a small tokenizer.json. */
static const char *write_hf(const char *name, const hf_spec *s, tiny_weights *w) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s", sdtest_tmp_path(name));
    mkdir(dir, 0700);
    make_weights(s, w);
    char path[700], cfg[2048];
    /* config.json, with one key dropped on request */
    char keys[8][128];
    int nk = 0;
    snprintf(keys[nk++], 128, "\"hidden_size\": %d", s->dim);
    snprintf(keys[nk++], 128, "\"num_hidden_layers\": %d", s->layers);
    snprintf(keys[nk++], 128, "\"num_attention_heads\": %d", s->heads);
    snprintf(keys[nk++], 128, "\"num_key_value_heads\": %d", s->kv_heads);
    snprintf(keys[nk++], 128, "\"intermediate_size\": %d", s->hidden);
    snprintf(keys[nk++], 128, "\"vocab_size\": %d", s->vocab);
    snprintf(keys[nk++], 128, "\"max_position_embeddings\": %d", s->ctx);
    size_t o = (size_t)snprintf(cfg, sizeof cfg, "{\"architectures\": [\"%s\"], \"rms_norm_eps\": 1e-05, "
                                "\"rope_theta\": 10000.0, \"tie_word_embeddings\": %s, \"bos_token_id\": 1, "
                                "\"eos_token_id\": 2, \"hidden_act\": \"silu\"",
                                s->arch, s->tied ? "true" : "false");
    for (int i = 0; i < nk; i++) {
        if (s->drop_key && strstr(keys[i], s->drop_key) == keys[i] + 1) continue;
        o += (size_t)snprintf(cfg + o, sizeof cfg - o, ", %s", keys[i]);
    }
    if (s->head_dim_key) o += (size_t)snprintf(cfg + o, sizeof cfg - o, ", \"head_dim\": %d", s->head_dim);
    if (s->extra_cfg) o += (size_t)snprintf(cfg + o, sizeof cfg - o, ", %s", s->extra_cfg);
    snprintf(cfg + o, sizeof cfg - o, "}\n");
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);

    /* weights: one file, or two shards split halfway with an index */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    remove(path);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    remove(path);
    if (s->shards == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        write_safetensors(path, s, w, 0, w->n);
    } else {
        int half = w->n / 2;
        snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
        write_safetensors(path, s, w, 0, half);
        snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
        write_safetensors(path, s, w, half, w->n);
        cJSON *idx = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(idx, "weight_map");
        for (int i = 0; i < w->n; i++)
            cJSON_AddStringToObject(wm, w->t[i].name, i < half ? "model-00001-of-00002.safetensors"
                                                               : "model-00002-of-00002.safetensors");
        char *txt = cJSON_Print(idx);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        write_text(path, txt);
        free(txt);
        cJSON_Delete(idx);
    }
    /* tokenizer.json: <unk> <s> </s> and single letters, SentencePiece-style */
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    remove(path);
    if (!s->no_tokenizer) {
        char tok[2048];
        o = (size_t)snprintf(tok, sizeof tok, "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"merges\": [], "
                                              "\"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"\xe2\x96\x81\": 3");
        for (int i = 0; i < 26 && 4 + i < s->vocab; i++)
            o += (size_t)snprintf(tok + o, sizeof tok - o, ", \"%c\": %d", 'a' + i, 4 + i);
        snprintf(tok + o, sizeof tok - o,
                 "}}, \"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"special\": true}, "
                 "{\"id\": 2, \"content\": \"</s>\", \"special\": true}]}");
        write_text(path, tok);
    }
    return dir;
}

/* ---- a naive forward in double, straight from the HF modelling code ---------------------- */

static void rmsnorm_d(double *out, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

static void matvec_d(double *y, const float *W, const double *x, int rows, int cols, const float *bias) {
    for (int r = 0; r < rows; r++) {
        double a = bias ? bias[r] : 0;
        for (int c = 0; c < cols; c++) a += (double)W[(size_t)r * cols + c] * x[c];
        y[r] = a;
    }
}

/* rotate_half: (x1, x2) halves of each head, x*cos + rotate_half(x)*sin. */
static void rope_half_d(double *v, int n_heads, int hd, int pos, double theta) {
    for (int h = 0; h < n_heads; h++) {
        double *x = v + (size_t)h * hd;
        for (int i = 0; i < hd / 2; i++) {
            double f = pow(theta, -2.0 * i / hd), c = cos(pos * f), s = sin(pos * f);
            double a = x[i], b = x[i + hd / 2];
            x[i] = a * c - b * s;
            x[i + hd / 2] = b * c + a * s;
        }
    }
}

static float *naive_logits(const hf_spec *s, const tiny_weights *w, const int32_t *tok, int n) {
    const int D = s->dim, H = s->hidden, hd = s->head_dim, q = s->heads * hd, kv = s->kv_heads * hd, V = s->vocab;
    double *x = calloc((size_t)D, sizeof *x), *xb = calloc((size_t)(D > q ? D : q), sizeof *xb);
    double *qv = calloc((size_t)q, sizeof *qv), *att = calloc((size_t)q, sizeof *att);
    double *K = calloc((size_t)s->layers * n * kv, sizeof *K), *Vc = calloc((size_t)s->layers * n * kv, sizeof *Vc);
    double *g = calloc((size_t)H, sizeof *g), *u = calloc((size_t)H, sizeof *u), *tmp = calloc((size_t)D, sizeof *tmp);
    double *sc = calloc((size_t)n, sizeof *sc), *lg = calloc((size_t)V, sizeof *lg);
    float *out = malloc((size_t)n * V * sizeof(float));
    const float *emb = wget(w, "model.embed_tokens.weight");
    const float *head = s->tied ? emb : wget(w, "lm_head.weight");
    char name[96];
#define G(suffix) (snprintf(name, sizeof name, "model.layers.%d." suffix, l), wget(w, name))
    for (int p = 0; p < n; p++) {
        for (int i = 0; i < D; i++) x[i] = emb[(size_t)tok[p] * D + i];
        for (int l = 0; l < s->layers; l++) {
            double *Kl = K + (size_t)l * n * kv, *Vl = Vc + (size_t)l * n * kv;
            rmsnorm_d(xb, x, G("input_layernorm.weight"), D, 1e-5);
            matvec_d(qv, G("self_attn.q_proj.weight"), xb, q, D, s->bias ? G("self_attn.q_proj.bias") : NULL);
            matvec_d(Kl + (size_t)p * kv, G("self_attn.k_proj.weight"), xb, kv, D,
                     s->bias ? G("self_attn.k_proj.bias") : NULL);
            matvec_d(Vl + (size_t)p * kv, G("self_attn.v_proj.weight"), xb, kv, D,
                     s->bias ? G("self_attn.v_proj.bias") : NULL);
            rope_half_d(qv, s->heads, hd, p, 10000.0);
            rope_half_d(Kl + (size_t)p * kv, s->kv_heads, hd, p, 10000.0);
            for (int h = 0; h < s->heads; h++) {
                int kh = h / (s->heads / s->kv_heads);
                double mx = -INFINITY, sum = 0;
                for (int t = 0; t <= p; t++) {
                    double a = 0;
                    for (int i = 0; i < hd; i++) a += qv[h * hd + i] * Kl[(size_t)t * kv + kh * hd + i];
                    sc[t] = a / sqrt((double)hd);
                    if (sc[t] > mx) mx = sc[t];
                }
                for (int t = 0; t <= p; t++) sum += sc[t] = exp(sc[t] - mx);
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int t = 0; t <= p; t++) a += sc[t] / sum * Vl[(size_t)t * kv + kh * hd + i];
                    att[h * hd + i] = a;
                }
            }
            matvec_d(tmp, G("self_attn.o_proj.weight"), att, D, q, NULL);
            for (int i = 0; i < D; i++) x[i] += tmp[i];
            rmsnorm_d(xb, x, G("post_attention_layernorm.weight"), D, 1e-5);
            matvec_d(g, G("mlp.gate_proj.weight"), xb, H, D, NULL);
            matvec_d(u, G("mlp.up_proj.weight"), xb, H, D, NULL);
            for (int i = 0; i < H; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            matvec_d(tmp, G("mlp.down_proj.weight"), g, D, H, NULL);
            for (int i = 0; i < D; i++) x[i] += tmp[i];
        }
        rmsnorm_d(xb, x, wget(w, "model.norm.weight"), D, 1e-5);
        matvec_d(lg, head, xb, V, D, NULL);
        for (int i = 0; i < V; i++) out[(size_t)p * V + i] = (float)lg[i];
    }
#undef G
    free(x), free(xb), free(qv), free(att), free(K), free(Vc), free(g), free(u), free(tmp), free(sc), free(lg);
    return out;
}

/* Loads the spec's checkpoint and checks it against the naive forward, batched and stepwise,
 * and batched == stepwise bit for bit (the small-batch kernels sum in decode order). */
static void check_tiny(const char *name, const hf_spec *s) {
    tiny_weights w;
    const char *dir = write_hf(name, s, &w);
    sd_model *m = load_ok(dir);
    const int n = 20, V = s->vocab;
    int32_t tok[20];
    for (int i = 0; i < n; i++) tok[i] = (int32_t)((i * 7 + 3) % V);
    float *want = naive_logits(s, &w, tok, n);
    float *got = sdtest_batched_logits(m, tok, n);
    float *step = sdtest_stepwise_logits(m, tok, n);
    double d1 = sdtest_max_abs_diff(got, want, (size_t)n * V), d2 = sdtest_max_abs_diff(step, want, (size_t)n * V);
    double d3 = sdtest_max_abs_diff(got, step, (size_t)n * V);
    printf("  %s (%s, %s): |batched - naive| %.3g, |stepwise - naive| %.3g, |batched - stepwise| %.3g\n", name,
           s->arch, s->dtype, d1, d2, d3);
    assert_true(d1 <= 1e-4 && d2 <= 1e-4);
    assert_true(n <= SD_SMALL_BATCH && d3 == 0);
    free(want);
    free(got);
    free(step);
    sd_model_free(m);
    free_weights(&w);
}

static void test_tiny_llama(void **state) {
    (void)state;
    hf_spec s = tiny_spec();
    check_tiny("llama", &s);
    s.tied = 1; /* tied, with only model.embed_tokens.weight stored */
    s.kv_heads = 4;
    s.seed = 2;
    check_tiny("llama-tied", &s);
    s = tiny_spec(); /* head_dim set apart from hidden_size / heads */
    s.arch = "MistralForCausalLM";
    s.head_dim = 12;
    s.head_dim_key = 1;
    s.seed = 3;
    s.extra_cfg = "\"sliding_window\": 4096";
    check_tiny("mistral-head-dim", &s);
}

static void test_tiny_qwen2_bias(void **state) {
    (void)state;
    hf_spec s = tiny_spec();
    s.arch = "Qwen2ForCausalLM";
    s.bias = 1;
    s.tied = 1;
    s.seed = 4;
    check_tiny("qwen2", &s);
}

/* F16 and BF16 storage (used in place, or converted where BF16 has no kernel) and sharded
 * checkpoints hold the same model as F32 in one file. */
static void test_dtypes_and_shards(void **state) {
    (void)state;
    hf_spec s = tiny_spec();
    s.arch = "Qwen2ForCausalLM";
    s.bias = 1;
    s.seed = 5;
    s.dtype = "F16";
    check_tiny("f16", &s);
    s.dtype = "BF16";
    check_tiny("bf16", &s);
    s.dtype = "F32";
    s.shards = 2;
    check_tiny("sharded", &s);
}

/* ---- malformed checkpoints --------------------------------------------------------------- */

static void expect_load_fail(const char *name, const hf_spec *s, sd_status want, const char *needle) {
    tiny_weights w;
    const char *dir = write_hf(name, s, &w);
    free_weights(&w);
    sd_model *m = (sd_model *)0x1;
    sd_status st = sd_model_load(dir, NULL, &m);
    if (st != want || !strstr(sd_last_error(), needle)) {
        print_error("%s: status %d (want %d), message \"%s\" (want \"%s\" in it)\n", name, (int)st, (int)want,
                    sd_last_error(), needle);
        fail();
    }
    assert_null(m);
}

/* Replaces the first `from` in dir/config.json by `to`. */
static void patch_config(const char *dir, const char *from, const char *to) {
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len = 0;
    char *cfg = sdtest_read_file(path, &len);
    assert_non_null(cfg);
    char *out = malloc(len + strlen(to) + 1);
    assert_non_null(out);
    cfg = realloc(cfg, len + 1);
    cfg[len] = '\0';
    char *at = strstr(cfg, from);
    assert_non_null(at);
    size_t pre = (size_t)(at - cfg);
    memcpy(out, cfg, pre);
    strcpy(out + pre, to);
    strcat(out, at + strlen(from));
    write_text(path, out);
    free(out);
    free(cfg);
}

static void test_bad_checkpoints(void **state) {
    (void)state;
    hf_spec s = tiny_spec();
    s.drop_key = "hidden_size";
    expect_load_fail("no-key", &s, SD_ERR_FORMAT, "config.json: .: missing required key \"hidden_size\"");
    s = tiny_spec();
    s.arch = "GPT2LMHeadModel";
    expect_load_fail("arch", &s, SD_ERR_UNSUPPORTED, "architecture 'GPT2LMHeadModel'");
    s = tiny_spec();
    s.header_delta = 1 << 20;
    expect_load_fail("header-past-eof", &s, SD_ERR_FORMAT, "header length");
    s = tiny_spec();
    s.header_delta = -16; /* cuts the JSON short */
    expect_load_fail("header-cut", &s, SD_ERR_FORMAT, "not a JSON object");
    s = tiny_spec();
    s.bad_tensor = "model.layers.1.mlp.up_proj.weight";
    s.bad_end = 1;
    expect_load_fail("offsets", &s, SD_ERR_FORMAT, "data_offsets");
    s = tiny_spec();
    s.bad_tensor = "model.norm.weight";
    s.bad_dtype = "F12";
    expect_load_fail("dtype", &s, SD_ERR_UNSUPPORTED, "unknown dtype 'F12'");
    s = tiny_spec();
    s.bad_tensor = "model.layers.0.self_attn.k_proj.weight";
    s.bad_dtype = "I32"; /* known to safetensors, but not something to compute with */
    expect_load_fail("dtype-i32", &s, SD_ERR_UNSUPPORTED, "dtype I32");
    s = tiny_spec();
    s.bad_tensor = "model.layers.0.self_attn.q_proj.weight";
    s.bad_rows = 31;
    expect_load_fail("shape", &s, SD_ERR_FORMAT, "has shape [31, 32], expected [32, 32] from config.json");
    s = tiny_spec();
    s.extra_cfg = "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}";
    expect_load_fail("rope-scaling", &s, SD_ERR_UNSUPPORTED, "rope_scaling type 'yarn' is not supported (default, linear, llama3)");
    s.extra_cfg = "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}";
    expect_load_fail("rope-llama3-partial", &s, SD_ERR_FORMAT, "config.json: .rope_scaling: missing required key \"low_freq_factor\"");
    s.extra_cfg = "\"rope_scaling\": {\"type\": \"linear\", \"factor\": -2}";
    expect_load_fail("rope-linear-negative", &s, SD_ERR_FORMAT, "config.json: .rope_scaling.factor: expected a number > 0, got -2");
    s.extra_cfg = "\"rope_scaling\": [1, 2]";
    expect_load_fail("rope-not-object", &s, SD_ERR_FORMAT, "config.json: .rope_scaling: expected an object, got an array");
    /* every value typed: a string where a number or a boolean belongs is named, never read as 0 */
    s.extra_cfg = "\"head_dim\": \"64\"";
    expect_load_fail("head-dim-string", &s, SD_ERR_FORMAT, "config.json: .head_dim: expected an integer in 2..65536, got \"64\"");
    s.extra_cfg = "\"attention_bias\": \"no\"";
    expect_load_fail("bool-string", &s, SD_ERR_FORMAT, "config.json: .attention_bias: expected true or false, got \"no\"");
    /* a key given twice is ambiguous (readers disagree on which one wins) */
    s.extra_cfg = "\"rms_norm_eps\": 0.5";
    expect_load_fail("duplicate", &s, SD_ERR_FORMAT, "config.json: .rms_norm_eps: duplicate key");
    /* a JSON syntax error is located */
    s.extra_cfg = "\"rope_theta\": 10000.0,";
    expect_load_fail("trailing-comma", &s, SD_ERR_FORMAT, "invalid JSON: expected a key string, got '}'");
    s = tiny_spec();
    s.kv_heads = 3;
    expect_load_fail("kv-heads", &s, SD_ERR_FORMAT, "num_key_value_heads=3 does not divide");
    s = tiny_spec();
    s.no_tokenizer = 1;
    expect_load_fail("no-tokenizer", &s, SD_ERR_IO, "tokenizer.json");

    /* config.json promising more than the weights hold: a third layer, an untied classifier */
    s = tiny_spec();
    tiny_weights w;
    const char *dir = write_hf("missing-tensor", &s, &w);
    free_weights(&w);
    patch_config(dir, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
    sd_model *m = NULL;
    assert_int_equal(sd_model_load(dir, NULL, &m), SD_ERR_FORMAT);
    assert_non_null(strstr(sd_last_error(), "missing tensor model.layers.2.input_layernorm.weight (attention norm, required for 'llama')"));
    s.tied = 1;
    dir = write_hf("missing-head", &s, &w);
    free_weights(&w);
    assert_int_equal(sd_model_load(dir, NULL, &m), SD_OK);
    sd_model_free(m);
    patch_config(dir, "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false");
    assert_int_equal(sd_model_load(dir, NULL, &m), SD_ERR_FORMAT);
    assert_non_null(strstr(sd_last_error(), "missing tensor lm_head.weight"));

    char path[700];
    FILE *f;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    remove(path);
    assert_int_equal(sd_model_load(dir, NULL, &m), SD_ERR_IO);
    assert_non_null(strstr(sd_last_error(), "no model.safetensors"));
    f = fopen(path, "wb");
    fputs("abc", f);
    fclose(f);
    assert_int_equal(sd_model_load(dir, NULL, &m), SD_ERR_FORMAT);
    assert_non_null(strstr(sd_last_error(), "too small"));
    assert_int_equal(sd_model_load("/nonexistent/dir/config.json", NULL, &m), SD_ERR_IO);
    assert_null(m);

    /* an index naming a shard that is not there */
    s = tiny_spec();
    s.shards = 2;
    dir = write_hf("missing-shard", &s, &w);
    free_weights(&w);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    remove(path);
    assert_int_equal(sd_model_load(dir, NULL, &m), SD_ERR_IO);
    assert_non_null(strstr(sd_last_error(), "model-00002-of-00002.safetensors"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tinystories_reference),
        cmocka_unit_test(test_tinystories_paths),
        cmocka_unit_test(test_tiny_llama),
        cmocka_unit_test(test_tiny_qwen2_bias),
        cmocka_unit_test(test_dtypes_and_shards),
        cmocka_unit_test(test_bad_checkpoints),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
