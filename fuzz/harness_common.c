/* Helpers shared by the fuzz harnesses: property failures, the one-thread setup, the check
 * that error messages are printable, and shared-test-data lookup. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/io.h"
#include "harness.h"
#include "specdec/model.h"
#include "specdec/status.h"

const sd_fuzz_target sd_fuzz_targets[] = {
    {"gguf", sd_fuzz_gguf},
    {"model_gguf", sd_fuzz_model_gguf},
    {"llama2c", sd_fuzz_llama2c},
    {"tokenizer", sd_fuzz_tokenizer},
    {"tokenizer_file", sd_fuzz_tokenizer_file},
    {"config", sd_fuzz_config},
    {"safetensors", sd_fuzz_safetensors},
    {"hf_tokenizer", sd_fuzz_hf_tokenizer},
    {"chat", sd_fuzz_chat},
    {"tool_calls", sd_fuzz_tool_calls},
    {"hf_config", sd_fuzz_hf_config},
    {"gbnf", sd_fuzz_gbnf},
    {"schema", sd_fuzz_schema},
    {"http_frames", sd_fuzz_http_frames},
    {NULL, NULL},
};

void sd_fuzz_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "fuzz property violated: %s (%s:%d); last error: %s\n", cond, file, line,
            sd_last_error());
    abort(); /* harness code, not library code: the crash is the report */
}

void sd_fuzz_init(void) {
    static int done;
    if (done) return;
    done = 1;
    omp_set_num_threads(1); /* every context the harnesses make (n_threads 0) */
}

/* Length of the valid UTF-8 sequence at p (1..4), 0 when invalid (overlong, surrogate,
 * above U+10FFFF, truncated). */
static size_t utf8_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
    else return 0;
    if (len > n) return 0;
    unsigned cp = c & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

void sd_fuzz_check_error(void) {
    const char *m = sd_last_error();
    size_t n = strnlen(m, 4096);
    SD_FUZZ_CHECK(n > 0);    /* every failure says why */
    SD_FUZZ_CHECK(n < 4096); /* and the per-thread buffer is terminated */
    const unsigned char *u = (const unsigned char *)m;
    for (size_t i = 0; i < n;) {
        SD_FUZZ_CHECK(u[i] >= 0x20 && u[i] != 0x7F); /* no terminal control sequences */
        size_t l = utf8_len(u + i, n - i);
        SD_FUZZ_CHECK(l > 0);
        /* C1 controls (U+0080..U+009F) are terminal controls too */
        SD_FUZZ_CHECK(!(l == 2 && u[i] == 0xC2 && u[i + 1] < 0xA0));
        i += l;
    }
}

const char *sd_fuzz_shared(const char *rel) {
    static char buf[4096];
    const char *env = getenv("SPECDEC_SHARED");
    const char *dirs[] = {env, "../shared", "../../shared"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        if (!dirs[i] || !dirs[i][0]) continue;
        snprintf(buf, sizeof buf, "%s/%s", dirs[i], rel);
        if (access(buf, R_OK) == 0) return buf;
    }
    return NULL;
}

uint8_t *sd_fuzz_read_file(const char *path, size_t *len) {
    char *b = NULL;
    if (sd_file_read(path, 0, &b, len) != SD_OK) return NULL;
    return (uint8_t *)b;
}

uint32_t sd_fuzz_u32(const uint8_t *data, size_t size) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4 && i < size; i++) v |= (uint32_t)data[i] << (8 * i);
    return v;
}
