/* Replays every fuzz reproducer in tests/fuzz-regressions/<target>/ and the generated seed
 * corpus (plus truncations and byte corruptions of it) through the fuzz harness bodies, so
 * each bug libFuzzer found stays fixed in the normal and the ASan builds. */
#include "sdtest.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "specdec/model.h"

#ifndef SD_FUZZ_REGRESSIONS_DIR
#define SD_FUZZ_REGRESSIONS_DIR "tests/fuzz-regressions"
#endif

/* Runs fn over a copy of exactly len bytes, so a read past the input is an ASan report. */
static void run_exact(int (*fn)(const uint8_t *, size_t), const uint8_t *data, size_t len) {
    uint8_t *c = malloc(len ? len : 1);
    assert_non_null(c);
    if (len) memcpy(c, data, len);
    assert_int_equal(fn(c, len), 0);
    free(c);
}

/* Reproducers committed under tests/fuzz-regressions (raise it when adding one). */
#define SD_FUZZ_MIN_REPRODUCERS 12

static void test_regression_files(void **state) {
    (void)state;
    int total = 0;
    for (const sd_fuzz_target *t = sd_fuzz_targets; t->name; t++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", SD_FUZZ_REGRESSIONS_DIR, t->name);
        DIR *d = opendir(dir);
        if (!d) continue; /* no reproducers for this target */
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            size_t len = 0;
            void *buf = sdtest_read_file(path, &len);
            assert_non_null(buf);
            fprintf(stderr, "replay %s/%s (%zu bytes)\n", t->name, e->d_name, len);
            run_exact(t->fn, buf, len);
            free(buf);
            n++;
        }
        closedir(d);
        total += n;
    }
    fprintf(stderr, "replayed %d fuzz reproducers\n", total);
    /* A wrong directory or a lost target name would otherwise replay nothing and pass. */
    if (total < SD_FUZZ_MIN_REPRODUCERS)
        fail_msg("replayed %d reproducers from %s, expected at least %d", total, SD_FUZZ_REGRESSIONS_DIR,
                 SD_FUZZ_MIN_REPRODUCERS);
}

/* Seeds, every prefix of the first 64 bytes and ~100 more, and ~100 single-byte corruptions
 * (each position set to 0xFF, or to 0 where it was 0xFF). */
