#!/usr/bin/env bash
# test-amx.sh: on an x86-64 CPU with AMX (the CI machine kind; the GPU
# device machines' hosts), checks the AMX tiles of
# src/backend/cpu/qdot_pack_amx.c (on by default for Q4_K/Q6_K; TELA_AMX=1
# adds Q8_0/Q4_0, TELA_AMX_FLOAT=1 the bf16 tiles for F16/BF16) on the real
# instructions and measures them. CPU only (no CUDA); builds build-amx/ (Release) and build-amx-asan/.
#  1. The packed-kernel tests with TELA_AMX=1 TELA_AMX_FLOAT=1: gemms of
#     16+ columns on the tiles against vec_dot / the packed models (int8
#     tiles bitwise, bf16 tiles within their bound), also under ASan+UBSan.
#  2. The whole ctest suite with TELA_AMX=1 (the int8 tiles are bitwise the
#     VNNI tiles, so every expected output still holds).
#  3. Speed: 'tela bench -p 512 -n 0 -t 2' pinned to two cores (taskset;
#     CORES=a,b to choose them),
#     VNNI tiles (TELA_CPU=avx512) against AMX (TELA_AMX=1; F16 also
#     TELA_AMX_FLOAT=1), on random-weight Llama-3.2-1B Q4_K_M, Q8_0, F16
#     and Qwen3.5-2B Q4_K_M files (made here, in $TELA_MODELS or
#     /tmp/tela-models); and the demo's perplexity with and without the
#     bf16 tiles. A table is printed last.
# TELA_AMX_QUICK=1: the checks (1, 2) only. On a machine without AMX it says
# so and stops.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -f scripts/gpu-env.sh ] && . scripts/gpu-env.sh # the device machines' build packages
if ! grep -qw amx_int8 /proc/cpuinfo; then
    echo "test-amx.sh: this CPU has no AMX (no amx_int8 in /proc/cpuinfo)"
    exit 77
fi
JOBS=${JOBS:-$(nproc)}
n_cpu=$(nproc)
CORES=${CORES:-$((n_cpu > 2 ? n_cpu - 2 : 0)),$((n_cpu > 2 ? n_cpu - 1 : 1))} # two cores, the last ones
summary=()
note() { summary+=("$1"); }
grep -m1 "model name" /proc/cpuinfo
cmake -S . -B build-amx -G Ninja -DCMAKE_BUILD_TYPE=Release -DTELA_CUDA=OFF -DTELA_SERVER=OFF > /tmp/tela-amx-cmake.log 2>&1 &&
    ninja -C build-amx > /tmp/tela-amx-build.log 2>&1 || { tail -30 /tmp/tela-amx-build.log; exit 1; }
export TELA_AMX=1
for t in test_qdot_packed_k test_qdot_packed_q8 test_qdot_packed_f test_qdot_amx_model; do
    if TELA_AMX_FLOAT=1 ./build-amx/tests/$t > /tmp/tela-amx-$t.log 2>&1; then r=ok; else r=FAILED; tail -5 /tmp/tela-amx-$t.log; fi
    note "$t (TELA_AMX=1 TELA_AMX_FLOAT=1): $r, $(tail -1 /tmp/tela-amx-$t.log)"
done
for t in test_qdot_packed_k test_qdot_packed_q8; do # the defaults
    if env -u TELA_AMX ./build-amx/tests/$t > /tmp/tela-amx-d-$t.log 2>&1; then r=ok; else r=FAILED; tail -5 /tmp/tela-amx-d-$t.log; fi
    note "$t (defaults): $r, $(grep 'AMX tiles' /tmp/tela-amx-d-$t.log), $(tail -1 /tmp/tela-amx-d-$t.log)"
