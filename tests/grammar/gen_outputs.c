/* Test-only driver for the schema validity test: for every schema of a JSON file and every model
 * given, generates under the schema with constrained plain sampling (forward, mask the logits,
 * sd_sample_probs, draw, accept) for several seeds and temperatures, and writes one JSON line per
 * output: {"schema": i, "model", "seed", "temp", "finished", "tokens", "text"}, and for an output the
 * budget cut, "closed": the bytes of the grammar's shortest completion appended to its text (so the
 * validator checks it whole). A finite schema must finish within its bound (max bytes + 1 tokens)
 * whenever that fits the budget; an output that breaks this, a token the matcher then refuses, or
 * a cut output the grammar cannot complete fails the run (exit 1).
 * Usage: sd_grammar_gen SCHEMAS.json OUT.jsonl BUDGET MODEL...   (a llama2.c .bin takes tokenizer
 * tok512.bin beside it, as the CLI finds it) */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/io.h"
#include "specdec/context.h"
#include "specdec/grammar.h"
#include "specdec/model.h"
#include "specdec/sample.h"
#include "specdec/tokenizer.h"
#include "close_cut.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const struct {
    uint64_t seed;
    float temp;
} k_runs[] = {{1, 1.0f}, {2, 0.7f}, {3, 1.5f}};

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s SCHEMAS.json OUT.jsonl BUDGET MODEL...\n", argv[0]);
        return 2;
    }
    size_t len = 0;
    char *text = NULL;
    if (sd_file_read(argv[1], 0, &text, &len) != SD_OK) text = NULL;
    cJSON *schemas = text ? cJSON_ParseWithLength(text, len) : NULL;
    if (!schemas || !cJSON_IsArray(schemas)) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 1;
    }
    FILE *out = fopen(argv[2], "w");
    int budget = atoi(argv[3]);
    if (!out || budget < 1) return 1;
    int failures = 0;
    for (int mi = 4; mi < argc; mi++) {
        sd_model_params mp = sd_model_default_params();
        sd_model *model = NULL;
        if (sd_model_load(argv[mi], &mp, &model) != SD_OK) {
            fprintf(stderr, "error: %s\n", sd_last_error());
            return 1;
        }
        const sd_tokenizer *tok = sd_model_tokenizer(model);
        sd_grammar_vocab *voc = NULL;
        if (sd_grammar_vocab_create(tok, &voc) != SD_OK) return 1;
        int n_vocab = sd_grammar_vocab_n(voc);
        sd_context_params cp = sd_context_default_params();
        cp.n_ctx = budget + 64;
        cp.n_threads = 1;
        sd_context *ctx = NULL;
        if (sd_context_create(model, &cp, &ctx) != SD_OK) {
            fprintf(stderr, "error: %s\n", sd_last_error());
            return 1;
        }
        float *logits = malloc(sizeof(float) * (size_t)n_vocab), *probs = malloc(sizeof(float) * (size_t)n_vocab);
        uint64_t *mask = malloc(sizeof(uint64_t) * sd_grammar_mask_words(voc));
        int32_t *prompt = NULL;
        int n_prompt = 0;
        const char *ptext = "The answer as JSON: ";
        sd_tokenizer_tokenize_alloc(tok, ptext, strlen(ptext), 1, 0, &prompt, &n_prompt);
        const char *mname = strrchr(argv[mi], '/') ? strrchr(argv[mi], '/') + 1 : argv[mi];
        double t_mask = 0;
        long n_tokens = 0, n_finished = 0, n_outputs = 0, n_closed = 0;
        int si = 0;
        for (const cJSON *e = schemas->child; e; e = e->next, si++) {
            char *stext = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "schema"));
            sd_grammar *g = NULL;
            if (sd_grammar_from_json_schema(stext, strlen(stext), &g) != SD_OK) {
                fprintf(stderr, "FAIL: schema %d (%s) refused: %s\n", si, cJSON_GetObjectItem(e, "name")->valuestring,
                        sd_last_error());
                failures++;
                free(stext);
                continue;
            }
            free(stext);
            uint64_t max_bytes = 0;
            int finite = sd_grammar_max_bytes(g, &max_bytes);
            for (size_t r = 0; r < sizeof k_runs / sizeof k_runs[0]; r++) {
                sd_grammar_matcher *m = NULL;
                if (sd_grammar_matcher_create(g, voc, &m) != SD_OK) return 1;
                sd_context_seq_truncate(ctx, 0, 0);
                sd_rng rng;
                sd_rng_seed(&rng, k_runs[r].seed * 1000 + (uint64_t)si);
                sd_sampler_params sp = sd_sampler_default_params();
                sp.temperature = k_runs[r].temp;
                if (sd_context_forward(ctx, 0, prompt, n_prompt, logits, 0) != SD_OK) {
                    fprintf(stderr, "error: %s\n", sd_last_error());
                    return 1;
                }
                char *buf = malloc((size_t)budget * ((size_t)sd_tokenizer_max_piece_len(tok) + 1) + CLOSE_CAP + 1);
                size_t blen = 0;
                int finished = 0, n = 0;
                for (; n < budget; n++) {
                    double t0 = now();
                    sd_grammar_matcher_mask(m, mask);
                    t_mask += now() - t0;
                    sd_grammar_mask_logits(mask, logits, n_vocab, -1e30f);
                    if (sd_sample_probs(&sp, logits, n_vocab, probs, NULL) != SD_OK) {
                        fprintf(stderr, "error: %s\n", sd_last_error());
                        return 1;
                    }
                    int32_t id = sd_sample_draw(probs, n_vocab, &rng);
                    if (id < 0 || !((mask[id >> 6] >> (id & 63)) & 1)) {
                        fprintf(stderr, "FAIL: schema %d: drew a token the mask forbids (%d)\n", si, (int)id);
                        failures++;
                        break;
                    }
                    if (sd_grammar_matcher_accept(m, id) != SD_OK) {
                        fprintf(stderr, "FAIL: schema %d: an allowed token was refused: %s\n", si, sd_last_error());
                        failures++;
                        break;
                    }
                    if (sd_tokenizer_is_eog(tok, id)) {
                        finished = 1;
                        n++;
                        break;
                    }
                    size_t bl = 0;
                    const uint8_t *b = sd_grammar_vocab_bytes(voc, id, &bl);
                    memcpy(buf + blen, b, bl);
                    blen += bl;
                    if (sd_context_forward(ctx, 0, &id, 1, logits, 0) != SD_OK) {
                        fprintf(stderr, "error: %s\n", sd_last_error());
                        return 1;
                    }
                }
                n_tokens += n;
                n_outputs++;
                n_finished += finished;
                if (finite && max_bytes + 1 <= (uint64_t)budget && !finished) {
                    fprintf(stderr, "FAIL: schema %d (%s): finite (at most %llu bytes) but not finished in %d tokens\n", si,
                            cJSON_GetObjectItem(e, "name")->valuestring, (unsigned long long)max_bytes, n);
                    failures++;
                }
                if (finished && finite && (uint64_t)n > max_bytes + 1) {
                    fprintf(stderr, "FAIL: schema %d: %d tokens, beyond the bound of %llu bytes\n", si, n,
                            (unsigned long long)max_bytes);
                    failures++;
                }
                /* a cut output is closed by the grammar's shortest completion, so that the validator
                 * checks it too: every prefix the mask allowed must extend to a valid instance */
                long closed = -1;
                if (!finished && !failures) {
                    closed = close_cut(m, buf, &blen, si);
                    if (closed < 0) failures++;
                    else n_closed++;
                }
                buf[blen] = 0;
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, "schema", si);
                cJSON_AddStringToObject(o, "model", mname);
                cJSON_AddNumberToObject(o, "seed", (double)k_runs[r].seed);
                cJSON_AddNumberToObject(o, "temp", k_runs[r].temp);
                cJSON_AddBoolToObject(o, "finished", finished);
                if (closed >= 0) cJSON_AddNumberToObject(o, "closed", (double)closed);
                cJSON_AddNumberToObject(o, "tokens", n);
                cJSON_AddStringToObject(o, "text", buf);
                char *line = cJSON_PrintUnformatted(o);
                fprintf(out, "%s\n", line);
                free(line);
                cJSON_Delete(o);
                free(buf);
                sd_grammar_matcher_free(m);
            }
            sd_grammar_free(g);
        }
        fprintf(stderr, "%s: %ld outputs, %ld finished, %ld cut and closed by the shortest completion, %ld tokens, mask %.3f ms per token\n",
                mname, n_outputs, n_finished, n_closed, n_tokens, n_tokens ? t_mask / (double)n_tokens * 1e3 : 0.0);
        free(prompt);
        free(logits);
        free(probs);
        free(mask);
        sd_context_free(ctx);
        sd_grammar_vocab_free(voc);
        sd_model_free(model);
    }
    fclose(out);
    cJSON_Delete(schemas);
    free(text);
    return failures ? 1 : 0;
}
