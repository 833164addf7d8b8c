/* GET /metrics: the server's counters in Prometheus' text format, named with a "specdec:" prefix
 * as vLLM and llama.cpp prefix theirs (the speculative counters under their names). */
#include <math.h>
#include <stdio.h>

#include "core/io.h"
#include "server/internal.h"

void srv_rate_add(srv_rate *r, double now, double tokens) {
    const long sec = (long)floor(now);
    const int i = (int)(sec % SRV_RATE_BUCKETS);
    if (r->sec[i] != sec) {
        r->sec[i] = sec;
        r->tokens[i] = 0;
    }
    r->tokens[i] += tokens;
}

double srv_rate_recent(const srv_rate *r, double now, int seconds) {
    const long sec = (long)floor(now);
    double sum = 0;
    for (int k = 0; k < seconds && k < SRV_RATE_BUCKETS; k++) { /* the current second and the ones before */
        const int i = (int)((sec - k) % SRV_RATE_BUCKETS);
        if (r->sec[i] == sec - k) sum += r->tokens[i];
    }
    return sum / seconds;
}

typedef struct {
    const char *name, *type, *help;
} metric;

static void head(srv_buf *b, const metric *m) {
    char line[512];
    snprintf(line, sizeof line, "# HELP specdec:%s %s\n# TYPE specdec:%s %s\n", m->name, m->help, m->name, m->type);
    srv_buf_puts(b, line);
}

static void value(srv_buf *b, const metric *m, const char *labels, double v) {
    char line[256];
    snprintf(line, sizeof line, "specdec:%s%s %.17g\n", m->name, labels ? labels : "", v);
    srv_buf_puts(b, line);
}

static void one(srv_buf *b, const char *name, const char *type, const char *help, double v) {
    const metric m = {name, type, help};
    head(b, &m);
    value(b, &m, NULL, v);
}

