#!/usr/bin/env bash
# cli_serve_robust.sh: tela serve against malformed requests and clients
# that hang up (tests/server/robust.test.cjs: raw sockets, no npm package
# needed); fewer iterations in the sanitizer build. Skips (77) without node.
set -u
SRC=${TELA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
TELA_SERVE_NEED_OPENAI=0
. "$SRC/tests/server/env.sh"
cd "$SRC/tests/server" && exec node --test robust.test.cjs
