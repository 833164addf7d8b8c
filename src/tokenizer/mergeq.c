/* The merge queue of long words: candidate merges popped in (priority, position) order, as one
 * binary heap of every pair would pop them, but kept in one bucket per priority (a BPE rank, an
 * SPM score) with a small heap over the buckets. A long word's pairs then cost an append each and
 * a sequential sweep per bucket instead of a walk down a heap of millions of entries. */
#include "tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t prio;
    uint32_t n, cap, cur;   /* entries e[cur, n) are pending */
    sd_mq_entry *e;
    sd_mq_entry *late;      /* pushed out of order while the bucket was being swept: a heap by pos */
    uint32_t n_late, cap_late;
    uint8_t sorted;         /* e[cur, n) ascends by position */
    uint8_t in_heap;
} mq_bucket;

struct sd_mq {
    mq_bucket *b;           /* buckets [0, n_b) belong to the current word; the rest keep memory */
    uint32_t n_b, cap_b;
    uint32_t *slot_key, *slot_gen; /* priority -> bucket, open addressing, stale unless gen */
    int32_t *slot_b;
    uint32_t mask, gen;
    int32_t *heap;          /* buckets by priority, the lowest on top */
    uint32_t n_heap, cap_heap;
    int32_t cur;            /* the bucket being swept, -1: none */
    int oom;
};

sd_mq *sd_mq_create(void) {
    sd_mq *q = calloc(1, sizeof *q);
    if (q) {
        q->cur = -1;
        q->gen = 1; /* slots start at generation 0: stale */
    }
    return q;
}

void sd_mq_free(sd_mq *q) {
    if (!q) return;
    for (uint32_t i = 0; i < q->cap_b; i++) {
        free(q->b[i].e);
        free(q->b[i].late);
    }
    free(q->b);
    free(q->slot_key);
    free(q->slot_gen);
    free(q->slot_b);
    free(q->heap);
    free(q);
}

void sd_mq_reset(sd_mq *q) {
    q->n_b = 0;
    q->n_heap = 0;
    q->cur = -1;
    if (++q->gen == 0) { /* wrapped: every slot must read as stale again */
        if (q->slot_gen) memset(q->slot_gen, 0, ((size_t)q->mask + 1) * sizeof *q->slot_gen);
        q->gen = 1;
    }
    q->oom = 0;
}

static uint32_t prio_hash(uint32_t k) {
    k ^= k >> 16;
    k *= 0x7feb352dU;
    k ^= k >> 15;
    k *= 0x846ca68bU;
    k ^= k >> 16;
    return k;
}

/* Doubles the table (at most half full afterwards), keeping the current word's slots. */
static int grow_slots(sd_mq *q) {
    const uint32_t cap = q->mask ? 2 * (q->mask + 1) : 1024;
    uint32_t *key = malloc(cap * sizeof *key), *gen = calloc(cap, sizeof *gen);
    int32_t *b = malloc(cap * sizeof *b);
    if (!key || !gen || !b) {
        free(key);
        free(gen);
        free(b);
        return -1;
    }
    const uint32_t old = q->mask ? q->mask + 1 : 0;
    for (uint32_t i = 0; i < old; i++) {
        if (q->slot_gen[i] != q->gen) continue;
        uint32_t j = prio_hash(q->slot_key[i]) & (cap - 1);
        while (gen[j] == q->gen) j = (j + 1) & (cap - 1);
        key[j] = q->slot_key[i];
        gen[j] = q->gen;
        b[j] = q->slot_b[i];
    }
    free(q->slot_key);
    free(q->slot_gen);
    free(q->slot_b);
    q->slot_key = key;
    q->slot_gen = gen;
    q->slot_b = b;
    q->mask = cap - 1;
    return 0;
}

/* The bucket of prio, created empty if the word has none yet; -1 when out of memory. */
static int32_t bucket_of(sd_mq *q, uint32_t prio) {
    if (2 * ((size_t)q->n_b + 1) > (size_t)q->mask + 1 && grow_slots(q) != 0) return -1;
    uint32_t j = prio_hash(prio) & q->mask;
    for (; q->slot_gen[j] == q->gen; j = (j + 1) & q->mask)
        if (q->slot_key[j] == prio) return q->slot_b[j];
    if (q->n_b == q->cap_b) {
        const uint32_t cap = q->cap_b ? 2 * q->cap_b : 256;
        mq_bucket *nb = realloc(q->b, cap * sizeof *nb);
        if (!nb) return -1;
        memset(nb + q->cap_b, 0, (cap - q->cap_b) * sizeof *nb);
        q->b = nb;
        q->cap_b = cap;
    }
    mq_bucket *B = &q->b[q->n_b];
    B->prio = prio;
    B->n = B->cur = B->n_late = 0;
    B->sorted = 1;
    B->in_heap = 0;
    q->slot_key[j] = prio;
    q->slot_gen[j] = q->gen;
    q->slot_b[j] = (int32_t)q->n_b;
    return (int32_t)q->n_b++;
}

/* ---- the heap of buckets ------------------------------------------------------------------ */

