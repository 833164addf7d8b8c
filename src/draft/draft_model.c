/* The model drafter: a small model decoding k tokens one at a time in its own KV cache sequence,
 * recording the processed distribution each draft was drawn from. It remembers the tokens its
 * cache holds, so it syncs itself to any history by keeping the common prefix. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "specdec/draft.h"
#include "specdec/grammar.h"

typedef struct {
    sd_context *ctx;
    int seq;
    sd_sampler_params sp;
    int n_vocab;       /* width of the distributions: the target's vocabulary */
    int model_vocab;   /* the draft model's logit count */
    int32_t *fed;      /* [n_ctx] the tokens the cache holds, in order */
    int n_fed;
    int synced;        /* fed[0..synced) is known to equal the history's prefix */
    float *logits;     /* [model_vocab] after the last fed token */
    int have_logits;   /* logits belong to fed[n_fed - 1] */
    float *row;        /* [n_vocab] logits restricted/padded to the target's vocabulary */
    float *probs;      /* [n_vocab] when q is not requested */
    void *scratch;     /* sd_sample_scratch_bytes(n_vocab) */
    int32_t *pen_cnt;  /* [n_vocab] zeroed: sd_penalize's scratch */
} model_drafter;

static const sd_drafter_vtbl k_model_vtbl;

/* Ids the target cannot score get a logit that underflows to probability 0, so the draft
 * never proposes them and q stays the distribution actually sampled from. */
#define SD_MASKED_LOGIT (-1e30f)

/* The id the draft model reads for token t: a target with more embedding rows (a padded
 * vocabulary) may emit ids the draft has no row for; they go in as id 0. Drafts are only
 * proposals, so verification stays exact. */
static int32_t draft_id(const model_drafter *md, int32_t t) { return t < md->model_vocab ? t : 0; }

/* Feeds tokens[0..n) after what the cache holds; logits of the last one. */
static sd_status feed(model_drafter *md, const int32_t *tokens, int n) {
    int32_t *mapped = NULL;
    for (int i = 0; i < n && !mapped; i++)
        if (tokens[i] >= md->model_vocab) {
            if (!(mapped = malloc((size_t)n * sizeof *mapped))) return sd_fail(SD_ERR_NOMEM, "out of memory");
            for (int j = 0; j < n; j++) mapped[j] = draft_id(md, tokens[j]);
        }
    sd_status st = sd_context_forward(md->ctx, md->seq, mapped ? mapped : tokens, n, md->logits, 0);
    free(mapped);
    if (st != SD_OK) return st;
    memcpy(md->fed + md->n_fed, tokens, (size_t)n * sizeof *tokens);
    md->n_fed += n;
    md->have_logits = 1;
    return SD_OK;
}

/* Keeps the longest prefix of the cache that the history shares (fed[0..c) is known to be
 * shared), then feeds the rest of the history; for `logits` at most n_hist - 1 tokens are kept,
 * so that the last history token is fed and gives the logits to draft from. */
static sd_status check_hist(const model_drafter *md, int n_hist) {
    if (n_hist < 1) return sd_fail(SD_ERR_INVALID_ARG, "drafter: empty history");
    if (n_hist > sd_context_n_ctx(md->ctx))
        return sd_fail(SD_ERR_CONTEXT_FULL, "drafter: a history of %d tokens exceeds its context of %d", n_hist,
                       sd_context_n_ctx(md->ctx));
    return SD_OK;
}

/* ... and *n_fed_out: the tokens it fed. */
static sd_status sync_from(model_drafter *md, const int32_t *hist, int n_hist, int c, int logits, int *n_fed_out) {
    *n_fed_out = 0;
    sd_status st = logits ? check_hist(md, n_hist) : SD_OK; /* without: a checked history's prefix */
    if (st != SD_OK) return st;
    while (c < md->n_fed && c < n_hist && md->fed[c] == hist[c]) c++;
    if (c == n_hist && md->n_fed == n_hist && (md->have_logits || !logits)) {
        md->synced = c;
        return SD_OK; /* already there (with logits in hand, where they are needed) */
    }
    if (logits && c > n_hist - 1) c = n_hist - 1;
    if ((st = sd_context_seq_truncate(md->ctx, md->seq, c)) != SD_OK) return st;
    md->n_fed = c;
    md->have_logits = 0;
    md->synced = c;
    if (c < n_hist && (st = feed(md, hist + c, n_hist - c)) != SD_OK) return st;
    md->synced = n_hist;
    *n_fed_out = n_hist - c;
    return SD_OK;
}

