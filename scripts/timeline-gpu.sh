#!/usr/bin/env bash
# timeline-gpu.sh MODEL [K] [ROWS]: where the time of one quantized product
# goes inside a captured decode step, warp by warp. Builds build-tl/ with
# -DTELA_CUDA_TIMELINE (each warp of the one-token Q4_K/Q6_K products whose
# rows are K inputs long stamps the GPU's global timer at entry, after its
# PDL wait, after its last round of loads and after its write), runs a
# tg128 with it and prints, for the last such launch of each type: when the
# wait passed, how long the rounds and the write took, the warps alive and
# loading over time (the waves and the gaps between them) and each SM's
# share. K defaults to 14,336 (Llama-3.1-8B's down product, ROWS 4,096).
# With TELA_CUDA_GEMV_PERSIST=1 in the environment the rows-in-turns kernel
# is stamped instead (its "rounds" end when a warp's first row is written).
# Writes $OUT/timeline.bin when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
M=${1:?model}
K=${2:-14336}
ROWS=${3:-4096}
cmake -S . -B build-tl -G Ninja -DCMAKE_BUILD_TYPE=Release -DTELA_CUDA=ON -DTELA_SERVER=OFF -DTELA_WERROR=OFF \
    -DCMAKE_CUDA_FLAGS="-DTELA_CUDA_TIMELINE -DTELA_CUDA_TIMELINE_K=$K" > /tmp/tela-tl-cmake.log 2>&1 || { tail /tmp/tela-tl-cmake.log; exit 1; }
ninja -C build-tl tela > /tmp/tela-tl-build.log 2>&1 || { grep -E "error|FAILED" /tmp/tela-tl-build.log | head; exit 1; }
bin=${OUT:-/tmp}/timeline.bin
rm -f "$bin"
TELA_CUDA_TIMELINE="$bin" ./build-tl/bin/tela bench -m "$M" -p 0 -n 128 -r 1 | grep tg128
[ -f "$bin" ] || { echo "no timeline written"; exit 1; }
python3 - "$bin" "$K" "$ROWS" <<'PY'
import struct, sys
W = 16384  # TL_WARPS
raw = open(sys.argv[1], 'rb').read()
K, ROWS = int(sys.argv[2]), int(sys.argv[3])
vals = struct.unpack('<%dQ' % (2 * W * 6), raw)
pc = lambda a, q: a[min(len(a) - 1, int(q * len(a)))]
for slot, name, bpb in ((0, 'Q4_K', 144), (1, 'Q6_K', 210)):
    rows = [vals[(slot * W + w) * 6:(slot * W + w) * 6 + 6] for w in range(W)]
    rows = [r for r in rows if r[0]]
    if not rows:
        print('== %s: no launch stamped' % name)
        continue
    t0 = min(r[0] for r in rows)
    us = lambda v: (v - t0) / 1e3
    e = [(us(r[0]), us(r[1]), us(r[2]), us(r[3]), r[4]) for r in rows]
    n = len(e)
    D, S = (rows[0][5] >> 48) & 0xff, (rows[0][5] >> 40) & 0xff
    turns = (rows[0][5] >> 56) & 1  # gemv3p_q_kernel: "rounds" end at its first row written
    waits = sorted(x[1] for x in e)
    end = max(x[3] for x in e)
    mb = ROWS * K / 256 * bpb / 1e6
    print('== %s: %d warps (D = %d rounds in flight, S = %d warps a row%s), %.1f MB of weights'
          % (name, n, D, S, ', rows in turns: "rounds" end at the first row written' if turns else '', mb))
    print('  first entry 0, first wait passed %.2f us, last write %.2f: %.2f us after the wait, %.2f TB/s'
          % (waits[0], end, end - waits[0], mb / (end - waits[0])))
    print('  entered before the first wait passed: %d warps' % sum(1 for x in e if x[0] < waits[0]))
    for label, v in (('rounds (wait -> last round)', sorted(x[2] - x[1] for x in e)),
                     ('write (last round -> written)', sorted(x[3] - x[2] for x in e))):
        print('  %s us: p10 %.2f p50 %.2f p90 %.2f max %.2f' % (label, pc(v, .1), pc(v, .5), pc(v, .9), v[-1]))
    step = 0.5
    nb = int(end / step) + 1
    alive, busy = [0] * nb, [0] * nb
    for x in e:
        for b in range(int(x[0] / step), min(nb, int(x[3] / step) + 1)): alive[b] += 1
        for b in range(int(x[1] / step), min(nb, int(x[2] / step) + 1)): busy[b] += 1
    print('  warps alive / in their rounds, every 0.5 us:')
    for i in range(0, nb, 12):
        print('   %5.1f: %s' % (i * step, ' '.join('%d/%d' % (alive[b], busy[b]) for b in range(i, min(nb, i + 12)))))
    sms = {}
    for x in e: sms.setdefault(x[4], []).append(x)
    per = sorted(len(v) for v in sms.values())
    last = sorted(max(y[3] for y in v) for v in sms.values())
    print('  %d SMs: %d-%d warps an SM; an SM\'s last write: first %.2f, median %.2f, last %.2f us'
          % (len(sms), per[0], per[-1], last[0], pc(last, .5), last[-1]))
PY
