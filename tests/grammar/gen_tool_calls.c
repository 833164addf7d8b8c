/* Test-only driver for the tool-call validity test: every object schema of a JSON file becomes the
 * parameters of a function "f<i>", offered beside a second function "other"; for each model, each
 * call syntax (Hermes <tool_call> blocks, Llama 3's bare JSON) and each tool_choice (required with
 * parallel calls and without, f<i> named, and auto with strict functions: the lazy grammar, its free
 * text begun with a fixed lead that starts a call, as a model that chose to call writes it), outputs
 * are generated under sd_chat_tool_grammar's grammar with constrained plain sampling (forward, mask,
 * sd_sample_probs, draw, accept) for two seeds and temperatures, read back with the call parser the
 * server uses for that choice, and written one JSON line each:
 * {"schema": i, "model", "syntax", "mode", "seed", "temp", "finished", "tokens", "text", "calls":
 * [{"name", "arguments"}]}, and for an output the budget cut, "closed": the bytes of the grammar's
 * shortest completion appended to its text. A finished or closed output that does not read back as
 * calls alone, or a cut one the grammar cannot complete, fails the run (exit 1); validate_tools.mjs
 * reads the text again by itself and checks the arguments with ajv.
 * Usage: sd_tool_gen SCHEMAS.json OUT.jsonl BUDGET MODEL...   (a llama2.c .bin takes tok512.bin beside it) */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io.h"
#include "specdec/chat.h"
#include "specdec/context.h"
#include "specdec/grammar.h"
#include "specdec/model.h"
#include "specdec/sample.h"
#include "specdec/tokenizer.h"
#include "close_cut.h"

static const char k_other[] = "{\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\", \"maxLength\": 6}}, "
                              "\"required\": [\"q\"], \"additionalProperties\": false}";

/* auto: the text a Hermes reply writes before its call */
#define k_lead "Let me look."

static const struct {
    uint64_t seed;
    float temp;
} k_runs[] = {{1, 1.0f}, {2, 0.7f}};