/* A new history (a generation's prompt): all but its last token fed now, as the target's prefill
 * feeds them (the cache's common prefix kept). A generation's first round drafts (the controller),
 * and fed then, the prompt's catch-up made that round's drafting time no draft step's price, so a
 * second round had to draft only to measure it (measured: commit 16f286b). */
static sd_status md_sync(sd_drafter *d, const int32_t *hist, int n_hist) {
    model_drafter *md = d->impl;
    sd_status st = check_hist(md, n_hist);
    int n_fed;
    return st != SD_OK ? st : sync_from(md, hist, n_hist - 1, 0, 0, &n_fed);
}

/* The logits in hand restricted/padded to the target's vocabulary into md->row, with the
 * generation's penalties from what the cache holds (the history and the drafts fed so far, the
 * generated part from n_prompt), as the target's rows will have them. */
static void md_row(model_drafter *md, const float *logits, int n_prompt) {
    const int nv = md->n_vocab, common = md->model_vocab < nv ? md->model_vocab : nv;
    memcpy(md->row, logits, (size_t)common * sizeof(float));
    for (int i = common; i < nv; i++) md->row[i] = SD_MASKED_LOGIT;
    sd_penalize(&md->sp, md->fed, md->n_fed, n_prompt, md->row, nv, md->pen_cnt);
}

/* The grammar's mask at the proposal about to be drawn, on md->row (a proposal the target could
 * never accept is not worth a draft). 0 when the grammar allows nothing: no proposal. */
static int md_constrain(model_drafter *md, sd_draft_req *r) {
    if (!r->grammar) return 1;
    const int nv = md->n_vocab;
    memset(r->mask, 0, (size_t)(nv + 63) / 64 * sizeof *r->mask);
    if (sd_grammar_matcher_mask(r->grammar, r->mask) != SD_OK) return 0;
    int any = 0;
    for (int w = 0; w < (nv + 63) / 64 && !any; w++) any = r->mask[w] != 0;
    if (any) sd_grammar_mask_logits(r->mask, md->row, nv, SD_MASKED_LOGIT);
    return any;
}

/* The distribution the next proposal is drawn from, from the logits in hand, and its pre-draw
 * confidence (its top probability; greedy: the raw softmax's, computed only when wanted). Into
 * dst (q's row) when given, else the drafter's own buffer; *dist says where it is (NULL when
 * greedy without q: the argmax needs none). */
static sd_status md_dist(model_drafter *md, sd_draft_req *r, float *dst, int want_conf, const float **dist, float *conf,
                         int *allowed) {
    const int nv = md->n_vocab;
    md_row(md, md->logits, r->n_prompt);
    *allowed = md_constrain(md, r);
    *conf = 1.0f;
    *dist = NULL;
    if (md->sp.temperature == 0 && !dst) {
        if (want_conf) /* the top-1 probability: exp(0) over the sum of exp(x - max) */
            *conf = (float)(1.0 / sd_exp_sum(md->row, nv, md->row[sd_argmax(md->row, nv)]));
        return SD_OK;
    }
    float *probs = dst ? dst : md->probs;
    sd_status st = sd_sample_probs(&md->sp, md->row, nv, probs, md->scratch);
    if (st != SD_OK) return st;
    *conf = probs[sd_argmax(probs, nv)];
    *dist = probs;
    return SD_OK;
}

/* The proposal for history position pos, drawn after the policy said to: the argmax (greedy),
 * the race's winner (coupled), or a draw from the distribution (rejection). */
static int32_t md_draw(const model_drafter *md, const float *dist, sd_rng *rng, int64_t pos) {
    if (md->sp.temperature == 0) return dist ? sd_argmax(dist, md->n_vocab) : sd_argmax(md->row, md->n_vocab);
    if (md->sp.mode == SD_SAMPLING_COUPLED) return sd_sample_coupled(dist, md->n_vocab, sd_coupled_key(md->sp.seed, pos));
    return sd_sample_draw(dist, md->n_vocab, rng);
}

