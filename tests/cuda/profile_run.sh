#!/usr/bin/env bash
# Where one decode step's time goes, kernel by kernel (Nsight Compute; needs a runtime where
# ncu reads counters, e.g. the Firecracker machines). Each kernel's own GPU time, summed per
# kernel name over two decode steps of the 124M shape; compare the sum with gpt2-bench-cuda's
# graph_replay_ms: the difference is launch and dependency latency between kernels.
#   tests/cuda/profile_run.sh [path/to/gpt2-bench-cuda]      (from the repository root)
set -uo pipefail
OUT="${OUT:-/tmp/gpt2-profile}"
mkdir -p "$OUT"
bench="${1:-.prebuilt/gpt2-bench-cuda}"
# Skip the prompt passes and the first decode steps; keep the one-token kernels and the sampler.
timeout 300 ncu --clock-control none --graph-profiling node -k regex:'gemv|attn_decode|embed|sample_kernel' \
    --launch-skip 400 --launch-count 126 --metrics gpu__time_duration.sum --csv \
    "$bench" --random 124M --prompt 64 --decode 64 --repeat 1 >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
echo "ncu exit $?"
python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows:
    sys.exit("no ncu rows; see ncu.err")
head = rows[0]
name_i, value_i, unit_i = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
total = collections.defaultdict(float); count = collections.Counter()
for r in rows[1:]:
    v = float(r[value_i].replace(",", ""))
    v = v / 1000 if r[unit_i] == "nsecond" else v  # to microseconds
    key = r[name_i].split("(")[0]
    total[key] += v; count[key] += 1
for k in sorted(total, key=total.get, reverse=True):
    print(f"{k:60} {count[k]:4d} launches {total[k] / count[k]:8.2f} us each {total[k]:9.1f} us total")
print(f"sum over {sum(count.values())} launches: {sum(total.values()):.1f} us")
PY
