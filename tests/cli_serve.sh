#!/usr/bin/env bash
# cli_serve.sh: tela serve's API end to end on the demo model, through the
# official openai npm client (pinned in tests/server/package.json, installed
# by scripts/fetch-test-data.sh) and plain HTTP: tests/server/api.test.cjs
# (chat and completions against tela run's greedy output, streaming, stop
# strings, seeds, n, logprobs, usage, errors, 8 concurrent streams and
# determinism), tests/server/lifecycle.test.cjs (API key, queue full,
# SIGTERM with a stream under way) and tests/server/spec.test.cjs (--spec
# ngram, --spec mtp, --draft: plain greedy text, seeded sampling as tela
# run --spec's, usage and metrics of the drafts; --tensor-parallel 2 with
# prompt lookup and with MTP on the hybrid demo: the whole model's greedy
# text). Skips (77) without node or the package.
set -u
SRC=${TELA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
. "$SRC/tests/server/env.sh"
cd "$SRC/tests/server" && exec node --test api.test.cjs lifecycle.test.cjs spec.test.cjs