/* Whether proposals need q recorded: only rejection sampling verifies against it. */
static int md_wants_q(const model_drafter *md) {
    return md->sp.temperature > 0 && md->sp.mode == SD_SAMPLING_REJECTION;
}

static sd_status md_draft(sd_drafter *d, sd_draft_req *r) {
    model_drafter *md = d->impl;
    r->n_out = 0;
    r->source = 0;
    float *q = md_wants_q(md) ? r->q : NULL;
    r->q_filled = q != NULL;
    /* The history extends the last one: its first `synced` tokens are the cache's. */
    int c = md->synced < md->n_fed ? md->synced : md->n_fed;
    r->n_steps = 0;
    sd_status st = sync_from(md, r->hist, r->n_hist, c < r->n_hist ? c : r->n_hist, 1, &r->n_synced);
    if (st != SD_OK) return st;
    r->n_steps = r->n_synced > 0;
    /* Drafts go into the cache too (all but the last); the next sync keeps those accepted. */
    int k = r->k;
    const int room = sd_context_n_ctx(md->ctx) - md->n_fed;
    if (k > room + 1) k = room + 1;
    for (int i = 0; i < k; i++) {
        float conf;
        const float *dist;
        int allowed;
        if ((st = md_dist(md, r, q ? q + (size_t)i * md->n_vocab : NULL, r->policy != NULL, &dist, &conf, &allowed)) !=
            SD_OK)
            return st;
        if (!allowed) break; /* the grammar allows nothing more: the target ends here */
        /* asked before the draw: the answer cannot depend on which token comes out */
        const sd_draft_verdict v = r->policy ? r->policy->judge(r->policy, 0, i, conf) : SD_DRAFT_MORE;
        if (v == SD_DRAFT_STOP) break;
        r->out[i] = md_draw(md, dist, r->rng, (int64_t)r->n_hist + i);
        if (r->grammar && sd_grammar_matcher_accept(r->grammar, r->out[i]) != SD_OK)
            return sd_fail(SD_ERR_INVALID_ARG, "drafter: the grammar refused token %d its mask allowed", (int)r->out[i]);
        if (r->conf) r->conf[i] = conf;
        r->n_out = i + 1;
        if (v == SD_DRAFT_LAST || i + 1 == k) break; /* the last draft is fed only if it is accepted */
        if ((st = feed(md, &r->out[i], 1)) != SD_OK) return st;
        r->n_steps++;
    }
    return SD_OK;
}

/* ---- several drafters on one context, in lockstep ------------------------------------------ */

int sd_drafter_model_batchable(const sd_drafter *a, const sd_drafter *b) {
    return a && b && a->vt == &k_model_vtbl && b->vt == &k_model_vtbl &&
           ((const model_drafter *)a->impl)->ctx == ((const model_drafter *)b->impl)->ctx;
}

/* Runs the batch and hands each drafter whose token asked for logits its row. */
static sd_status run_lockstep(sd_context *ctx, const sd_batch *b, model_drafter *const *who, int n_who, float *lg,
                              size_t vocab) {
    sd_status st = sd_context_decode(ctx, b, lg);
    if (st != SD_OK) return st;
    for (int i = 0; i < n_who; i++) {
        memcpy(who[i]->logits, lg + (size_t)i * vocab, vocab * sizeof(float));
        who[i]->have_logits = 1;
    }
    return SD_OK;
}

