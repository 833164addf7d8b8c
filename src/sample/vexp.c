/* The softmax numerators of a row, exp((x - max) / T), in one straight loop the compiler
 * vectorises (compiled with -fno-trapping-math, which lets it evaluate both arms of the selects;
 * no result changes). expf from libm is a call per element, 113 us over a 32k row here. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "sample/vexp.h"

/* exp(y) for y <= 0: y = n ln2 + r with |r| <= ln2 / 2, exp(r) by the polynomial of Cephes'
 * expf (within 1-2 units in the last place), 2^n by the exponent bits. Below -87.3 the result
 * would be subnormal: 0 exactly, so a token masked with a huge negative logit keeps no mass. */
static inline float exp_neg(float y) {
    const float yc = y < -87.3f ? -87.3f : y;
    const float fn = floorf(yc * 1.44269504088896341f + 0.5f); /* the nearest n (a float-int-float round trip
                                                                  would stop the vectoriser) */
    const float r = (yc - fn * 0.693359375f) - fn * -2.12194440e-4f;
    const float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)fn + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    const float v = p * scale;
    return y < -87.3f ? 0.0f : v;
}

double sd_softmax_numerators(const float *x, int n, float mx, float t, float *out) {
    for (int i = 0; i < n; i++) out[i] = exp_neg((x[i] - mx) / t);
    /* the sum in eight double lanes (a fixed order, so the same bits every run), then the tail */
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, total = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] += out[i + j];
    for (int j = 0; j < 8; j++) total += lane[j];
    for (; i < n; i++) total += out[i];
    return total;
}
