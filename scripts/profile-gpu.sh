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
    timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size --csv \
        --launch-skip "${NCU_SKIP:-3000}" --launch-count "${NCU_COUNT:-230}" \
        "$B/tela" bench -m "$M" -p 0 -n "$N" -r 1 > "$csv" 2>/dev/null
    python3 - "$csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("no ncu rows"); sys.exit()
h = rows[0]; ki = h.index("Kernel Name"); mi = h.index("Metric Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
ii = h.index("ID")
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "ns": 1e-3, "us": 1.0, "ms": 1e3, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9}
per = collections.defaultdict(dict)  # launch id -> metric -> value (us, bytes)
name = {}
for r in rows[1:]:
    v = float(r[vi].replace(",", "")) * scale.get(r[ui], 1.0)
    per[r[ii]][r[mi]] = v; name[r[ii]] = r[ki].split("(")[0][:58]
tot = collections.defaultdict(lambda: [0.0, 0.0, 0])
for i, m in per.items():  # one line a kernel and grid size: the products of one template differ by shape
    t = tot["%s [%d]" % (name[i], int(m.get("launch__grid_size", 0)))]; t[0] += m.get("gpu__time_duration.sum", 0.0)
    t[1] += m.get("dram__bytes_read.sum", 0.0) + m.get("dram__bytes_write.sum", 0.0); t[2] += 1
s = sum(t[0] for t in tot.values()); n = sum(t[2] for t in tot.values()); b = sum(t[1] for t in tot.values())
print("== %d kernels, %.1f us of kernel time (%.2f us a kernel), %.1f MB of DRAM traffic (%.2f TB/s over the kernels)" % (n, s, s / max(n, 1), b * 1e-6, b / max(s, 1e-9) * 1e-6))
print("   total us  count   us each    MB each   TB/s  kernel")
for k, t in sorted(tot.items(), key=lambda kv: -kv[1][0]):
    print("%11.1f %6d %9.2f %10.2f %6.2f  %s" % (t[0], t[2], t[0] / t[2], t[1] / t[2] * 1e-6, t[1] / max(t[0], 1e-9) * 1e-6, k))
PY
fi