sd_status sd_drafter_model_draft_many(sd_drafter *const *ds, sd_draft_req *const *reqs, int n) {
    if (n < 1) return SD_OK;
    for (int i = 1; i < n; i++)
        if (!sd_drafter_model_batchable(ds[0], ds[i]))
            return sd_fail(SD_ERR_INVALID_ARG, "drafting in lockstep needs model drafters on one context");
    model_drafter *m0 = ds[0]->impl;
    const size_t vocab = (size_t)m0->model_vocab;
    int total = 0;
    for (int i = 0; i < n; i++) total += reqs[i]->n_hist + 1;
    sd_batch b = {0};
    model_drafter **who = malloc((size_t)n * sizeof *who);
    int *k = malloc((size_t)n * sizeof *k), *live = malloc((size_t)n * sizeof *live);
    float *lg = malloc((size_t)n * vocab * sizeof *lg);
    sd_status st = who && k && live && lg ? sd_batch_init(&b, total) : sd_fail(SD_ERR_NOMEM, "out of memory");
    int n_who = 0;
    /* sync: every drafter's missing history tokens, as chains of one batch */
    for (int i = 0; i < n && st == SD_OK; i++) {
        model_drafter *md = ds[i]->impl;
        sd_draft_req *r = reqs[i];
        r->n_out = 0;
        r->n_steps = 0;
        r->source = 0;
        r->q_filled = md_wants_q(md) && r->q != NULL;
        if ((st = check_hist(md, r->n_hist)) != SD_OK) break;
        int c = md->synced < md->n_fed ? md->synced : md->n_fed;
        if (c > r->n_hist) c = r->n_hist;
        while (c < md->n_fed && c < r->n_hist && md->fed[c] == r->hist[c]) c++;
        r->n_synced = 0;
        if (c == r->n_hist && md->n_fed == r->n_hist && md->have_logits) continue; /* in step already */
        if (c > r->n_hist - 1) c = r->n_hist - 1;
        r->n_synced = r->n_hist - c;
        r->n_steps = 1;
        sd_context_seq_truncate(md->ctx, md->seq, c);
        md->n_fed = c;
        md->have_logits = 0;
        for (int t = c; t < r->n_hist; t++) sd_batch_add(&b, draft_id(md, r->hist[t]), t, md->seq, t == r->n_hist - 1);
        memcpy(md->fed + c, r->hist + c, (size_t)(r->n_hist - c) * sizeof *md->fed);
        md->n_fed = r->n_hist;
        md->synced = r->n_hist;
        who[n_who++] = md;
    }
    if (st == SD_OK && b.n) st = run_lockstep(m0->ctx, &b, who, n_who, lg, vocab);
    for (int i = 0; i < n; i++) {
        model_drafter *md = ds[i]->impl;
        const int room = sd_context_n_ctx(md->ctx) - md->n_fed;
        k[i] = reqs[i]->k > room + 1 ? room + 1 : reqs[i]->k;
        live[i] = st == SD_OK && k[i] > 0;
    }
    /* draft steps: each live drafter is asked, draws, and the ones going on feed their draws together */
    for (int step = 0; st == SD_OK; step++) {
        sd_batch_clear(&b);
        n_who = 0;
        for (int i = 0; i < n && st == SD_OK; i++) {
            if (!live[i]) continue;
            model_drafter *md = ds[i]->impl;
            sd_draft_req *r = reqs[i];
            float conf;
            const float *dist;
            float *q = md_wants_q(md) ? r->q : NULL;
            int allowed;
            st = md_dist(md, r, q ? q + (size_t)step * md->n_vocab : NULL, r->policy != NULL, &dist, &conf, &allowed);
            if (st != SD_OK) break;
            live[i] = 0;
            if (!allowed) continue;
            const sd_draft_verdict v = r->policy ? r->policy->judge(r->policy, 0, step, conf) : SD_DRAFT_MORE;
            if (v == SD_DRAFT_STOP) continue;
            r->out[step] = md_draw(md, dist, r->rng, (int64_t)r->n_hist + step);
            if (r->grammar && sd_grammar_matcher_accept(r->grammar, r->out[step]) != SD_OK) {
                st = sd_fail(SD_ERR_INVALID_ARG, "drafter: the grammar refused token %d its mask allowed", (int)r->out[step]);
                break;
            }
            if (r->conf) r->conf[step] = conf;
            r->n_out = step + 1;
            if (v == SD_DRAFT_LAST || step + 1 == k[i]) continue; /* the last draft is fed only if accepted */
            live[i] = 1;
            r->n_steps++;
            sd_batch_add(&b, r->out[step], md->n_fed, md->seq, 1);
            md->fed[md->n_fed++] = r->out[step];
            who[n_who++] = md;
        }
        if (st != SD_OK || !b.n) break;
        st = run_lockstep(m0->ctx, &b, who, n_who, lg, vocab);
    }
    sd_batch_free(&b);
    free(who);
    free(k);
    free(live);
    free(lg);
    return st;
}

