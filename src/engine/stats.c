/* The statistics serialiser (stats.h): one definition of each reported figure. */
#include "specdec/stats.h"

#include <cjson/cJSON.h>

sd_status sd_spec_stats_to_json(const sd_spec_stats *s, cJSON *o) {
    if (!s || !o) return sd_fail(SD_ERR_INVALID_ARG, "stats: nothing to write");
    const int prompt_n = s->n_prompt - s->n_reused;
    const double prompt_ms = s->t_prefill * 1e3, pred_ms = (s->t_total - s->t_prefill) * 1e3;
    int ok = 1;
#define NUM(key, v) ok &= cJSON_AddNumberToObject(o, key, (double)(v)) != NULL
    ok &= cJSON_AddStringToObject(o, "stop_reason", sd_stop_reason_name(s->stop_reason)) != NULL;
    NUM("cache_n", s->n_reused);
    NUM("prompt_n", prompt_n);
    NUM("prompt_ms", prompt_ms);
    NUM("prompt_per_second", prompt_ms > 0 ? prompt_n * 1e3 / prompt_ms : 0);
    NUM("predicted_n", s->n_generated);
    NUM("predicted_ms", pred_ms);
    NUM("predicted_per_second", pred_ms > 0 ? s->n_generated * 1e3 / pred_ms : 0);
    NUM("decode_per_second", sd_spec_decode_tps(s));
    NUM("ttft_ms", s->t_first * 1e3);
    NUM("draft_max", s->k);
    NUM("draft_n", s->n_drafted);
    NUM("draft_n_accepted", s->n_accepted);
    NUM("verify_n", s->n_verify);
    NUM("target_steps_n", s->n_target_steps);
    NUM("tokens_per_pass", sd_spec_tokens_per_pass(s));
    NUM("acceptance_rate", sd_spec_acceptance(s));
    NUM("mean_accepted_length", sd_spec_mean_accepted(s));
    NUM("num_drafts", s->n_verify);
    NUM("num_draft_tokens", s->n_drafted);
    NUM("num_accepted_tokens", s->n_accepted);
    cJSON *per = cJSON_AddArrayToObject(o, "num_accepted_tokens_per_pos");
    cJSON *pos = cJSON_AddArrayToObject(o, "acceptance_by_position");
    ok &= per && pos;
    for (int i = 0; ok && i < s->k && i < SD_MAX_DRAFT; i++) {
        cJSON_AddItemToArray(per, cJSON_CreateNumber(s->accepted_at[i]));
        cJSON_AddItemToArray(pos, cJSON_CreateNumber(s->drafted_at[i] ? (double)s->accepted_at[i] / s->drafted_at[i] : 0));
    }
    cJSON *src = cJSON_AddArrayToObject(o, "sources");
    ok &= src != NULL;
    for (int i = 0; ok && i < s->n_sources; i++) {
        cJSON *e = cJSON_CreateObject();
        ok &= e && cJSON_AddStringToObject(e, "name", s->sources[i]) && cJSON_AddNumberToObject(e, "drafted", s->drafted_by[i]) &&
              cJSON_AddNumberToObject(e, "accepted", s->accepted_by[i]);
        if (e) cJSON_AddItemToArray(src, e);
    }
    NUM("time_draft_ms", s->t_draft * 1e3);
    NUM("time_verify_ms", s->t_verify * 1e3);
    NUM("time_sample_ms", s->t_sample * 1e3);
    NUM("time_total_ms", s->t_total * 1e3);
    NUM("kv_bytes_target", s->kv_bytes_target);
    NUM("kv_bytes_draft", s->kv_bytes_draft);
#undef NUM
    return ok ? SD_OK : sd_fail(SD_ERR_NOMEM, "stats: out of memory");
}
