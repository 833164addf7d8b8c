/* Model lookup by name: the search path shared by every command and the bench configs
 * ($SPECDEC_MODEL_PATH, ./models, ../shared/models). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "specdec/model.h"

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* An HF model directory: one holding config.json (sd_model_load takes the directory). */
static int is_hf_dir(const char *p) {
    struct stat st;
    char cfg[4096];
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    int n = snprintf(cfg, sizeof cfg, "%s/config.json", p);
    return n > 0 && (size_t)n < sizeof cfg && is_file(cfg);
}

sd_status sd_model_resolve(const char *arg, char *buf, size_t cap) {
    if (!buf || cap == 0) return sd_fail(SD_ERR_INVALID_ARG, "no buffer for the model path");
    if (!arg || !arg[0]) return sd_fail(SD_ERR_INVALID_ARG, "empty model name");
    if (is_file(arg) || is_hf_dir(arg)) {
        if ((size_t)snprintf(buf, cap, "%s", arg) >= cap) return sd_fail(SD_ERR_INVALID_ARG, "model path too long: %s", arg);
        return SD_OK;
    }
    static const char *forms[] = {"%s/%s", "%s/%s.gguf", "%s/%s.bin", "%s/%s/%s.bin", "%s/%s/%s.gguf"};
    char dirs[4096];
    const char *env = getenv("SPECDEC_MODEL_PATH");
    snprintf(dirs, sizeof dirs, "%s%s./models:../shared/models", env ? env : "", env && *env ? ":" : "");
    char *save = NULL;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dirs);
    for (char *d = strtok_r(tmp, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
            int n;
            if (f < 3) n = snprintf(buf, cap, forms[f], d, arg);
            else n = snprintf(buf, cap, forms[f], d, arg, arg);
            if (n > 0 && (size_t)n < cap && (is_file(buf) || (f == 0 && is_hf_dir(buf)))) return SD_OK;
        }
    }
    return sd_fail(SD_ERR_IO,
                   "model '%s' not found (not a file or HF model directory; searched %s as NAME, NAME.gguf, NAME.bin, NAME/NAME.bin, NAME/NAME.gguf)",
                   arg, dirs);
}
