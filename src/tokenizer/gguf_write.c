/* Writes a loaded tokenizer back out as GGUF tokenizer.ggml.* metadata (used by the model
 * converter): SentencePiece-style vocabularies as llama.cpp's "llama" model, byte-level BPE
 * as "gpt2" with merges and a tokenizer.ggml.pre name, and HF BPE over U+2581-escaped text
 * (byte fallback, no byte-level mapping) as "llama" with merge-rank scores, as llama.cpp's
 * converter does, plus the merges and specdec.tokenizer.* keys that let specdec reload the
 * exact BPE coder (llama.cpp ignores both). */
#include <stdlib.h>
#include <string.h>

#include "specdec/convert.h"
#include "tokenizer/tok_internal.h"

static int by_rank(const void *pa, const void *pb) {
    const struct sd_bpe_merge *a = pa, *b = pb;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

/* The BPE-only keys: merges as "left right" in rank order (rebuilt from the merge table;
 * merges the loader dropped could never fire), pre-tokenizer and flags. */
static sd_status write_bpe(const sd_tokenizer *t, sd_gguf_writer *w, float *scores) {
    const int n = t->n_merges;
    struct sd_bpe_merge *m = malloc(((size_t)n + 1) * sizeof *m);
    char **strs = calloc((size_t)n + 1, sizeof *strs);
    sd_status st = SD_OK;
    if (!m || !strs) {
        st = sd_fail(SD_ERR_NOMEM, "tokenizer writer: no memory for %d merges", n);
        goto out;
    }
    int k = 0;
    for (uint32_t i = 0; t->merges && i <= t->merge_mask; i++)
        if (t->merges[i].rank >= 0 && k < n) m[k++] = t->merges[i];
    qsort(m, (size_t)k, sizeof *m, by_rank);
    for (int i = 0; i < k; i++) {
        int32_t a = (int32_t)(m[i].key >> 32), b = (int32_t)(uint32_t)m[i].key;
        strs[i] = malloc((size_t)t->len[a] + t->len[b] + 2);
        if (!strs[i]) {
            st = sd_fail(SD_ERR_NOMEM, "tokenizer writer: no memory for merges");
            goto out;
        }
        memcpy(strs[i], t->text + t->off[a], t->len[a]);
        strs[i][t->len[a]] = ' ';
        memcpy(strs[i] + t->len[a] + 1, t->text + t->off[b], (size_t)t->len[b] + 1);
        /* SentencePiece-style score for llama.cpp: the earlier the merge, the higher */
        if (scores && scores[m[i].id] == -(float)n - 1) scores[m[i].id] = -(float)i;
    }
    if ((st = sd_gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)strs, (uint64_t)k))) goto out;
    if (t->byte_level) {
        char name[32];
        const char *pre = sd_bpe_pre_name(t, name);
        if (!pre) {
            st = sd_fail(SD_ERR_UNSUPPORTED,
                         "tokenizer writer: this byte-level pre-tokenizer has no tokenizer.ggml.pre name");
            goto out;
        }
        st = sd_gguf_set_str(w, "tokenizer.ggml.pre", pre);
        goto out;
    }
    int32_t steps[sizeof t->pre];
    for (int i = 0; i < t->n_pre; i++) steps[i] = t->pre[i];
    if ((st = sd_gguf_set_bool(w, "specdec.tokenizer.bpe", 1)) ||
        (st = sd_gguf_set_arr_i32(w, "specdec.tokenizer.pre_steps", steps, (uint64_t)t->n_pre)) ||
        (st = sd_gguf_set_bool(w, "specdec.tokenizer.prefix_first", t->prefix_first)) ||
        (st = sd_gguf_set_bool(w, "specdec.tokenizer.prefix_missing", t->prefix_missing)) ||
        (st = sd_gguf_set_bool(w, "specdec.tokenizer.byte_fallback", t->byte_fallback)) ||
        (st = sd_gguf_set_bool(w, "specdec.tokenizer.fuse_unk", t->fuse_unk)) ||
        (st = sd_gguf_set_bool(w, "specdec.tokenizer.ignore_merges", t->ignore_merges)))
        goto out;
out:
    for (int i = 0; strs && i < n; i++) free(strs[i]);
    free(strs);
    free(m);
    return st;
}

sd_status sd_tokenizer_write_gguf(const sd_tokenizer *t, sd_gguf_writer *w) {
    if (!t || !w) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer writer: NULL argument");
    const int bpe = t->kind == SD_TOKENIZER_BPE, bl = bpe && t->byte_level;
    /* What GGUF "gpt2" (llama.cpp's llm_tokenizer_bpe) cannot say. */
    if (bl && (t->bl_prefix || t->escape_spaces || t->add_space_prefix || t->byte_fallback || t->fuse_unk))
        return sd_fail(SD_ERR_UNSUPPORTED,
                       "tokenizer writer: byte-level BPE with add_prefix_space, U+2581 escaping, byte "
                       "fallback or fuse_unk has no GGUF \"gpt2\" form");
    if (bpe && !bl && !t->escape_spaces)
        return sd_fail(SD_ERR_UNSUPPORTED,
                       "tokenizer writer: BPE that is neither byte-level nor U+2581-escaped has no GGUF form");
    const int n = t->n_vocab;
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    float *scores = malloc((size_t)n * sizeof *scores);
    int32_t *types = malloc((size_t)n * sizeof *types);
    sd_status st = SD_OK;
    if (!pieces || !scores || !types) {
        st = sd_fail(SD_ERR_NOMEM, "tokenizer writer: no memory for %d pieces", n);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        pieces[i] = t->text + t->off[i]; /* NUL-terminated in the store */
        /* non-byte-level BPE: merge results get -rank in write_bpe, other normal pieces
         * rank below every merge */
        scores[i] = bpe && !bl ? (t->type[i] == SD_TOKEN_NORMAL ? -(float)t->n_merges - 1 : 0.0f) : t->score[i];
        types[i] = t->type[i];
    }
    if (bpe && !bl && (st = write_bpe(t, w, scores))) goto out;
    if (bl && (st = write_bpe(t, w, NULL))) goto out;
    if ((st = sd_gguf_set_str(w, "tokenizer.ggml.model", bl ? "gpt2" : "llama")) ||
        (st = sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", pieces, (uint64_t)n)) ||
        (!bl && (st = sd_gguf_set_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)n))) ||
        (st = sd_gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)n)))
        goto out;
    /* Absent ids are written as llama.cpp writes them: 0xFFFFFFFF ("none"). */
    const struct {
        const char *key;
        int32_t id;
    } ids[] = {{"tokenizer.ggml.bos_token_id", t->bos},
               {"tokenizer.ggml.eos_token_id", t->eos},
               {"tokenizer.ggml.unknown_token_id", t->unk},
               {"tokenizer.ggml.padding_token_id", t->pad}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if ((st = sd_gguf_set_u32(w, ids[i].key, ids[i].id < 0 ? UINT32_MAX : (uint32_t)ids[i].id))) goto out;
    if ((st = sd_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos)) ||
        (st = sd_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", 0)))
        goto out;
    st = sd_gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", t->add_space_prefix);
    if (st == SD_OK && t->chat_template) st = sd_gguf_set_str(w, "tokenizer.chat_template", t->chat_template);
out:
    free(pieces);
    free(scores);
    free(types);
    return st;
}
