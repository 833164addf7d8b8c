/* Synthetic Llama GGUF models: deterministic random weights of any shape and a SentencePiece-style
 * vocabulary, named exactly as llama.cpp names them so the real loader path is exercised. */
#include "specdec/synth.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "model/arch.h"
#include "model/writer_internal.h"
#include "specdec/quant.h"
#include "specdec/types.h"

#define SYNTH_MAX_DIM (1 << 20) /* any single size above this is a typo, not a model */
#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's visible space */

sd_synth_params sd_synth_default_params(void) {
    sd_synth_params p = {
        .dim = 64, .n_layers = 5, .n_heads = 8, .n_kv_heads = 4, .hidden_dim = 172, .vocab_size = 512,
        .ctx_len = 512, .rope_theta = 10000.0f, .norm_eps = 1e-5f, .wtype = SD_TYPE_F32, .tied_output = 0,
        .seed = 1234, .weight_scale = 0.0f,
    };
    return p;
}

/* The llama2.c "stories" shapes (the last three with the Llama-2 vocabulary, 32000), shared
 * by `specdec mkmodel --shape` and the bench configs' "generate" models. */
static const struct {
    const char *name;
    int dim, layers, heads, kv_heads, hidden, vocab, ctx;
} k_shapes[] = {
    {"stories260K", 64, 5, 8, 4, 172, 512, 512},
    {"stories15M", 288, 6, 6, 6, 768, 32000, 256},
    {"stories42M", 512, 8, 8, 8, 1376, 32000, 1024},
    {"stories110M", 768, 12, 12, 12, 2048, 32000, 1024},
};

sd_status sd_synth_shape(const char *name, sd_synth_params *p) {
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++) {
        if (strcmp(k_shapes[i].name, name) != 0) continue;
        p->dim = k_shapes[i].dim;
        p->n_layers = k_shapes[i].layers;
        p->n_heads = k_shapes[i].heads;
        p->n_kv_heads = k_shapes[i].kv_heads;
        p->hidden_dim = k_shapes[i].hidden;
        p->vocab_size = k_shapes[i].vocab;
        p->ctx_len = k_shapes[i].ctx;
        return SD_OK;
    }
    return sd_fail(SD_ERR_INVALID_ARG, "unknown shape '%s' (known: %s)", name, SD_SYNTH_SHAPES);
}

static sd_status check_size(const char *field, int v) {
    if (v <= 0 || v > SYNTH_MAX_DIM)
        return sd_fail(SD_ERR_INVALID_ARG, "synth: %s = %d must be in [1, %d]", field, v, SYNTH_MAX_DIM);
    return SD_OK;
}

