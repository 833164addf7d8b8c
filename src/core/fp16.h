/* IEEE half <-> single conversion in portable C (bit manipulation, no F16C), shared by the
 * model writer and the kernels' reference paths. Rounding is round-to-nearest-even, as ggml's. */
#ifndef SPECDEC_CORE_FP16_H
#define SPECDEC_CORE_FP16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t sd_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) /* Inf stays Inf; NaN stays a (quiet) NaN */
        return (uint16_t)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u | ((mag >> 13) & 0x3ffu) : 0));
    if (mag >= 0x477ff000u) /* rounds to >= 65520: overflow to Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (mag < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (mag < 0x33000000u) return sign; /* below half the smallest subnormal: rounds to 0 */
        uint32_t e = mag >> 23;
        uint32_t mant = (mag & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24: value = mant * 2^(e-150), half subnormal unit 2^-24 */
        uint32_t h = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    /* Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits. A carry
     * out of the mantissa correctly bumps the exponent. */
    uint32_t h = (mag - 0x38000000u) >> 13;
    uint32_t rem = mag & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

static inline float sd_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    uint32_t x;
    if (e == 0x1fu) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        x = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        x = sign;
    } else { /* subnormal half: normalise */
        e = 113u;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

#endif
