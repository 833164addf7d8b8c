/* Cost twins (specdec/twin.h): a small model's weights placed inside a larger llama shape so
 * that the large model computes the small one's function; everything else random inputs and
 * zero outputs, which cost their bytes and add nothing. */
#include "specdec/twin.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model_internal.h"
#include "model/writer_internal.h"
#include "specdec/quant.h"
#include "specdec/synth.h"

/* Extras sharing a block with small weights are zero: 256 covers every block a writable type
 * uses (32 for Q4_0/Q5_0/Q8_0, the 256-element super-blocks of the k-quants). */
#define TWIN_BLOCK 256

/* Row sources of an input matrix: a small row index, or one of these. */
#define ROW_RANDOM (-1)
#define ROW_ZERO (-2)

sd_twin_params sd_twin_default_params(void) {
    sd_twin_params p = {.dim = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12, .hidden_dim = 2048,
                        .wtype = SD_TYPE_F32, .seed = 1, .name = NULL};
    return p;
}

sd_status sd_twin_shape(const char *name, sd_twin_params *p) {
    sd_synth_params s = sd_synth_default_params();
    sd_status st = sd_synth_shape(name, &s);
    if (st) return st;
    p->dim = s.dim, p->n_layers = s.n_layers, p->n_heads = s.n_heads, p->n_kv_heads = s.n_kv_heads;
    p->hidden_dim = s.hidden_dim;
    return SD_OK;
}

typedef struct {
    const sd_model *s;
    sd_gguf_writer *w;
    const sd_hparams *h; /* the small model's */
    const char *sname;   /* how messages and metadata name it */
    sd_twin_params p;
    int hs, HS, r;       /* head sizes, HS = r * hs */
    float c, qscale;     /* sqrt(D/d), sqrt(HS/hs) */
    int *kvsrc;          /* [n_kv_heads]: small kv head copied into each twin kv head, or -1 */
    int64_t *src;        /* [max rows] row sources of the matrix being built */
    int64_t *colmap;     /* [max small cols] twin column of each small column */
    float *buf;          /* [max rows * cols] the matrix being built */
    float *row;          /* [max small cols] one small row */
} twin;

/* The twin kv head each small kv head must become: q head h (< small heads) uses twin kv head
 * h / G and small kv head h / g; -1 where no small head lands. 0, or -1 after sd_fail. */
static int map_kv_heads(const sd_hparams *h, const sd_twin_params *p, const char *sname, int *kvsrc) {
    const int g = h->n_heads / h->n_kv_heads, G = p->n_heads / p->n_kv_heads;
    for (int j = 0; j < p->n_kv_heads; j++) kvsrc[j] = -1;
    for (int q = 0; q < h->n_heads; q++) {
        const int j = q / G, want = q / g;
        if (kvsrc[j] >= 0 && kvsrc[j] != want) {
            sd_fail(SD_ERR_INVALID_ARG,
                    "twin: kv_heads %d does not fit %s's grouped-query attention: twin kv head %d would serve "
                    "q heads %d and %d, which use %s's kv heads %d and %d (each group of %d q heads must lie "
                    "within one of %s's groups of %d; n_kv_heads = n_heads always works)",
                    p->n_kv_heads, sname, j, q - 1, q, sname, kvsrc[j], want, G, sname, g);
            return -1;
        }
        kvsrc[j] = want;
    }
    return 0;
}

/* The first weight of s beyond the plain llama set (biases, q/k norms, RoPE factors), which a
 * twin's llama GGUF does not carry; NULL when there is none. */
static const char *extra_weight(const sd_model *s) {
    static const sd_weight extra[] = {SD_W_ROPE_FREQS, SD_W_ATTN_Q_B,     SD_W_ATTN_K_B,
                                      SD_W_ATTN_V_B,   SD_W_ATTN_Q_NORM, SD_W_ATTN_K_NORM};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        for (int l = 0; l < (sd_weight_is_layer(extra[i]) ? s->hp.n_layers : 1); l++)
            if (sd_model_w(s, l, extra[i])->data) return sd_weight_table[extra[i]].what;
    return NULL;
}

static const char *small_name(const sd_model *small, const sd_twin_params *p) {
    return p->name && p->name[0] ? p->name : small->path;
}