/* ---- trees -------------------------------------------------------------------------------- */

/* How a node's children are chosen, from the drafter's sampling. */
typedef enum {
    TREE_TOP,  /* greedy: the likeliest tokens */
    TREE_RACE, /* coupled: the race's best tokens at the children's position */
    TREE_IID,  /* rejection: i.i.d. draws from the node's distribution, recorded in q */
} tree_mode;

static tree_mode md_tree_mode(const model_drafter *md) {
    return md->sp.temperature == 0 ? TREE_TOP : md->sp.mode == SD_SAMPLING_COUPLED ? TREE_RACE : TREE_IID;
}

/* The distribution at a node from its logits (restricted/padded to n_vocab) into out: the run's
 * processed distribution when sampling, else the plain softmax (scores for ranking). */
static sd_status node_dist(model_drafter *md, const float *logits, int n_prompt, tree_mode mode, float *out) {
    const int nv = md->n_vocab;
    md_row(md, logits, n_prompt); /* a node's own path is left out of the penalties: q is still what
                                     its children are drawn from, and verification stays exact */
    if (mode != TREE_TOP) return sd_sample_probs(&md->sp, md->row, nv, out, md->scratch);
    sd_sampler_params t1 = sd_sampler_default_params();
    t1.temperature = 1.0f;
    return sd_sample_probs(&t1, md->row, nv, out, md->scratch);
}

/* Indices of the `count` largest values of x[0..n), largest first, into top; returns how many. */
static int top_indices(const float *x, int n, int count, int32_t *top) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!(x[i] > 0) || (m == count && !(x[i] > x[top[m - 1]]))) continue;
        int j = m < count ? m++ : m - 1;
        while (j > 0 && x[top[j - 1]] < x[i]) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = i;
    }
    return m;
}

/* Node u's children: its `count` likeliest tokens (greedy), the race's best `count` at their
 * position (coupled), or `count` i.i.d. draws from dist (rejection). The count is fixed before
 * any draw and every draw is kept. */
static void add_children(sd_draft_tree_req *r, const model_drafter *md, tree_mode mode, const float *dist, int u,
                         int count, double *score, int *depth_of) {
    const int nv = md->n_vocab;
    int32_t top[16];
    if (count > 16) count = 16;
    const int m = mode == TREE_IID  ? count
                  : mode == TREE_TOP ? top_indices(dist, nv, count, top)
                                     : sd_sample_coupled_top(dist, nv,
                                                             sd_coupled_key(md->sp.seed, (int64_t)r->n_hist + depth_of[u]),
                                                             count, top);
    for (int c = 0; c < m && r->n <= r->budget; c++) {
        const int32_t t = mode == TREE_IID ? sd_sample_draw(dist, nv, r->rng) : top[c];
        r->tok[r->n] = t;
        r->par[r->n] = u;
        score[r->n] = score[u] * dist[t];
        depth_of[r->n] = depth_of[u] + 1;
        r->n++;
    }
}

/* A node whose likeliest token is this probable gets one child: alternatives would rarely pay. */
#define TREE_SURE 0.8f

static int children_for(const float *dist, int nv, int branch) {
    float top = 0;
    for (int i = 0; i < nv; i++) top = dist[i] > top ? dist[i] : top;
    return top >= TREE_SURE ? 1 : branch;
}

/* Level by level: expand the `width` best-scoring nodes of the newest level (their distributions
 * come from one draft pass over them and their ancestors, a tree batch after the history), each
 * getting `branch` children (1 where its top token is likely enough), until the budget or the
 * depth is spent. Scores are path probabilities. The draft's cache keeps the history only. */
