#!/usr/bin/env bash
# fetch-gpu-deps.sh: saves the Debian packages tela's build needs (PCRE2,
# utf8proc, cJSON, pkgconf, libmicrohttpd for tela serve) into .devdeps/ (git-ignored through
# .git/info/exclude), for a GPU machine that reaches no registry:
# scripts/gpu-env.sh unpacks them there. Name .devdeps in the device
# tool's carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .devdeps
grep -qx '/.devdeps/' .git/info/exclude 2>/dev/null || echo '/.devdeps/' >> .git/info/exclude
cd .devdeps
apt-get download libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev \
    libutf8proc2 libcjson-dev libcjson1 pkgconf pkgconf-bin libpkgconf3 libmicrohttpd-dev libmicrohttpd12
ls -la
