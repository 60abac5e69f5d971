#!/usr/bin/env bash
# serve-bench-gpu.sh: tela serve on the GPU under the conditions of
# ANCHORS.md's llama-server table: random-weight F16 files at the
# Llama-3.2-1B and Qwen3.5-2B shapes with their real tokenizers, streamed
# /v1/completions of 200-word prompts and 256 tokens (tela-loadgen -p 200
# -n 256 --ignore-eos), 1, 16 and 64 streams, greedy and with --temp 1.
# The tokenizers come from vocabulary-only GGUF files, xz-compressed, in
# .shared/vocab/ (made where ../shared is: python3
# tools/vocab/gguf_vocab_only.py ../shared/reference/fixtures/llama-d1.gguf
# .shared/vocab/llama3-vocab.gguf, the same for qwen35-d1 as
# qwen35-vocab.gguf, then xz -9; carry .shared). Needs build-cuda/ (made
# by scripts/test-gpu.sh). SERVE_QWEN=0 skips the hybrid.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
B=./build-cuda/bin
D=${TELA_MODELS:-/tmp/tela-models}
mkdir -p "$D"
vocab() { # name: the vocabulary-only file, unpacked
    [ -f "$D/$1-vocab.gguf" ] || python3 -c "import lzma,sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())" \
        ".shared/vocab/$1-vocab.gguf.xz" > "$D/$1-vocab.gguf"
}
serve() { # file port
    "$B/tela" serve -m "$1" --port "$2" --parallel 64 -c 1024 > "${OUT:-/tmp}/serve-$2.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 1 240); do grep -q listening "${OUT:-/tmp}/serve-$2.log" && return 0; sleep 0.5; done
    echo "serve-bench-gpu.sh: tela serve did not start:" >&2
    cat "${OUT:-/tmp}/serve-$2.log" >&2
    return 1
}
load() { # port, then tela-loadgen arguments
    local port=$1
    shift
    echo "-- $*"
    "$B/tela-loadgen" --port "$port" -r 1 -n 256 -p 200 --ignore-eos "$@" | tail -1
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader 2>/dev/null
vocab llama3
[ -f "$D/l1b-f16v.gguf" ] || "$B/tela-mkmodel" llama-3.2-1b --vocab-from "$D/llama3-vocab.gguf" -o "$D/l1b-f16v.gguf" -q
if serve "$D/l1b-f16v.gguf" 8090; then
    for c in 1 1 16 64 64; do load 8090 -c "$c"; done
    for c in 1 64 64; do load 8090 -c "$c" --temp 1; done
    kill -TERM "$SERVER"
    wait "$SERVER"
fi
if [ "${SERVE_QWEN:-1}" = 1 ]; then
    vocab qwen35
    [ -f "$D/q35-2b-f16v.gguf" ] || "$B/tela-mkmodel" qwen3.5-2b --vocab-from "$D/qwen35-vocab.gguf" -o "$D/q35-2b-f16v.gguf" -q
    if serve "$D/q35-2b-f16v.gguf" 8091; then
        for c in 1 1 64 64; do load 8091 -c "$c"; done
        for c in 64 64; do load 8091 -c "$c" --temp 1; done
        kill -TERM "$SERVER"
        wait "$SERVER"
    fi
fi
