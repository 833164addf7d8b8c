/* Fuzz body for bench configurations: arbitrary bytes as JSON text (not NUL-terminated). */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "specdec/bench_config.h"

int sd_fuzz_config(const uint8_t *data, size_t size) {
    /* exact-size copy: the parser gets (text, len) and must not look for a terminator */
    char *text = malloc(size ? size : 1);
    SD_FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    sd_bench_config c;
    sd_clear_error();
    sd_status st = sd_bench_config_parse(text, size, "fuzz.json", &c);
    free(text); /* the config copies what it keeps */
    if (st != SD_OK) {
        sd_fuzz_check_error();
        SD_FUZZ_CHECK(c.file == NULL && c.prompts == NULL && c.name == NULL); /* freed and zeroed */
        return 0;
    }
    SD_FUZZ_CHECK(c.file && c.name && c.out_json && c.out_svg);
    SD_FUZZ_CHECK(c.n_predict >= 1 && c.repetitions >= 1 && c.threads >= 0);
    SD_FUZZ_CHECK(c.n_k >= 0 && c.n_k <= SD_MAX_DRAFT);
    for (int i = 0; i < c.n_k; i++) SD_FUZZ_CHECK(c.k[i] >= 1 && c.k[i] <= SD_MAX_DRAFT);
    SD_FUZZ_CHECK(c.n_prompts >= 0);
    for (int i = 0; i < c.n_prompts; i++) SD_FUZZ_CHECK(c.prompts[i] != NULL);
    volatile size_t sink = strlen(c.name) + strlen(c.file) + strlen(c.out_json) + strlen(c.out_svg);
    (void)sink;
    sd_bench_config_free(&c);
    SD_FUZZ_CHECK(c.file == NULL);
    return 0;
}
