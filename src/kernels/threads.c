/* The kernels' threads: the team size a context runs with (its own, set on the calling thread
 * for each pass), the static split of 16-row blocks (the float kernels) and the work stealing
 * of the integer kernels (kernels.h). */
#include <omp.h>

#include "kernels/kernels.h"

int sd_kernels_team(int n) {
    if (n < 1) n = omp_get_max_threads();
    const int limit = omp_get_thread_limit(); /* OMP_THREAD_LIMIT: what OpenMP will give (see sgemm_locked) */
    return limit > 0 && n > limit ? limit : n;
}

/* omp_set_num_threads sets the calling thread's team size only, which is what lets contexts
 * on different threads run with different counts. */
void sd_kernels_enter(int n) {
    if (n > 0 && omp_get_max_threads() != n) omp_set_num_threads(n);
}

void sd_thread_blocks(int64_t nblk, int64_t *b0, int64_t *b1) {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    *b0 = nblk * id / nt;
    *b1 = nblk * (id + 1) / nt;
}

static inline uint64_t steal_pack(uint32_t lo, uint32_t hi) { return (uint64_t)hi << 32 | lo; }

void sd_steal_init(sd_steal *w, int64_t nblk) {
    int nt = omp_get_max_threads();
    if (nt > SD_STEAL_MAX_THREADS) nt = SD_STEAL_MAX_THREADS;
    w->n = nt;
    for (int i = 0; i < nt; i++)
        atomic_store_explicit(&w->slot[i].range, steal_pack((uint32_t)(nblk * i / nt), (uint32_t)(nblk * (i + 1) / nt)),
                              memory_order_relaxed);
}

int sd_steal_next(sd_steal *w, int64_t *b0, int64_t *b1) {
    const int me = omp_get_thread_num();
    /* A thread beyond the slots (a team larger than SD_STEAL_MAX_THREADS, or than the team the
     * ranges were cut for) has no range of its own: it only steals, and computes what it took. */
    _Atomic uint64_t *mine = me < w->n ? &w->slot[me].range : NULL;
    for (;;) {
        uint64_t v = mine ? atomic_load_explicit(mine, memory_order_relaxed) : 0;
        uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
        if (lo < hi) { /* claim a quarter of what is left of my range, from its front */
            uint32_t take = (hi - lo) / 4 ? (hi - lo) / 4 : 1;
            if (atomic_compare_exchange_weak_explicit(mine, &v, steal_pack(lo + take, hi), memory_order_relaxed,
                                                      memory_order_relaxed)) {
                *b0 = lo;
                *b1 = lo + take;
                return 1;
            }
            continue;
        }
        /* Mine is empty: the back half of the fullest other range becomes mine. Only its
         * owner and thieves change a slot, each by compare-and-swap, and a claimed block never
         * returns to any slot, so a stale read can only make a swap fail. */
        int victim = -1;
        uint32_t most = 0;
        for (int i = 0; i < w->n; i++) {
            if (i == me) continue;
            uint64_t u = atomic_load_explicit(&w->slot[i].range, memory_order_relaxed);
            uint32_t rem = (uint32_t)(u >> 32) > (uint32_t)u ? (uint32_t)(u >> 32) - (uint32_t)u : 0;
            if (rem > most) most = rem, victim = i;
        }
        if (victim < 0) return 0;
        _Atomic uint64_t *theirs = &w->slot[victim].range;
        uint64_t u = atomic_load_explicit(theirs, memory_order_relaxed);
        uint32_t ulo = (uint32_t)u, uhi = (uint32_t)(u >> 32);
        if (ulo >= uhi) continue;
        uint32_t take = (uhi - ulo + 1) / 2;
        if (!atomic_compare_exchange_strong_explicit(theirs, &u, steal_pack(ulo, uhi - take), memory_order_relaxed,
                                                     memory_order_relaxed))
            continue;
        if (!mine) {
            *b0 = uhi - take;
            *b1 = uhi;
            return 1;
        }
        atomic_store_explicit(mine, steal_pack(uhi - take, uhi), memory_order_relaxed);
    }
}
