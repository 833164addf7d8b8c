/* The round engine of a target context: the rounds of any number of its sequences as ONE verify
 * pass (the weights read once for all), their model drafters drafting in lockstep, each
 * sequence's share of the pass, the batch switch, and the costs every draft controller weighs
 * drafts against. A single sequence's step is a batch of one. */
#include <stdlib.h>
#include <string.h>

#include "core/io.h"
#include "specdec/cpu.h"
#include "specdec/model.h"
#include "engine/internal.h"

/* Engines whose model drafters draft in one lockstep group at most. */
#define SD_MAX_BATCH_ENGINES 64

sd_spec_batch_params sd_spec_batch_default_params(void) {
    sd_spec_batch_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* Whether the target's weights are more than the caches its threads use (sd_cache_bytes, as
 * bench-decode reports them; unknown: no): a pass reading them in order then streams them all
 * from memory, as the caches evict each line before the next pass reads it again. */
static int target_streams(const sd_context *target) {
    const double caches = sd_cache_bytes(sd_context_n_threads(target), NULL);
    return caches > 0 && (double)sd_model_weight_bytes(sd_context_model(target)) > caches;
}

sd_status sd_spec_batch_create(sd_context *target, const sd_spec_batch_params *p, sd_spec_batch **out) {
    *out = NULL;
    if (!target) return sd_fail(SD_ERR_INVALID_ARG, "batch: no target context");
    sd_spec_batch *b = calloc(1, sizeof *b);
    if (!b) return sd_fail(SD_ERR_NOMEM, "out of memory");
    b->ctx = target;
    b->p = p ? *p : sd_spec_batch_default_params();
    if (b->p.max_batch <= 0) b->p.max_batch = 256;
    sd_draft_costs_init(&b->costs);
    b->costs.streamed = target_streams(target);
    sd_status st = sd_verify_round_create(target, &b->round);
    if (st == SD_OK && b->p.draft_switch) st = sd_draft_switch_init(&b->sw, b->p.max_batch);
    if (st != SD_OK) {
        sd_spec_batch_free(b);
        return st;
    }
    *out = b;
    return SD_OK;
}

void sd_spec_batch_free(sd_spec_batch *b) {
    if (!b) return;
    sd_verify_round_free(b->round);
    sd_draft_switch_free(&b->sw);
    free(b);
}

int sd_spec_batch_pass_tokens(const sd_spec_batch *b) { return b->last_pass; }
sd_context *sd_spec_batch_context(sd_spec_batch *b) { return b->ctx; }

int sd_spec_batch_switch_rates(const sd_spec_batch *b, int batch, double rate[2], int n[2]) {
    if (!b->p.draft_switch || !b->sw.size || batch < 1 || batch > b->sw.max_batch) return 0;
    for (int i = 0; i < 2; i++) {
        rate[i] = sd_draft_switch_rate(&b->sw.size[batch], i);
        n[i] = b->sw.size[batch].n[i];
    }
    return 1;
}

/* One pass of one token, thrown away: the step every judgement compares against, for a round
 * that several sequences share before it is known (a shared pass holds more than one token; the
 * loop below runs one per sequence until it is counted, the first being provisional, replaced by
 * the second: sd_draft_costs_pass). A sequence alone needs none: after its first round, which
 * drafts, comes a plain step, which measures it (the controller); this pass, made at every start,
 * had cost each generation a decode step before its first token. */
sd_status sd_batch_measure(sd_spec_batch *b, sd_spec *s) {
    const int len = sd_context_seq_len(b->ctx, s->seq);
    if (len + 1 > s->n_ctx) return SD_OK; /* no room: the first rounds measure instead */
    const int32_t tok = s->tokens[s->n_tokens - 1];
    int row;
    sd_verify_round_clear(b->round);
    sd_status st = sd_verify_round_add_chain(b->round, s->seq, &tok, 1, &row);
    const double t0 = sd_now();
    if (st == SD_OK) st = sd_verify_round_run(b->round);
    const double t = sd_now() - t0;
    sd_context_seq_truncate(b->ctx, s->seq, len);
    if (st != SD_OK) return st;
    sd_draft_costs_pass(&b->costs, 1, t);
    return SD_OK;
}

