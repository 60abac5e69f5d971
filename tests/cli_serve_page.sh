#!/usr/bin/env bash
# cli_serve_page.sh: tela serve's chat page in headless Chromium
# (tests/server/page.test.cjs, DevTools protocol over a pipe). Skips (77)
# without node or chromium (Debian: apt-get install chromium).
set -u
SRC=${TELA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
TELA_SERVE_NEED_OPENAI=0
. "$SRC/tests/server/env.sh"
TELA_CHROMIUM=${TELA_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$TELA_CHROMIUM" ]; then
    echo "SKIP: no chromium"
    exit 77
fi
export TELA_CHROMIUM
cd "$SRC/tests/server" && exec node --test page.test.cjs