static sd_status md_draft_tree(sd_drafter *d, sd_draft_tree_req *r) {
    model_drafter *md = d->impl;
    const int nv = md->n_vocab, cap = r->budget + 1;
    const tree_mode mode = md_tree_mode(md);
    r->n = 0;
    r->q_filled = 0;
    if (mode == TREE_IID && !r->q)
        return sd_fail(SD_ERR_INVALID_ARG, "drafter: a sampled tree needs room for its distributions (q)");
    int c0 = md->synced < md->n_fed ? md->synced : md->n_fed;
    int n_synced;
    sd_status st = sync_from(md, r->hist, r->n_hist, c0 < r->n_hist ? c0 : r->n_hist, 1, &n_synced);
    if (st != SD_OK) return st;
    const int base = md->n_fed; /* the history; tree rows go after it and are dropped */
    const int width = r->width < 1 ? 1 : r->width;
    double *score = malloc((size_t)cap * sizeof *score);
    int *depth_of = malloc((size_t)cap * sizeof *depth_of), *in_batch = malloc((size_t)cap * sizeof *in_batch);
    int *expand = malloc((size_t)width * sizeof *expand);
    float *dist = mode == TREE_IID ? NULL : malloc((size_t)nv * sizeof *dist);
    float *lg = malloc((size_t)width * md->model_vocab * sizeof *lg);
    sd_batch b = {0};
    if (!score || !depth_of || !in_batch || !expand || (mode != TREE_IID && !dist) || !lg || sd_batch_init(&b, cap) != SD_OK) {
        st = sd_fail(SD_ERR_NOMEM, "drafter: out of memory for a tree of %d nodes", cap);
        goto out;
    }
    r->tok[0] = r->hist[r->n_hist - 1];
    r->par[0] = -1;
    score[0] = 1;
    depth_of[0] = 0;
    r->n = 1;
    float *du = mode == TREE_IID ? r->q : dist; /* the root's distribution: the logits after the history */
    if ((st = node_dist(md, md->logits, r->n_prompt, mode, du)) != SD_OK) goto out;
    add_children(r, md, mode, du, 0, children_for(du, nv, r->branch), score, depth_of);
    for (int level = 1, level_start = 1; level < r->depth && r->n < cap; level++) {
        int n_exp = 0; /* the newest level's best `width`, best first */
        for (int i = level_start; i < r->n; i++) {
            if (n_exp == width && !(score[i] > score[expand[width - 1]])) continue;
            int j = n_exp < width ? n_exp++ : width - 1;
            while (j > 0 && score[expand[j - 1]] < score[i]) {
                expand[j] = expand[j - 1];
                j--;
            }
            expand[j] = i;
        }
        if (n_exp == 0) break;
        /* one pass over them and their ancestors (node order: parents first); logits for them */
        for (int i = 0; i < r->n; i++) in_batch[i] = -1;
        for (int e = 0; e < n_exp; e++)
            for (int j = expand[e]; j > 0; j = r->par[j]) in_batch[j] = 0;
        for (int e = 0; e < n_exp; e++) in_batch[expand[e]] = 1;
        sd_batch_clear(&b);
        int out_row[64];
        for (int i = 1, rows = 0; i < r->n; i++) {
            if (in_batch[i] < 0) continue;
            const int want = in_batch[i];
            in_batch[i] = b.n;
            if (want) out_row[b.n < 64 ? b.n : 63] = rows++;
            sd_batch_add_child(&b, r->tok[i], base + depth_of[i] - 1, md->seq, r->par[i] > 0 ? in_batch[r->par[i]] : -1,
                               want);
        }
        st = sd_context_decode(md->ctx, &b, lg);
        sd_context_seq_truncate(md->ctx, md->seq, base);
        if (st != SD_OK) goto out;
        const int level_end = r->n;
        for (int e = 0; e < n_exp && r->n < cap; e++) {
            const int u = expand[e];
            du = mode == TREE_IID ? r->q + (size_t)u * nv : dist;
            if ((st = node_dist(md, lg + (size_t)out_row[in_batch[u]] * md->model_vocab, r->n_prompt, mode, du)) != SD_OK)
                goto out;
            add_children(r, md, mode, du, u, children_for(du, nv, r->branch), score, depth_of);
        }
        level_start = level_end;
    }
out:
    r->q_filled = st == SD_OK && mode == TREE_IID;
    sd_context_seq_truncate(md->ctx, md->seq, base);
    sd_batch_free(&b);
    free(score);
    free(depth_of);
    free(in_batch);
    free(expand);
    free(dist);
    free(lg);
    return st;
}

