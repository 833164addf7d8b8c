/* Prompt-lookup drafting (no model): the continuation of the most recent earlier occurrence of the
 * history's last n tokens (n from n_max down to n_min), found through a hash index of every
 * n-gram that grows with the history instead of rescanning it. Proposals are deterministic (q is
 * one-hot). Also the drafter that tries it first and falls back to a model drafter. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "specdec/draft.h"

typedef struct {
    uint64_t key; /* 0: empty slot */
    int32_t pos;  /* the n-gram's last position (its continuation starts at pos + 1) */
} slot;

typedef struct {
    int n_min, n_max;
    int32_t *tok;   /* the history indexed so far */
    int n_tok, cap;
    int indexed;    /* n-grams ending at positions < indexed are in the table */
    slot *tab;
    size_t tab_cap, tab_used; /* power of two; kept at most half full */
} ngram_drafter;

/* n and the n tokens ending at position p, hashed (FNV-1a over the ids, then mixed); never 0. */
static uint64_t key_of(const int32_t *tok, int p, int n) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int i = p - n + 1; i <= p; i++) h = (h ^ (uint32_t)tok[i]) * 1099511628211ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h ? h : 1;
}

static int grow(ngram_drafter *g) {
    size_t cap = g->tab_cap ? 2 * g->tab_cap : 1024;
    slot *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < g->tab_cap; i++) {
        if (!g->tab[i].key) continue;
        size_t j = g->tab[i].key & (cap - 1);
        while (t[j].key) j = (j + 1) & (cap - 1);
        t[j] = g->tab[i];
    }
    free(g->tab);
    g->tab = t;
    g->tab_cap = cap;
    return 0;
}

/* Records that the n-gram with this key ends at pos (the newest occurrence wins). */
static int put(ngram_drafter *g, uint64_t key, int32_t pos) {
    if (2 * (g->tab_used + 1) > g->tab_cap && grow(g) != 0) return -1;
    size_t j = key & (g->tab_cap - 1);
    while (g->tab[j].key && g->tab[j].key != key) j = (j + 1) & (g->tab_cap - 1);
    if (!g->tab[j].key) g->tab_used++;
    g->tab[j].key = key;
    g->tab[j].pos = pos;
    return 0;
}

static int get(const ngram_drafter *g, uint64_t key, int32_t *pos) {
    if (!g->tab_cap) return 0;
    size_t j = key & (g->tab_cap - 1);
    while (g->tab[j].key) {
        if (g->tab[j].key == key) {
            *pos = g->tab[j].pos;
            return 1;
        }
        j = (j + 1) & (g->tab_cap - 1);
    }
    return 0;
}

/* Makes tok the history (keeping the shared prefix and its index when it only grew) and indexes
 * every n-gram that has a continuation: those ending before the last token. */
static sd_status ng_sync(sd_drafter *d, const int32_t *hist, int n_hist) {
    ngram_drafter *g = d->impl;
    int c = 0;
    while (c < g->n_tok && c < n_hist && g->tok[c] == hist[c]) c++;
    if (c < g->n_tok) { /* another history: start over */
        memset(g->tab, 0, g->tab_cap * sizeof *g->tab);
        g->tab_used = 0;
        g->indexed = 0;
        g->n_tok = c;
    }
    if (n_hist > g->cap) {
        int cap = g->cap ? g->cap : 1024;
        while (cap < n_hist) cap *= 2;
        int32_t *t = realloc(g->tok, (size_t)cap * sizeof *t);
        if (!t) return sd_fail(SD_ERR_NOMEM, "ngram drafter: out of memory");
        g->tok = t;
        g->cap = cap;
    }
    memcpy(g->tok + g->n_tok, hist + g->n_tok, (size_t)(n_hist - g->n_tok) * sizeof *hist);
    g->n_tok = n_hist;
    for (; g->indexed < n_hist - 1; g->indexed++)
        for (int n = g->n_min; n <= g->n_max && n <= g->indexed + 1; n++)
            if (put(g, key_of(g->tok, g->indexed, n), g->indexed) != 0)
                return sd_fail(SD_ERR_NOMEM, "ngram drafter: out of memory");
    return SD_OK;
}