char *srv_metrics_text(srv *s) {
    srv_buf b = {0};
    pthread_mutex_lock(&s->net_mu); /* before mu, never inside it: the door takes them in this order */
    const double conns = s->n_conns, buffered = (double)s->buffered, timed_out = (double)s->timed_out;
    pthread_mutex_unlock(&s->net_mu);
    pthread_mutex_lock(&s->mu);
    const srv_metrics *m = &s->m;
    one(&b, "requests_total", "counter", "Generation requests accepted into the queue.", (double)m->requests);
    const metric fin = {"requests_finished_total", "counter",
                        "Generation requests ended, by reason (stop: a stop string or end of generation; length: "
                        "max_tokens or the context; shutdown: cut by the server's shutdown; cancelled: the client left; "
                        "error)."};
    head(&b, &fin);
    value(&b, &fin, "{reason=\"stop\"}", (double)m->finished_stop);
    value(&b, &fin, "{reason=\"length\"}", (double)m->finished_length);
    value(&b, &fin, "{reason=\"shutdown\"}", (double)m->finished_shutdown);
    value(&b, &fin, "{reason=\"cancelled\"}", (double)m->finished_cancelled);
    value(&b, &fin, "{reason=\"error\"}", (double)m->finished_error);
    const metric http = {"http_responses_total", "counter", "HTTP responses, by status code."};
    head(&b, &http);
    for (int code = 0; code < SRV_HTTP_CODES; code++)
        if (m->http[code]) {
            char lab[32];
            snprintf(lab, sizeof lab, "{code=\"%d\"}", code);
            value(&b, &http, lab, (double)m->http[code]);
        }
    one(&b, "prompt_tokens_total", "counter", "Prompt tokens of started requests.", (double)m->prompt_tokens);
    one(&b, "prompt_tokens_cached_total", "counter", "Prompt tokens a slot already held (not computed again).",
        (double)m->prompt_cached);
    one(&b, "prompt_seconds_total", "counter", "Engine seconds spent prefilling prompts.", m->prompt_s);
    one(&b, "prompt_tokens_per_second", "gauge", "Prompt tokens per prefill second, since the start.",
        m->prompt_s > 0 ? (double)(m->prompt_tokens - m->prompt_cached) / m->prompt_s : 0);
    one(&b, "generation_tokens_total", "counter", "Tokens generated.", (double)m->gen_tokens);
    one(&b, "generation_seconds_total", "counter", "Engine seconds spent in generation rounds.", m->gen_s);
    one(&b, "generation_tokens_per_second", "gauge",
        "Tokens generated per second of generation rounds, all slots together, since the start.",
        m->gen_s > 0 ? (double)m->gen_tokens / m->gen_s : 0);
    one(&b, "tokens_per_second", "gauge", "Tokens generated per second of wall time over the last 10 seconds, all slots "
        "together: the load figure.", srv_rate_recent(&s->rate, sd_now(), 10));
    one(&b, "queue_length", "gauge", "Requests waiting for a slot.", (double)s->q_len);
    one(&b, "queue_capacity", "gauge", "Requests that may wait for a slot before 429.", (double)s->p.queue_max);
    one(&b, "slots_busy", "gauge", "Slots generating.", (double)s->n_busy);
    one(&b, "slots_total", "gauge", "Slots.", (double)s->n_slots);
    one(&b, "draining", "gauge", "1 while the server drains before it stops (/health says 503 draining).", (double)s->draining);
    one(&b, "tokenizer_queue_length", "gauge", "Request bodies waiting for or being tokenized.", (double)s->n_jobs);
    one(&b, "connections", "gauge", "Open connections.", conns);
    one(&b, "request_bytes_buffered", "gauge", "Request body bytes held beyond each connection's first 16 KiB.", buffered);
    one(&b, "connections_timed_out_total", "counter",
        "Connections cut off at a deadline (a request not in whole within --request-timeout, or idle past --timeout).",
        timed_out);
    one(&b, "rounds_total", "counter", "Generation rounds (one batched target pass over the busy slots each).",
        (double)m->rounds);
    one(&b, "rounds_drafting_total", "counter", "Rounds in which at least one slot verified drafts.",
        (double)m->rounds_drafting);
    one(&b, "pass_tokens_total", "counter", "Tokens in the rounds' target passes (slots' last tokens and drafts).",
        (double)m->pass_tokens);
    if (s->auto_spec) {
        const metric mr = {"round_tokens_per_second", "gauge",
                           "Tokens per second of recent rounds, by busy slots and by whether drafting was allowed "
                           "(each round takes the faster mode for its batch size)."};
        head(&b, &mr);
        for (int n = 1; n <= s->n_slots; n++)
            for (int d = 0; d < 2; d++)
                if (s->modes[n].n[d]) {
                    char lab[64];
                    snprintf(lab, sizeof lab, "{slots=\"%d\",drafting=\"%s\"}", n, d ? "allowed" : "off");
                    value(&b, &mr, lab, s->modes[n].rate[d]);
                }
    }
    one(&b, "spec_decode_num_drafts_total", "counter", "Verify passes that carried drafts (per slot).",
        (double)m->drafts);
    one(&b, "spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed.", (double)m->draft_tokens);
    one(&b, "spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", (double)m->accepted);
    const metric pos = {"spec_decode_num_accepted_tokens_per_pos_total", "counter",
                        "Draft tokens accepted, by position in the draft (0-based)."};
    head(&b, &pos);
    const int k = s->p.spec.draft_max < SD_MAX_DRAFT ? s->p.spec.draft_max : SD_MAX_DRAFT;
    for (int i = 0; i < k; i++) {
        char lab[32];
        snprintf(lab, sizeof lab, "{position=\"%d\"}", i);
        value(&b, &pos, lab, (double)m->accepted_at[i]);
    }
    pthread_mutex_unlock(&s->mu);
    if (b.oom) {
        srv_buf_free(&b);
        return NULL;
    }
    return b.p;
}
