/* Fuzz bodies for the model loaders (GGUF image; llama2.c checkpoint plus tokenizer.bin):
 * a model that loads must describe itself and run a two-token prefill and one decode step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "specdec/context.h"
#include "specdec/model.h"

#define FUZZ_CTX 16
/* Forward passes are skipped above this much KV cache + logits (bytes): the loader has
 * already run, and a hostile header must not turn one input into seconds of arithmetic. */
#define FUZZ_MAX_STATE (8u << 20)

void sd_fuzz_exercise_model(sd_model *m) {
    const sd_hparams *hp = sd_model_hparams(m);
    SD_FUZZ_CHECK(hp->dim > 0 && hp->n_layers > 0 && hp->n_heads > 0 && hp->n_kv_heads > 0);
    SD_FUZZ_CHECK(hp->n_heads % hp->n_kv_heads == 0);
    SD_FUZZ_CHECK(hp->head_dim > 0 && hp->vocab_size > 0 && hp->hidden_dim > 0);
    const sd_tokenizer *tok = sd_model_tokenizer(m);
    SD_FUZZ_CHECK(tok != NULL && sd_tokenizer_n_vocab(tok) <= hp->vocab_size);

    /* describe() prints header-derived text: it must not crash or read out of bounds */
    char *txt = NULL;
    size_t txt_len = 0;
    FILE *f = open_memstream(&txt, &txt_len);
    if (f) {
        sd_model_describe(m, f);
        fclose(f);
    }
    free(txt);
    (void)sd_model_bytes_per_token(m);
    (void)sd_model_weight_bytes(m);

    const double state = 2.0 * hp->n_layers * FUZZ_CTX * hp->n_kv_heads * hp->head_dim * 4.0 +
                         3.0 * hp->vocab_size * 4.0;
    if (state > FUZZ_MAX_STATE) return;

    sd_context *c = NULL;
    sd_context_params cp = sd_context_default_params();
    cp.n_ctx = FUZZ_CTX;
    cp.n_batch = 4;
    sd_clear_error();
    if (sd_context_create(m, &cp, &c) != SD_OK) {
        sd_fuzz_check_error();
        return;
    }
    SD_FUZZ_CHECK(sd_context_n_ctx(c) == FUZZ_CTX);
    float *logits = malloc(2 * (size_t)hp->vocab_size * sizeof(float));
    if (!logits) {
        sd_context_free(c);
        return;
    }
    int32_t bos = sd_tokenizer_bos(tok);
    int32_t toks[2] = {bos >= 0 ? bos : 0, hp->vocab_size - 1};
    sd_clear_error();
    sd_status st = sd_context_forward(c, 0, toks, 2, logits, 1);
    if (st != SD_OK) {
        SD_FUZZ_CHECK(st == SD_ERR_NUMERIC); /* hostile weights may overflow; nothing else may fail */
        SD_FUZZ_CHECK(sd_context_seq_len(c, 0) == 0);
        sd_fuzz_check_error();
    } else {
        SD_FUZZ_CHECK(sd_context_seq_len(c, 0) == 2);
        for (int i = 0; i < 2 * hp->vocab_size; i++) SD_FUZZ_CHECK(isfinite(logits[i]));
        int32_t next = toks[1] / 2;
        sd_clear_error();
        st = sd_context_forward(c, 0, &next, 1, logits, 0);
        if (st != SD_OK) {
            SD_FUZZ_CHECK(st == SD_ERR_NUMERIC);
            sd_fuzz_check_error();
        }
        /* out-of-vocabulary ids are refused, not looked up */
        int32_t bad = hp->vocab_size;
        sd_clear_error();
        SD_FUZZ_CHECK(sd_context_forward(c, 0, &bad, 1, logits, 0) == SD_ERR_INVALID_ARG);
        sd_fuzz_check_error();
    }
    free(logits);
    sd_context_free(c);

    /* the model's own tokenizer on a fixed prompt */
    int32_t ids[64];
    int n = 0;
    sd_clear_error();
    if (sd_tokenizer_encode(tok, "Once upon a time", 16, 1, ids, 64, &n) == SD_OK) {
        char piece[1024];
        for (int i = 0; i < n; i++) {
            SD_FUZZ_CHECK(ids[i] >= 0 && ids[i] < sd_tokenizer_n_vocab(tok));
            int w = sd_tokenizer_decode(tok, i ? ids[i - 1] : -1, ids[i], piece, sizeof piece);
            SD_FUZZ_CHECK(w >= 0 && (size_t)w <= sizeof piece);
        }
    } else {
        sd_fuzz_check_error();
    }
}

int sd_fuzz_model_gguf(const uint8_t *data, size_t size) {
    sd_fuzz_init();
    sd_model_params p = sd_model_default_params();
    sd_model *m = (sd_model *)1;
    sd_clear_error();
    sd_status st = sd_model_load_gguf_mem(data, size, "fuzz.gguf", &p, &m);
    if (st != SD_OK) {
        SD_FUZZ_CHECK(m == NULL);
        sd_fuzz_check_error();
        return 0;
    }
    sd_fuzz_exercise_model(m);
    sd_model_free(m);
    return 0;
}

/* Input: u32 split, then the checkpoint (split mod the rest bytes of it), then tokenizer.bin.
 * Both parts are copied into exact-size allocations so an overread of either is caught. */
int sd_fuzz_llama2c(const uint8_t *data, size_t size) {
    sd_fuzz_init();
    if (size < 4) return 0;
    const size_t rest = size - 4;
    const size_t split = (size_t)sd_fuzz_u32(data, size) % (rest + 1);
    uint8_t *model = malloc(split ? split : 1);
    uint8_t *tok = malloc(rest - split ? rest - split : 1);
    if (!model || !tok) {
        free(model);
        free(tok);
        return 0;
    }
    memcpy(model, data + 4, split);
    memcpy(tok, data + 4 + split, rest - split);
    sd_model *m = (sd_model *)1;
    sd_clear_error();
    sd_status st = sd_model_load_llama2c_mem(model, split, "fuzz.bin", tok, rest - split, &m);
    free(tok); /* the tokenizer is copied */
    if (st != SD_OK) {
        SD_FUZZ_CHECK(m == NULL);
        sd_fuzz_check_error();
    } else {
        sd_fuzz_exercise_model(m);
        sd_model_free(m);
    }
    free(model);
    return 0;
}