/* Object schemas: functions take an object of arguments. */
static int is_object_schema(const cJSON *s) {
    const cJSON *t = cJSON_GetObjectItem(s, "type");
    return cJSON_IsObject(s) && ((cJSON_IsString(t) && !strcmp(t->valuestring, "object")) || cJSON_GetObjectItem(s, "properties"));
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s SCHEMAS.json OUT.jsonl BUDGET MODEL...\n", argv[0]);
        return 2;
    }
    size_t len = 0;
    char *text = NULL;
    if (sd_file_read(argv[1], 0, &text, &len) != SD_OK) text = NULL;
    cJSON *schemas = text ? cJSON_ParseWithLength(text, len) : NULL;
    FILE *out = fopen(argv[2], "w");
    const int budget = atoi(argv[3]);
    if (!schemas || !cJSON_IsArray(schemas) || !out || budget < 1) {
        fprintf(stderr, "cannot read %s or write %s\n", argv[1], argv[2]);
        return 1;
    }
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
        const int n_vocab = sd_grammar_vocab_n(voc);
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
        char *buf = malloc((size_t)budget * ((size_t)sd_tokenizer_max_piece_len(tok) + 1) + CLOSE_CAP + 1);
        int32_t *prompt = NULL;
        int n_prompt = 0;
        const char *ptext = "Call a function: ";
        sd_tokenizer_tokenize_alloc(tok, ptext, strlen(ptext), 1, 0, &prompt, &n_prompt);
        const char *mname = strrchr(argv[mi], '/') ? strrchr(argv[mi], '/') + 1 : argv[mi];
        long n_outputs = 0, n_finished = 0, n_closed = 0, n_tokens = 0, n_calls = 0;
        int si = 0;
        for (const cJSON *e = schemas->child; e; e = e->next, si++) {
            const cJSON *schema = cJSON_GetObjectItem(e, "schema");
            if (!is_object_schema(schema)) continue;
            char *stext = cJSON_PrintUnformatted(schema);
            char fname[32];
            snprintf(fname, sizeof fname, "f%d", si);
            const sd_chat_tool tools[2] = {{fname, stext, strlen(stext)}, {"other", k_other, sizeof k_other - 1}};
            const char *const names[2] = {fname, "other"};
            for (int syn = SD_CHAT_TOOLS_HERMES; syn <= SD_CHAT_TOOLS_LLAMA3; syn++) {
                static const char *const modes[4] = {"required", "required-one", "named", "auto"};
                for (int mode = 0; mode < 4; mode++) {
                    const int named = mode == 2, single = mode == 1 || mode == 2, lazy = mode == 3;
                    const int only = named ? 0 : lazy ? SD_CHAT_TOOL_AFTER_TEXT : SD_CHAT_TOOL_ANY;
                    /* auto: text, then the call's start as the reader knows it */
                    char lead[64] = "";
                    if (lazy) snprintf(lead, sizeof lead, "%s", syn == SD_CHAT_TOOLS_HERMES ? k_lead " <tool_call>" : " {");
                    sd_grammar *g = NULL;
                    if (sd_chat_tool_grammar((sd_chat_tool_syntax)syn, tools, 2, only, !single, NULL, NULL, &g) != SD_OK) {
                        fprintf(stderr, "FAIL: schema %d (%s): %s\n", si, cJSON_GetObjectItem(e, "name")->valuestring,
                                sd_last_error());
                        failures++;
                        continue;
                    }
                    for (size_t r = 0; r < sizeof k_runs / sizeof k_runs[0]; r++) {
                        sd_grammar_matcher *m = NULL;
                        if (sd_grammar_matcher_create(g, voc, &m) != SD_OK) return 1;
                        sd_context_seq_truncate(ctx, 0, 0);
                        sd_rng rng;
                        sd_rng_seed(&rng, k_runs[r].seed * 7919 + (uint64_t)(si * 8 + syn * 4 + mode));
                        sd_sampler_params sp = sd_sampler_default_params();
                        sp.temperature = k_runs[r].temp;
                        if (sd_context_forward(ctx, 0, prompt, n_prompt, logits, 0) != SD_OK) {
                            fprintf(stderr, "error: %s\n", sd_last_error());
                            return 1;
                        }
                        size_t blen = 0;
                        int finished = 0, n = 0, n_lead = 0;
                        const int failures0 = failures;
                        int32_t *lead_ids = NULL;
                        sd_tokenizer_tokenize_alloc(tok, lead, strlen(lead), 0, 0, &lead_ids, &n_lead);
                        for (; n < budget; n++) {
                            sd_grammar_matcher_mask(m, mask);
                            sd_grammar_mask_logits(mask, logits, n_vocab, -1e30f);
                            if (sd_sample_probs(&sp, logits, n_vocab, probs, NULL) != SD_OK) return 1;
                            const int32_t id = n < n_lead ? lead_ids[n] : sd_sample_draw(probs, n_vocab, &rng);
                            if (id < 0 || !((mask[id >> 6] >> (id & 63)) & 1) || sd_grammar_matcher_accept(m, id) != SD_OK) {
                                fprintf(stderr, "FAIL: schema %d: token %d outside the grammar\n", si, (int)id);
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
                            if (sd_context_forward(ctx, 0, &id, 1, logits, 0) != SD_OK) return 1;
                        }
                        /* a cut output is closed by the grammar's shortest completion, so that its
                         * calls are read back and validated too */
                        long closed = -1;
                        if (!finished && failures == failures0) {
                            closed = close_cut(m, buf, &blen, si);
                            if (closed < 0) failures++;
                            else n_closed++;
                        }
                        buf[blen] = 0;
                        free(lead_ids);
                        sd_grammar_matcher_free(m);
                        /* read back: calls only, each whole (auto: after the lead's text) */
                        sd_chat_tool_parser *p = NULL;
                        const sd_chat_tool_event *ev = NULL;
                        int n_ev = 0;
                        if (sd_chat_tool_parser_create((sd_chat_tool_syntax)syn, !lazy, names, 2, &p) != SD_OK ||
                            sd_chat_tool_parser_feed(p, buf, blen, 1, &ev, &n_ev) != SD_OK)
                            return 1;
                        cJSON *o = cJSON_CreateObject(), *calls = cJSON_CreateArray();
                        cJSON *cur = NULL;
                        char *args = calloc(blen + 1, 1);
                        size_t al = 0;
                        /* the lead's text as decoded: a SentencePiece vocabulary writes a space before it */
                        const char *call_at = lazy && syn == SD_CHAT_TOOLS_HERMES ? strstr(buf, " <tool_call>") : NULL;
                        size_t content = 0, lead_text = call_at ? (size_t)(call_at - buf) : 0;
                        for (int k = 0; k <= n_ev; k++) {
                            if (cur && (k == n_ev || ev[k].kind == SD_CHAT_TOOL_CALL)) {
                                args[al] = 0;
                                cJSON_AddStringToObject(cur, "arguments", args);
                                al = 0;
                                cur = NULL;
                            }
                            if (k == n_ev) break;
                            if (ev[k].kind == SD_CHAT_TOOL_CONTENT) {
                                content += ev[k].len;
                            } else if (ev[k].kind == SD_CHAT_TOOL_CALL) {
                                cur = cJSON_CreateObject();
                                char nm[80];
                                snprintf(nm, sizeof nm, "%.*s", (int)ev[k].len, ev[k].text);
                                cJSON_AddStringToObject(cur, "name", nm);
                                cJSON_AddItemToArray(calls, cur);
                            } else {
                                memcpy(args + al, ev[k].text, ev[k].len);
                                al += ev[k].len;
                            }
                        }
                        if ((finished || closed >= 0) && (content != lead_text || cJSON_GetArraySize(calls) < 1 || (single && cJSON_GetArraySize(calls) != 1) ||
                                         (syn == SD_CHAT_TOOLS_LLAMA3 && cJSON_GetArraySize(calls) != 1))) {
                            fprintf(stderr, "FAIL: schema %d: a finished or closed output does not read back as calls: %s\n", si, buf);
                            failures++;
                        }
                        n_calls += cJSON_GetArraySize(calls);
                        cJSON_AddNumberToObject(o, "schema", si);
                        cJSON_AddStringToObject(o, "model", mname);
                        cJSON_AddStringToObject(o, "syntax", syn == SD_CHAT_TOOLS_HERMES ? "hermes" : "llama3");
                        cJSON_AddStringToObject(o, "mode", modes[mode]);
                        cJSON_AddNumberToObject(o, "seed", (double)k_runs[r].seed);
                        cJSON_AddNumberToObject(o, "temp", k_runs[r].temp);
                        cJSON_AddBoolToObject(o, "finished", finished);
                        if (closed >= 0) cJSON_AddNumberToObject(o, "closed", (double)closed);
                        cJSON_AddNumberToObject(o, "tokens", n);
                        cJSON_AddStringToObject(o, "text", buf);
                        cJSON_AddItemToObject(o, "calls", calls);
                        char *line = cJSON_PrintUnformatted(o);
                        fprintf(out, "%s\n", line);
                        free(line);
                        cJSON_Delete(o);
                        free(args);
                        sd_chat_tool_parser_free(p);
                        n_outputs++;
                        n_finished += finished;
                        n_tokens += n;
                    }
                    sd_grammar_free(g);
                }
            }
            free(stext);
        }
        fprintf(stderr, "%s: %ld outputs, %ld finished, %ld cut and closed by the shortest completion, %ld calls, %ld tokens\n",
                mname, n_outputs, n_finished, n_closed, n_calls, n_tokens);
        free(prompt);
        free(buf);
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
