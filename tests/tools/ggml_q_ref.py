#!/usr/bin/env python3
"""Independent reference for tests/test_quant.c: ggml's quantize_row_q8_0_ref and
quantize_row_q4_0_ref in plain Python, every float32 operation emulated by rounding the
(exact, or correctly rounded double) result to float32; fp16 via struct 'e' (round to
nearest even, as ggml's F16C conversion). Prints the input blocks as C hex floats and the
expected block bytes. Run: python3 tests/tools/ggml_q_ref.py"""
import math
import struct


def f32(v):
    return struct.unpack('<f', struct.pack('<f', v))[0]


def fp16_bytes(v):
    return struct.pack('<e', v)


def fp16_val(b):
    return struct.unpack('<e', b)[0]


def roundf(v):  # C roundf: halfway cases away from zero
    return math.copysign(math.floor(abs(v) + 0.5), v)


def q8_0(x):
    amax = 0.0
    for v in x:
        amax = max(amax, abs(v))
    d = f32(amax / 127)
    idv = f32(1.0 / d) if d else 0.0
    out = bytearray(fp16_bytes(d))
    for v in x:
        out += struct.pack('<b', int(roundf(f32(v * idv))))
    return bytes(out)


def q4_0(x):
    amax, mx = 0.0, 0.0
    for v in x:
        if amax < abs(v):
            amax, mx = abs(v), v
    d = f32(mx / -8)
    idv = f32(1.0 / d) if d else 0.0
    out = bytearray(fp16_bytes(d))
    for j in range(16):
        a = min(15, int(f32(f32(x[j] * idv) + 8.5)))       # (int8_t) truncates toward 0
        b = min(15, int(f32(f32(x[j + 16] * idv) + 8.5)))
        out.append(a | (b << 4))
    return bytes(out)


def blocks():
    # A: scale exactly 1.0 (amax 127), halves to show roundf's ties away from zero.
    a = [127.0, 2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 100.25, -64.0, 3.75, -0.25, 0.0,
         63.5, -63.5, 126.5, -126.5] + [f32((i - 16) * 7.25) for i in range(16)]
    # B: an awkward scale, largest magnitude negative (Q4_0 maps it to level 0).
    b = [f32(math.sin(i * 0.7) * 0.37 - 0.05 * i) for i in range(32)]
    b[9] = f32(-1.9)
    # C: largest magnitude positive; ties of the Q4_0 +8.5 truncation.
    c = [f32((i % 9) * 0.125 - 0.5) for i in range(32)]
    c[20] = 1.0
    return [a, b, c]


def c_array(name, data, per_line=12):
    items = ['0x%02x' % v for v in data]
    lines = [', '.join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return 'static const uint8_t %s[%d] = {\n    %s,\n};' % (name, len(data), ',\n    '.join(lines))


if __name__ == '__main__':
    bs = blocks()
    print('static const float k_ref_in[%d][32] = {' % len(bs))
    for blk in bs:
        print('    {' + ', '.join(float(v).hex() + 'f' for v in blk) + '},')
    print('};')
    print(c_array('k_ref_q8_0', b''.join(q8_0(x) for x in bs)))
    print(c_array('k_ref_q4_0', b''.join(q4_0(x) for x in bs)))
