/* The one serialiser of a generation's statistics (sd_spec_stats): every figure the CLI's JSON,
 * the server's timings and the bench's records report is computed here, once. */
#ifndef SPECDEC_STATS_H
#define SPECDEC_STATS_H

#include "specdec/spec.h"
#include "specdec/status.h"

struct cJSON;

/* Adds the statistics to JSON object o. Names follow llama.cpp's timings where it has the figure
 * (cache_n, prompt_n, prompt_ms, prompt_per_second, predicted_n, predicted_ms,
 * predicted_per_second, draft_n, draft_n_accepted) and vLLM's speculative counters
 * (num_drafts, num_draft_tokens, num_accepted_tokens, num_accepted_tokens_per_pos):
 *   prompt_n              prompt tokens prefilled (the prompt less the cached prefix)
 *   prompt_per_second     prompt_n / prompt_ms
 *   predicted_n           tokens generated; predicted_ms: from the end of the prefill to the last
 *   predicted_per_second  predicted_n / predicted_ms (llama.cpp's)
 *   decode_per_second     tokens after the first / time after the first (steady state)
 *   ttft_ms               from the start to the first token
 *   tokens_per_pass       generated / target passes (verify rounds and plain steps)
 *   acceptance_rate       accepted / drafted
 *   mean_accepted_length  1 + accepted / verify rounds
 * stop_reason is sd_stop_reason_name's. SD_ERR_NOMEM when cJSON fails to allocate. */
sd_status sd_spec_stats_to_json(const sd_spec_stats *st, struct cJSON *o);

#endif
