#!/usr/bin/env bash
# shared-parts.sh: takes ../shared's reference fixtures (the d1 models and
# transformers' logits, ~37 MB) to a lent GPU machine, whose calls carry at
# most 64 MiB with the tree (~57 MB): one xz tar cut into parts small
# enough to carry one a call; they gather on the warm machine.
#   scripts/shared-parts.sh pack      here: writes .shared-parts/1..N (each
#                                     with the whole file's sha256) and
#                                     prints the carry name of each part
#   scripts/shared-parts.sh unpack D  there: keeps the parts this call
#                                     carried in /tmp/tela-shared-parts;
#                                     once all have come, joins and checks
#                                     them and unpacks into D (then
#                                     TELA_SHARED_DIR=D); rc 1 before
# PART_BYTES sets a part's size (default 7,000,000). .shared-parts/ must
# be ignored (.git/info/exclude) so that only a call's carry takes it.
set -euo pipefail
cd "$(dirname "$0")/.."
P=.shared-parts
case "${1:-}" in
pack)
    src=${TELA_SHARED_DIR:-../shared}
    [ -f "$src/reference/fixtures/refs-d1.json" ] || { echo "shared-parts.sh: no $src/reference/fixtures/refs-d1.json" >&2; exit 1; }
    mkdir -p "$P"
    git check-ignore -q "$P/" || { echo "shared-parts.sh: $P/ is not ignored: add /$P/ to .git/info/exclude" >&2; exit 1; }
    rm -rf "$P" && mkdir -p "$P"
    (cd "$src" && tar -cf - reference/fixtures/refs-d1.json reference/fixtures/*-d1.gguf reference/fixtures/*-d1.logits.f32) |
        xz -6 -T0 > "$P/all.tar.xz"
    sum=$(sha256sum "$P/all.tar.xz" | cut -d' ' -f1)
    size=$(stat -c %s "$P/all.tar.xz")
    bytes=${PART_BYTES:-7000000}
    n=$(( (size + bytes - 1) / bytes ))
    for i in $(seq 1 "$n"); do
        mkdir -p "$P/$i"
        dd if="$P/all.tar.xz" of="$P/$i/part" iflag=skip_bytes,count_bytes skip=$(( (i - 1) * bytes )) count="$bytes" bs=1M status=none
        echo "$i $n $sum" > "$P/$i/of"
        echo "$P/$i"
    done
    rm "$P/all.tar.xz"
    ;;
unpack)
    dest=${2:?usage: shared-parts.sh unpack DIR}
    # the parts carried by this call and earlier ones gather outside the tree
    S=${TMPDIR:-/tmp}/tela-shared-parts
    mkdir -p "$S"
    for d in "$P"/*/; do [ -f "$d/part" ] && cp -r "$d" "$S/"; done 2>/dev/null || true
    P=$S
    [ -f "$P/1/of" ] || { echo "shared-parts.sh: no parts here" >&2; exit 1; }
    read -r _ n sum < "$P/1/of"
    for i in $(seq 1 "$n"); do
        [ -f "$P/$i/part" ] || { echo "shared-parts.sh: part $i of $n not here yet" >&2; exit 1; }
    done
    got=$(for i in $(seq 1 "$n"); do cat "$P/$i/part"; done | sha256sum | cut -d' ' -f1)
    [ "$got" = "$sum" ] || { echo "shared-parts.sh: the parts joined do not match (sha256 $got, want $sum)" >&2; exit 1; }
    mkdir -p "$dest"
    for i in $(seq 1 "$n"); do cat "$P/$i/part"; done |
        python3 -c "
import sys, tarfile
t = tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz')
if hasattr(tarfile, 'data_filter'):
    t.extractall(sys.argv[1], filter='data')
else:
    t.extractall(sys.argv[1])" "$dest"
    echo "shared-parts.sh: $n parts unpacked into $dest"
    ;;
*)
    echo "usage: scripts/shared-parts.sh pack | unpack DIR" >&2
    exit 2
    ;;
esac
