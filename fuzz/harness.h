/* Fuzz harness bodies for specdec's untrusted-input parsers, callable without libFuzzer:
 * the libFuzzer mains (fuzz_*.c) and tests/test_fuzz_regressions.c both call them. */
#ifndef SPECDEC_FUZZ_HARNESS_H
#define SPECDEC_FUZZ_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* Each returns 0 (libFuzzer's "keep going"); a violated property aborts the process after
 * printing what failed, which libFuzzer records as a crash and the test as a failure. */
int sd_fuzz_gguf(const uint8_t *data, size_t size);           /* sd_gguf_parse + full walk */
int sd_fuzz_model_gguf(const uint8_t *data, size_t size);     /* GGUF model load + a forward */
int sd_fuzz_llama2c(const uint8_t *data, size_t size);        /* u32 split | checkpoint | tokenizer.bin */
int sd_fuzz_tokenizer(const uint8_t *data, size_t size);      /* mode byte | text / int32 ids */
int sd_fuzz_tokenizer_file(const uint8_t *data, size_t size); /* u32 vocab size | tokenizer.bin */
int sd_fuzz_config(const uint8_t *data, size_t size);         /* bench config JSON text */

int sd_fuzz_safetensors(const uint8_t *data, size_t size);     /* u32 split | config.json | safetensors */
int sd_fuzz_hf_tokenizer(const uint8_t *data, size_t size);    /* special-id byte | tokenizer.json */
int sd_fuzz_chat(const uint8_t *data, size_t size);            /* mode byte | chat template / messages */
int sd_fuzz_tool_calls(const uint8_t *data, size_t size);      /* mode byte | piece sizes | model output */
int sd_fuzz_hf_config(const uint8_t *data, size_t size);       /* generation/tokenizer_config.json */
int sd_fuzz_gbnf(const uint8_t *data, size_t size);            /* GBNF grammar text, then matching */
int sd_fuzz_schema(const uint8_t *data, size_t size);          /* JSON Schema text, then matching */
int sd_fuzz_http_frames(const uint8_t *data, size_t size);     /* chunk-size byte | a client's request stream */

typedef struct {
    const char *name; /* "gguf": the fuzz_gguf binary, tests/fuzz-regressions/gguf/ */
    int (*fn)(const uint8_t *data, size_t size);
} sd_fuzz_target;

/* Every target, terminated by {NULL, NULL}. */
extern const sd_fuzz_target sd_fuzz_targets[];

/* ---- seeds (fuzz/seeds.c): inputs built with the project's own writers ---- */
typedef struct {
    char name[64];
    uint8_t *data;
    size_t len;
} sd_fuzz_seed;

/* Seeds for one target into a malloc'd array (*n entries); generated, no files read.
 * Returns 0, or -1 on an unknown target or allocation failure. */
int sd_fuzz_make_seeds(const char *target, sd_fuzz_seed **out, int *n);
void sd_fuzz_free_seeds(sd_fuzz_seed *s, int n);

/* ---- helpers shared by the harnesses (fuzz/harness_common.c) ---- */
void sd_fuzz_fail(const char *cond, const char *file, int line);
#define SD_FUZZ_CHECK(c) ((c) ? (void)0 : sd_fuzz_fail(#c, __FILE__, __LINE__))

/* Shared checks: encode (count, exact and truncated buffers; decode(encode(x)) == x when
 * roundtrip is set and only normal/byte pieces came out) and decode (ids read from data,
 * in and out of range, into exact-size buffers). Abort on a violation. */
struct sd_tokenizer;
void sd_fuzz_check_encode(const struct sd_tokenizer *t, const char *text, size_t len, int add_bos, int roundtrip);
/* The same with parse_special (sd_tokenizer_tokenize). */
void sd_fuzz_check_tokenize(const struct sd_tokenizer *t, const char *text, size_t len, int add_bos,
                            int parse_special, int roundtrip);
void sd_fuzz_check_decode(const struct sd_tokenizer *t, const uint8_t *data, size_t size);
/* Runs a loaded model: hyperparameter sanity, describe, a 2-token prefill and a decode step
 * (n_ctx must be 16; skipped above a few MB of KV/logits), its tokenizer on a prompt. */
struct sd_model;
void sd_fuzz_exercise_model(struct sd_model *m);
/* A small SentencePiece-style BPE tokenizer.json (Llama conventions) of n_vocab >= 8 ids. */
char *sd_fuzz_hf_tokenizer_json(int n_vocab, size_t *len);

/* One thread for every kernel: deterministic, cheap, and what libFuzzer's model assumes. */
void sd_fuzz_init(void);

/* Checks that sd_last_error() is a non-empty, bounded, printable message (no control bytes,
 * valid UTF-8): errors about hostile files end up on a terminal. */
void sd_fuzz_check_error(void);

/* Path of rel under the shared test data ($SPECDEC_SHARED, else ../shared, ../../shared),
 * or NULL when absent. Static storage, overwritten by the next call. */
const char *sd_fuzz_shared(const char *rel);

/* Reads a whole file (malloc'd; NULL on error). */
uint8_t *sd_fuzz_read_file(const char *path, size_t *len);

/* Little-endian u32 from the first 4 bytes (missing bytes read as 0). */
uint32_t sd_fuzz_u32(const uint8_t *data, size_t size);

#endif
