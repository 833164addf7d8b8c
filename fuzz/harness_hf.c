/* Fuzz bodies for Hugging Face inputs: a checkpoint (config.json + model.safetensors, which
 * the loader only takes as files, so they are written to a private temporary directory for
 * each input) and tokenizer.json through its (text, len) entry point. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "harness.h"
#include "specdec/model.h"
#include "specdec/tokenizer.h"

static char g_dir[256];
static char g_cfg[300], g_st[300], g_tok[300];

static void cleanup(void) {
    unlink(g_cfg);
    unlink(g_st);
    unlink(g_tok);
    rmdir(g_dir);
}

static int write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = len ? fwrite(data, 1, len, f) : 0;
    return fclose(f) == 0 && w == len ? 0 : -1;
}

/* libFuzzer leaves by _Exit on a crash or timeout, skipping cleanup(): directories whose
 * process is gone are removed by the next process instead. */
static void remove_stale(const char *base) {
    DIR *d = opendir(base);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid;
        char rest[32];
        if (sscanf(e->d_name, "sd_fuzz_hf.%ld.%31s", &pid, rest) != 2 || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
        static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json"};
        char path[512];
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            snprintf(path, sizeof path, "%s/%s/%s", base, e->d_name, files[i]);
            unlink(path);
        }
        snprintf(path, sizeof path, "%s/%s", base, e->d_name);
        rmdir(path);
    }
    closedir(d);
}

/* The directory (tmpfs when there is one: an input is two file writes) and the fixed
 * synthetic tokenizer.json (32 ids), made once per process. */
static const char *model_dir(void) {
    if (g_dir[0]) return g_dir;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    remove_stale(base);
    snprintf(g_dir, sizeof g_dir, "%s/sd_fuzz_hf.%ld.XXXXXX", base, (long)getpid());
    SD_FUZZ_CHECK(mkdtemp(g_dir) != NULL);
    snprintf(g_cfg, sizeof g_cfg, "%s/config.json", g_dir);
    snprintf(g_st, sizeof g_st, "%s/model.safetensors", g_dir);
    snprintf(g_tok, sizeof g_tok, "%s/tokenizer.json", g_dir);
    size_t len;
    char *j = sd_fuzz_hf_tokenizer_json(32, &len);
    SD_FUZZ_CHECK(j && write_file(g_tok, j, len) == 0);
    free(j);
    atexit(cleanup);
    return g_dir;
}

int sd_fuzz_safetensors(const uint8_t *data, size_t size) {
    sd_fuzz_init();
    if (size < 4) return 0;
    const char *dir = model_dir();
    const size_t rest = size - 4;
    const size_t split = (size_t)sd_fuzz_u32(data, size) % (rest + 1);
    SD_FUZZ_CHECK(write_file(g_cfg, data + 4, split) == 0);
    SD_FUZZ_CHECK(write_file(g_st, data + 4 + split, rest - split) == 0);
    sd_model_params p = sd_model_default_params();
    p.tokenizer_path = g_tok;
    sd_model *m = (sd_model *)1;
    sd_clear_error();
    sd_status st = sd_model_load(dir, &p, &m);
    if (st != SD_OK) {
        SD_FUZZ_CHECK(m == NULL);
        sd_fuzz_check_error();
        return 0;
    }
    SD_FUZZ_CHECK(strcmp(sd_model_format(m), "hf") == 0);
    sd_fuzz_exercise_model(m);
    sd_model_free(m);
    return 0;
}

/* Input: a byte choosing the BOS/EOS ids config.json would give (none, 1/2, or out of
 * range), then tokenizer.json. */
int sd_fuzz_hf_tokenizer(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const int32_t ids[4][2] = {{-1, -1}, {1, 2}, {0, 0}, {1 << 30, -5}};
    const int32_t bos = ids[data[0] & 3][0], eos = ids[data[0] & 3][1];
    const size_t len = size - 1;
    char *json = malloc(len ? len : 1); /* exact size, no terminator */
    SD_FUZZ_CHECK(json != NULL);
    memcpy(json, data + 1, len);
    sd_tokenizer *t = (sd_tokenizer *)1;
    sd_clear_error();
    sd_status st = sd_tokenizer_from_hf_json(json, len, "fuzz.tokenizer.json", bos, eos, &t);
    free(json);
    if (st != SD_OK) {
        SD_FUZZ_CHECK(t == NULL);
        sd_fuzz_check_error();
        return 0;
    }
    const int nv = sd_tokenizer_n_vocab(t);
    SD_FUZZ_CHECK(nv > 0);
    SD_FUZZ_CHECK(sd_tokenizer_bos(t) >= -1 && sd_tokenizer_bos(t) < nv);
    SD_FUZZ_CHECK(sd_tokenizer_eos(t) >= -1 && sd_tokenizer_eos(t) < nv);
    SD_FUZZ_CHECK(sd_tokenizer_check_compatible(t, t) == SD_OK);
    static const char *const texts[] = {"Once upon a time, there was a cat.", " the  end\n\n",
                                        "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac 123 4567 \xf0\x9f\x99\x82", "\xff\xfe bad"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        sd_fuzz_check_encode(t, texts[i], strlen(texts[i]), (int)(i & 1), 0);
    /* the input's own bytes as text (piece-like strings) and as ids */
    sd_fuzz_check_encode(t, (const char *)data + 1, len < 128 ? len : 128, 1, 0);
    sd_fuzz_check_decode(t, data + 1, len < 256 ? len : 256);
    sd_tokenizer_free(t);
    return 0;
}
