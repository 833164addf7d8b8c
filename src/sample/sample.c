/* Sampling: the seeded RNG and the logits -> processed-distribution pipeline (temperature,
 * softmax, top-k, top-p) shared by plain decoding and both sides of speculative decoding. */
#include "specdec/sample.h"

#include "kernels/kernels.h"
#include "kernels/sampling.h" /* lane_sum */

#include <math.h>
#include <string.h>

/* ---- RNG ---------------------------------------------------------------------------- */

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* SplitMix64 expands one seed into well-mixed state words: xoshiro must never start from
 * the all-zero state, and nearby seeds (0, 1, 2...) must still give unrelated streams. */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void sd_rng_seed(sd_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

uint64_t sd_rng_next(sd_rng *r) {
    uint64_t *s = r->s;
    const uint64_t result = rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* 24 bits is exactly a float's mantissa, so every value is representable and the result can
 * never round up to 1.0 (which would break the "u < cdf" draw at the last token). */
float sd_rng_uniform(sd_rng *r) { return (float)(sd_rng_next(r) >> 40) * 0x1.0p-24f; }

/* ---- Parameters ------------------------------------------------------------------------ */

sd_sampler_params sd_sampler_default_params(void) {
    sd_sampler_params p = {.temperature = 0.0f,
                           .top_k = 0,
                           .top_p = 1.0f,
                           .seed = 42,
                           .mode = SD_SAMPLING_DEFAULT,
                           .min_p = 0.0f,
                           .presence_penalty = 0.0f,
                           .frequency_penalty = 0.0f,
                           .repetition_penalty = 1.0f};
    return p;
}

static const char *const k_mode_names[] = {[SD_SAMPLING_COUPLED] = "coupled", [SD_SAMPLING_REJECTION] = "rejection"};

const char *sd_sampling_mode_name(sd_sampling_mode m) {
    return (unsigned)m < sizeof k_mode_names / sizeof *k_mode_names ? k_mode_names[m] : "?";
}

sd_status sd_sampling_mode_from_name(const char *name, sd_sampling_mode *out) {
    for (unsigned i = 0; name && i < sizeof k_mode_names / sizeof *k_mode_names; i++)
        if (!strcmp(name, k_mode_names[i])) {
            *out = (sd_sampling_mode)i;
            return SD_OK;
        }
    return sd_fail(SD_ERR_INVALID_ARG, "sampling mode must be coupled or rejection, got '%s'", name ? name : "(null)");
}

sd_status sd_sampler_params_check(const sd_sampler_params *p) {
    if (!p) return sd_fail(SD_ERR_INVALID_ARG, "sampler params are NULL");
    if (!isfinite(p->temperature))
        return sd_fail(SD_ERR_INVALID_ARG, "temperature must be finite (got %g)",
                       (double)p->temperature);
    if (p->temperature < 0)
        return sd_fail(SD_ERR_INVALID_ARG, "temperature must be >= 0 (got %g)",
                       (double)p->temperature);
    if (p->top_k < 0) return sd_fail(SD_ERR_INVALID_ARG, "top_k must be >= 0 (got %d)", p->top_k);
    /* Written as !(in range) so NaN is rejected too. */
    if (!(p->top_p > 0 && p->top_p <= 1))
        return sd_fail(SD_ERR_INVALID_ARG, "top_p must be in (0, 1] (got %g)", (double)p->top_p);
    if (p->mode != SD_SAMPLING_COUPLED && p->mode != SD_SAMPLING_REJECTION)
        return sd_fail(SD_ERR_INVALID_ARG, "sampling mode %d (coupled or rejection)", (int)p->mode);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return sd_fail(SD_ERR_INVALID_ARG, "min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return sd_fail(SD_ERR_INVALID_ARG, "presence penalty must be in [-2, 2] (got %g)", (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return sd_fail(SD_ERR_INVALID_ARG, "frequency penalty must be in [-2, 2] (got %g)", (double)p->frequency_penalty);
    if (!(p->repetition_penalty > 0 && p->repetition_penalty <= 10))
        return sd_fail(SD_ERR_INVALID_ARG, "repetition penalty must be in (0, 10] (got %g)",
                       (double)p->repetition_penalty);
    return SD_OK;
}

int32_t sd_argmax(const float *x, int n) {
    if (!x || n <= 0) return -1;
    /* the active kernel path's loop: a scan with a strict '>' (the lowest index on ties), as a
     * vector max and a blockwise search; a scalar scan was slow over a 152k-token row (measured:
     * commit 9fc1b55) */
    return sd_row_argmax(x, n);
}

double sd_row_sum(const float *x, int n) { return x && n > 0 ? lane_sum(x, n) : 0.0; }

double sd_exp_sum(const float *x, int n, float mx) {
    /* a block at a time through the stack: libm's exp in double was far slower over a 152k-token
     * row (measured: commit d5026a9) */
    enum { EXP_BLOCK = 1024 };
    float buf[EXP_BLOCK];
    double sum = 0;
    for (int i0 = 0; x && i0 < n; i0 += EXP_BLOCK)
        sum += sd_softmax_numerators(x + i0, n - i0 < EXP_BLOCK ? n - i0 : EXP_BLOCK, mx, 1.0f, buf);
    return sum;
}

/* ---- Candidate selection --------------------------------------------------------------- */

/* Candidates live in two parallel arrays (probability, token id) so partitioning streams
 * through contiguous memory instead of gathering probs[id] at random. */
typedef struct {
    float *key;
    int32_t *id;
} cand_set;

/* The strict total order "more likely first, lower id first on ties". Because no two
 * candidates compare equal, top-k and top-p cut sets are unique and deterministic. */
static int ranks_before(float ka, int32_t ia, float kb, int32_t ib) {
    return ka > kb || (ka == kb && ia < ib);
}

static void cand_swap(cand_set c, int a, int b) {
    float k = c.key[a];
    int32_t i = c.id[a];
    c.key[a] = c.key[b];
    c.id[a] = c.id[b];
    c.key[b] = k;
    c.id[b] = i;
}

/* Partitions c[lo, hi) around a median-of-three pivot and returns its final slot pp:
 * [lo, pp) ranks before the pivot, (pp, hi) after. Median-of-three keeps already-ordered
 * input (common: tied logits are ordered by id) from degrading to quadratic time. */
static int cand_partition(cand_set c, int lo, int hi) {
    int a = lo, b = lo + (hi - lo) / 2, z = hi - 1;
    if (ranks_before(c.key[b], c.id[b], c.key[a], c.id[a])) cand_swap(c, a, b);
    if (ranks_before(c.key[z], c.id[z], c.key[a], c.id[a])) cand_swap(c, a, z);
    if (ranks_before(c.key[z], c.id[z], c.key[b], c.id[b])) cand_swap(c, b, z);
    cand_swap(c, b, z); /* median now at the end */
    const float pk = c.key[z];
    const int32_t pid = c.id[z];
    int store = lo;
    for (int i = lo; i < z; i++)
        if (ranks_before(c.key[i], c.id[i], pk, pid)) cand_swap(c, i, store++);
    cand_swap(c, store, z);
    return store;
}

/* Quickselect: afterwards c[0, k) holds the k top-ranked candidates (in no particular order).
 * Expected O(cnt); a full sort is never needed because only set membership matters. */
static void cand_select_top_k(cand_set c, int cnt, int k) {
    int lo = 0, hi = cnt;
    /* Invariant: c[0, lo) ranks before c[lo, hi), which ranks before c[hi, cnt). */
    while (lo < k && k < hi) {
        int pp = cand_partition(c, lo, hi);
        if (pp < k)
            lo = pp + 1;
        else
            hi = pp;
    }
}

/* Returns the length m of the shortest ranked prefix whose mass reaches target, leaving
 * that prefix in c[0, m). Same partition scheme as quickselect, but it descends by mass
 * instead of by count, so it is expected O(cnt) rather than a sort. */
static int cand_select_mass(cand_set c, int cnt, double target) {
    int lo = 0, hi = cnt;
    double base = 0; /* mass of c[0, lo), all of which is in the prefix */
    while (lo < hi) {
        int pp = cand_partition(c, lo, hi);
        double above = base;
        for (int i = lo; i < pp; i++) above += c.key[i];
        if (above >= target) {
            hi = pp; /* the cut falls strictly before the pivot */
        } else if (above + c.key[pp] >= target) {
            return pp + 1; /* the pivot is the last token needed */
        } else {
            base = above + c.key[pp];
            lo = pp + 1;
        }
    }
    /* Reached only through rounding (sums taken in a different order than the caller's):
     * candidates a hair short of target keep everything, a target already met keeps none. */
    return lo;
}

/* Coarse pre-selection. Exact selection over all n tokens mispredicts a branch on nearly
 * every element, while the cut of a 32k-vocab LLM distribution typically falls among a few
 * dozen tokens. One histogram pass finds the bucket the cut falls in; the tokens above it are
 * kept outright and only that bucket's tokens go through exact selection. Buckets are the top
 * bits of the IEEE pattern (sign, exponent, 3 mantissa bits): for non-negative floats the
 * pattern orders like the value, so every token in a higher bucket outranks every token in a
 * lower one, and ties share a bucket. Softmax numerators lie in [0, 1] (the max was
 * subtracted), which uses buckets 0..1016, eight per octave. */
enum { SD_BUCKETS = 1024, SD_BUCKET_SHIFT = 20 };

static int bucket_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u >>= SD_BUCKET_SHIFT;
    return u < SD_BUCKETS ? (int)u : SD_BUCKETS - 1; /* clamping keeps the order monotone */
}

/* Smallest value in bucket b, so "x >= bucket_floor(b)" is "bucket_of(x) >= b". */
static float bucket_floor(int b) {
    if (b >= SD_BUCKETS) return INFINITY;
    const uint32_t bits = (uint32_t)b << SD_BUCKET_SHIFT;
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* Bucket holding the k-th ranked token (counting from the top). */
static int top_k_bucket(const float *probs, int n, int k) {
    int count[SD_BUCKETS] = {0};
    for (int i = 0; i < n; i++) count[bucket_of(probs[i])]++;
    int b = SD_BUCKETS - 1, above = 0;
    while (b > 0 && above + count[b] < k) above += count[b--];
    return b;
}

/* Bucket in which the running mass, from the top, reaches target: the buckets above it hold
 * less than target, so the shortest prefix reaching it ends inside this bucket. Stops at
 * bucket 0 at the latest, which selects over everything: the safe answer should rounding
 * leave the total a hair under target. */
static int top_p_bucket(const float *probs, int n, double target) {
    double mass[SD_BUCKETS] = {0};
    for (int i = 0; i < n; i++) mass[bucket_of(probs[i])] += probs[i];
    int b = SD_BUCKETS - 1;
    double acc = 0;
    while (b > 0 && (acc += mass[b]) < target) b--;
    return b;
}

/* Result of gathering around a boundary bucket: c[0, above) outrank the bucket and are kept;
 * c[above, above + tied) are the bucket's own tokens, still to be cut exactly. */
typedef struct {
    int above;
    int tied;
} cand_split;

/* The branches are cheap because for a peaked distribution almost every token lies below the
 * boundary; boundary tokens are stacked from the back so one pass fills both groups. */
static cand_split cand_gather(const float *probs, int n, int bucket, cand_set c) {
    const float lo = bucket_floor(bucket), hi = bucket_floor(bucket + 1);
    int a = 0, z = n;
    for (int i = 0; i < n; i++) {
        const float v = probs[i];
        if (v < lo) continue;
        if (v >= hi) {
            c.key[a] = v;
            c.id[a++] = i;
        } else {
            c.key[--z] = v;
            c.id[z] = i;
        }
    }
    memmove(c.key + a, c.key + z, (size_t)(n - z) * sizeof *c.key);
    memmove(c.id + a, c.id + z, (size_t)(n - z) * sizeof *c.id);
    return (cand_split){a, n - z};
}

/* ---- Processed distribution ------------------------------------------------------------ */

size_t sd_sample_scratch_bytes(int n) {
    return n > 0 ? (size_t)n * (sizeof(float) + sizeof(int32_t)) : 0;
}

/* SD_ERR_NUMERIC naming the first infinity or NaN of a logit row, found by the vector scan first. */
static sd_status logits_finite(const float *logits, int n) {
    if (sd_row_nonfinite(logits, n))
        for (int i = 0; i < n; i++)
            if (!isfinite(logits[i]))
                return sd_fail(SD_ERR_NUMERIC, "logits[%d] is %s", i, isnan(logits[i]) ? "NaN" : "Inf");
    return SD_OK;
}

sd_status sd_sample_probs(const sd_sampler_params *p, const float *logits, int n, float *probs,
                          void *scratch) {
    if (!p || !logits || !probs || n <= 0)
        return sd_fail(SD_ERR_INVALID_ARG, "sd_sample_probs: NULL argument or n = %d", n);
    sd_status st = sd_sampler_params_check(p);
    if (st != SD_OK || (st = logits_finite(logits, n)) != SD_OK) return st;

    const int32_t best = sd_argmax(logits, n);
    const float mx = logits[best];

    if (p->temperature == 0) {
        memset(probs, 0, (size_t)n * sizeof *probs);
        probs[best] = 1.0f;
        return SD_OK;
    }

    /* Subtracting the max makes the largest term exactly exp(0) = 1, so the sum is >= 1 and
     * nothing overflows. Dividing (rather than multiplying by 1/T) keeps a tiny T from
     * turning the max's 0 * inf into NaN. */
    const float t = p->temperature;
    double total = sd_softmax_numerators(logits, n, mx, t, probs);

    /* Order: top-k, then top-p against the mass top-k kept (see sample.h). */
    const int use_k = p->top_k > 0 && p->top_k < n;
    const int use_p = p->top_p < 1.0f;
    if (use_k || use_p) {
        if (!scratch)
            return sd_fail(SD_ERR_INVALID_ARG, "sd_sample_probs: top-k/top-p need scratch");
        cand_set c = {(float *)scratch, (int32_t *)((char *)scratch + (size_t)n * sizeof(float))};
        int cnt;
        if (use_k) {
            const cand_split split = cand_gather(probs, n, top_k_bucket(probs, n, p->top_k), c);
            const cand_set tied = {c.key + split.above, c.id + split.above};
            cand_select_top_k(tied, split.tied, p->top_k - split.above);
            cnt = p->top_k;
            if (use_p) {
                double kmass = 0;
                for (int i = 0; i < cnt; i++) kmass += c.key[i];
                cnt = cand_select_mass(c, cnt, (double)p->top_p * kmass);
            }
        } else {
            const double target = (double)p->top_p * total;
            const cand_split split = cand_gather(probs, n, top_p_bucket(probs, n, target), c);
            const cand_set tied = {c.key + split.above, c.id + split.above};
            double above_mass = 0;
            for (int i = 0; i < split.above; i++) above_mass += c.key[i];
            cnt = split.above + cand_select_mass(tied, split.tied, target - above_mass);
        }
        /* min-p against the top of what is kept: the top token is probs' largest (the max was
         * subtracted: its numerator is exactly 1), and top-k/top-p keep it */
        if (p->min_p > 0) {
            int w = 0;
            for (int i = 0; i < cnt; i++)
                if (c.key[i] >= p->min_p) {
                    c.key[w] = c.key[i];
                    c.id[w++] = c.id[i];
                }
            cnt = w;
        }
        double kept = 0;
        for (int i = 0; i < cnt; i++) kept += c.key[i];
        const float inv = (float)(1.0 / kept);
        memset(probs, 0, (size_t)n * sizeof *probs);
        for (int i = 0; i < cnt; i++) probs[c.id[i]] = c.key[i] * inv;
        return SD_OK;
    }

    if (p->min_p > 0) { /* every token whose numerator (p / p_max) is below min_p goes */
        total = 0;
        for (int i = 0; i < n; i++) {
            if (probs[i] < p->min_p) probs[i] = 0.0f;
            total += probs[i];
        }
    }
    const float inv = (float)(1.0 / total);
    for (int i = 0; i < n; i++) probs[i] *= inv;
    return SD_OK;
}

int sd_sampler_has_penalties(const sd_sampler_params *p) {
    return p->presence_penalty != 0 || p->frequency_penalty != 0 || p->repetition_penalty != 1;
}

void sd_penalize(const sd_sampler_params *p, const int32_t *hist, int n_hist, int n_prompt, float *row, int n,
                 int32_t *cnt) {
    if (!sd_sampler_has_penalties(p) || !hist) return;
    /* cnt[t]: bit 0 the token was seen (prompt or generated), the rest twice its generated count */
    for (int i = 0; i < n_hist; i++) {
        const int32_t t = hist[i];
        if (t < 0 || t >= n) continue;
        cnt[t] |= 1;
        if (i >= n_prompt) cnt[t] += 2;
    }
    for (int i = 0; i < n_hist; i++) { /* each distinct token once: its entry is cleared after */
        const int32_t t = hist[i];
        if (t < 0 || t >= n || !cnt[t]) continue;
        const int count = cnt[t] >> 1;
        float x = row[t];
        if (p->repetition_penalty != 1) x = x > 0 ? x / p->repetition_penalty : x * p->repetition_penalty;
        if (count > 0) x -= p->presence_penalty + p->frequency_penalty * (float)count;
        row[t] = x;
        cnt[t] = 0;
    }
}

/* Tokens per block that the draw skips whole, summed into this many partial sums at once. */
#define DRAW_BLOCK 64
#define DRAW_LANES 8

int32_t sd_sample_draw(const float *probs, int n, sd_rng *r) {
    if (!probs || n <= 0 || !r) return -1;
    const double u = sd_rng_uniform(r);
    /* Accumulating in double keeps the CDF of a 152k-token row accurate to ~1e-16, far below
     * the 2^-24 resolution of u. Blocks the draw cannot land in are summed as independent
     * partial sums and skipped: one dependent add per token was slow over half of a flat
     * 152k-token row (measured: commit e0aeeb2). Their order changes the CDF only by that
     * rounding. Within a block, the walk is token by token. Zero-mass tokens are skipped
     * outright, so neither u landing exactly on a CDF step nor the rounding fall-back can ever
     * return one. */
    double cdf = 0;
    int i = 0;
    for (; i + DRAW_BLOCK <= n; i += DRAW_BLOCK) {
        double s[DRAW_LANES] = {0};
        for (int j = 0; j < DRAW_BLOCK; j += DRAW_LANES)
            for (int l = 0; l < DRAW_LANES; l++) s[l] += probs[i + j + l];
        double b = 0;
        for (int l = 0; l < DRAW_LANES; l++) b += s[l];
        if (u < cdf + b) break;
        cdf += b;
    }
    int32_t last = -1;
    for (; i < n; i++) {
        if (probs[i] > 0) {
            cdf += probs[i];
            last = i;
            if (u < cdf) return i;
        }
    }
    /* rounding left u above the total: the last token with mass (maybe in a skipped block) */
    for (i = n - 1; last < 0 && i >= 0; i--)
        if (probs[i] > 0) last = i;
    return last;
}

sd_status sd_logprobs(const float *logits, int n, int32_t tok, int n_top, sd_token_logprobs *out) {
    if (!logits || n <= 0 || tok < 0 || tok >= n || n_top < 0 || n_top > SD_MAX_LOGPROBS || !out)
        return sd_fail(SD_ERR_INVALID_ARG, "logprobs: token %d of %d, %d alternatives", (int)tok, n, n_top);
    const sd_status st = logits_finite(logits, n);
    if (st != SD_OK) return st;
    const float mx = logits[sd_argmax(logits, n)];
    const double lse = mx + log(sd_exp_sum(logits, n, mx));
    out->logprob = (float)(logits[tok] - lse);
    /* the n_top largest by insertion (n_top is at most 20), a block of 64 skipped whole once the
     * list is full and nothing in it beats the list's last */
    int m = 0;
    for (int32_t i0 = 0; i0 < n && n_top > 0; i0 += 64) {
        const int32_t e = n - i0 < 64 ? n : i0 + 64;
        if (m == n_top) {
            const float last = logits[out->top_id[m - 1]];
            int beats = 0;
            for (int32_t i = i0; i < e; i++) beats |= logits[i] > last;
            if (!beats) continue;
        }
        for (int32_t i = i0; i < e; i++) {
            if (m == n_top && !(logits[i] > logits[out->top_id[m - 1]])) continue;
            int j = m < n_top ? m++ : m - 1;
            while (j > 0 && logits[out->top_id[j - 1]] < logits[i]) {
                out->top_id[j] = out->top_id[j - 1];
                j--;
            }
            out->top_id[j] = i;
        }
    }
    out->n_top = m;
    for (int j = 0; j < m; j++) out->top_logprob[j] = (float)(logits[out->top_id[j]] - lse);
    return SD_OK;
}
