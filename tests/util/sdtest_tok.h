/* Tokenizer test helpers shared by test_tokenizer.c and test_bpe.c: encode/decode wrappers,
 * readable failure dumps, round trips, and llama.cpp's vocab test vectors (.inp/.out). */
#ifndef SDTEST_TOK_H
#define SDTEST_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "specdec/gguf.h"
#include "specdec/tokenizer.h"

#define SDTEST_MAX_CASES 64
#define SDTEST_MAX_CASE_IDS 512

/* First occurrence of needle[0..m) in hay[0..n) (memmem is a GNU extension), or NULL. */
const char *sdtest_find(const char *hay, size_t n, const char *needle, size_t m);

/* Loads the tokenizer of the GGUF file ../shared/<rel> (skips the test when absent). The GGUF
 * image is freed before the tokenizer is used, so ASan catches any piece that still points
 * into it. Fails the test on error, printing the loader's message. */
sd_tokenizer *sdtest_load_gguf_tokenizer(const char *rel);

/* Loads ../shared/<rel> as a llama2.c tokenizer.bin (vocab 0: counted from the file) or as a
 * Hugging Face tokenizer.json with the given BOS/EOS; skips when absent, fails on error. */
sd_tokenizer *sdtest_load_llama2c_tokenizer(const char *rel, int vocab);
sd_tokenizer *sdtest_load_hf_tokenizer(const char *rel, int32_t bos, int32_t eos);

/* Writes w's GGUF image to memory (freeing w), parses it under `name` and returns
 * sd_tokenizer_from_gguf's status; the image is freed before the tokenizer is used. */
sd_status sdtest_tokenizer_from_writer(sd_gguf_writer *w, const char *name, sd_tokenizer **out);

/* Encodes into a malloc'd array sized by a first counting call; *n is the id count. */
int32_t *sdtest_encode(const sd_tokenizer *t, const char *s, size_t len, int bos, int *n);

/* Decodes a sequence the way the engine prints it: each token after its predecessor.
 * Returns a malloc'd NUL-terminated string of *len bytes. */
char *sdtest_decode_all(const sd_tokenizer *t, const int32_t *ids, int n, size_t *len);

/* Print `label "text"` (control characters escaped) and `label [id id ...]` via print_error. */
void sdtest_print_text(const char *label, const char *s, size_t n);
void sdtest_print_ids(const char *label, const int32_t *ids, int n);

/* Encoding s gives exactly want[0..n_want); else prints input, expected and got, and fails. */
void sdtest_expect_ids(const sd_tokenizer *t, const char *s, int bos, const int32_t *want, int n_want);

/* Whether s[0..len) encodes (with BOS when `bos`) and decodes back to itself; prints the
 * input, the decoded text and the ids under `name` when not. */
int sdtest_roundtrip_ok(const sd_tokenizer *t, const char *s, size_t len, int bos, const char *name);

/* A random byte string for round trips: a length below cap, then each byte from
 * alphabet[0..n_alphabet), both drawn from the LCG state *seed (advanced). Returns the length. */
size_t sdtest_random_bytes(uint32_t *seed, const unsigned char *alphabet, size_t n_alphabet, char *s, size_t cap);

/* llama.cpp's test vectors: .inp is every input followed by "\n__ggml_vocab_test__\n";
 * .out holds one line of space-separated ids per input (no BOS). */
typedef struct {
    char *inp, *outp;
    int n;
    const char *text[SDTEST_MAX_CASES];
    size_t len[SDTEST_MAX_CASES];
    int32_t ids[SDTEST_MAX_CASES][SDTEST_MAX_CASE_IDS];
    int n_ids[SDTEST_MAX_CASES];
} sdtest_vocab_cases;

/* Reads ../shared/<vocab>.inp and <vocab>.out (skips the test when absent). */
sdtest_vocab_cases *sdtest_load_vocab_cases(const char *vocab);
void sdtest_free_vocab_cases(sdtest_vocab_cases *c);

/* Runs every case of ../shared/<vectors> through t: the ids (sdtest_vocab_case_ok) and, when
 * roundtrip, decode(encode(x)) == x. Returns the number of failures (each one printed). */
int sdtest_vocab_case_failures(const sd_tokenizer *t, const char *vectors, int roundtrip, const char *name);

/* ../shared/corpora/tinystories.txt (skips when absent): malloc'd, *len bytes. */
char *sdtest_load_corpus(size_t *len);

/* Whether case i encodes (no BOS) to its ids; prints "<name>: vocab case <i> differs" with the
 * input, expected and got ids when not. */
int sdtest_vocab_case_ok(const sd_tokenizer *t, const sdtest_vocab_cases *c, int i, const char *name);

#endif
