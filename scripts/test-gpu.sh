#!/usr/bin/env bash
# test-gpu.sh: on a machine with an NVIDIA GPU and the CUDA toolkit, builds
# tela with the CUDA backend (build-cuda/) and runs the whole test suite
# there: the GPU tests (test_cuda_*) and every other test (on the CPU,
# TELA_DEVICE=cpu, so their expected outputs hold), then the GPU op tests
# under compute-sanitizer memcheck (TELA_MEMCHECK=0 skips that), then the
# demo model through 'tela run' on both devices. A summary is printed last.
# TELA_CPU_TESTS=0 skips the CPU tests, TELA_MEMCHECK=0 the memcheck.
# Without ../shared, the fixtures come from scripts/shared-parts.sh's parts.
# TELA_GPU_PART=1 runs all but the op tests' variants, =2 only those (the
# build, then the variants): two calls where one would run too long.
# The variants run VJOBS at a time (default: half the cores).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
JOBS=${JOBS:-$(nproc)}
summary=()
note() { summary+=("$1"); }

# ../shared's fixtures where there is no ../shared (the lent machines):
# from the parts carried by this call and earlier ones (shared-parts.sh)
if [ -z "${TELA_SHARED_DIR:-}" ] && [ ! -d ../shared/reference ]; then
    if scripts/shared-parts.sh unpack /tmp/tela-shared > /tmp/tela-shared.log 2>&1; then
        export TELA_SHARED_DIR=/tmp/tela-shared
        note "../shared: $(tail -1 /tmp/tela-shared.log)"
    else
        note "../shared: none here ($(tail -1 /tmp/tela-shared.log)): its cases skip"
    fi
fi

# tela serve only where libmicrohttpd is found (the device machines lack it)
server=OFF; pkg-config --exists libmicrohttpd 2>/dev/null && server=ON
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DTELA_CUDA=ON -DTELA_SERVER=$server -DTELA_WERROR=OFF -DTELA_SHARED_DIR="${TELA_SHARED_DIR:-$PWD/../shared}" > /tmp/tela-cmake.log 2>&1 ||
    { cat /tmp/tela-cmake.log; echo "test-gpu.sh: configure failed"; exit 1; }
if ! ninja -C build-cuda > /tmp/tela-build.log 2>&1; then
    grep -E "error|FAILED" /tmp/tela-build.log | head -40
    echo "test-gpu.sh: build failed"
    exit 1
fi
note "build: ok ($(grep -o 'CUDA backend on.*' /tmp/tela-cmake.log | head -1))"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv,noheader 2>/dev/null |
    sed 's/^/gpu: /' | while read -r l; do echo "$l"; done
./build-cuda/bin/tela --version

part=${TELA_GPU_PART:-0}
if [ "$part" = 2 ]; then TELA_CPU_TESTS=0 TELA_MEMCHECK=0; fi
[ "$part" = 1 ] && TELA_GPU_VARIANTS=0
if [ "$part" != 2 ]; then
(cd build-cuda && ctest --output-on-failure -R '^test_cuda' 2>&1 | tee /tmp/tela-ctest-gpu.log)
grep -hE '^[0-9]+ passed, [0-9]+ failed|^type |^device:|^out of memory|^note' build-cuda/Testing/Temporary/LastTest.log
note "GPU tests: $(grep -E 'tests passed|tests failed' /tmp/tela-ctest-gpu.log | tail -1); checks: $(grep -hE '^[0-9]+ passed, [0-9]+ failed' build-cuda/Testing/Temporary/LastTest.log | tr '\n' ' ')"
fi
# the op tests again on each variant of the decode products and attention
# (TELA_GPU_VARIANTS=0: not)
# (TELA_GPU_VARIANTS="A=1 B=2,C=3": those settings instead; a comma joins
# settings of one variant)
variants="TELA_CUDA_GEMV_EARLY=0 TELA_CUDA_GEMV_EARLY_NT=0 TELA_CUDA_GEMV_ORDER=0 TELA_CUDA_GEMV_ORDER=2 TELA_CUDA_GEMV_FX=0 TELA_CUDA_GEMV_FX=0,TELA_CUDA_GEMV_WPR=1 TELA_CUDA_GEMV_FX=0,TELA_CUDA_GEMV_WPR=4 TELA_CUDA_GEMV_FX=8:1:8 TELA_CUDA_GEMV_FX=16:4:4 TELA_CUDA_GEMV_QROWS=4 TELA_CUDA_GEMV=1 TELA_CUDA_GEMV_QROWS=1 TELA_CUDA_GEMV_QROWS=2 TELA_CUDA_GEMV_ROWS=0 TELA_CUDA_GEMV_ROWS=1 TELA_CUDA_GEMV_ROWS=2 TELA_CUDA_GEMV_ROWS=4 TELA_CUDA_ATTN_SHORT=4096 TELA_CUDA_ATTN=1 TELA_CUDA_ATTN=2 TELA_CUDA_GEMV_DEPTH=1 TELA_CUDA_GEMV_DEPTH=2 TELA_CUDA_GEMV_SPLIT=1 TELA_CUDA_GEMV_SPLIT=2 TELA_CUDA_FLOAT_GEMM_BYTES=0 TELA_CUDA_GEMV_FM=0 TELA_CUDA_GEMV_FM=1 TELA_CUDA_FM_SLICES=8 TELA_CUDA_FM_RB=1 TELA_CUDA_NORM_ROPE=0 TELA_CUDA_GEMV_SPLIT_SW=1 TELA_CUDA_GEMV_SPLIT_WAVES=1 TELA_CUDA_GEMV_D4=0 TELA_CUDA_GEMV_D4=2 TELA_CUDA_GEMV_PERSIST=1"
case "${TELA_GPU_VARIANTS:-1}" in 0) variants="" ;; 1) ;; *) variants=$TELA_GPU_VARIANTS ;; esac
# VJOBS of them at once (default: half the cores; the tests spend most of
# their time in the host's float64 references)
run_variant() { # one variant: its summary line into /tmp/tela-ops-$1.note
    # shellcheck disable=SC2046 # the variant's settings, one word each
    if env $(echo "$1" | tr , ' ') TELA_SOURCE_DIR=$PWD ./build-cuda/tests/test_cuda_ops > "/tmp/tela-ops-$1.log" 2>&1; then r=ok
    else r=FAILED; fi
    echo "test_cuda_ops $1: $r ($(grep -E '^[0-9]+ passed, [0-9]+ failed' "/tmp/tela-ops-$1.log" | tail -1))" > "/tmp/tela-ops-$1.note"
}
export -f run_variant
[ -n "$variants" ] && printf '%s\n' $variants | xargs -r -P "${VJOBS:-$(( (JOBS + 1) / 2 ))}" -I{} bash -c 'run_variant "$1"' _ {}
for v in $variants; do
    grep -q ": ok" "/tmp/tela-ops-$v.note" 2>/dev/null || grep -E "FAIL|failed" "/tmp/tela-ops-$v.log" | head -5
    note "$(cat "/tmp/tela-ops-$v.note" 2>/dev/null || echo "test_cuda_ops $v: no result")"