sd_status sd_batch_step_cb(sd_spec_batch *b, sd_spec *const *specs, int n, sd_spec_round *rounds, sd_token_cb cb,
                           void *user) {
    if (n < 1) return SD_OK;
    for (int i = 0; i < n; i++) {
        if (rounds) memset(&rounds[i], 0, sizeof rounds[i]);
        if (specs[i]->batch != b)
            return sd_fail(SD_ERR_INVALID_ARG, "step: engine %d belongs to another batch (another target context)", i);
        for (int j = 0; j < i; j++)
            if (specs[j]->seq == specs[i]->seq)
                return sd_fail(SD_ERR_INVALID_ARG, "step: engines %d and %d share sequence %d", j, i, specs[i]->seq);
    }
    const double t_step = sd_now();
    sd_status rc = SD_OK;
    int *in = malloc((size_t)n * sizeof *in), *batched = calloc((size_t)n, sizeof *batched);
    if (!in || !batched) {
        free(in);
        free(batched);
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    /* The pass stays within the kernels whose rows equal decoding each token alone (a verify
     * pass of SD_MAX_DRAFT + 1 tokens is asserted to fit them), so that every engine emits what
     * it would alone: each engine's share of it is an equal part. */
    int n_live = 0, sum_n = 0, sum_e = 0;
    double sum_t = 0;
    for (int i = 0; i < n; i++)
        if (specs[i]->active) {
            n_live++;
            sum_n += specs[i]->last_n;
            sum_e += specs[i]->last_e;
            sum_t += specs[i]->last_td;
        }
    for (int i = 0; n_live > 1 && !(b->costs.n_pass[1] > 0) && i < n && rc == SD_OK; i++)
        if (specs[i]->active && specs[i]->drafter && specs[i]->p.draft_mode == SD_DRAFT_ADAPTIVE &&
            !specs[i]->p.costs.given)
            rc = sd_batch_measure(b, specs[i]); /* a sequence without room measures nothing: the next */
    const int share = n_live > 0 && n_live <= SD_MAX_DRAFT + 1 ? (SD_MAX_DRAFT + 1) / n_live - 1 : 0;
    const int allowed = b->p.draft_switch ? sd_draft_switch_allow(&b->sw, n_live) : 1;
    int n_in = 0;
    for (int i = 0; i < n && rc == SD_OK; i++) {
        sd_spec *s = specs[i];
        /* each controller weighs a draft against the whole round's rate (the others' last round) */
        const int alone = n_live <= 1;
        if (!sd_seq_plan(s, share, allowed, alone ? 0 : sum_n - s->last_n, alone ? 0 : sum_e - s->last_e,
                         alone ? 0 : sum_t - s->last_td, &rc))
            in[n_in++] = i;
    }
    /* chain rounds of model drafters sharing a draft context draft in lockstep */
    for (int i = 0; i < n_in && rc == SD_OK; i++) {
        sd_spec *a = specs[in[i]];
        if (batched[i] || a->rnd.tree || a->rnd.k < 1) continue;
        sd_drafter *ds[SD_MAX_BATCH_ENGINES];
        sd_draft_req *rq[SD_MAX_BATCH_ENGINES];
        int idx[SD_MAX_BATCH_ENGINES], g = 0;
        for (int j = i; j < n_in && g < SD_MAX_BATCH_ENGINES; j++) {
            sd_spec *c = specs[in[j]];
            if (batched[j] || c->rnd.tree || c->rnd.k < 1 || !sd_drafter_model_batchable(a->drafter, c->drafter)) continue;
            sd_seq_fill_req(c);
            ds[g] = c->drafter;
            rq[g] = &c->rnd.req;
            idx[g++] = j;
        }
        if (g < 2) continue;
        double td = sd_now();
        rc = sd_drafter_model_draft_many(ds, rq, g);
        td = sd_now() - td;
        int n_synced = 0; /* the group's time holds every drafter's catch-up */
        for (int j = 0; j < g; j++)
            if (rq[j]->n_synced > n_synced) n_synced = rq[j]->n_synced;
        for (int j = 0; j < g && rc == SD_OK; j++) {
            sd_spec *c = specs[in[idx[j]]];
            c->st.t_draft += td / g;
            batched[idx[j]] = 1;
            rc = sd_seq_check_req(c, td / g, n_synced);
        }
    }
    for (int i = 0; i < n_in && rc == SD_OK; i++)
        if (!batched[i]) rc = sd_seq_draft(specs[in[i]]);
    sd_verify_round_clear(b->round);
    for (int i = 0; i < n_in && rc == SD_OK; i++) rc = sd_seq_add(specs[in[i]], b->round);
    b->last_pass = sd_verify_round_n_tokens(b->round);
    if (rc == SD_OK && n_in > 0) {
        double tv = sd_now();
        rc = sd_verify_round_run(b->round);
        tv = sd_now() - tv;
        int any_tree = 0;
        for (int i = 0; i < n_in && rc == SD_OK; i++) {
            specs[in[i]]->st.t_verify += tv;
            any_tree |= specs[in[i]]->rnd.tree;
        }
        /* a tree pass costs more than a chain of as many tokens (its attention gathers paths) */
        if (rc == SD_OK && !any_tree) sd_draft_costs_pass(&b->costs, b->last_pass, tv);
    }
    int emitted = 0;
    double catchup = 0;
    for (int i = 0; i < n_in && rc == SD_OK; i++) {
        sd_spec *s = specs[in[i]];
        const int before = s->st.n_generated;
        catchup += s->rnd.t_catchup;
        rc = sd_seq_finish(s, b->round, cb, user, rounds ? &rounds[in[i]] : NULL);
        emitted += s->st.n_generated - before;
    }
    for (int i = 0; rounds && i < n; i++) rounds[i].done = !specs[i]->active;
    if (rc == SD_OK && b->p.draft_switch && n_live >= 2)
        sd_draft_switch_record(&b->sw, n_live, allowed, emitted, sd_now() - t_step, catchup);
    free(in);
    free(batched);
    return rc;
}

sd_status sd_spec_batch_step(sd_spec_batch *b, sd_spec *const *specs, int n, sd_spec_round *rounds) {
    return sd_batch_step_cb(b, specs, n, rounds, NULL, NULL);
}