sd_status sd_synth_validate(const sd_synth_params *p) {
    if (!p) return sd_fail(SD_ERR_INVALID_ARG, "synth: NULL params");
    sd_status st;
    if ((st = check_size("dim", p->dim)) || (st = check_size("n_layers", p->n_layers)) ||
        (st = check_size("n_heads", p->n_heads)) || (st = check_size("n_kv_heads", p->n_kv_heads)) ||
        (st = check_size("hidden_dim", p->hidden_dim)) || (st = check_size("vocab_size", p->vocab_size)) ||
        (st = check_size("ctx_len", p->ctx_len)))
        return st;
    if (p->arch && !sd_arch_by_name(p->arch, strlen(p->arch)))
        return sd_fail(SD_ERR_INVALID_ARG, "synth: unknown arch '%s' (%s)", p->arch, sd_arch_list());
    if (p->head_dim < 0 || p->head_dim > SYNTH_MAX_DIM || (uint64_t)p->head_dim * (uint64_t)p->n_heads > SYNTH_MAX_DIM)
        return sd_fail(SD_ERR_INVALID_ARG, "synth: head_dim %d must be in [0, %d / n_heads]", p->head_dim, SYNTH_MAX_DIM);
    if (!p->head_dim && p->dim % p->n_heads != 0)
        return sd_fail(SD_ERR_INVALID_ARG, "synth: dim %d is not divisible by n_heads %d", p->dim, p->n_heads);
    if (p->n_heads % p->n_kv_heads != 0)
        return sd_fail(SD_ERR_INVALID_ARG, "synth: n_heads %d is not divisible by n_kv_heads %d", p->n_heads,
                       p->n_kv_heads);
    const int hd = p->head_dim ? p->head_dim : p->dim / p->n_heads;
    if (hd % 2 != 0 && p->head_dim)
        return sd_fail(SD_ERR_INVALID_ARG, "synth: head_dim %d must be even for RoPE", hd);
    if (hd % 2 != 0)
        return sd_fail(SD_ERR_INVALID_ARG, "synth: head_dim %d (dim %d / n_heads %d) must be even for RoPE", hd,
                       p->dim, p->n_heads);
    if (p->vocab_size < 3)
        return sd_fail(SD_ERR_INVALID_ARG, "synth: vocab_size %d must be >= 3 (<unk>, <s>, </s>)", p->vocab_size);
    if (!(isfinite(p->rope_theta) && p->rope_theta > 0))
        return sd_fail(SD_ERR_INVALID_ARG, "synth: rope_theta %g must be finite and > 0", (double)p->rope_theta);
    if (!(isfinite(p->norm_eps) && p->norm_eps > 0))
        return sd_fail(SD_ERR_INVALID_ARG, "synth: norm_eps %g must be finite and > 0", (double)p->norm_eps);
    if (!(isfinite(p->weight_scale) && p->weight_scale >= 0))
        return sd_fail(SD_ERR_INVALID_ARG, "synth: weight_scale %g must be finite and >= 0 (0 = default)",
                       (double)p->weight_scale);
    if (!sd_quant_can_write((sd_type)p->wtype)) {
        const sd_type_traits *t = sd_type_info(p->wtype);
        return sd_fail(SD_ERR_INVALID_ARG,
                       "synth: wtype %" PRIu32 " (%s) not supported (use f32, f16, bf16, q8_0, q4_0, q5_0, q4_K or q6_K)",
                       p->wtype, t ? t->name : "unknown");
    }
    /* The largest single tensor is the embedding or a feed-forward matrix; each must be
     * addressable as floats for generation. */
    uint64_t emb = (uint64_t)p->dim * (uint64_t)p->vocab_size;
    uint64_t ffn = (uint64_t)p->dim * (uint64_t)p->hidden_dim;
    uint64_t big = emb > ffn ? emb : ffn;
    if (big > SIZE_MAX / sizeof(float) / 4)
        return sd_fail(SD_ERR_INVALID_ARG, "synth: tensor of %" PRIu64 " elements is too large", big);
    return SD_OK;
}

/* ------------------------------------------------------------------ vocabulary */

/* Single characters first, then pieces each the concatenation of two earlier ones, so an SPM
 * tokenizer can actually reach them by merges (lower score = merged later). */