done
if cmake -S . -B build-amx-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTELA_SANITIZE=ON -DTELA_CUDA=OFF -DTELA_SERVER=OFF > /dev/null 2>&1 &&
    ninja -C build-amx-asan tests/test_qdot_packed_k tests/test_qdot_packed_q8 tests/test_qdot_packed_f > /dev/null 2>&1; then
    for t in test_qdot_packed_k test_qdot_packed_q8 test_qdot_packed_f; do
        if TELA_AMX_FLOAT=1 ./build-amx-asan/tests/$t > /tmp/tela-amx-asan-$t.log 2>&1; then r=ok; else r=FAILED; tail -5 /tmp/tela-amx-asan-$t.log; fi
        note "ASan+UBSan $t: $r"
    done
else
    note "ASan+UBSan build: failed"
fi
(cd build-amx && ctest -j "$JOBS" > /tmp/tela-amx-ctest.log 2>&1)
note "ctest with TELA_AMX=1: $(grep -E 'tests passed|tests failed' /tmp/tela-amx-ctest.log | tail -1)"
grep -E "\*\*\*Failed|Failed  " /tmp/tela-amx-ctest.log | head
[ "${TELA_AMX_QUICK:-0}" = 1 ] && { for s in "${summary[@]}"; do echo "$s"; done; exit 0; } # the checks only

B=./build-amx/bin
D=${TELA_MODELS:-/tmp/tela-models}
mkdir -p "$D"
[ -f "$D/l1b-f16.gguf" ] || "$B/tela-mkmodel" llama-3.2-1b -o "$D/l1b-f16.gguf" -q
[ -f "$D/l1b-q4_k_m.gguf" ] || "$B/tela" quantize "$D/l1b-f16.gguf" "$D/l1b-q4_k_m.gguf" Q4_K_M > /dev/null
[ -f "$D/l1b-q8_0.gguf" ] || "$B/tela" quantize "$D/l1b-f16.gguf" "$D/l1b-q8_0.gguf" Q8_0 > /dev/null
[ -f "$D/q35-2b-f16.gguf" ] || "$B/tela-mkmodel" qwen3.5-2b -o "$D/q35-2b-f16.gguf" -q
[ -f "$D/q35-2b-q4_k_m.gguf" ] || "$B/tela" quantize "$D/q35-2b-f16.gguf" "$D/q35-2b-q4_k_m.gguf" Q4_K_M > /dev/null
pp() { # file, env...: pp512 tok/s on two cores
    local f=$1; shift
    env TELA_AMX=0 "$@" taskset -c "$CORES" "$B/tela" bench -m "$D/$f" -p 512 -n 0 -r 2 -t 2 --json 2>/dev/null |
        grep -o '"avg_ts": *[0-9.]*' | head -1 | awk '{printf "%.1f", $2} END {if (!NR) printf "?"}'
}
rows=()
for f in l1b-q4_k_m.gguf l1b-q8_0.gguf q35-2b-q4_k_m.gguf l1b-f16.gguf; do
    extra=""
    [ "$f" = l1b-f16.gguf ] && extra="TELA_AMX_FLOAT=1"
    v1=$(pp "$f" TELA_CPU=avx512); a1=$(pp "$f" TELA_AMX=1 $extra)
    v2=$(pp "$f" TELA_CPU=avx512); a2=$(pp "$f" TELA_AMX=1 $extra)
    rows+=("$(printf '| %s | %s / %s | %s / %s |' "$f" "$v1" "$v2" "$a1" "$a2")")
done
ppl() { env TELA_AMX=0 "$@" "$B/tela" perplexity -m models/tela-kjv-f16.gguf -f tests/fixtures/demo/heldout-excerpt.txt -c 256 2>&1 |
    grep -o 'PPL = [0-9.]*'; }
note "demo perplexity (F16, -c 256): exact $(ppl), bf16 tiles $(ppl TELA_AMX_FLOAT=1)"
echo
echo "== test-amx.sh summary"
for s in "${summary[@]}"; do echo "$s"; done
echo "| file | pp512 VNNI tiles (two runs) | pp512 AMX tiles (two runs) |"
echo "| --- | --- | --- |"
for r in "${rows[@]}"; do echo "$r"; done
