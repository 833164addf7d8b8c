/* Norms, RoPE, softmax, SwiGLU and conversions: the active path's kernels, split across the
 * threads for a prefill's sizes, and the portable versions (the references the vector ones are
 * tested against). */
#include <math.h>
#include <omp.h>

#include "core/fp16.h"
#include "kernels/isa.h"
#include "kernels/portable.h"

/* Elementwise work (norms, RoPE, SwiGLU) splits across the threads from this many elements: a
 * prefill's rows (512 x 768 per norm), never a decode or verify pass's few, where the fork
 * would cost more than the little work per element it shares out. Run serially, they were a
 * visible share of an F32 512-token prefill on the 110M shape, the other thread waiting
 * (measured: commit b51cc31; docs/benchmarks/2026-11-26-zen4-kernels.md). */
#define SD_EW_PAR_MIN_ELEMS (1 << 16)

/* ---------------------------------------------------------------- the active path's */

static void rmsnorm_row(const sd_isa_kernels *K, float *o, const float *xr, const float *w, int d, float eps) {
    float ss = K->dot(xr, xr, d);
    float scale = 1.0f / sqrtf(ss / (float)d + eps);
    for (int i = 0; i < d; i++) o[i] = xr[i] * scale * w[i];
}

void sd_rmsnorm(float *out, const float *x, const float *w, int n, int d, float eps) {
    const sd_isa_kernels *K = sd_kernels();
    if ((int64_t)n * d < SD_EW_PAR_MIN_ELEMS) { /* not even a team of one: see sd_matmul */
        for (int t = 0; t < n; t++) rmsnorm_row(K, out + (size_t)t * d, x + (size_t)t * d, w, d, eps);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) rmsnorm_row(K, out + (size_t)t * d, x + (size_t)t * d, w, d, eps);
}

void sd_rope_angles(int pos, const float *inv_freq, int rope_dim, float *cs) {
    const int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        cs[i] = cosf((float)pos * inv_freq[i]);
        cs[half + i] = sinf((float)pos * inv_freq[i]);
    }
}

void sd_rope(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int half_style) {
    sd_kernels()->rope(x, n_heads, head_dim, rope_dim, cs, half_style);
}

void sd_rope_tokens(float *q, float *k, int n, int n_heads, int n_kv_heads, int head_dim, int rope_dim,
                    const float *cs, int half_style) {
    const sd_isa_kernels *K = sd_kernels();
    const int64_t qd = (int64_t)n_heads * head_dim, kd = (int64_t)n_kv_heads * head_dim;
#define ROPE_TOKEN(t)                                                                                         \
    do {                                                                                                      \
        K->rope(q + (size_t)(t) * qd, n_heads, head_dim, rope_dim, cs + (size_t)(t) * rope_dim, half_style);    \
        K->rope(k + (size_t)(t) * kd, n_kv_heads, head_dim, rope_dim, cs + (size_t)(t) * rope_dim, half_style); \
    } while (0)
    if ((int64_t)n * (qd + kd) < SD_EW_PAR_MIN_ELEMS) { /* not even a team of one: see sd_matmul */
        for (int t = 0; t < n; t++) ROPE_TOKEN(t);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) ROPE_TOKEN(t);
#undef ROPE_TOKEN
}

void sd_softmax(float *x, int n) { sd_kernels()->softmax(x, n); }

long sd_first_nonfinite(const float *x, size_t n) { return sd_kernels()->first_nonfinite(x, n); }

void sd_swiglu(float *a, const float *b, int n) {
    const sd_isa_kernels *K = sd_kernels();
    if (n < SD_EW_PAR_MIN_ELEMS) {
        K->swiglu(a, b, 0, n);
        return;
    }
#pragma omp parallel
    {
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num(), nv = ((int64_t)n + 15) / 16;
        const int64_t i0 = nv * id / nt * 16, i1 = nv * (id + 1) / nt * 16; /* whole vectors per thread */
        K->swiglu(a, b, i0, i1 < n ? i1 : n);
    }
}

void sd_f32_to_f16_row(const float *x, uint16_t *y, size_t n) { sd_kernels()->f32_to_f16(x, y, n); }

/* ---------------------------------------------------------------- portable (and references) */

float sd_portable_dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void sd_rope_ref(float *x, int n_heads, int head_dim, int rope_dim, const float *cs, int half_style) {
    const int half = rope_dim / 2;
    for (int i = 0; i < half; i++) {
        const float c = cs[i], s = cs[half + i];
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * head_dim;
            /* interleaved: pair (2i, 2i+1); rotate-half: pair (i, i + rope_dim/2) */
            int a = half_style ? i : 2 * i;
            int b = half_style ? i + half : 2 * i + 1;
            float v0 = v[a], v1 = v[b];
            v[a] = v0 * c - v1 * s;
            v[b] = v0 * s + v1 * c;
        }
    }
}

void sd_portable_softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

long sd_portable_first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (long)i;
    return -1;
}

void sd_portable_swiglu(float *a, const float *b, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
        float g = a[i];
        a[i] = g / (1.0f + expf(-g)) * b[i];
    }
}

void sd_portable_f32_to_f16(const float *x, uint16_t *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = sd_fp32_to_fp16(x[i]);
}

float sd_portable_stream(const float *buf, size_t per) {
    float s = 0;
    for (size_t i = 0; i < per; i++)
        for (int k = 0; k < 8; k++) s += buf[(size_t)k * per + i];
    return s;
}