static const char *const k_pieces[] = {
    SPM_SPACE, "e", "t", "a", "o", "h", "n", "s", "i", "r", "d", "l", "y", "w", "u", "m", "g", "c", "f", "b", "p",
    "k", "v", "j", "x", "q", "z", "T", "O", "L", "S", "I", "H", "A", "B", "M", "0", "1", "2", "3", "4", "5", "6",
    "7", "8", "9", ".", ",", "!", "?", "'", "\"", "-",
    SPM_SPACE "t", "he", SPM_SPACE "a", "in", SPM_SPACE "s", SPM_SPACE "w", "er", SPM_SPACE "t" "he", "an", "nd",
    SPM_SPACE "b", SPM_SPACE "h", "ou", SPM_SPACE "o", SPM_SPACE "c", "ed", SPM_SPACE "a" "nd", "it", SPM_SPACE "f",
    "at", "en", "in" "g", "is", SPM_SPACE "T", "on", SPM_SPACE "t" "o", SPM_SPACE "h" "e", SPM_SPACE "l",
    SPM_SPACE "p", SPM_SPACE "m", SPM_SPACE "d", SPM_SPACE "O", "ce", SPM_SPACE "O" "n", SPM_SPACE "O" "n" "ce", "as",
    "ar", SPM_SPACE "w" "as", "ll", SPM_SPACE "S", SPM_SPACE "s" "h", SPM_SPACE "s" "h" "e", "ay", SPM_SPACE "it",
    SPM_SPACE "in", SPM_SPACE "g", "le", SPM_SPACE "p" "l", SPM_SPACE "p" "l" "ay", SPM_SPACE "t" "i",
    SPM_SPACE "t" "i" "m", SPM_SPACE "t" "i" "m" "e", "up", SPM_SPACE "up", SPM_SPACE "T" "he", SPM_SPACE "d" "ay",
    SPM_SPACE "h" "a", SPM_SPACE "h" "a" "d", "ig", SPM_SPACE "b" "ig", SPM_SPACE "L", "il", SPM_SPACE "L" "il",
    SPM_SPACE "L" "il" "y", SPM_SPACE "t" "he" "y", SPM_SPACE "h" "e" "r", SPM_SPACE "s" "a", "id",
    SPM_SPACE "s" "a" "id", SPM_SPACE "f" "r", SPM_SPACE "f" "r" "i", "en" "d", SPM_SPACE "f" "r" "i" "en" "d",
};
#define N_PIECES ((int)(sizeof k_pieces / sizeof k_pieces[0]))

void sd_synth_vocab_free(sd_synth_vocab *v) {
    if (!v) return;
    if (v->pieces)
        for (int i = 0; i < v->n; i++) free(v->pieces[i]);
    free(v->pieces);
    free(v->scores);
    free(v->types);
    memset(v, 0, sizeof *v);
}

sd_status sd_synth_vocab_build(int vocab_size, sd_synth_vocab *out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "synth vocab: NULL output");
    memset(out, 0, sizeof *out);
    if (vocab_size < 3 || vocab_size > SYNTH_MAX_DIM)
        return sd_fail(SD_ERR_INVALID_ARG, "synth vocab: vocab_size %d not in [3, %d]", vocab_size, SYNTH_MAX_DIM);
    out->n = vocab_size;
    out->pieces = calloc((size_t)vocab_size, sizeof *out->pieces);
    out->scores = calloc((size_t)vocab_size, sizeof *out->scores);
    out->types = calloc((size_t)vocab_size, sizeof *out->types);
    if (!out->pieces || !out->scores || !out->types) goto oom;

    int id = 0;
    static const char *const specials[3] = {"<unk>", "<s>", "</s>"};
    static const int32_t special_types[3] = {2, 3, 3};
    for (; id < 3; id++) {
        out->pieces[id] = strdup(specials[id]);
        out->types[id] = special_types[id];
        if (!out->pieces[id]) goto oom;
    }
    if (vocab_size >= 3 + 256) {
        for (int b = 0; b < 256; b++, id++) {
            char buf[8];
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            out->pieces[id] = strdup(buf);
            out->types[id] = 6;
            if (!out->pieces[id]) goto oom;
        }
    }
    for (int k = 0; id < vocab_size; id++, k++) {
        if (k < N_PIECES) {
            out->pieces[id] = strdup(k_pieces[k]);
        } else {
            /* "▁w<id>" cannot collide with a listed piece: none is "▁w" followed by digits. */
            char buf[32];
            snprintf(buf, sizeof buf, SPM_SPACE "w%d", id);
            out->pieces[id] = strdup(buf);
        }
        if (!out->pieces[id]) goto oom;
        out->types[id] = 1;
        out->scores[id] = -(float)k;
    }
    return SD_OK;
oom:
    sd_synth_vocab_free(out);
    return sd_fail(SD_ERR_NOMEM, "synth vocab: no memory for %d pieces", vocab_size);
}

