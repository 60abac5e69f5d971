#!/usr/bin/env bash
# prepare_data.sh: builds the training text of the demo model from the King
# James Version of the Bible as Debian packages it (bible-kjv-text holds the
# compressed text, bible-kjv the program that reads it; the KJV text is in the
# public domain). Deterministic: the same packages give byte-identical files.
#
#   tools/train/prepare_data.sh [OUTDIR]        (default: .train-data)
#
# Writes, in OUTDIR:
#   kjv.txt      the whole text: per chapter a heading line ("Genesis 1"), a
#                blank line, one verse per line (verse numbers dropped), a
#                blank line
#   train.txt    the chapters used for training (90%)
#   valid.txt    every 20th chapter from the 1st (5%): picks the checkpoint
#   heldout.txt  every 20th chapter from the 11th (5%): never seen in
#                training; the perplexity figures are measured on it
#   heldout-excerpt.txt  the first ~6 KB of heldout.txt (whole lines), the
#                test text of tests/cli_demo.sh
set -euo pipefail
out=${1:-.train-data}
export LC_ALL=C
if ! command -v bible >/dev/null 2>&1 || [ ! -f /usr/lib/bible.data ]; then
    echo "prepare_data.sh: needs the KJV text: apt-get install -y bible-kjv bible-kjv-text" >&2
    exit 1
fi
mkdir -p "$out"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
# -l with a huge width: one verse per line, no wrapping
bible -l1000000 "Gen1:1-Rev22:21" >"$raw"

# Heading lines start in column 0, verse lines with spaces and the verse number.
awk -v out="$out" '
    function flush() {
        if (head == "") return
        block = head "\n\n" body "\n"
        printf "%s", block > (out "/kjv.txt")
        k = nchap % 20
        f = (k == 0) ? "/valid.txt" : (k == 10) ? "/heldout.txt" : "/train.txt"
        printf "%s", block > (out f)
        nchap++
        head = ""; body = ""
    }
    /^$/ { next }
    /^ +[0-9]+ / { sub(/^ +[0-9]+ /, ""); body = body $0 "\n"; nverse++; next }
    { flush(); head = $0 }
    END {
        flush()
        if (nchap != 1189 || nverse != 31102) {
            printf "prepare_data.sh: expected 1189 chapters and 31102 verses, got %d and %d\n", nchap, nverse > "/dev/stderr"
            exit 1
        }
    }' "$raw"

# the test excerpt: whole lines of heldout.txt up to 6000 bytes
awk '{ n += length($0) + 1; if (n > 6000) exit; print }' "$out/heldout.txt" >"$out/heldout-excerpt.txt"

for f in kjv train valid heldout heldout-excerpt; do
    printf '%-22s %9d bytes  %s\n' "$f.txt" "$(wc -c <"$out/$f.txt")" "$(sha256sum "$out/$f.txt" | cut -c1-16)"
done