/* The continuation of the longest n-gram match of the history's end; 0 proposals when none. */
static sd_status ng_draft(sd_drafter *d, sd_draft_req *r) {
    ngram_drafter *g = d->impl;
    r->n_out = 0;
    r->q_filled = 0;
    r->source = 0;
    r->n_synced = 0;
    r->n_steps = 0;
    sd_status st = ng_sync(d, r->hist, r->n_hist);
    if (st != SD_OK) return st;
    const int last = g->n_tok - 1;
    for (int n = g->n_max; n >= g->n_min; n--) {
        if (n > g->n_tok) continue;
        int32_t pos;
        if (!get(g, key_of(g->tok, last, n), &pos) || pos >= last) continue;
        if (memcmp(g->tok + pos - n + 1, g->tok + last - n + 1, (size_t)n * sizeof *g->tok) != 0) continue;
        /* longer matches are more reliable: their length is the proposals' confidence */
        const float conf = (float)n / (float)(g->n_max + 1);
        for (int i = 0; i < r->k && pos + 1 + i <= last; i++) {
            const sd_draft_verdict v = r->policy ? r->policy->judge(r->policy, r->source, i, conf) : SD_DRAFT_MORE;
            if (v == SD_DRAFT_STOP) break;
            r->out[i] = g->tok[pos + 1 + i];
            if (r->conf) r->conf[i] = conf;
            r->n_out = i + 1;
            if (v == SD_DRAFT_LAST) break;
        }
        break;
    }
    return SD_OK;
}

static void ng_destroy(sd_drafter *d) {
    ngram_drafter *g = d->impl;
    if (g) {
        free(g->tok);
        free(g->tab);
        free(g);
    }
    free(d);
}

static const sd_drafter_vtbl k_ngram_vtbl = {ng_sync, ng_draft, ng_destroy, NULL, NULL};

sd_status sd_drafter_ngram_create(int n_min, int n_max, int n_vocab, sd_drafter **out) {
    *out = NULL;
    if (n_min < 1 || n_max < n_min || n_max > 64)
        return sd_fail(SD_ERR_INVALID_ARG, "ngram drafter: n-gram sizes %d..%d (need 1 <= min <= max <= 64)", n_min,
                       n_max);
    if (n_vocab <= 0) return sd_fail(SD_ERR_INVALID_ARG, "ngram drafter: vocabulary of %d", n_vocab);
    sd_drafter *d = calloc(1, sizeof *d);
    ngram_drafter *g = calloc(1, sizeof *g);
    if (!d || !g) {
        free(d);
        free(g);
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    g->n_min = n_min;
    g->n_max = n_max;
    d->vt = &k_ngram_vtbl;
    d->impl = g;
    d->name = "ngram";
    d->sources[0] = "ngram";
    d->n_sources = 1;
    d->n_vocab = n_vocab;
    d->capacity = INT32_MAX;
    *out = d;
    return SD_OK;
}

/* ---- n-gram first, a model when it finds no match ------------------------------------------- */

typedef struct {
    sd_drafter *ngram, *model; /* owned */
} combo_drafter;

static sd_status combo_sync(sd_drafter *d, const int32_t *hist, int n_hist) {
    combo_drafter *c = d->impl;
    sd_status st = c->ngram->vt->sync(c->ngram, hist, n_hist);
    if (st == SD_OK && c->model->vt->sync) st = c->model->vt->sync(c->model, hist, n_hist);
    return st;
}

static sd_status combo_draft(sd_drafter *d, sd_draft_req *r) {
    combo_drafter *c = d->impl;
    sd_status st = c->ngram->vt->draft(c->ngram, r);
    if (st != SD_OK || r->n_out > 0) return st; /* source 0: ngram */
    st = c->model->vt->draft(c->model, r);
    r->source = 1;
    return st;
}

static void combo_destroy(sd_drafter *d) {
    combo_drafter *c = d->impl;
    if (c) {
        sd_drafter_free(c->ngram);
        sd_drafter_free(c->model);
        free(c);
    }
    free(d);
}

static sd_status combo_set_sampling(sd_drafter *d, const sd_sampler_params *sp) {
    combo_drafter *c = d->impl;
    return sd_drafter_set_sampling(c->model, sp);
}

static const sd_drafter_vtbl k_combo_vtbl = {combo_sync, combo_draft, combo_destroy, NULL, combo_set_sampling};

sd_status sd_drafter_combo_create(sd_drafter *ngram, sd_drafter *model, sd_drafter **out) {
    *out = NULL;
    if (!ngram || !model) return sd_fail(SD_ERR_INVALID_ARG, "combined drafter: two drafters needed");
    sd_drafter *d = calloc(1, sizeof *d);
    combo_drafter *c = calloc(1, sizeof *c);
    if (!d || !c) {
        free(d);
        free(c);
        return sd_fail(SD_ERR_NOMEM, "out of memory");
    }
    c->ngram = ngram;
    c->model = model;
    d->vt = &k_combo_vtbl;
    d->impl = c;
    d->name = "ngram+model";
    d->sources[0] = "ngram";
    d->sources[1] = "model";
    d->n_sources = 2;
    d->n_vocab = ngram->n_vocab < model->n_vocab ? ngram->n_vocab : model->n_vocab;
    d->capacity = model->capacity;
    d->stepping = model->stepping << 1; /* source 1: the model */
    *out = d;
    return SD_OK;
}

sd_drafter *sd_drafter_combo_model(sd_drafter *d) {
    return d && d->vt == &k_combo_vtbl ? ((combo_drafter *)d->impl)->model : NULL;
}