sd_status sd_synth_add_tokenizer(sd_gguf_writer *w, int vocab_size) {
    if (!w) return sd_fail(SD_ERR_INVALID_ARG, "synth: NULL writer");
    sd_synth_vocab v;
    sd_status st = sd_synth_vocab_build(vocab_size, &v);
    if (st) return st;
    if (!(st = sd_gguf_set_str(w, "tokenizer.ggml.model", "llama")) &&
        !(st = sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.pieces, (uint64_t)v.n)) &&
        !(st = sd_gguf_set_arr_f32(w, "tokenizer.ggml.scores", v.scores, (uint64_t)v.n)) &&
        !(st = sd_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", v.types, (uint64_t)v.n)) &&
        !(st = sd_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) &&
        !(st = sd_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2)) &&
        !(st = sd_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)) &&
        !(st = sd_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", 1)))
        st = sd_gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", 1);
    sd_synth_vocab_free(&v);
    return st;
}

/* ------------------------------------------------------------------ weights */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Each tensor draws from its own stream keyed by (seed, name), so its values do not depend on
 * which other tensors exist or in what order they are generated. */
static uint64_t stream_for(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    uint64_t s = seed ^ h;
    splitmix64(&s); /* decorrelates seeds that differ in few bits */
    return s;
}

void sd_writer_fill_uniform(float *buf, size_t n, float mean, float std, uint64_t seed, const char *key) {
    uint64_t s = stream_for(seed, key);
    float half_width = std * 1.7320508f; /* uniform on [-a, a] has std a / sqrt(3) */
    for (size_t i = 0; i < n; i++) {
        float u = (float)(splitmix64(&s) >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
        buf[i] = mean + (2.0f * u - 1.0f) * half_width;
    }
}

sd_status sd_writer_add_floats(sd_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, int64_t cols,
                               int64_t rows, const float *buf) {
    const uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
    const size_t n = (size_t)cols * (size_t)rows;
    if (type == SD_TYPE_F32) return sd_gguf_add_tensor(w, name, type, n_dims, ne, buf, n * sizeof(float));
    const sd_type t = sd_quant_fallback((sd_type)type, cols);
    const size_t rb = sd_type_row_bytes(t, cols);
    uint8_t *q = malloc(rb * (size_t)rows);
    sd_status st = q ? SD_OK : sd_fail(SD_ERR_NOMEM, "writer: no memory for tensor %s", name);
    for (int64_t r = 0; r < rows && st == SD_OK; r++)
        st = sd_quantize_row(t, buf + (size_t)r * cols, q + (size_t)r * rb, cols);
    if (st == SD_OK) st = sd_gguf_add_tensor(w, name, t, n_dims, ne, q, rb * (size_t)rows);
    free(q);
    return st;
}

/* Fills rows x cols with mean + uniform noise of standard deviation std, stored as `type`
 * (quantised types through the writer's row quantiser; rows that do not divide into its
 * blocks fall back as llama.cpp's quantizer does, see sd_quant_fallback). */
static sd_status add_random(sd_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, int64_t cols,
                            int64_t rows, float mean, float std, uint64_t seed) {
    size_t n = (size_t)cols * (size_t)rows; /* bounded by sd_synth_validate */
    float *buf = malloc(n * sizeof(float));
    if (!buf) return sd_fail(SD_ERR_NOMEM, "synth: no memory for tensor %s (%zu elements)", name, n);
    sd_writer_fill_uniform(buf, n, mean, std, seed, name);
    sd_status st = sd_writer_add_floats(w, name, type, n_dims, cols, rows, buf);
    free(buf);
    return st;
}

/* A GGUF matrix with ne = {cols, rows}: y = W x takes x of length cols. */
static sd_status add_matrix(const sd_synth_params *p, sd_gguf_writer *w, const char *name, int cols, int rows) {
    float std = p->weight_scale > 0 ? p->weight_scale : 1.0f / sqrtf((float)cols);
    return add_random(w, name, p->wtype, 2, cols, rows, 0.0f, std, p->seed);
}

/* The hyperparameters the architecture table sizes the tensors from. */
static sd_hparams synth_hparams(const sd_synth_params *p) {
    sd_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.dim = p->dim;
    hp.n_layers = p->n_layers;
    hp.n_heads = p->n_heads;
    hp.n_kv_heads = p->n_kv_heads;
    hp.head_dim = p->head_dim ? p->head_dim : p->dim / p->n_heads;
    hp.hidden_dim = p->hidden_dim;
    hp.vocab_size = p->vocab_size;
    hp.ctx_len = p->ctx_len;
    hp.rope_dim = hp.head_dim;
    hp.rope_theta = p->rope_theta;
    hp.norm_eps = p->norm_eps;
    hp.rope_scale = 1;
    return hp;
}

/* Weight w of layer l: norm gains near 1, biases small, matrices by their fan-in (the
 * embeddings as given). */
static sd_status add_weight(const sd_synth_params *p, const sd_hparams *hp, sd_gguf_writer *w, sd_weight id, int l,
                            float emb_std) {
    const sd_weight_info *wi = &sd_weight_table[id];
    char name[96];
    if (sd_weight_name(id, l, 0, name, sizeof name) != 0) return sd_fail(SD_ERR_INVALID_ARG, "synth: weight name");
    const int64_t cols = sd_dim_value(hp, wi->cols);
    if (sd_weight_is_vector(id)) {
        const int norm = strstr(name, "norm") != NULL;
        return add_random(w, name, SD_TYPE_F32, 1, cols, 1, norm ? 1.0f : 0.0f, 0.02f, p->seed);
    }
    if (id == SD_W_TOKEN_EMBD) return add_random(w, name, p->wtype, 2, cols, sd_dim_value(hp, wi->rows), 0.0f, emb_std, p->seed);
    return add_matrix(p, w, name, (int)cols, (int)sd_dim_value(hp, wi->rows));
}

sd_status sd_synth_build(const sd_synth_params *p, sd_gguf_writer **out) {
    if (!out) return sd_fail(SD_ERR_INVALID_ARG, "synth: NULL output");
    *out = NULL;
    sd_status st = sd_synth_validate(p);
    if (st) return st;
    const char *an = p->arch ? p->arch : "llama";
    const sd_arch *arch = sd_arch_by_name(an, strlen(an));
    const sd_hparams hp = synth_hparams(p);
    sd_gguf_writer *w = sd_gguf_writer_create();
    if (!w) return sd_fail(SD_ERR_NOMEM, "synth: no memory for the writer");

    /* A tied embedding is also the classifier: with the usual 0.02 its logits would be
     * nearly flat, so it gets the classifier's 1/sqrt(dim) instead. */
    float emb_std = p->weight_scale > 0 ? p->weight_scale
                    : p->tied_output    ? 1.0f / sqrtf((float)p->dim)
                                        : 0.02f;
    st = sd_writer_set_meta(w, an, "specdec-synth", (sd_type)p->wtype, &hp, NULL);
    if (!st) st = sd_synth_add_tokenizer(w, p->vocab_size);
    /* the weights the architecture requires, in llama.cpp's order */
    if (!st) st = add_weight(p, &hp, w, SD_W_TOKEN_EMBD, 0, emb_std);
    for (int l = 0; !st && l < p->n_layers; l++)
        for (int id = SD_W_LAYER0; !st && id < SD_W_COUNT; id++)
            if (arch->need[id] == SD_NEED_YES) st = add_weight(p, &hp, w, (sd_weight)id, l, emb_std);
    if (!st) st = add_weight(p, &hp, w, SD_W_OUTPUT_NORM, 0, emb_std);
    if (!st && !p->tied_output) st = add_weight(p, &hp, w, SD_W_OUTPUT, 0, emb_std);
    if (st) {
        sd_gguf_writer_free(w);
        return st;
    }
    *out = w;
    return SD_OK;
}

sd_status sd_synth_write_file(const sd_synth_params *p, const char *path) {
    sd_gguf_writer *w;
    sd_status st = sd_synth_build(p, &w);
    if (st) return st;
    st = sd_gguf_write_file(w, path);
    sd_gguf_writer_free(w);
    return st;
}

sd_status sd_synth_write_mem(const sd_synth_params *p, void **buf, size_t *len) {
    sd_gguf_writer *w;
    sd_status st = sd_synth_build(p, &w);
    if (st) return st;
    st = sd_gguf_write_mem(w, buf, len);
    sd_gguf_writer_free(w);
    return st;
}