sd_status sd_twin_check(const sd_model *small, const sd_twin_params *p) {
    if (!small || !p) return sd_fail(SD_ERR_INVALID_ARG, "twin: NULL argument");
    const sd_hparams *h = &small->hp;
    const char *sn = small_name(small, p);
    const char *extra = extra_weight(small);
    if (extra)
        return sd_fail(SD_ERR_UNSUPPORTED, "twin: %s (%s) has a %s, which the twin writer does not carry over (llama "
                       "models without biases, q/k norms or RoPE factors only)", sn, small->arch->name, extra);
    if (small->hp.rope_scale != 1)
        return sd_fail(SD_ERR_UNSUPPORTED, "twin: %s uses RoPE position scaling (factor %g), which the twin writer does "
                       "not carry over", sn, (double)small->hp.rope_scale);
    const struct {
        const char *field;
        int big, small;
    } sizes[] = {{"dim", p->dim, h->dim},
                 {"layers", p->n_layers, h->n_layers},
                 {"heads", p->n_heads, h->n_heads},
                 {"hidden", p->hidden_dim, h->hidden_dim}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].big < sizes[i].small)
            return sd_fail(SD_ERR_INVALID_ARG,
                           "twin: %s %d is smaller than %s's %d (a twin is at least the small model in every size)",
                           sizes[i].field, sizes[i].big, sn, sizes[i].small);
    if (p->n_kv_heads < 1 || p->n_heads % p->n_kv_heads != 0)
        return sd_fail(SD_ERR_INVALID_ARG, "twin: heads %d is not divisible by kv_heads %d", p->n_heads, p->n_kv_heads);
    if (p->dim % p->n_heads != 0)
        return sd_fail(SD_ERR_INVALID_ARG, "twin: dim %d is not divisible by heads %d", p->dim, p->n_heads);
    const int HS = p->dim / p->n_heads;
    if (HS % h->head_dim != 0)
        return sd_fail(SD_ERR_INVALID_ARG,
                       "twin: head size %d (dim %d / %d heads) is not a multiple of %s's head size %d, so its RoPE "
                       "pairs cannot keep their frequencies",
                       HS, p->dim, p->n_heads, sn, h->head_dim);
    /* The remaining limits (sizes that fit in memory, a writable type) are the synthetic
     * models' own. */
    sd_synth_params sp = sd_synth_default_params();
    sp.dim = p->dim, sp.n_layers = p->n_layers, sp.n_heads = p->n_heads, sp.n_kv_heads = p->n_kv_heads;
    sp.hidden_dim = p->hidden_dim, sp.vocab_size = h->vocab_size, sp.ctx_len = h->ctx_len;
    sp.rope_theta = h->rope_theta, sp.norm_eps = h->norm_eps, sp.wtype = p->wtype;
    if (sd_synth_validate(&sp) != SD_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", sd_last_error());
        return sd_fail(SD_ERR_INVALID_ARG, "twin: %s", strncmp(why, "synth: ", 7) ? why : why + 7);
    }
    int *kvsrc = malloc((size_t)p->n_kv_heads * sizeof *kvsrc);
    if (!kvsrc) return sd_fail(SD_ERR_NOMEM, "twin: out of memory");
    const int bad = map_kv_heads(h, p, sn, kvsrc);
    free(kvsrc);
    return bad ? SD_ERR_INVALID_ARG : SD_OK;
}

/* ------------------------------------------------------------------ small weights */

/* Tensor i of the small model in sd_model_tensor's order. */
static sd_status small_view(const twin *t, int i, sd_tensor *v) {
    char name[96];
    return sd_model_tensor(t->s, i, name, sizeof name, v);
}
/* A layer's tensors in that order: index 1 + 9 * layer + k. */
enum { K_ATTN_NORM, K_Q, K_K, K_V, K_O, K_FFN_NORM, K_GATE, K_DOWN, K_UP };

static sd_status small_row(const twin *t, const sd_tensor *v, int64_t r, float *out) {
    if (sd_dequant_row(v, r, out) != 0) {
        const sd_type_traits *ti = sd_type_info(v->type);
        return sd_fail(SD_ERR_UNSUPPORTED, "twin: cannot read %s's %s weights", t->sname, ti ? ti->name : "?");
    }
    return SD_OK;
}

/* Standard deviation of a small matrix (the magnitude of the random weights extending it). */
static sd_status small_std(const twin *t, const sd_tensor *v, float *std) {
    double ss = 0;
    for (int64_t r = 0; r < v->rows; r++) {
        sd_status st = small_row(t, v, r, t->row);
        if (st) return st;
        for (int64_t i = 0; i < v->cols; i++) ss += (double)t->row[i] * t->row[i];
    }
    *std = (float)sqrt(ss / ((double)v->rows * (double)v->cols));
    if (!(*std > 0) || !isfinite(*std)) *std = 1.0f / sqrtf((float)v->cols);
    return SD_OK;
}

