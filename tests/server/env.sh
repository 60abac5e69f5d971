# env.sh: sourced by the tests/cli_serve*.sh scripts: finds tela, node and
# the openai package (exiting 77, a skip, without them) and tells the node
# tests whether this is a sanitizer build (slower: fewer iterations, longer
# waits).
export TELA_BIN=${TELA_BIN:?TELA_BIN is not set}
export TELA_SOURCE_DIR=$SRC
if ! "$TELA_BIN" serve --help >/dev/null 2>&1; then
    echo "SKIP: this tela has no serve command (built with -DTELA_SERVER=OFF)"
    exit 77
fi
if ! command -v node >/dev/null; then
    echo "SKIP: no node (Debian: apt-get install nodejs npm; scripts/test.sh installs them)"
    exit 77
fi
export TELA_SERVER_NODE_MODULES=${TELA_SERVER_NODE_MODULES:-${TELA_TEST_DATA:-$SRC/build-data}/server/node_modules}
if [ "${TELA_SERVE_NEED_OPENAI:-1}" = 1 ] && [ ! -d "$TELA_SERVER_NODE_MODULES/openai" ]; then
    echo "SKIP: no openai package in $TELA_SERVER_NODE_MODULES (run scripts/fetch-test-data.sh)"
    exit 77
fi
export TELA_SERVE_SLOW=0
if [ -n "${TELA_BUILD_DIR:-}" ] && grep -q '^TELA_SANITIZE:BOOL=ON' "$TELA_BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
    export TELA_SERVE_SLOW=1
fi
