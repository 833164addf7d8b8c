/* Writes a loaded SentencePiece-style tokenizer back out as GGUF tokenizer.ggml.* metadata,
 * the keys llama.cpp's "llama" vocabulary loader reads (used by the model converter). */
#include <stdlib.h>
#include <string.h>

#include "specdec/convert.h"
#include "tokenizer/tok_internal.h"

sd_status sd_tokenizer_write_gguf(const sd_tokenizer *t, sd_gguf_writer *w) {
    if (!t || !w) return sd_fail(SD_ERR_INVALID_ARG, "tokenizer writer: NULL argument");
    if (t->kind != SD_TOKENIZER_SPM)
        return sd_fail(SD_ERR_UNSUPPORTED,
                       "tokenizer writer: only SentencePiece-style (GGUF \"llama\") vocabularies can be written yet");
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
        scores[i] = t->score[i];
        types[i] = t->type[i];
    }
    if ((st = sd_gguf_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (st = sd_gguf_set_arr_str(w, "tokenizer.ggml.tokens", pieces, (uint64_t)n)) ||
        (st = sd_gguf_set_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)n)) ||
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
out:
    free(pieces);
    free(scores);
    free(types);
    return st;
}