/* ------------------------------------------------------------------ twin matrices */

/* Twin head dim of small head dim j: pair j/2 goes to pair (j/2) * r, which has the same RoPE
 * frequency theta^(-2p/hs) = theta^(-2pr/HS). */
static int64_t twin_head_dim(const twin *t, int j) { return (int64_t)(j / 2) * 2 * t->r + (j & 1); }

/* Small Q/K row holding interleaved row r (rotate-half models keep theirs in HF order). */
static int64_t small_qk_row(const twin *t, int64_t r, int heads) {
    return sd_writer_rope_half_row(r, t->h->rope_style == SD_ROPE_HALF ? heads : 0, t->hs, t->h->rope_dim);
}

/* An input matrix ([rows][D]: it reads the residual stream), row i from t->src[i]: a row of
 * small's v times scale in the first d columns (then zero to the end of their TWIN_BLOCK, and
 * random after it when random_extras, else zero), ROW_RANDOM, or ROW_ZERO. Random values have
 * magnitude std and come from the stream of the tensor's name. */
static sd_status add_input(twin *t, const char *name, const sd_tensor *v, int64_t rows, float scale, float std,
                           int random_extras) {
    const int64_t D = t->p.dim, d = t->h->dim;
    int64_t shared_end = (d + TWIN_BLOCK - 1) / TWIN_BLOCK * TWIN_BLOCK;
    if (shared_end > D || !random_extras) shared_end = D;
    sd_writer_fill_uniform(t->buf, (size_t)rows * D, 0.0f, std, t->p.seed, name);
    for (int64_t i = 0; i < rows; i++) {
        float *o = t->buf + (size_t)i * D;
        if (t->src[i] == ROW_RANDOM) continue;
        if (t->src[i] == ROW_ZERO) {
            memset(o, 0, (size_t)D * sizeof(float));
            continue;
        }
        sd_status st = small_row(t, v, t->src[i], t->row);
        if (st) return st;
        for (int64_t j = 0; j < d; j++) o[j] = t->row[j] * scale;
        memset(o + d, 0, (size_t)(shared_end - d) * sizeof(float));
    }
    return sd_writer_add_floats(t->w, name, t->p.wtype, 2, D, rows, t->buf);
}

/* An output matrix ([D][cols]: it writes the residual stream): row i < d is small's row i of
 * v times c at the columns t->colmap gives; everything else (all of it when v is NULL) zero. */
static sd_status add_output(twin *t, const char *name, const sd_tensor *v, int64_t cols) {
    memset(t->buf, 0, (size_t)t->p.dim * (size_t)cols * sizeof(float));
    for (int64_t i = 0; v && i < v->rows; i++) {
        sd_status st = small_row(t, v, i, t->row);
        if (st) return st;
        float *o = t->buf + (size_t)i * cols;
        for (int64_t j = 0; j < v->cols; j++) o[t->colmap[j]] = t->row[j] * t->c;
    }
    return sd_writer_add_floats(t->w, name, t->p.wtype, 2, cols, t->p.dim, t->buf);
}

/* Norm gains: small's over c on its d dims (g may be NULL: an extra layer), 1 on the others,
 * which only ever multiply zeros. */
static sd_status add_norm(twin *t, const char *name, const float *g) {
    for (int i = 0; i < t->p.dim; i++) t->buf[i] = i < t->h->dim && g ? g[i] / t->c : 1.0f;
    return sd_writer_add_floats(t->w, name, SD_TYPE_F32, 1, t->p.dim, 1, t->buf);
}