done
[ "${TELA_CPU_TESTS:-1}" = 0 ] || (cd build-cuda && TELA_DEVICE=cpu ctest -j "$JOBS" -E '^test_cuda' 2>&1 | tee /tmp/tela-ctest-cpu.log | tail -5)
[ "${TELA_CPU_TESTS:-1}" = 0 ] || grep -hE 'FAIL|failed:|CHECK failed|Error' build-cuda/Testing/Temporary/LastTest.log | head -20
[ "${TELA_CPU_TESTS:-1}" = 0 ] || note "other tests (CPU): $(grep -E 'tests passed|tests failed' /tmp/tela-ctest-cpu.log | tail -1)"

if [ "${TELA_MEMCHECK:-1}" != 0 ] && command -v compute-sanitizer >/dev/null; then
    export TELA_SOURCE_DIR=$PWD TELA_BIN=$PWD/build-cuda/bin/tela TELA_SHARED_DIR=${TELA_SHARED_DIR:-$PWD/../shared}
    for t in test_cuda_ops test_cuda_gdn ${TELA_MEMCHECK_MORE:-}; do
        if compute-sanitizer --tool memcheck --error-exitcode 99 ./build-cuda/tests/$t > /tmp/tela-memcheck-$t.log 2>&1; then
            note "memcheck $t: clean ($(grep -E 'ERROR SUMMARY' /tmp/tela-memcheck-$t.log | tail -1))"
        else
            grep -E "ERROR SUMMARY|Invalid|at 0x|by thread" /tmp/tela-memcheck-$t.log | head -20
            note "memcheck $t: FAILED ($(grep -E 'ERROR SUMMARY' /tmp/tela-memcheck-$t.log | tail -1))"
        fi
    done
fi

if [ "$part" != 2 ]; then
# tela chat on the GPU (llama-d1 and qwen35-d1 from ../shared): turn 2 reuses
# turn 1's state and replies as a full evaluation does (exact mode, where
# the two orders of work agree to rounding)
if TELA_DEVICE=cuda TELA_EXACT_MATMUL=1 TELA_BIN=$PWD/build-cuda/bin/tela TELA_SOURCE_DIR=$PWD \
    TELA_SHARED_DIR=${TELA_SHARED_DIR:-$PWD/../shared} bash tests/cli_chat.sh > /tmp/tela-chat-cuda.log 2>&1; then r=ok
else r="rc $?"; grep -E "FAIL|SKIP" /tmp/tela-chat-cuda.log | head -10; fi
note "cli_chat.sh on cuda (exact): $r ($(grep -c '^ok' /tmp/tela-chat-cuda.log) ok, $(grep -c '^FAIL' /tmp/tela-chat-cuda.log) failed)"

for dev in cpu cuda; do
    out=$(TELA_DEVICE=$dev ./build-cuda/bin/tela run -p "And God said" -n 24 --temp 0 2>/tmp/tela-run-$dev.log)
    note "tela run --device $dev: $(echo "$out" | tr '\n' ' ' | cut -c1-100)"
done
fi

echo
echo "==== test-gpu.sh summary ===="
for l in "${summary[@]}"; do echo "$l"; done
