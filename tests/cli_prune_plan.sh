#!/usr/bin/env bash
# cli_prune_plan.sh: 'tela prune-plan' on the demo model with the held-out
# excerpt: the table (every layer once, cosines in [-1, 1], sorted, the
# plan's --skip-layers line), --json (parsed by Python: 8 layers, the plan
# the size asked for, the top-ranked layers), the warning past 20% of the
# layers, errors; and --skip-layers on run and perplexity (a layer that does
# not exist is an error naming it).
set -u
tela=${TELA_BIN:?TELA_BIN not set}
src=${TELA_SOURCE_DIR:?TELA_SOURCE_DIR not set}
M=$src/models/tela-kjv-q8_0.gguf
T=$src/tests/fixtures/demo/heldout-excerpt.txt
if [ ! -f "$M" ] || [ ! -f "$T" ]; then echo "SKIP: no demo model or text"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
export TELA_DEVICE=cpu

"$tela" prune-plan --help > "$tmp/help" 2>&1
check "--help" "grep -q 'usage: tela prune-plan' '$tmp/help'"
"$tela" prune-plan -m "$M" -f "$T" --prompts 12 --prune 2 > "$tmp/table" 2> "$tmp/err"
check "prune-plan runs" "[ $? -eq 0 ]"
check "eight rows, one per layer" "[ \$(grep -cE '^ +[0-9]+ +[0-7] +attention ' '$tmp/table') -eq 8 ]"
check "the plan line" "grep -qE '^plan for 2 removals \(2 attention, 0 Gated DeltaNet\): --skip-layers [0-7],[0-7]$' '$tmp/table'"
check "a warning at 2 of 8 (more than 20%)" "grep -q 'more than 20%' '$tmp/err'"
"$tela" prune-plan -m "$M" -f "$T" --prompts 4 --prune 1 > /dev/null 2> "$tmp/err"
check "no warning at 1 of 8" "[ \$? -eq 0 ] && ! grep -q warning '$tmp/err'"
"$tela" prune-plan -m "$M" -f "$T" --prompts 12 --prune 2 --json > "$tmp/json" 2>/dev/null
python3 - "$tmp/json" "$tmp/table" <<'PY' && echo "ok: json" || { echo "FAIL: json"; exit 1; }
import json, re, sys
o = json.load(open(sys.argv[1]))
assert o["n_layer"] == 8 and o["prompts"] == 12, o
layers = o["layers"]
assert sorted(l["layer"] for l in layers) == list(range(8)), layers
cos = [l["mean_cosine"] for l in layers]
assert cos == sorted(cos, reverse=True), cos
assert all(-1 <= c <= 1 for c in cos), cos
for l in layers:
    assert abs(l["importance"] - (1 - l["mean_cosine"])) < 1e-9, l
assert o["prune"] == 2 and len(o["skip_layers"]) == 2, o
assert sorted(o["skip_layers"]) == sorted(l["layer"] for l in layers[:2]), o
# the table shows the same plan
line = [l for l in open(sys.argv[2]) if l.startswith("plan for")][0]
assert line.strip().endswith(",".join(str(x) for x in o["skip_layers"])), line
PY
[ $? -eq 0 ] || fail=1
"$tela" prune-plan -m "$M" > /dev/null 2> "$tmp/err"
check "no calibration text is an error" "[ $? -eq 2 ] && grep -q 'CALIBRATION' '$tmp/err'"
"$tela" prune-plan -m "$M" -f "$T" --prune 9 > /dev/null 2> "$tmp/err"
check "more removals than layers is an error" "[ $? -ne 0 ] && grep -q 'only 8 layers' '$tmp/err'"

"$tela" run -m "$M" -p "And God said" -n 8 --temp 0 --skip-layers 4 > "$tmp/run" 2> "$tmp/err"
check "run --skip-layers" "[ $? -eq 0 ] && [ -s '$tmp/run' ]"
"$tela" run -m "$M" -p "And God said" -n 8 --skip-layers 8 > /dev/null 2> "$tmp/err"
check "a layer that does not exist is an error" "[ $? -ne 0 ] && grep -q 'cannot skip layer 8' '$tmp/err'"
"$tela" perplexity -m "$M" -f "$T" --skip-layers 3,4 > "$tmp/ppl" 2>&1
check "perplexity --skip-layers" "[ $? -eq 0 ] && grep -q 'Final estimate' '$tmp/ppl'"
exit $fail