static sd_status add_layer(twin *t, int l) {
    const sd_hparams *h = t->h;
    const int real = l < h->n_layers, sl = real ? l : h->n_layers - 1; /* extra layers: magnitudes of the last */
    const int NH = t->p.n_heads, NKV = t->p.n_kv_heads, HS = t->HS, hs = t->hs;
    sd_tensor v[9];
    float std[9] = {0};
    sd_status st;
    for (int k = 0; k < 9; k++) {
        if ((st = small_view(t, 1 + 9 * sl + k, &v[k]))) return st;
        if (k != K_ATTN_NORM && k != K_FFN_NORM && (st = small_std(t, &v[k], &std[k]))) return st;
    }
    char name[96];
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, l), name)
    int64_t *src = t->src;
    if ((st = add_norm(t, NAME("attn_norm.weight"), real ? v[K_ATTN_NORM].data : NULL))) return st;
    /* Q: small head h in twin head h, scaled; the extra dims and heads random. */
    for (int64_t i = 0; i < (int64_t)NH * HS; i++) src[i] = ROW_RANDOM;
    for (int q = 0; real && q < h->n_heads; q++)
        for (int j = 0; j < hs; j++) src[(int64_t)q * HS + twin_head_dim(t, j)] = small_qk_row(t, (int64_t)q * hs + j, h->n_heads);
    if ((st = add_input(t, NAME("attn_q.weight"), &v[K_Q], (int64_t)NH * HS, t->qscale, std[K_Q], 1))) return st;
    /* K: extra dims of a copied head zero (q.k unchanged); V: random there. */
    for (int kv = 0; kv < 2; kv++) {
        for (int j = 0; j < NKV; j++)
            for (int i = 0; i < HS; i++)
                src[(int64_t)j * HS + i] = real && t->kvsrc[j] >= 0 && kv == 0 ? ROW_ZERO : ROW_RANDOM;
        for (int j = 0; real && j < NKV; j++)
            for (int i = 0; t->kvsrc[j] >= 0 && i < hs; i++) {
                const int64_t r = (int64_t)t->kvsrc[j] * hs + i;
                src[(int64_t)j * HS + twin_head_dim(t, i)] = kv == 0 ? small_qk_row(t, r, h->n_kv_heads) : r;
            }
        const int k = kv == 0 ? K_K : K_V;
        if ((st = add_input(t, kv == 0 ? NAME("attn_k.weight") : NAME("attn_v.weight"), &v[k], (int64_t)NKV * HS,
                            1.0f, std[k], 1)))
            return st;
    }
    for (int q = 0; q < h->n_heads; q++)
        for (int j = 0; j < hs; j++) t->colmap[q * hs + j] = (int64_t)q * HS + twin_head_dim(t, j);
    if ((st = add_output(t, NAME("attn_output.weight"), real ? &v[K_O] : NULL, (int64_t)NH * HS))) return st;
    if ((st = add_norm(t, NAME("ffn_norm.weight"), real ? v[K_FFN_NORM].data : NULL))) return st;
    for (int64_t i = 0; i < t->p.hidden_dim; i++) src[i] = real && i < h->hidden_dim ? i : ROW_RANDOM;
    if ((st = add_input(t, NAME("ffn_gate.weight"), &v[K_GATE], t->p.hidden_dim, 1.0f, std[K_GATE], 1))) return st;
    for (int64_t j = 0; j < h->hidden_dim; j++) t->colmap[j] = j;
    if ((st = add_output(t, NAME("ffn_down.weight"), real ? &v[K_DOWN] : NULL, t->p.hidden_dim))) return st;
    if ((st = add_input(t, NAME("ffn_up.weight"), &v[K_UP], t->p.hidden_dim, 1.0f, std[K_UP], 1))) return st;
#undef NAME
    return SD_OK;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The metadata: llama hyperparameters of the twin with small's vocabulary, context, RoPE base
 * and epsilon, and specdec.twin_of. */
static sd_status add_metadata(twin *t) {
    const sd_hparams *h = t->h;
    sd_hparams b = *h;
    b.dim = t->p.dim, b.n_layers = t->p.n_layers, b.n_heads = t->p.n_heads, b.n_kv_heads = t->p.n_kv_heads;
    b.head_dim = t->HS, b.hidden_dim = t->p.hidden_dim, b.rope_dim = h->rope_dim * t->r;
    b.rope_style = SD_ROPE_INTERLEAVED;
    const char *base = strrchr(t->sname, '/');
    base = base ? base + 1 : t->sname;
    char gname[160], desc[1024];
    snprintf(gname, sizeof gname, "%.*s twin", (int)strcspn(base, "."), base);
    snprintf(desc, sizeof desc,
             "%s (dim %d, %d layers, %d heads, %d kv heads, hidden %d) at dim %d, %d layers, %d heads, %d kv heads, "
             "hidden %d: the same function (residual stream x sqrt(%d/%d), norm gains / the same, q x sqrt(%d/%d); "
             "extra heads, head dims, FFN units and layers with random inputs and zero outputs; seed %" PRIu64 ")",
             t->sname, h->dim, h->n_layers, h->n_heads, h->n_kv_heads, h->hidden_dim, b.dim, b.n_layers, b.n_heads,
             b.n_kv_heads, b.hidden_dim, b.dim, h->dim, t->HS, t->hs, t->p.seed);
    if (!t->s->tok) return sd_fail(SD_ERR_INVALID_ARG, "twin: %s has no tokenizer to copy", t->sname);
    sd_status st = sd_writer_set_meta(t->w, "llama", gname, t->p.wtype, &b, t->s->tok);
    return st ? st : sd_gguf_set_str(t->w, "specdec.twin_of", desc);
}

