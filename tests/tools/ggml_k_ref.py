#!/usr/bin/env python3
"""Independent reference for tests/test_quant.c: ggml's quantize_row_q4_K_ref (with
make_qkx2_quants) and quantize_row_q6_K_ref (with make_qx_quants, rmse_type 1) in plain
Python, every float32 operation emulated by rounding to float32 after it, in ggml's order.
Prints one 256-element input block as C hex floats and the expected block bytes.
Run: python3 tests/tools/ggml_k_ref.py"""
import math
import struct


def f32(v):
    return struct.unpack('<f', struct.pack('<f', v))[0]


def fp16(v):  # returns (bytes, value) of the round-to-nearest-even half
    b = struct.pack('<e', v)
    return b, struct.unpack('<e', b)[0]


def nearest_int(v):  # ggml: float add of 1.5*2^23, then the low mantissa bits
    s = f32(v + 12582912.0)
    i = struct.unpack('<i', struct.pack('<f', s))[0]
    return (i & 0x007fffff) - 0x00400000


def make_qkx2(x, w, nmax, rmin, rdelta, nstep):
    n = len(x)
    mn = x[0]; mx = x[0]
    sum_w = w[0]
    sum_x = f32(sum_w * x[0])
    for i in range(1, n):
        if x[i] < mn: mn = x[i]
        if x[i] > mx: mx = x[i]
        sum_w = f32(sum_w + w[i])
        sum_x = f32(sum_x + f32(w[i] * x[i]))
    if mn > 0: mn = 0.0
    if mx == mn:
        return 0.0, -mn, [0] * n
    iscale = f32(nmax / f32(mx - mn))
    scale = f32(1.0 / iscale)
    L = []
    best = 0.0
    for i in range(n):
        l = max(0, min(nmax, nearest_int(f32(iscale * f32(x[i] - mn)))))
        L.append(l)
        diff = f32(f32(f32(scale * l) + mn) - x[i])
        best = f32(best + f32(w[i] * f32(diff * diff)))
    for st in range(nstep + 1):
        iscale = f32(f32(f32(rmin + f32(rdelta * st)) + nmax) / f32(mx - mn))
        sum_l = sum_l2 = sum_xl = 0.0
        Laux = []
        for i in range(n):
            l = max(0, min(nmax, nearest_int(f32(iscale * f32(x[i] - mn)))))
            Laux.append(l)
            wl = f32(w[i] * l)
            sum_l = f32(sum_l + wl)
            sum_l2 = f32(sum_l2 + f32(wl * l))
            sum_xl = f32(sum_xl + f32(wl * x[i]))
        D = f32(f32(sum_w * sum_l2) - f32(sum_l * sum_l))
        if D > 0:
            this_scale = f32(f32(f32(sum_w * sum_xl) - f32(sum_x * sum_l)) / D)
            this_min = f32(f32(f32(sum_l2 * sum_x) - f32(sum_l * sum_xl)) / D)
            if this_min > 0:
                this_min = 0.0
                this_scale = f32(sum_xl / sum_l2)
            cur = 0.0
            for i in range(n):
                diff = f32(f32(f32(this_scale * Laux[i]) + this_min) - x[i])
                cur = f32(cur + f32(w[i] * f32(diff * diff)))
            if cur < best:
                L = Laux; best = cur; scale = this_scale; mn = this_min
    return scale, -mn, L


def q4_k(x):
    scales, mins, L = [], [], [0] * 256
    max_scale = max_min = 0.0
    for j in range(8):
        xs = x[32 * j:32 * j + 32]
        s2 = 0.0
        for v in xs:
            s2 = f32(s2 + f32(v * v))
        av = f32(math.sqrt(f32(s2 / 32)))
        w = [f32(av + abs(v)) for v in xs]
        sc, m, l = make_qkx2(xs, w, 15, -1.0, f32(0.1), 20)  # rdelta is the float 0.1f
        scales.append(sc); mins.append(m); L[32 * j:32 * j + 32] = l
        if sc > max_scale: max_scale = sc
        if m > max_min: max_min = m
    inv_s = f32(63.0 / max_scale) if max_scale > 0 else 0.0
    inv_m = f32(63.0 / max_min) if max_min > 0 else 0.0
    sc = [0] * 12
    for j in range(8):
        ls = min(63, nearest_int(f32(inv_s * scales[j])) & 0xFF)
        lm = min(63, nearest_int(f32(inv_m * mins[j])) & 0xFF)
        if j < 4:
            sc[j] = ls; sc[j + 4] = lm
        else:
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
            sc[j - 4] |= (ls >> 4) << 6
            sc[j] |= (lm >> 4) << 6
    db, d = fp16(f32(max_scale / 63.0))
    mb, dmin = fp16(f32(max_min / 63.0))
    for j in range(8):
        if j < 4:
            s6, m6 = sc[j] & 63, sc[j + 4] & 63
        else:
            s6 = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4)
            m6 = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)
        dd = f32(d * s6)
        if not dd:
            continue
        dm = f32(dmin * m6)
        for ii in range(32):
            L[32 * j + ii] = max(0, min(15, nearest_int(f32(f32(x[32 * j + ii] + dm) / dd))))
    q = []
    for j in range(0, 256, 64):
        q += [L[j + l] | (L[j + l + 32] << 4) for l in range(32)]
    return db + mb + bytes(sc) + bytes(q)