static void bheap_push(sd_mq *q, int32_t bi) {
    uint32_t i = q->n_heap++;
    const uint32_t p = q->b[bi].prio;
    while (i > 0) {
        const uint32_t up = (i - 1) / 2;
        if (q->b[q->heap[up]].prio <= p) break;
        q->heap[i] = q->heap[up];
        i = up;
    }
    q->heap[i] = bi;
}

static void bheap_pop(sd_mq *q) {
    const int32_t last = q->heap[--q->n_heap];
    const uint32_t n = q->n_heap, p = q->b[last].prio;
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && q->b[q->heap[c + 1]].prio < q->b[q->heap[c]].prio) c++;
        if (q->b[q->heap[c]].prio >= p) break;
        q->heap[i] = q->heap[c];
        i = c;
    }
    if (n) q->heap[i] = last;
}

/* ---- one bucket's late entries: a heap by position ------------------------------------------ */

static int late_push(mq_bucket *B, sd_mq_entry x) {
    if (B->n_late == B->cap_late) {
        const uint32_t cap = B->cap_late ? 2 * B->cap_late : 16;
        sd_mq_entry *l = realloc(B->late, cap * sizeof *l);
        if (!l) return -1;
        B->late = l;
        B->cap_late = cap;
    }
    uint32_t i = B->n_late++;
    while (i > 0) {
        const uint32_t up = (i - 1) / 2;
        if (B->late[up].pos <= x.pos) break;
        B->late[i] = B->late[up];
        i = up;
    }
    B->late[i] = x;
    return 0;
}

static sd_mq_entry late_pop(mq_bucket *B) {
    const sd_mq_entry top = B->late[0], last = B->late[--B->n_late];
    const uint32_t n = B->n_late;
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && B->late[c + 1].pos < B->late[c].pos) c++;
        if (B->late[c].pos >= last.pos) break;
        B->late[i] = B->late[c];
        i = c;
    }
    if (n) B->late[i] = last;
    return top;
}

static int by_pos(const void *a, const void *b) {
    const int32_t x = ((const sd_mq_entry *)a)->pos, y = ((const sd_mq_entry *)b)->pos;
    return (x > y) - (x < y);
}

static int append(mq_bucket *B, sd_mq_entry x) {
    if (B->n == B->cap) {
        const uint32_t cap = B->cap ? 2 * B->cap : 8;
        sd_mq_entry *e = realloc(B->e, cap * sizeof *e);
        if (!e) return -1;
        B->e = e;
        B->cap = cap;
    }
    B->e[B->n++] = x;
    return 0;
}

/* The bucket about to be swept: its pending entries (and late ones) in one ascending run. */
static int prepare(mq_bucket *B) {
    if (B->sorted && !B->n_late) return 0;
    while (B->n_late)
        if (append(B, late_pop(B)) != 0) return -1;
    qsort(B->e + B->cur, B->n - B->cur, sizeof *B->e, by_pos);
    B->sorted = 1;
    return 0;
}

/* ---- push and pop ---------------------------------------------------------------------------- */

int sd_mq_push(sd_mq *q, uint32_t prio, int32_t pos, uint32_t aux) {
    if (q->oom) return -1;
    const int32_t bi = bucket_of(q, prio);
    if (bi < 0) return q->oom = -1;
    if (q->n_heap == q->cap_heap) {
        const uint32_t cap = q->cap_heap ? 2 * q->cap_heap : 256;
        int32_t *h = realloc(q->heap, cap * sizeof *h);
        if (!h) return q->oom = -1;
        q->heap = h;
        q->cap_heap = cap;
    }
    mq_bucket *B = &q->b[bi];
    const sd_mq_entry x = {pos, aux};
    const int after_last = B->n == B->cur || B->e[B->n - 1].pos <= pos;
    int rc;
    if (bi == q->cur && !after_last) {
        rc = late_push(B, x); /* the sweep is under way: keep e[cur, n) ascending */
    } else {
        if (!after_last) B->sorted = 0;
        rc = append(B, x);
    }
    if (rc != 0) return q->oom = -1;
    if (!B->in_heap) {
        B->in_heap = 1;
        bheap_push(q, bi);
    }
    return 0;
}

int sd_mq_pop(sd_mq *q, uint32_t *prio, sd_mq_entry *out) {
    while (q->n_heap && !q->oom) {
        const int32_t bi = q->heap[0];
        mq_bucket *B = &q->b[bi];
        if (bi != q->cur) {
            if (prepare(B) != 0) {
                q->oom = -1;
                break;
            }
            q->cur = bi;
        }
        const int have_e = B->cur < B->n, have_l = B->n_late > 0;
        if (!have_e && !have_l) { /* swept: out of the heap, its memory kept for later pushes */
            bheap_pop(q);
            B->in_heap = 0;
            B->n = B->cur = 0;
            B->sorted = 1;
            q->cur = -1;
            continue;
        }
        *prio = B->prio;
        if (have_l && (!have_e || B->late[0].pos < B->e[B->cur].pos)) *out = late_pop(B);
        else *out = B->e[B->cur++];
        return 1;
    }
    return q->oom ? -1 : 0;
}

int32_t sd_mq_ahead(const sd_mq *q, uint32_t k) {
    if (q->cur < 0) return -1;
    const mq_bucket *B = &q->b[q->cur];
    return B->cur + k < B->n ? B->e[B->cur + k].pos : -1;
}