static sd_status build(twin *t) {
    const sd_hparams *h = t->h;
    const int64_t V = h->vocab_size;
    sd_status st = add_metadata(t);
    if (st) return st;
    sd_tensor emb, out;
    const int n_small = sd_model_n_tensors(t->s), tied = n_small == 2 + 9 * h->n_layers;
    if ((st = small_view(t, 0, &emb)) || (st = small_view(t, tied ? 0 : n_small - 1, &out))) return st;
    for (int64_t i = 0; i < V; i++) t->src[i] = i;
    /* The embedding writes the residual stream: its extra columns are zero. */
    if ((st = add_input(t, "token_embd.weight", &emb, V, t->c, 0.0f, 0))) return st;
    for (int l = 0; l < t->p.n_layers; l++)
        if ((st = add_layer(t, l))) return st;
    sd_tensor g;
    if ((st = small_view(t, n_small - (tied ? 1 : 2), &g)) || (st = add_norm(t, "output_norm.weight", g.data)))
        return st;
    /* A separate classifier (small's, tied or not): it reads the normalised stream, which is
     * small's exactly, so it is not scaled. */
    float std;
    if ((st = small_std(t, &out, &std))) return st;
    for (int64_t i = 0; i < V; i++) t->src[i] = i;
    return add_input(t, "output.weight", &out, V, 1.0f, std, 1);
}

sd_status sd_twin_build(const sd_model *small, const sd_twin_params *p, sd_gguf_writer **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "twin: NULL output");
    *out = NULL;
    sd_status st = sd_twin_check(small, p);
    if (st) return st;
    const sd_hparams *h = &small->hp;
    twin t = {.s = small, .h = h, .sname = small_name(small, p), .p = *p, .hs = h->head_dim};
    t.HS = p->dim / p->n_heads;
    t.r = t.HS / t.hs;
    t.c = (float)sqrt((double)p->dim / h->dim);
    t.qscale = (float)sqrt((double)t.HS / t.hs);
    const int64_t D = p->dim, V = h->vocab_size, H = p->hidden_dim;
    const int64_t rows = max64(max64(V, H), max64(D, (int64_t)p->n_kv_heads * t.HS));
    const int64_t small_cols = max64(max64(h->dim, h->hidden_dim), (int64_t)h->n_heads * h->head_dim);
    t.w = sd_gguf_writer_create();
    t.kvsrc = malloc((size_t)p->n_kv_heads * sizeof *t.kvsrc);
    t.src = malloc((size_t)rows * sizeof *t.src);
    t.colmap = malloc((size_t)small_cols * sizeof *t.colmap);
    t.row = malloc((size_t)small_cols * sizeof *t.row);
    t.buf = malloc((size_t)rows * (size_t)max64(D, H) * sizeof *t.buf);
    if (!t.w || !t.kvsrc || !t.src || !t.colmap || !t.row || !t.buf)
        st = sd_fail(SD_ERR_NOMEM, "twin: no memory to build a twin of dim %d", p->dim);
    else if (map_kv_heads(h, p, t.sname, t.kvsrc) != 0)
        st = SD_ERR_INVALID_ARG;
    else
        st = build(&t);
    free(t.kvsrc);
    free(t.src);
    free(t.colmap);
    free(t.row);
    free(t.buf);
    if (st) {
        sd_gguf_writer_free(t.w);
        return st;
    }
    *out = t.w;
    return SD_OK;
}

sd_status sd_twin_write_file(const sd_model *small, const sd_twin_params *p, const char *path) {
    sd_gguf_writer *w;
    sd_status st = sd_twin_build(small, p, &w);
    if (st) return st;
    st = sd_gguf_write_file(w, path);
    sd_gguf_writer_free(w);
    return st;
}

int sd_model_twin_of(const sd_model *m, char *buf, size_t cap) {
    if (cap) buf[0] = 0;
    const sd_gguf_kv *kv = m && m->gguf ? sd_gguf_find_kv(m->gguf, "specdec.twin_of") : NULL;
    if (!kv || kv->type != SD_GGUF_STRING || !cap) return 0;
    size_t n = kv->v.str.len < cap - 1 ? (size_t)kv->v.str.len : cap - 1;
    for (size_t i = 0; i < n; i++) { /* file bytes: nothing but printable ASCII reaches a terminal */
        const unsigned char ch = (unsigned char)kv->v.str.ptr[i];
        buf[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    buf[n] = 0;
    return 1;
}