static void replay_seeds(const char *target) {
    const sd_fuzz_target *t = sd_fuzz_targets;
    while (t->name && strcmp(t->name, target)) t++;
    assert_non_null(t->name);
    sd_fuzz_seed *s;
    int n;
    assert_int_equal(sd_fuzz_make_seeds(target, &s, &n), 0);
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
        const size_t len = s[i].len;
        run_exact(t->fn, s[i].data, len);
        const size_t step = len / 100 + 1;
        for (size_t cut = 0; cut < len; cut += cut < 64 ? 1 : step) run_exact(t->fn, s[i].data, cut);
        uint8_t *m = malloc(len ? len : 1);
        assert_non_null(m);
        for (size_t at = 0; at < len; at += step) {
            memcpy(m, s[i].data, len);
            m[at] = m[at] == 0xFF ? 0 : 0xFF;
            run_exact(t->fn, m, len);
        }
        free(m);
    }
    sd_fuzz_free_seeds(s, n);
}

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* The model seeds must load, or the fuzzers would start from nothing but error paths. */
static void test_seeds_load(void **state) {
    (void)state;
    sd_fuzz_seed *s;
    int n;
    sd_model_params p = sd_model_default_params();
    assert_int_equal(sd_fuzz_make_seeds("model_gguf", &s, &n), 0);
    for (int i = 0; i < n; i++) {
        /* synth_align1 is legal GGUF that specdec refuses (weights off their alignment) */
        if (strncmp(s[i].name, "synth", 5) || strstr(s[i].name, "align1")) continue;
        sd_model *m = NULL;
        assert_int_equal(sd_model_load_gguf_mem(s[i].data, s[i].len, s[i].name, &p, &m), SD_OK);
        sd_model_free(m);
    }
    sd_fuzz_free_seeds(s, n);
    assert_int_equal(sd_fuzz_make_seeds("llama2c", &s, &n), 0);
    for (int i = 0; i < n; i++) {
        uint32_t split = sd_fuzz_u32(s[i].data, s[i].len);
        sd_model *m = NULL;
        sd_status st = sd_model_load_llama2c_mem(s[i].data + 4, split, s[i].name, s[i].data + 4 + split,
                                                 s[i].len - 4 - split, &m);
        if (st != SD_OK) fprintf(stderr, "%s\n", sd_last_error());
        assert_int_equal(st, SD_OK);
        sd_model_free(m);
    }
    sd_fuzz_free_seeds(s, n);
    assert_int_equal(sd_fuzz_make_seeds("tokenizer_file", &s, &n), 0);
    for (int i = 0; i < n; i++) {
        sd_tokenizer *t = NULL;
        int vocab = (int)sd_fuzz_u32(s[i].data, s[i].len);
        sd_status st = sd_tokenizer_from_llama2c_buf(s[i].data + 4, s[i].len - 4, vocab, s[i].name, &t);
        if (st != SD_OK) fprintf(stderr, "%s\n", sd_last_error());
        assert_int_equal(st, SD_OK);
        sd_tokenizer_free(t);
    }
    sd_fuzz_free_seeds(s, n);
    size_t len = 0;
    char *j = sd_fuzz_hf_tokenizer_json(300, &len);
    assert_non_null(j);
    sd_tokenizer *tk = NULL;
    sd_status st2 = sd_tokenizer_from_hf_json(j, len, "synth.tokenizer.json", 1, 2, &tk);
    if (st2 != SD_OK) fprintf(stderr, "%s\n", sd_last_error());
    assert_int_equal(st2, SD_OK);
    sd_tokenizer_free(tk);
    free(j);

    /* the HF seeds, laid out as the harness lays them out */
    j = sd_fuzz_hf_tokenizer_json(32, &len);
    assert_non_null(j);
    write_file(sdtest_tmp_path("tokenizer.json"), j, len);
    free(j);
    assert_int_equal(sd_fuzz_make_seeds("safetensors", &s, &n), 0);
    for (int i = 0; i < n; i++) {
        uint32_t split = sd_fuzz_u32(s[i].data, s[i].len);
        write_file(sdtest_tmp_path("config.json"), s[i].data + 4, split);
        write_file(sdtest_tmp_path("model.safetensors"), s[i].data + 4 + split, s[i].len - 4 - split);
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", sdtest_tmp_path("config.json"));
        *strrchr(dir, '/') = 0;
        sd_model *m = NULL;
        sd_status st3 = sd_model_load(dir, &p, &m);
        if (st3 != SD_OK) fprintf(stderr, "%s: %s\n", s[i].name, sd_last_error());
        assert_int_equal(st3, SD_OK);
        sd_model_free(m);
    }
    sd_fuzz_free_seeds(s, n);
}

static void test_seeds_gguf(void **state) { (void)state; replay_seeds("gguf"); }
static void test_seeds_model_gguf(void **state) { (void)state; replay_seeds("model_gguf"); }
static void test_seeds_llama2c(void **state) { (void)state; replay_seeds("llama2c"); }
static void test_seeds_tokenizer(void **state) { (void)state; replay_seeds("tokenizer"); }
static void test_seeds_tokenizer_file(void **state) { (void)state; replay_seeds("tokenizer_file"); }
static void test_seeds_config(void **state) { (void)state; replay_seeds("config"); }
static void test_seeds_safetensors(void **state) { (void)state; replay_seeds("safetensors"); }
static void test_seeds_hf_tokenizer(void **state) { (void)state; replay_seeds("hf_tokenizer"); }
static void test_seeds_chat(void **state) { (void)state; replay_seeds("chat"); }
static void test_seeds_tool_calls(void **state) { (void)state; replay_seeds("tool_calls"); }
static void test_seeds_hf_config(void **state) { (void)state; replay_seeds("hf_config"); }
static void test_seeds_gbnf(void **state) { (void)state; replay_seeds("gbnf"); }
static void test_seeds_schema(void **state) { (void)state; replay_seeds("schema"); }
static void test_seeds_http_frames(void **state) { (void)state; replay_seeds("http_frames"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regression_files),
        cmocka_unit_test(test_seeds_load),
        cmocka_unit_test(test_seeds_gguf),
        cmocka_unit_test(test_seeds_model_gguf),
        cmocka_unit_test(test_seeds_llama2c),
        cmocka_unit_test(test_seeds_tokenizer),
        cmocka_unit_test(test_seeds_tokenizer_file),
        cmocka_unit_test(test_seeds_config),
        cmocka_unit_test(test_seeds_safetensors),
        cmocka_unit_test(test_seeds_hf_tokenizer),
        cmocka_unit_test(test_seeds_chat),
        cmocka_unit_test(test_seeds_tool_calls),
        cmocka_unit_test(test_seeds_hf_config),
        cmocka_unit_test(test_seeds_gbnf),
        cmocka_unit_test(test_seeds_schema), cmocka_unit_test(test_seeds_http_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