def make_qx(x, nmax):
    mx = amax = 0.0
    for v in x:
        if abs(v) > amax: amax = abs(v); mx = v
    if amax < 1e-15:
        return 0.0, [0] * len(x)

    def fit(iscale):
        slx = sl2 = 0.0
        ls = []
        for v in x:
            l = max(-nmax, min(nmax - 1, nearest_int(f32(iscale * v))))
            ls.append(l)
            w = f32(v * v)
            slx = f32(slx + f32(f32(w * v) * l))
            sl2 = f32(sl2 + f32(f32(w * l) * l))
        return slx, sl2, ls
    iscale = f32(-nmax / mx)
    slx, sl2, ls = fit(iscale)
    L = [l + nmax for l in ls]
    scale = f32(slx / sl2) if sl2 else 0.0
    best = f32(scale * slx)
    for st in range(-9, 10):
        if st == 0:
            continue
        iscale = f32(-f32(nmax + f32(f32(0.1) * st)) / mx)  # 0.1f * is
        slx, sl2, ls = fit(iscale)
        if sl2 > 0 and f32(slx * slx) > f32(best * sl2):
            L = [l + nmax for l in ls]
            scale = f32(slx / sl2); best = f32(scale * slx)
    return scale, L


def q6_k(x):
    scales, L = [], [0] * 256
    max_scale = max_abs = 0.0
    for ib in range(16):
        s, l = make_qx(x[16 * ib:16 * ib + 16], 32)
        scales.append(s); L[16 * ib:16 * ib + 16] = l
        if abs(s) > max_abs: max_abs = abs(s); max_scale = s
    if max_abs < 1e-15:
        return bytes(210)
    iscale = f32(-128.0 / max_scale)
    db, d = fp16(f32(1.0 / iscale))
    sc = [min(127, nearest_int(f32(iscale * s))) for s in scales]
    for j in range(16):
        dd = f32(d * sc[j])
        if not dd:
            continue
        for ii in range(16):
            L[16 * j + ii] = max(-32, min(31, nearest_int(f32(x[16 * j + ii] / dd)))) + 32
    ql, qh = [0] * 128, [0] * 64
    for h, j in enumerate((0, 128)):
        for l in range(32):
            q1, q2, q3, q4 = L[j + l], L[j + l + 32], L[j + l + 64], L[j + l + 96]
            ql[64 * h + l] = (q1 & 0xF) | ((q3 & 0xF) << 4)
            ql[64 * h + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4)
            qh[32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    return bytes(ql) + bytes(qh) + bytes(v & 0xFF for v in sc) + db


def block():  # varied magnitudes per sub-block, an outlier, a zero group, signs mixed
    x = [f32(math.sin(i * 0.37) * (0.2 + (i // 32) * 0.15) + 0.03 * math.cos(i * 1.3)) for i in range(256)]
    x[77] = f32(2.5)
    for i in range(160, 176):
        x[i] = 0.0
    return x


def c_array(name, data, per_line=12):
    items = ['0x%02x' % v for v in data]
    lines = [', '.join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return 'static const uint8_t %s[%d] = {\n    %s,\n};' % (name, len(data), ',\n    '.join(lines))


if __name__ == '__main__':
    x = block()
    print('static const float k_kref_in[256] = {')
    for i in range(0, 256, 4):
        print('    ' + ', '.join(float(v).hex() + 'f' for v in x[i:i + 4]) + ',')
    print('};')
    print(c_array('k_ref_q4_k', q4_k(x)))
    print(c_array('k_ref_q6_k', q6_k(x)))
