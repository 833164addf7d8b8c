#!/usr/bin/env python3
"""A/B of two specdec binaries on `bench-decode`, runs alternating (the first binary swapped each
round, so that the machine's drift hits both alike), with medians, ranges and paired ratios.

usage: scripts/bench_ab.py [-r ROUNDS] BIN_A BIN_B MODEL [-- BENCH-DECODE ARGS]
  e.g. scripts/bench_ab.py -r 6 /tmp/old/specdec build/specdec .cache/s110-q4_k.gguf -- --reps 5 --no-batch

Prints each run's lines, then per binary the medians (low-high) of decode tokens/s, its fraction
of the bandwidth limit, T_verify(5) in ms and in decode steps, verify(n) for n = 2..9 in decode steps,
prefill tokens/s, and the median of the per-round ratios B/A (decode tokens/s, verify(n) in decode
steps, verify(5) time, prefill)."""
import re
import statistics
import subprocess
import sys
import time


def parse(out):
    f = {}
    m = re.search(r"^prefill:\s+([\d.]+) tokens/s", out, re.M)
    if m: f["pp"] = float(m.group(1))
    m = re.search(r"^decode:\s+([\d.]+) tokens/s .*= ([\d.]+)% of the bandwidth", out, re.M)
    if m: f["tps"], f["pct"] = float(m.group(1)), float(m.group(2))
    for m in re.finditer(r"^  k=\d+: T_verify\((\d+)\) = ([\d.]+) ms = ([\d.]+) x", out, re.M):
        f["v%sms" % m.group(1)], f["v" + m.group(1)] = float(m.group(2)), float(m.group(3))
    m = re.search(r"^bandwidth:\s+([\d.]+) GB/s", out, re.M)
    if m: f["bw"] = float(m.group(1))
    return f


def med(xs):
    xs = [x for x in xs if x is not None]
    if not xs: return "-"
    return "%.4g (%.4g-%.4g)" % (statistics.median(xs), min(xs), max(xs))


def main():
    args = sys.argv[1:]
    rounds = 4
    if args[:1] == ["-r"]:
        rounds, args = int(args[1]), args[2:]
    extra = []
    if "--" in args:
        i = args.index("--")
        args, extra = args[:i], args[i + 1:]
    if len(args) != 3:
        sys.exit(__doc__)
    bins, model = args[:2], args[2]
    res = {0: [], 1: []}
    print("command: %s bench-decode -m %s %s" % ("BIN", model, " ".join(extra)))
    for r in range(rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for b in order:
            out = subprocess.run([bins[b], "bench-decode", "-m", model] + extra, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit("%s failed: %s" % (bins[b], out.stderr))
            f = parse(out.stdout)
            res[b].append(f)
            print("round %d %s %s: %s" % (r + 1, "AB"[b], time.strftime("%H:%M:%S"),
                                          " ".join("%s=%s" % kv for kv in sorted(f.items()))), flush=True)
    for b in (0, 1):
        g = lambda k: [f.get(k) for f in res[b]]
        print("%s %s: decode %s t/s, %s%% of limit | v5 %s ms = %s steps | v9 %s | pp %s | bw %s GB/s" %
              ("AB"[b], bins[b], med(g("tps")), med(g("pct")), med(g("v5ms")), med(g("v5")), med(g("v9")),
               med(g("pp")), med(g("bw"))))
    for b in (0, 1):
        print("%s verify(n) in decode steps: %s" % ("AB"[b], "  ".join(
            "%d: %s" % (n, med([f.get("v%d" % n) for f in res[b]])) for n in range(2, 10)
            if any("v%d" % n in f for f in res[b]))))
    rat = {n: [b["v%d" % n] / a["v%d" % n] for a, b in zip(res[0], res[1]) if "v%d" % n in a and "v%d" % n in b]
           for n in range(2, 10)}
    print("B/A verify(n) in decode steps, median of the paired rounds: %s" %
          "  ".join("%d: %.3f" % (n, statistics.median(r)) for n, r in rat.items() if r))
    for k, name in (("tps", "decode tokens/s"), ("v5ms", "verify(5) time"), ("pp", "prefill")):
        rat = [b[k] / a[k] for a, b in zip(res[0], res[1]) if k in a and k in b]
        if rat:
            print("B/A %s: median %.3f [%s]" % (name, statistics.median(rat), " ".join("%.2f" % x for x in rat)))


if __name__ == "__main__":
    main()
