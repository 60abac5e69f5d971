#!/usr/bin/env bash
# setup.sh: installs the Debian packages tela builds with (when run as root
# or with sudo available), then configures and builds build/ (Release).
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="build-essential cmake ninja-build pkg-config clang libpcre2-dev libutf8proc-dev libcjson-dev libedit-dev libmicrohttpd-dev"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build
