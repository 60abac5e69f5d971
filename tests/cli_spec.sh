#!/usr/bin/env bash
# cli_spec.sh: speculative decoding as a user drives it, on the shipped KJV
# models: 'tela run --spec ngram' and '--draft tela-kjv-q8_0.gguf' print the
# same greedy ids as plain 'tela run' and report the acceptance on the
# timing line, as does '--spec mtp' on the Qwen3.5 hybrid demo, also with a
# draft vocabulary (--draft-vocab; a model without an MTP block is refused); a draft of another vocabulary,
# --draft-max out of range and
# conflicting options fail with messages; 'tela bench --spec' reports its
# table; --help documents the options. On the CPU (--device cpu): the
# exactness checked is the CPU's.
set -u
TELA=${TELA_BIN:?TELA_BIN is not set}
SRC=${TELA_SOURCE_DIR:?TELA_SOURCE_DIR is not set}
M=$SRC/models/tela-kjv-f16.gguf
D=$SRC/models/tela-kjv-q8_0.gguf
[ -f "$M" ] && [ -f "$D" ] || { echo "SKIP: no models/tela-kjv-*.gguf"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
P="And God said, Let there be light: and there was light. And God saw the light, that it was good"

"$TELA" run --device cpu -m "$M" -p "$P" -n 24 --temp 0 -t 2 --print-ids >"$tmp/plain" 2>"$tmp/plain.err" || bad "plain run: $(cat "$tmp/plain.err")"
for opts in "--spec ngram --draft-max 3" "--spec ngram --draft-max 1 --spec-ngram-min 1 --spec-ngram-max 2" \
            "--draft $D --draft-max 4" "--spec draft --draft $D --draft-max 2"; do
    # shellcheck disable=SC2086
    if "$TELA" run --device cpu -m "$M" -p "$P" -n 24 --temp 0 -t 2 --print-ids $opts >"$tmp/spec" 2>"$tmp/spec.err"; then
        cmp -s "$tmp/plain" "$tmp/spec" && ok "run $opts: the plain greedy ids" || bad "run $opts: ids differ"
        grep -Eq "speculative: [0-9]+ of [0-9]+ drafts accepted \([0-9.]+%\), [0-9.]+ tokens per verification step" "$tmp/spec.err" &&
            ok "run $opts: timing line" || bad "run $opts: timing line: $(tail -1 "$tmp/spec.err")"
    else
        bad "run $opts failed: $(cat "$tmp/spec.err")"
    fi
done

# errors: exit status 1 (load/check) or 2 (options), with a message naming the problem
"$TELA" run --device cpu -m "$M" -p "$P" -n 4 --draft "$SRC/tests/fixtures/llama/llama-gqa-f32.gguf" >/dev/null 2>"$tmp/e1"
[ $? -eq 1 ] && grep -q "same vocabulary" "$tmp/e1" && ok "a draft of another vocabulary is refused" || bad "vocab mismatch: $(cat "$tmp/e1")"
"$TELA" run --device cpu -m "$M" -p "$P" -n 4 --spec ngram --draft-max 16 >/dev/null 2>"$tmp/e2"
[ $? -eq 2 ] && grep -q "draft-max" "$tmp/e2" && ok "--draft-max 16 is refused" || bad "--draft-max 16: $(cat "$tmp/e2")"
"$TELA" run --device cpu -m "$M" -p "$P" -n 4 --spec draft >/dev/null 2>"$tmp/e3"
[ $? -eq 2 ] && grep -q "needs the draft model" "$tmp/e3" && ok "--spec draft without --draft" || bad "--spec draft: $(cat "$tmp/e3")"
"$TELA" run --device cpu -m "$M" -p "$P" -n 4 --spec ngram --draft "$D" >/dev/null 2>"$tmp/e4"
[ $? -eq 2 ] && grep -q "goes with --spec draft" "$tmp/e4" && ok "--draft with --spec ngram" || bad "--draft + ngram: $(cat "$tmp/e4")"
"$TELA" run --device cpu -m "$M" -p "$P" -n 4 --spec bogus >/dev/null 2>"$tmp/e5"
[ $? -eq 2 ] && grep -q "not ngram, draft, mtp or none" "$tmp/e5" && ok "--spec bogus" || bad "--spec bogus: $(cat "$tmp/e5")"

# MTP: the hybrid demo's own block (its drafts accepted), and a model without one
H=$SRC/models/tela-kjv-qwen35-f16.gguf
if [ -f "$H" ]; then
    "$TELA" run --device cpu -m "$H" -p "$P" -n 32 --temp 0 -t 2 --print-ids >"$tmp/hplain" 2>/dev/null || bad "hybrid plain run"
    if "$TELA" run --device cpu -m "$H" -p "$P" -n 32 --temp 0 -t 2 --print-ids --spec mtp --draft-max 2 >"$tmp/hspec" \
        2>"$tmp/hspec.err"; then
        cmp -s "$tmp/hplain" "$tmp/hspec" && ok "run --spec mtp: the plain greedy ids" || bad "run --spec mtp: ids differ"
        grep -Eq "speculative: [1-9][0-9]* of [0-9]+ drafts accepted" "$tmp/hspec.err" && ok "run --spec mtp: drafts accepted" ||
            bad "run --spec mtp: timing line: $(tail -1 "$tmp/hspec.err")"
    else
        bad "run --spec mtp failed: $(cat "$tmp/hspec.err")"
    fi
    # a draft vocabulary of a quarter of the ids: the same output, drafts accepted
    if "$TELA" run --device cpu -m "$H" -p "$P" -n 32 --temp 0 -t 2 --print-ids --spec mtp --draft-max 2 \
        --draft-vocab 1024 >"$tmp/hvoc" 2>"$tmp/hvoc.err"; then
        cmp -s "$tmp/hplain" "$tmp/hvoc" && ok "run --spec mtp --draft-vocab 1024: the plain greedy ids" ||
            bad "run --draft-vocab 1024: ids differ"
        grep -Eq "speculative: [1-9][0-9]* of [0-9]+ drafts accepted" "$tmp/hvoc.err" &&
            ok "run --draft-vocab 1024: drafts accepted" || bad "run --draft-vocab: timing line: $(tail -1 "$tmp/hvoc.err")"
    else
        bad "run --spec mtp --draft-vocab 1024 failed: $(cat "$tmp/hvoc.err")"
    fi
    "$TELA" run --device cpu -m "$H" -p "$P" -n 4 --spec mtp --draft-vocab x >/dev/null 2>"$tmp/e7"
    [ $? -eq 2 ] && grep -q "draft-vocab" "$tmp/e7" && ok "--draft-vocab x is refused" || bad "--draft-vocab x: $(cat "$tmp/e7")"
    "$TELA" bench --device cpu -m "$H" -p 0 -n 16 -r 1 -t 2 --spec mtp --draft-max 2 >"$tmp/hbench" 2>&1 &&
        grep -Eq "^\| tg16 mtp k=2 +\| +[0-9.]+ \| +[0-9.]+% \| +[0-9.]+ \| +[0-9.]+ \| +yes" "$tmp/hbench" &&
        ok "bench --spec mtp" || bad "bench --spec mtp: $(cat "$tmp/hbench")"
fi
"$TELA" run --device cpu -m "$M" -p "$P" -n 4 --spec mtp >/dev/null 2>"$tmp/e6"
[ $? -eq 1 ] && grep -q "multi-token-prediction block" "$tmp/e6" && ok "--spec mtp on a Llama is refused" || bad "--spec mtp on a Llama: $(cat "$tmp/e6")"

# bench
if "$TELA" bench --device cpu -m "$M" -p 0 -n 16 -r 1 -t 2 --draft "$D" --draft-max 1,2 >"$tmp/bench" 2>"$tmp/bench.err"; then
    grep -Eq "^\| tg16 draft k=2 +\| +[0-9.]+ \| +[0-9.]+% \| +[0-9.]+ \| +[0-9.]+ \| +yes" "$tmp/bench" &&
        ok "bench --draft: a row with acceptance and identical output" || bad "bench rows: $(cat "$tmp/bench")"
    grep -Eq "^\| +3 \| +[0-9.]+ \| +[0-9.]+ \|" "$tmp/bench" && ok "bench: verification cost rows" || bad "bench cost rows: $(cat "$tmp/bench")"
else
    bad "bench --draft failed: $(cat "$tmp/bench.err")"
fi
"$TELA" bench --device cpu -m "$M" -p 0 -n 8 -r 1 -t 2 --spec ngram --draft-max 2 --json >"$tmp/bj" 2>&1 &&
    grep -q '"acceptance": ' "$tmp/bj" && grep -q '"test": "verify 3"' "$tmp/bj" && ok "bench --json" || bad "bench --json: $(cat "$tmp/bj")"

for cmd in run chat bench; do
    "$TELA" $cmd --help | grep -q -- "--draft-max" && ok "$cmd --help documents --draft-max" || bad "$cmd --help"
    "$TELA" $cmd --help | grep -q -- "--draft-vocab" && ok "$cmd --help documents --draft-vocab" || bad "$cmd --help: --draft-vocab"
done
"$TELA" run --help | grep -q -- "--spec ngram|draft" && ok "run --help documents --spec" || bad "run --help: --spec"
exit $fail
