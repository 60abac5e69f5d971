#!/usr/bin/env bash
# bench-gpu.sh: the GPU speed figures of docs/BENCHMARKS.md on a machine
# with an NVIDIA GPU: random-weight models at real shapes made by
# tela-mkmodel (Llama-3.2-1B, and with BENCH_8B=1 Llama-3.1-8B), quantized
# by tela quantize, measured by 'tela bench -p 512,4096 -n 128' (plus a
# tg128 at a 32k-token depth on the 8B F16 file), and the Qwen3.5-2B
# shape (F16, Q8_0, Q4_K_M; BENCH_QWEN=0 skips it, BENCH_LLAMA=0 the
# Llama files), and with BENCH_27B=1 the Qwen3.5-27B shape in Q4_K_M (made
# as Q8_0 and requantized: its F16 would not fit the disk beside it). Needs build-cuda/ (made by scripts/test-gpu.sh).
# BENCH_VARIANTS=1 adds tg128 with each variant of the decode products
# (F16: TELA_CUDA_GEMV_ROWS=0 the one-row kernel, 1, 2, 4 rows a warp;
# quantized: TELA_CUDA_GEMV=1 the first variant, TELA_CUDA_GEMV_QROWS=1, 2
# rows a warp of the second), BENCH_PROFILE=1 a --profile run of each to
# $OUT/profile.log; BENCH_SPEC=1 speculative decoding (the demo models with MTP, prompt
# lookup and a draft model; the 2B shape's verification cost) to $OUT/spec.log;
# BENCH_PP=0 skips the prefill tests; TELA_BIN_DIR names prebuilt binaries. Files go to $TELA_MODELS (default
# /tmp/tela-models); JSON lines to $OUT/bench.jsonl when OUT is set. A table
# is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
B=${TELA_BIN_DIR:-./build-cuda/bin} # TELA_BIN_DIR: prebuilt binaries elsewhere
D=${TELA_MODELS:-/tmp/tela-models}
R=${BENCH_REPS:-3}
J=${OUT:-/tmp}/bench.jsonl
mkdir -p "$D"
: > "$J"
mk() { [ -f "$D/$2" ] || "$B/tela-mkmodel" "$1" -o "$D/$2" -q; }
qz() { [ -f "$D/$3" ] || "$B/tela" quantize "$D/$1" "$D/$3" "$2" > /dev/null; }
bench() { # file, extra args
    local f=$1; shift
    "$B/tela" bench -m "$D/$f" -r "$R" --json "$@" | sed "s|^{|{\"file\": \"$f\", |" | tee -a "$J"
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader 2>/dev/null

P=${BENCH_PP:-512,4096} # BENCH_PP=0: decode only
PROF=${OUT:-/tmp}/profile.log
variants() { # file: tg128 with each variant of the decode products (BENCH_VARIANTS=1)
    local f=$1 vs
    case "$f" in *f16*) vs="TELA_CUDA_GEMV_ROWS=0 TELA_CUDA_GEMV_ROWS=1 TELA_CUDA_GEMV_ROWS=2 TELA_CUDA_GEMV_ROWS=4" ;;
                 *) vs="TELA_CUDA_GEMV=1 TELA_CUDA_GEMV_QROWS=1 TELA_CUDA_GEMV_QROWS=2" ;; esac
    for v in $vs; do
        env "$v" "$B/tela" bench -m "$D/$f" -r "$R" --json -p 0 -n 128 | sed "s|^{|{\"file\": \"$f $v\", |" | tee -a "$J"
        # BENCH_PROFILE=1: the time of each kind of operation (graphs off), to $OUT/profile.log
        [ "${BENCH_PROFILE:-0}" = 1 ] && { echo "== $f $v"; env "$v" "$B/tela" bench -m "$D/$f" -r 1 -p 0 -n 64 --profile 2>&1 | sed -n '/^profile/,$p'; } >> "$PROF"
    done
}
one() { # file
    bench "$1" -p "$P" -n 128
    [ "${BENCH_VARIANTS:-0}" = 1 ] && variants "$1"
}
: > "$PROF"
if [ "${BENCH_LLAMA:-1}" = 1 ]; then
    mk llama-3.2-1b l1b-f16.gguf
    qz l1b-f16.gguf Q8_0 l1b-q8_0.gguf
    qz l1b-f16.gguf Q4_K_M l1b-q4_k_m.gguf
    for f in l1b-f16.gguf l1b-q8_0.gguf l1b-q4_k_m.gguf; do one "$f"; done