static void md_destroy(sd_drafter *d) {
    model_drafter *md = d->impl;
    if (md) {
        free(md->fed);
        free(md->logits);
        free(md->row);
        free(md->probs);
        free(md->scratch);
        free(md->pen_cnt);
        free(md);
    }
    free(d);
}

static sd_status md_set_sampling(sd_drafter *d, const sd_sampler_params *sp) {
    model_drafter *md = d->impl;
    sd_status st = sd_sampler_params_check(sp);
    if (st == SD_OK) md->sp = *sp;
    return st;
}

static const sd_drafter_vtbl k_model_vtbl = {md_sync, md_draft, md_destroy, md_draft_tree, md_set_sampling};

sd_status sd_drafter_model_create(sd_context *ctx, int seq, int n_vocab, const sd_sampler_params *sp,
                                  sd_drafter **out) {
    *out = NULL;
    if (!ctx) return sd_fail(SD_ERR_INVALID_ARG, "drafter: no context");
    if (n_vocab <= 0) return sd_fail(SD_ERR_INVALID_ARG, "drafter: vocabulary of %d", n_vocab);
    if (seq < 0 || seq >= sd_context_n_seq(ctx))
        return sd_fail(SD_ERR_INVALID_ARG, "drafter: sequence %d not in the context's %d", seq, sd_context_n_seq(ctx));
    sd_drafter *d = calloc(1, sizeof *d);
    model_drafter *md = calloc(1, sizeof *md);
    if (!d || !md) {
        free(d);
        free(md);
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    d->vt = &k_model_vtbl;
    d->impl = md;
    d->name = "model";
    d->sources[0] = "model";
    d->n_sources = 1;
    d->n_vocab = n_vocab;
    d->capacity = sd_context_n_ctx(ctx);
    d->stepping = 1u;
    md->ctx = ctx;
    md->seq = seq;
    md->sp = *sp;
    md->n_vocab = n_vocab;
    md->model_vocab = sd_model_hparams(sd_context_model(ctx))->vocab_size;
    md->n_fed = sd_context_seq_len(ctx, seq);
    if (md->n_fed > 0) sd_context_seq_truncate(ctx, seq, 0); /* unknown tokens: start empty */
    md->n_fed = 0;
    md->fed = malloc((size_t)sd_context_n_ctx(ctx) * sizeof *md->fed);
    md->logits = malloc((size_t)md->model_vocab * sizeof(float));
    md->row = malloc((size_t)n_vocab * sizeof(float));
    md->probs = malloc((size_t)n_vocab * sizeof(float));
    md->scratch = malloc(sd_sample_scratch_bytes(n_vocab));
    md->pen_cnt = calloc((size_t)n_vocab, sizeof *md->pen_cnt);
    if (!md->fed || !md->logits || !md->row || !md->probs || !md->scratch || !md->pen_cnt) {
        md_destroy(d);
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    *out = d;
    return SD_OK;
}


/* d itself, or the model drafter inside a combined one; NULL otherwise. */
static const model_drafter *model_of(const sd_drafter *d) {
    if (d && d->vt != &k_model_vtbl) d = sd_drafter_combo_model((sd_drafter *)d);
    return d && d->vt == &k_model_vtbl ? d->impl : NULL;
}


sd_context *sd_drafter_model_context(const sd_drafter *d) {
    const model_drafter *md = model_of(d);
    return md ? md->ctx : NULL;
}

int sd_drafter_model_seq(const sd_drafter *d) {
    const model_drafter *md = model_of(d);
    return md ? md->seq : -1;
}

const int32_t *sd_drafter_model_tokens(const sd_drafter *d, int *n) {
    *n = 0;
    d = d && d->vt != &k_model_vtbl ? sd_drafter_combo_model((sd_drafter *)d) : d;
    if (!d || d->vt != &k_model_vtbl) return NULL;
    const model_drafter *md = d->impl;
    *n = md->n_fed;
    return md->fed;
}
