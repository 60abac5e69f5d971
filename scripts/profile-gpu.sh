#!/usr/bin/env bash
# profile-gpu.sh MODEL [N_TOKENS]: where a decode step's time goes on the
# GPU: each kernel's duration over a few decode steps (Nsight Compute,
# clocks as the card has them), summed by kernel name; the same tg test
# with and without graphs; which graphs were captured. Needs build-cuda/.
# Writes $OUT/ncu.csv when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
M=${1:?model}
N=${2:-40}
B=./build-cuda/bin
echo "== graphs captured (TELA_CUDA_DEBUG=1)"
TELA_CUDA_DEBUG=1 "$B/tela" bench -m "$M" -p 0 -n 8 -r 1 2>&1 | grep -E "captured|tg8" | sort | uniq -c | head
echo "== tg128 with graphs, then eager"
"$B/tela" bench -m "$M" -p 0 -n 128 -r 2 | grep tg128
TELA_CUDA_GRAPHS=0 "$B/tela" bench -m "$M" -p 0 -n 128 -r 2 | grep tg128
csv=${OUT:-/tmp}/ncu.csv
if command -v ncu >/dev/null; then
    timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 3000 --launch-count 230 \
        "$B/tela" bench -m "$M" -p 0 -n "$N" -r 1 > "$csv" 2>/dev/null
    python3 - "$csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("no ncu rows"); sys.exit()
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(",", "")); u = r[ui]
    v = v / 1000.0 if u == "nsecond" else v * 1000.0 if u == "msecond" else v  # -> usecond
    name = r[ki].split("(")[0][:60]; tot[name] += v; cnt[name] += 1
s = sum(tot.values()); n = sum(cnt.values())
print("== %d kernels, %.1f us of kernel time (about %.1f us per kernel)" % (n, s, s / max(n, 1)))
for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
    print("%8.1f us %5d x  %6.2f us  %s" % (v, cnt[k], v / cnt[k], k))
PY
fi
