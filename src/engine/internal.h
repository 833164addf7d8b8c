/* The engine's parts and what they share: a sequence's generation (seq.c: history, the round's
 * phases, acceptance, statistics), the batch that runs the rounds of many sequences as one pass
 * (batch.c) and the pair builder (pair.c). Only the engine includes this. */
#ifndef SD_ENGINE_INTERNAL_H
#define SD_ENGINE_INTERNAL_H

#include "draft/controller.h"
#include "specdec/spec.h"
#include "specdec/target.h"

struct sd_spec_batch {
    sd_context *ctx;       /* the target context (borrowed) */
    sd_spec_batch_params p;
    sd_verify_round *round;
    sd_draft_costs costs;  /* measured by every round's pass and draft steps */
    sd_draft_switch sw;    /* p.draft_switch */
    int last_pass;         /* tokens in the last round's pass */
};

struct sd_spec {
    sd_spec_batch *batch; /* borrowed: the batch of the target context */
    int seq;
    sd_drafter *drafter;  /* borrowed; NULL: plain decoding */
    sd_pair *owner;       /* sd_spec_create: the pair this engine frees with itself */
    sd_spec_params p;
    int n_vocab;          /* target logits per row */
    int n_ctx;            /* tokens the history may hold */
    int has_model;        /* the drafter samples from a draft model (its drafts are random) */
    const sd_tokenizer *tok; /* the target's: its end-of-generation ids stop a generation */
    int32_t *tokens;      /* [n_ctx] prompt + emitted */
    int n_tokens;
    float *p_rows;        /* [k+1][n_vocab] processed target distributions */
    float *q_rows;        /* [k+1][n_vocab] processed draft distributions (rejection sampling) */
    float *residual;      /* [n_vocab] */
    void *scratch;        /* sampling scratch */
    int32_t *picks;       /* [k+1] the target's token at each row (greedy, coupled) */
    float *row_buf;       /* [n_vocab] a row with the sampling penalties applied */
    sd_grammar_matcher *gm; /* p.grammar's matcher for the running generation (NULL: none) */
    int gm_steps;         /* its steps at the history's end (the state rounds roll back to) */
    uint64_t *masks;      /* [k + 1][mask_words]: the grammar's mask at each row of the round */
    int mask_words;       /* words of a mask over the target's vocabulary */
    int32_t *pen_cnt;     /* [n_vocab] zeroed: sd_penalize's scratch */
    float conf[SD_MAX_DRAFT];
    sd_token_logprobs lp[SD_MAX_DRAFT + 1]; /* the round's candidate tokens' (params.logprobs) */
    int32_t tree_tok[SD_MAX_DRAFT + 1], tree_par[SD_MAX_DRAFT + 1], path[SD_MAX_DRAFT + 1];
    /* the round in progress (between plan and finish) */
    struct {
        int k;           /* most drafts (0: a plain step) */
        int room;        /* positions the history can still take */
        int share;       /* most drafts (tree nodes) this engine's share of the pass holds */
        double t_draft0; /* stats.t_draft before the round */
        int tree;        /* a tree round */
        int n_nodes;     /* tree: nodes, root included */
        int max_depth;   /* tree: its depth */
        int row0;        /* first logit row in the verify round */
        int n_forced;    /* chain[1..n_forced]: the bytes the grammar forced, tokenized */
        int nd;          /* drafts in the chain: n_forced + the drafter's (sd_seq_add sets it) */
        double t_catchup;/* seconds of the round's drafting spent catching up on history */
        sd_draft_req req;
        int32_t chain[SD_MAX_DRAFT + 1]; /* [pending, d1..dnd] */
    } rnd;
    sd_draft_ctl ctl;     /* the draft controller's state for this sequence */
    int k_alloc;          /* rows of p_rows/q_rows/picks less one: the most drafts set_params allows */
    /* this engine's last round, for the others of a shared one: tokens in the pass, tokens
     * emitted, seconds of drafting */
    int last_n, last_e;
    double last_td;
    sd_rng rng;
    sd_spec_stats st;
    double t0;
    int active;           /* between begin and the end of the generation */
};

/* seq.c: the phases of a round of one sequence */
/* Checks and sizes the round: 0 when the engine takes part (rnd set up, rnd.k drafts at most), 1
 * when its generation has ended instead (*rc set on an error). */
int sd_seq_plan(sd_spec *s, int share, int allowed, int others_n, double others_e, double others_t, sd_status *rc);
/* A chain round's request to the drafter (rnd.req). */
void sd_seq_fill_req(sd_spec *s);
/* The drafter's answer checked against its contract (and draft_min applied); td: seconds it took,
 * n_synced: the most history tokens a model fed to catch up in that time. */
sd_status sd_seq_check_req(sd_spec *s, double td, int n_synced);
/* The most tokens a model drafter feeds to catch up after a round that drafted: the target's own
 * token, and the last draft when every draft was accepted. */
#define SYNC_ROUND 2
/* The round's proposals from the drafter (a chain, or a tree), checked. */
sd_status sd_seq_draft(sd_spec *s);
/* The round's tokens into the verify round. */
sd_status sd_seq_add(sd_spec *s, sd_verify_round *vr);
/* After the pass: accept, keep the accepted rows, emit (cb may be NULL); out may be NULL. */
sd_status sd_seq_finish(sd_spec *s, const sd_verify_round *vr, sd_token_cb cb, void *user, sd_spec_round *out);

/* batch.c: one round of n engines, with a token callback (only a batch of one passes one) */
sd_status sd_batch_step_cb(sd_spec_batch *b, sd_spec *const *specs, int n, sd_spec_round *rounds, sd_token_cb cb,
                           void *user);
/* The adaptive controller's start: a target pass of 1 token after s's cached prompt (then rolled
 * back), into the batch's costs. */
sd_status sd_batch_measure(sd_spec_batch *b, sd_spec *s);

#endif