fi
if [ "${BENCH_QWEN:-1}" = 1 ]; then
    mk qwen3.5-2b q35-2b-f16.gguf
    qz q35-2b-f16.gguf Q8_0 q35-2b-q8_0.gguf
    qz q35-2b-f16.gguf Q4_K_M q35-2b-q4_k_m.gguf
    for f in q35-2b-f16.gguf q35-2b-q8_0.gguf q35-2b-q4_k_m.gguf; do one "$f"; done
fi
if [ "${BENCH_27B:-0}" = 1 ]; then
    [ -f "$D/q35-27b-q4_k_m.gguf" ] || {
        "$B/tela-mkmodel" qwen3.5-27b -o "$D/q35-27b-q8_0.gguf" --type q8_0 -q &&
            "$B/tela" quantize "$D/q35-27b-q8_0.gguf" "$D/q35-27b-q4_k_m.gguf" Q4_K_M --allow-requantize > /dev/null &&
            rm -f "$D/q35-27b-q8_0.gguf"
    }
    one q35-27b-q4_k_m.gguf
fi
if [ "${BENCH_8B:-0}" = 1 ]; then
    mk llama-3.1-8b l8b-f16.gguf
    qz l8b-f16.gguf Q4_K_M l8b-q4_k_m.gguf
    for f in l8b-f16.gguf l8b-q4_k_m.gguf; do one "$f"; done
    [ "$P" = 0 ] || bench l8b-f16.gguf -p 0 -n 128 -d 32768 -r 2
fi
if [ "${BENCH_SPEC:-0}" = 1 ]; then # speculative decoding: the demos (real acceptance), then the 2B's verification cost
    SP=${OUT:-/tmp}/spec.log
    : > "$SP"
    for a in "--spec mtp" "--spec ngram" "--draft models/tela-kjv-q8_0.gguf"; do
        echo "== tela-kjv-qwen35-f16 $a" >> "$SP"
        "$B/tela" bench -m models/tela-kjv-qwen35-f16.gguf -p 0 -n 128 -r "$R" $a --draft-max 1,2,3 >> "$SP" 2>&1
    done
    echo "== tela-kjv-f16 --spec ngram" >> "$SP"
    "$B/tela" bench -m models/tela-kjv-f16.gguf -p 0 -n 128 -r "$R" --spec ngram --draft-max 1,2,3 >> "$SP" 2>&1
    mk qwen3.5-2b q35-2b-f16.gguf
    qz q35-2b-f16.gguf Q4_K_M q35-2b-q4_k_m.gguf
    for f in q35-2b-f16.gguf q35-2b-q4_k_m.gguf; do
        echo "== $f --spec ngram (random weights: the verification cost table)" >> "$SP"
        "$B/tela" bench -m "$D/$f" -p 0 -n 32 -r "$R" --spec ngram --draft-max 1,2,3 >> "$SP" 2>&1
    done
    echo "== q35-2b-f16.gguf, TELA_CUDA_FLOAT_GEMM=9 (small passes through the decode kernels)" >> "$SP"
    TELA_CUDA_FLOAT_GEMM=9 "$B/tela" bench -m "$D/q35-2b-f16.gguf" -p 0 -n 32 -r "$R" --spec ngram --draft-max 3 >> "$SP" 2>&1
    grep -v "^|.*---" "$SP"
fi

echo
echo "==== bench-gpu.sh: tok/s (mean of $R) ===="
python3 - "$J" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"): continue
    o = json.loads(line)
    print("%-18s %-16s %10.1f +- %.1f" % (o["file"], o["test"], o["avg_ts"], o["stddev_ts"]))
PY
