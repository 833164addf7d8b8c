/* Seed inputs for every fuzz target, built in memory with the project's own writers (tiny
 * synthetic models and vocabularies), so corpora and the regression test need no files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "specdec/gguf.h"
#include "specdec/synth.h"
#include "specdec/types.h"

/* ---- a growable byte buffer ---- */
typedef struct {
    uint8_t *p;
    size_t n, cap;
    int oom;
} bytes;

static void put(bytes *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_le(bytes *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)n);
}

static void put_f32(bytes *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_le(b, u, 4);
}

static void put_gstr(bytes *b, const char *s) {
    put_le(b, strlen(s), 8);
    put(b, s, strlen(s));
}

/* ---- the seed list ---- */
typedef struct {
    sd_fuzz_seed *v;
    int n, cap, oom;
} seeds;

/* Takes ownership of data. */
static void add(seeds *s, const char *name, uint8_t *data, size_t len) {
    if (!data || s->oom) {
        free(data);
        s->oom = 1;
        return;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        sd_fuzz_seed *q = realloc(s->v, (size_t)cap * sizeof *q);
        if (!q) {
            free(data);
            s->oom = 1;
            return;
        }
        s->v = q;
        s->cap = cap;
    }
    sd_fuzz_seed *e = &s->v[s->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->data = data;
    e->len = len;
}

static void add_copy(seeds *s, const char *name, const void *data, size_t len) {
    uint8_t *c = malloc(len ? len : 1);
    if (c && len) memcpy(c, data, len);
    add(s, name, c, len);
}

/* prefix bytes + body, as one seed */
static void add_prefixed(seeds *s, const char *name, uint32_t prefix, const uint8_t *body, size_t len) {
    bytes b = {0};
    put_le(&b, prefix, 4);
    put(&b, body, len);
    if (b.oom) free(b.p);
    add(s, name, b.oom ? NULL : b.p, b.n);
}

/* Tiny models: GQA F32 with byte-fallback vocabulary, and F16 tied without byte tokens. */
static sd_synth_params tiny(int which) {
    sd_synth_params p = sd_synth_default_params();
    p.dim = 8;
    p.n_layers = which ? 2 : 1;
    p.n_heads = 2;
    p.n_kv_heads = which ? 2 : 1;
    p.hidden_dim = 16;
    p.vocab_size = which ? 32 : 280;
    p.ctx_len = 32;
    p.wtype = which ? SD_TYPE_F16 : SD_TYPE_F32;
    p.tied_output = which;
    p.seed = 7 + (uint64_t)which;
    return p;
}

static void add_synth_models(seeds *s) {
    for (int which = 0; which < 2; which++) {
        sd_synth_params p = tiny(which);
        void *buf = NULL;
        size_t len = 0;
        if (sd_synth_write_mem(&p, &buf, &len) != SD_OK) {
            s->oom = 1;
            return;
        }
        add(s, which ? "synth_f16_tied.gguf" : "synth_f32_gqa.gguf", buf, len);
    }
    /* general.alignment 1: legal GGUF whose tensors may start at any byte */
    sd_synth_params p = tiny(0);
    p.vocab_size = 32;
    sd_gguf_writer *w = NULL;
    void *buf = NULL;
    size_t len = 0;
    if (sd_synth_build(&p, &w) != SD_OK || sd_gguf_set_u32(w, "general.alignment", 1) != SD_OK ||
        sd_gguf_write_mem(w, &buf, &len) != SD_OK)
        s->oom = 1;
    else
        add(s, "synth_align1.gguf", buf, len);
    sd_gguf_writer_free(w);
}

/* Every value type, nested arrays, an explicit alignment, tensors of several types
 * (Q4_0 parses but cannot be computed with), version 2 and 3. */
static uint8_t *odd_gguf(uint32_t version, size_t *len) {
    bytes b = {0};
    put_le(&b, SD_GGUF_MAGIC, 4);
    put_le(&b, version, 4);
    put_le(&b, 3, 8);  /* tensors */
    put_le(&b, 14, 8); /* kvs */
    put_gstr(&b, "general.alignment"); put_le(&b, SD_GGUF_UINT32, 4); put_le(&b, 64, 4);
    put_gstr(&b, "general.architecture"); put_le(&b, SD_GGUF_STRING, 4); put_gstr(&b, "llama");
    put_gstr(&b, "u8"); put_le(&b, SD_GGUF_UINT8, 4); put_le(&b, 200, 1);
    put_gstr(&b, "i8"); put_le(&b, SD_GGUF_INT8, 4); put_le(&b, 0x80, 1);
    put_gstr(&b, "u16"); put_le(&b, SD_GGUF_UINT16, 4); put_le(&b, 65535, 2);
    put_gstr(&b, "i16"); put_le(&b, SD_GGUF_INT16, 4); put_le(&b, 0x8000, 2);
    put_gstr(&b, "u64"); put_le(&b, SD_GGUF_UINT64, 4); put_le(&b, UINT64_MAX, 8);
    put_gstr(&b, "i64"); put_le(&b, SD_GGUF_INT64, 4); put_le(&b, (uint64_t)INT64_MIN, 8);
    put_gstr(&b, "f64"); put_le(&b, SD_GGUF_FLOAT64, 4); put_le(&b, 0x7FEFFFFFFFFFFFFFull, 8);
    put_gstr(&b, "f32"); put_le(&b, SD_GGUF_FLOAT32, 4); put_f32(&b, 1e-5f);
    put_gstr(&b, "bool"); put_le(&b, SD_GGUF_BOOL, 4); put_le(&b, 1, 1);
    put_gstr(&b, "arr.bool"); put_le(&b, SD_GGUF_ARRAY, 4); put_le(&b, SD_GGUF_BOOL, 4); put_le(&b, 3, 8);
    put_le(&b, 0x000100, 3);
    /* [[ "a", "bc" ], [ [1, 2] ]]: an array of arrays of different element types */
    put_gstr(&b, "arr.nested"); put_le(&b, SD_GGUF_ARRAY, 4); put_le(&b, SD_GGUF_ARRAY, 4); put_le(&b, 2, 8);
    put_le(&b, SD_GGUF_STRING, 4); put_le(&b, 2, 8); put_gstr(&b, "a"); put_gstr(&b, "bc");
    put_le(&b, SD_GGUF_ARRAY, 4); put_le(&b, 1, 8); put_le(&b, SD_GGUF_INT16, 4); put_le(&b, 2, 8);
    put_le(&b, 1, 2); put_le(&b, 2, 2);
    put_gstr(&b, "arr.str"); put_le(&b, SD_GGUF_ARRAY, 4); put_le(&b, SD_GGUF_STRING, 4); put_le(&b, 3, 8);
    put_gstr(&b, ""); put_gstr(&b, "\xe2\x96\x81the"); put_gstr(&b, "<0x0A>");
    /* tensors: f32 [4], f16 [2, 3], q4_0 [32] */
    put_gstr(&b, "t.f32"); put_le(&b, 1, 4); put_le(&b, 4, 8); put_le(&b, SD_TYPE_F32, 4); put_le(&b, 0, 8);
    put_gstr(&b, "t.f16"); put_le(&b, 2, 4); put_le(&b, 2, 8); put_le(&b, 3, 8); put_le(&b, SD_TYPE_F16, 4);
    put_le(&b, 64, 8);
    put_gstr(&b, "t.q4_0"); put_le(&b, 1, 4); put_le(&b, 32, 8); put_le(&b, SD_TYPE_Q4_0, 4); put_le(&b, 128, 8);
    while (b.n % 64) put_le(&b, 0, 1);
    for (int i = 0; i < 128 + 18; i++) put_le(&b, (uint64_t)(i * 37), 1);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}

static uint8_t *empty_gguf(size_t *len) {
    bytes b = {0};
    put_le(&b, SD_GGUF_MAGIC, 4);
    put_le(&b, 3, 4);
    put_le(&b, 0, 8);
    put_le(&b, 0, 8);
    *len = b.n;
    return b.oom ? (free(b.p), NULL) : b.p;
}

/* llama2.c tokenizer.bin of the synthetic vocabulary: "▁" back to ' ', BOS/EOS as the
 * exporter wrote them ("\n<s>\n"). */
static uint8_t *llama2c_tokenizer(int n_vocab, size_t *len) {
    sd_synth_vocab v;
    if (sd_synth_vocab_build(n_vocab, &v) != SD_OK) return NULL;
    bytes b = {0};
    put_le(&b, 16, 4); /* max_token_length */
    for (int i = 0; i < v.n; i++) {
        char piece[256];
        size_t o = 0;
        const char *p = v.pieces[i];
        if (i == 1 || i == 2) piece[o++] = '\n';
        for (size_t k = 0; p[k] && o < sizeof piece - 2;) {
            if (!strncmp(p + k, "\xe2\x96\x81", 3)) {
                piece[o++] = ' ';
                k += 3;
            } else {
                piece[o++] = p[k++];
            }
        }
        if (i == 1 || i == 2) piece[o++] = '\n';
        put_f32(&b, v.scores[i]);
        put_le(&b, o, 4);
        put(&b, piece, o);
    }
    sd_synth_vocab_free(&v);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}

/* llama2.c checkpoint: the 7-int header, then small deterministic weights in export order
 * (a negative vocab_size stores the classifier separately). */
static uint8_t *llama2c_model(int dim, int hidden, int nl, int nh, int nkv, int vocab, int seq, size_t *len) {
    bytes b = {0};
    const int32_t h[7] = {dim, hidden, nl, nh, nkv, vocab, seq};
    for (int i = 0; i < 7; i++) put_le(&b, (uint32_t)h[i], 4);
    const int v = vocab < 0 ? -vocab : vocab, hd = dim / nh, kvd = nkv * hd;
    const long n = (long)v * dim + (long)nl * (2L * dim + 2L * dim * dim + 2L * dim * kvd + 3L * dim * hidden) + dim +
                   (long)seq * hd + (vocab < 0 ? (long)v * dim : 0);
    uint32_t x = 12345;
    for (long i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        put_f32(&b, ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.2f);
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.n;
    return b.p;
}

static void add_llama2c(seeds *s, const char *name, int vocab, int tok_vocab) {
    size_t ml = 0, tl = 0;
    uint8_t *m = llama2c_model(8, 16, 1, 2, 1, vocab, 8, &ml);
    uint8_t *t = llama2c_tokenizer(tok_vocab, &tl);
    if (m && t) {
        bytes b = {0};
        put_le(&b, (uint32_t)ml, 4);
        put(&b, m, ml);
        put(&b, t, tl);
        if (b.oom) free(b.p);
        add(s, name, b.oom ? NULL : b.p, b.n);
    } else {
        s->oom = 1;
    }
    free(m);
    free(t);
}

/* ---- Hugging Face checkpoints ---- */

/* Appends a JSON string literal (the pieces are plain ASCII or "▁"; quotes and backslashes
 * escaped for safety). */
static void put_jstr(bytes *b, const char *s) {
    put(b, "\"", 1);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') put(b, "\\", 1);
        put(b, s, 1);
    }
    put(b, "\"", 1);
}

char *sd_fuzz_hf_tokenizer_json(int n_vocab, size_t *len) {
    if (n_vocab < 8) return NULL;
    static const char *const base[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "\xe2\x96\x81t", "h", "e", "he",
                                       "\xe2\x96\x81the", "t", "a", ("\xe2\x96\x81" "a"), "n", "d", "o", " "};
    const int n_base = (int)(sizeof base / sizeof base[0]);
    bytes b = {0};
    const char *head =
        "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,"
        " \"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
        " {\"id\": 1, \"content\": \"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
        " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\xe2\x96\x81\"},"
        " {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}]},"
        " \"pre_tokenizer\": null,"
        " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
        " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1]}}},"
        " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\xe2\x96\x81\"},"
        " \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \","
        " \"start\": 1, \"stop\": 0}]},"
        " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": \"<unk>\", \"continuing_subword_prefix\": null,"
        " \"end_of_word_suffix\": null, \"fuse_unk\": true, \"byte_fallback\": true, \"vocab\": {";
    put(&b, head, strlen(head));
    for (int i = 0; i < n_vocab; i++) {
        char piece[32];
        if (i < n_base) snprintf(piece, sizeof piece, "%s", base[i]);
        else if (i - n_base < 256) snprintf(piece, sizeof piece, "<0x%02X>", i - n_base);
        else snprintf(piece, sizeof piece, "\xe2\x96\x81w%d", i);
        if (i) put(&b, ", ", 2);
        put_jstr(&b, piece);
        char num[16];
        snprintf(num, sizeof num, ": %d", i);
        put(&b, num, strlen(num));
    }
    const char *tail = "}, \"merges\": [\"\xe2\x96\x81 t\", \"h e\", \"\xe2\x96\x81t he\", \"\xe2\x96\x81 a\"]}}";
    put(&b, tail, strlen(tail));
    put(&b, "", 1); /* NUL, not counted */
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.n - 1;
    return (char *)b.p;
}

/* Deterministic small weights (an LCG), the same generator as the llama2.c seeds. */
static void put_weights(bytes *b, long n, int f16, uint32_t *x) {
    for (long i = 0; i < n; i++) {
        *x = *x * 1664525u + 1013904223u;
        float v = ((float)(*x >> 8) / 16777216.0f - 0.5f) * 0.2f;
        if (!f16) {
            put_f32(b, v);
        } else { /* |v| < 0.1, normal or zero: a plain round-toward-zero fp16 is enough here */
            uint32_t u;
            memcpy(&u, &v, 4);
            int e = (int)((u >> 23) & 0xFF) - 127 + 15;
            uint16_t h = (uint16_t)((u >> 16) & 0x8000);
            if (e > 0) h |= (uint16_t)(e << 10 | ((u >> 13) & 0x3FF));
            put_le(b, h, 2);
        }
    }
}

/* u32 split | config.json | model.safetensors of a tiny Llama (f32, tied) or Qwen2 (f16,
 * q/k/v biases, untied) with dim 8, 1 layer, 2 heads, 1 KV head, hidden 16, vocab 32. */
static uint8_t *hf_seed(int qwen, size_t *len) {
    const int dim = 8, hid = 16, V = 32, hd = 4, kvd = 4;
    const char *dt = qwen ? "F16" : "F32";
    const int es = qwen ? 2 : 4;
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"%s\"], \"hidden_size\": %d, \"intermediate_size\": %d,"
             " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
             " \"vocab_size\": %d, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-06,"
             " \"rope_theta\": 10000.0, \"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\","
             " \"tie_word_embeddings\": %s, \"rope_scaling\": null}",
             qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM", dim, hid, V, qwen ? "false" : "true");
    struct {
        const char *name;
        int rows, cols; /* cols 0: a vector */
    } ts[] = {
        {"model.embed_tokens.weight", V, dim}, {"model.norm.weight", dim, 0},
        {"model.layers.0.input_layernorm.weight", dim, 0}, {"model.layers.0.post_attention_layernorm.weight", dim, 0},
        {"model.layers.0.self_attn.q_proj.weight", dim, dim}, {"model.layers.0.self_attn.k_proj.weight", kvd, dim},
        {"model.layers.0.self_attn.v_proj.weight", kvd, dim}, {"model.layers.0.self_attn.o_proj.weight", dim, dim},
        {"model.layers.0.mlp.gate_proj.weight", hid, dim}, {"model.layers.0.mlp.down_proj.weight", dim, hid},
        {"model.layers.0.mlp.up_proj.weight", hid, dim},
        {"lm_head.weight", V, dim}, {"model.layers.0.self_attn.q_proj.bias", dim, 0},
        {"model.layers.0.self_attn.k_proj.bias", kvd, 0}, {"model.layers.0.self_attn.v_proj.bias", kvd, 0},
    };
    const int nt = qwen ? 15 : 11;
    (void)hd;
    bytes h = {0}, d = {0};
    put(&h, "{\"__metadata__\": {\"format\": \"pt\"}", strlen("{\"__metadata__\": {\"format\": \"pt\"}"));
    uint32_t x = 99;
    for (int i = 0; i < nt; i++) {
        const long n = (long)ts[i].rows * (ts[i].cols ? ts[i].cols : 1);
        const size_t begin = d.n;
        if (strstr(ts[i].name, "norm")) { /* norms near 1 */
            for (long k = 0; k < n; k++) {
                if (qwen) put_le(&d, 0x3C00, 2);
                else put_f32(&d, 1.0f);
            }
        } else {
            put_weights(&d, n, qwen, &x);
        }
        char e[256];
        if (ts[i].cols)
            snprintf(e, sizeof e, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [%d, %d], \"data_offsets\": [%zu, %zu]}",
                     ts[i].name, dt, ts[i].rows, ts[i].cols, begin, d.n);
        else
            snprintf(e, sizeof e, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [%d], \"data_offsets\": [%zu, %zu]}",
                     ts[i].name, dt, ts[i].rows, begin, d.n);
        put(&h, e, strlen(e));
    }
    (void)es;
    put(&h, "}", 1);
    while (h.n % 8) put(&h, " ", 1); /* the data section starts 8-aligned, as safetensors pads it */
    bytes out = {0};
    put_le(&out, strlen(cfg), 4);
    put(&out, cfg, strlen(cfg));
    put_le(&out, h.n, 8);
    put(&out, h.p, h.n);
    put(&out, d.p, d.n);
    free(h.p);
    free(d.p);
    if (out.oom || h.oom || d.oom) {
        free(out.p);
        return NULL;
    }
    *len = out.n;
    return out.p;
}

static const char *const k_texts[] = {
    "Once upon a time, there was a little cat.",
    "  leading spaces and\ttabs\nnewlines  ",
    "h\xc3\xa9llo \xe2\x96\x81 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82",
    "\xff\xfe\xe2\x96 \xc3 \xf0\x9f bad utf-8",
    "<s></s><unk><0x41> special-looking pieces",
    "",
};

static const char *const k_configs[] = {
    "{\"target\": {\"model\": \"stories260K\"}, \"draft\": {\"model\": \"stories-draft\"},"
    " \"prompts\": {\"text\": [\"Once upon a time\"]}, \"sweep\": {\"k\": [1, 2, 4]}}",
    "{\"name\": \"x\", \"description\": \"d\", \"target\": {\"model\": \"t.bin\", \"tokenizer\": \"tok.bin\"},"
    " \"draft\": {\"generate\": {\"shape\": \"stories260K\", \"type\": \"f16\", \"seed\": 3, \"dim\": 16,"
    " \"layers\": 1, \"heads\": 2, \"kv_heads\": 1, \"hidden\": 32, \"vocab\": 512, \"ctx\": 64, \"tied\": true}},"
    " \"prompts\": {\"file\": \"p.txt\", \"count\": 2, \"first_sentence\": true}, \"n_predict\": 8,"
    " \"ignore_eos\": false, \"sweep\": {\"k\": [1, 32]}, \"sampling\": {\"temperature\": 0.8, \"top_k\": 40,"
    " \"top_p\": 0.9, \"seed\": 1}, \"threads\": 2, \"repetitions\": 1,"
    " \"output\": {\"json\": \"o.json\", \"svg\": \"o.svg\"}}",
    "{\"target\": {\"twin\": {\"of\": \"stories260K\", \"shape\": \"stories110M\", \"type\": \"q4_0\", \"seed\": 2,"
    " \"dim\": 1536, \"layers\": 14, \"heads\": 24, \"kv_heads\": 8, \"hidden\": 4096}},"
    " \"draft\": {\"twin\": {\"of\": \"stories-draft\", \"tokenizer\": \"tok512.bin\", \"shape\": \"stories15M\"}},"
    " \"prompts\": {\"text\": [\"a\"]}, \"sweep\": {\"k\": [4]}}",
    "{\"target\": {\"model\": 1}}",
    "[1, 2, {\"a\": [true, false, null, -1.5e300, \"\\u00e9\\ud83d\\ude42\"]}]",
};

/* chat: mode byte (format, generation prompt) then a template's marker text, or messages as
 * role-byte + content segments split at NUL (sizeof - 1 keeps the inner NULs). */
#define CHAT_SEED(s) {s, sizeof s - 1}
static const struct {
    const char *text;
    size_t len;
} k_chat[] = {
    CHAT_SEED("\x10{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'}}"),
    CHAT_SEED("\x12<|im_start|>{% if '</think>' in content %}<think>{% endif %}"),
    CHAT_SEED("\x14<|start_header_id|>Cutting Knowledge Date: December 2023 strftime_now"),
    CHAT_SEED("\x18<start_of_turn>{{ bos_token }}"),
    CHAT_SEED("\x19<|assistant|>\n<|end|>"),
    CHAT_SEED("\x16[INST] <<SYS>>\n{{ system }}\n<</SYS>>"),
    CHAT_SEED("\x07[INST] {{ m }} [/INST]"),
    CHAT_SEED("\x02\x01q1\0\x02<think>\nr1\n</think>\n\na1\0\x01q2\0\x02\n\nA</think>B"),
    CHAT_SEED("\x13\x00You are brief.\0\x01  Hello \xe3\x80\x80\0\x02\xc2\xa0 Hi \0\x03tool"),
    CHAT_SEED("\x16\x02" "first\0\x01user\0\x00\0"),
};

/* http_frames: a chunk-size byte, then pipelined requests: Content-Length and chunked bodies (with
 * an extension and a trailer), request-like bytes inside a body, an empty line before a request,
 * and heads the door refuses. */
#define HTTP_SEED(x) {x, sizeof x - 1}
static const struct {
    const char *text;
    size_t len;
} k_http[] = {
    HTTP_SEED("\x07GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\n\r\n"),
    HTTP_SEED("\x02POST /v1/completions HTTP/1.1\r\nContent-Length: 27\r\n\r\n{\"a\": \"\r\n\r\nGET / HTTP/1.1\"}\r\n"
              "GET / HTTP/1.1\r\n\r\n"),
    HTTP_SEED("\x05POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{\"a\"\r\nC\r\n: \"\r\n\r\nGET /\r\n"
              "3 \r\n\"}\n\r\n0\r\nX-Trailer: 1\r\n\r\nGET / HTTP/1.0\n\n"),
    HTTP_SEED("\x01GET / HTTP/2.0\r\n\r\n"),
    HTTP_SEED("\x03GET /a\0b HTTP/1.1\r\nX: y\r\n\r\n"),
    HTTP_SEED("\x09POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc"),
    HTTP_SEED("\x04POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
};
#undef HTTP_SEED

/* tool_calls: mode byte (syntax, constrained), 4 piece sizes, then an output: calls well-formed,
 * cut, malformed, after text. */
static const struct {
    const char *text;
    size_t len;
} k_tool_calls[] = {
    CHAT_SEED("\x00\x01\x02\x03\x05Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
              "</tool_call>\n<tool_call>{\"arguments\": {}, \"name\": \"f\"}</tool_call>"),
    CHAT_SEED("\x02\x03\x01\x07\x02<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\\\"\"]}}\n</tool_call>\n"
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci"),
    CHAT_SEED("\x01\x04\x04\x04\x04 {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"days\": 3}}\n"),
    CHAT_SEED("\x03\x01\x01\x01\x01{\"name\": \"f\", \"parameters\": -12.5e3}"),
    CHAT_SEED("\x00\x00\x00\x00\x00It is <tool_ and <tool_call> not a call </tool_call> \n"),
};

/* hf_config: the keys specdec reads, in their real shapes, and near misses. */
static const char *const k_hf_configs[] = {
    "{\"bos_token_id\": 1, \"eos_token_id\": [2, 3, 60], \"do_sample\": true}",
    "{\"eos_token_id\": 2, \"transformers_version\": \"4.41.2\"}",
    "{\"eos_token\": {\"content\": \"</s>\", \"lstrip\": false}, \"chat_template\": \"{{ '<|im_start|>' }}\"}",
    ("{\"eos_token\": \"<s>\", \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
     " {\"name\": \"default\", \"template\": \"<start_of_turn>\"}]}"),
    "{\"eos_token_id\": [1e9], \"chat_template\": 7, \"eos_token\": null}",
};

/* gbnf: llama.cpp-style grammars using every construct; schema: schemas using every keyword. */
static const char *const k_gbnf[] = {
    "root ::= object\nvalue ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n  \"{\" ws (\n    string \":\" ws value\n    (\",\" ws string \":\" ws value)*\n  )? \"}\" ws\n"
    "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n",
    "root  ::= (expr \"=\" ws term \"\\n\")+\nexpr  ::= term ([-+*/] term)*\n"
    "term  ::= ident | num | \"(\" ws expr \")\" ws\nident ::= [a-z] [a-z0-9_]* ws\nnum   ::= [0-9]+ ws\nws    ::= [ \\t\\n]*\n",
    "root ::= item+\n# comment\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n",
    "root    ::= \"1. \" move \" \" move \"\\n\" ([1-9] [0-9]? \". \" move \" \" move \"\\n\")+\n"
    "move    ::= (pawn | nonpawn | castle) [+#]?\nnonpawn ::= [NBKQR] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
    "pawn    ::= ([a-h] \"x\")? [a-h] [1-8] (\"=\" [NBKQR])?\ncastle  ::= \"O-O\" \"-O\"?\n",
    "root ::= \"a\"{2,4} . [\\u00e9-\\U0001F600]? (x | \"z\")* \"\\xff\"\nx ::= [^a-z]{,3} \"q\"{2,}\n",
};
static const char *const k_schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"exclusiveMaximum\":150},\"tags\":{\"type\":\"array\","
    "\"items\":{\"enum\":[\"a\",\"b\",null]},\"minItems\":1,\"maxItems\":3}},\"required\":[\"name\"],"
    "\"additionalProperties\":{\"type\":\"number\",\"minimum\":-1,\"maximum\":1}}",
    "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"const\":1},\"next\":{\"$ref\":\"#/$defs/n\"}}}},"
    "\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":[\"string\",\"null\"],\"pattern\":\"^(ab|[c-e]\\\\d{2,3})+x?$\"}]}",
    "{\"oneOf\":[{\"type\":\"string\",\"format\":\"date-time\"},{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"}],"
    "\"items\":false}],\"title\":\"t\",\"x-k\":1}",
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"e\":{\"format\":\"email\"},"
    "\"d\":{\"type\":\"string\",\"format\":\"date\"},\"n\":{\"type\":\"number\",\"exclusiveMinimum\":0},"
    "\"t\":{\"allOf\":[{\"type\":\"boolean\",\"nullable\":true}]}},\"additionalProperties\":false}",
    "{\"definitions\":{\"c\":{\"enum\":[1,\"x\",[true]]}},\"type\":\"array\",\"items\":[{\"$ref\":\"#/definitions/c\"}],"
    "\"additionalItems\":{\"type\":\"integer\",\"minimum\":-20,\"maximum\":300}}",
};

int sd_fuzz_make_seeds(const char *target, sd_fuzz_seed **out, int *n) {
    seeds s = {0};
    *out = NULL;
    *n = 0;
    size_t len = 0;
    char name[64];
    if (!strcmp(target, "gguf") || !strcmp(target, "model_gguf")) {
        add_synth_models(&s);
        uint8_t *e = empty_gguf(&len);
        add(&s, "empty.gguf", e, len);
        if (!strcmp(target, "gguf")) {
            uint8_t *o = odd_gguf(3, &len);
            add(&s, "odd_v3.gguf", o, len);
            o = odd_gguf(2, &len);
            add(&s, "odd_v2.gguf", o, len);
        }
    } else if (!strcmp(target, "llama2c")) {
        add_llama2c(&s, "shared_280.bin", 280, 280);
        add_llama2c(&s, "unshared_40.bin", -40, 40);
    } else if (!strcmp(target, "tokenizer")) {
        for (size_t i = 0; i < sizeof k_texts / sizeof k_texts[0]; i++)
            for (int v = 0; v < 6; v++) { /* every vocabulary, BOS on for odd ones */
                uint8_t mode = (uint8_t)(v | (v & 1) << 3);
                bytes b = {0};
                put(&b, &mode, 1);
                put(&b, k_texts[i], strlen(k_texts[i]));
                if (b.oom) free(b.p);
                snprintf(name, sizeof name, "text%zu_mode%u", i, mode);
                add(&s, name, b.oom ? NULL : b.p, b.n);
            }
        for (int v = 0; v < 6; v++) { /* special tokens written in the text, parsed (bit 4) */
            static const char specials[] = "<s>Once</s> <unk>x<|endoftext|>\n<|im_start|>";
            uint8_t mode = (uint8_t)(v | 16 | (v & 1) << 3);
            bytes b = {0};
            put(&b, &mode, 1);
            put(&b, specials, sizeof specials - 1);
            if (b.oom) free(b.p);
            snprintf(name, sizeof name, "specials_mode%u", mode);
            add(&s, name, b.oom ? NULL : b.p, b.n);
        }
        const int32_t ids[] = {1, 2, 3, 259, 300, 511, 512, -1, INT32_MIN, INT32_MAX, 0, 4, 100};
        bytes b = {0};
        put_le(&b, 2 | 8, 1); /* vocabulary 2, BOS on */
        for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) put_le(&b, (uint32_t)ids[i], 4);
        if (b.oom) free(b.p);
        add(&s, "ids", b.oom ? NULL : b.p, b.n);
    } else if (!strcmp(target, "tokenizer_file")) {
        const int sizes[] = {300, 32, 3};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            uint8_t *t = llama2c_tokenizer(sizes[i], &len);
            if (!t) {
                s.oom = 1;
                break;
            }
            snprintf(name, sizeof name, "synth_%d.bin", sizes[i]);
            add_prefixed(&s, name, (uint32_t)sizes[i], t, len);
            free(t);
        }
    } else if (!strcmp(target, "safetensors")) {
        for (int q = 0; q < 2; q++) {
            uint8_t *h = hf_seed(q, &len); /* before len is read */
            add(&s, q ? "qwen2_f16_bias" : "llama_f32_tied", h, len);
        }
    } else if (!strcmp(target, "hf_tokenizer")) {
        for (int nv = 32; nv <= 300; nv += 268) {
            char *j = sd_fuzz_hf_tokenizer_json(nv, &len);
            bytes b = {0};
            put_le(&b, 0, 1);
            if (j) put(&b, j, len);
            free(j);
            if (!j || b.oom) {
                free(b.p);
                b.p = NULL;
            }
            snprintf(name, sizeof name, "synth_%d.json", nv);
            add(&s, name, b.p, b.n);
        }
    } else if (!strcmp(target, "chat")) {
        for (size_t i = 0; i < sizeof k_chat / sizeof k_chat[0]; i++) {
            snprintf(name, sizeof name, "chat%zu", i);
            add_copy(&s, name, k_chat[i].text, k_chat[i].len);
        }
    } else if (!strcmp(target, "tool_calls")) {
        for (size_t i = 0; i < sizeof k_tool_calls / sizeof k_tool_calls[0]; i++) {
            snprintf(name, sizeof name, "tool_calls%zu", i);
            add_copy(&s, name, k_tool_calls[i].text, k_tool_calls[i].len);
        }
    } else if (!strcmp(target, "hf_config")) {
        for (size_t i = 0; i < sizeof k_hf_configs / sizeof k_hf_configs[0]; i++) {
            snprintf(name, sizeof name, "hf_config%zu.json", i);
            add_copy(&s, name, k_hf_configs[i], strlen(k_hf_configs[i]));
        }
    } else if (!strcmp(target, "gbnf") || !strcmp(target, "schema")) {
        int g = !strcmp(target, "gbnf");
        size_t cnt = g ? sizeof k_gbnf / sizeof k_gbnf[0] : sizeof k_schemas / sizeof k_schemas[0];
        for (size_t i = 0; i < cnt; i++) {
            const char *t = g ? k_gbnf[i] : k_schemas[i];
            snprintf(name, sizeof name, "%s%zu", target, i);
            add_copy(&s, name, t, strlen(t));
        }
    } else if (!strcmp(target, "http_frames")) {
        for (size_t i = 0; i < sizeof k_http / sizeof k_http[0]; i++) {
            snprintf(name, sizeof name, "http_frames%zu", i);
            add_copy(&s, name, k_http[i].text, k_http[i].len);
        }
    } else if (!strcmp(target, "config")) {
        for (size_t i = 0; i < sizeof k_configs / sizeof k_configs[0]; i++) {
            snprintf(name, sizeof name, "config%zu.json", i);
            add_copy(&s, name, k_configs[i], strlen(k_configs[i]));
        }
    } else {
        return -1;
    }
    if (s.oom) {
        sd_fuzz_free_seeds(s.v, s.n);
        return -1;
    }
    *out = s.v;
    *n = s.n;
    return 0;
}

void sd_fuzz_free_seeds(sd_fuzz_seed *s, int n) {
    for (int i = 0; i < n; i++) free(s[i].data);
    free(s);
}
