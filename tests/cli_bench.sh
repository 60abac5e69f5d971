#!/usr/bin/env bash
# cli_bench.sh: 'tela bench' output format on the small Q8_0 fixture model
# (tests/fixtures/llama/llama-gqa-q8_0.gguf): the table names the machine,
# the build and both tests (pp8, tg4); --json prints one object per test
# with the fields llama-bench's JSON has (test, n_prompt, n_gen, avg_ts,
# stddev_ts, threads, model_type, model_size) and the values asked for;
# --tensor-parallel splits the F32 fixture over 2 ranks (and is refused,
# with the counts, where the KV heads do not split); -np gives its
# batched row, greedy and with --temp sampled; --help and bad options
# behave. Speed itself is not checked.
set -u
TELA=${TELA_BIN:?TELA_BIN is not set}
M=${TELA_SOURCE_DIR:?TELA_SOURCE_DIR is not set}/tests/fixtures/llama/llama-gqa-q8_0.gguf
if [ ! -f "$M" ]; then
    echo "SKIP: no $M"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

if "$TELA" bench -m "$M" -p 8 -n 4 -r 1 -t 2 >"$tmp/table.txt" 2>"$tmp/err.txt"; then
    grep -q '^cpu: .*isa: .*threads: 2$' "$tmp/table.txt" && ok "machine line" || bad "no machine line: $(cat "$tmp/table.txt")"
    grep -q '^build: tela ' "$tmp/table.txt" && ok "build line" || bad "no build line"
    grep -Eq '^\| +model +\| +size +\| +params +\| +test +\| +t/s +\|$' "$tmp/table.txt" && ok "table header" || bad "no table header"
    grep -Eq '\| +pp8 \| +[0-9.]+ ± [0-9.]+ \|$' "$tmp/table.txt" && ok "pp8 row" || bad "no pp8 row"
    grep -Eq '\| +tg4 \| +[0-9.]+ ± [0-9.]+ \|$' "$tmp/table.txt" && ok "tg4 row" || bad "no tg4 row"
else
    bad "tela bench failed: $(cat "$tmp/err.txt")"
fi

if "$TELA" bench -m "$M" -p 8 -n 4 -r 2 -t 1 --json >"$tmp/out.json" 2>"$tmp/err.txt"; then
    if python3 - "$tmp/out.json" "$M" <<'PY'
import json, os, sys
lines = open(sys.argv[1]).read().strip().splitlines()
assert len(lines) == 2, "expected 2 lines, got %d" % len(lines)
objs = [json.loads(l) for l in lines]
want = [("pp8", 8, 0), ("tg4", 0, 4)]
for o, (name, np_, ng) in zip(objs, want):
    assert o["test"] == name, o
    assert o["n_prompt"] == np_ and o["n_gen"] == ng, o
    assert o["threads"] == 1, o
    assert o["avg_ts"] > 0 and o["stddev_ts"] >= 0, o
    assert o["model_type"].startswith("llama"), o
    # weight bytes: less than the file, more than half of it for this model
    size = os.path.getsize(sys.argv[2])
    assert size / 2 < o["model_size"] <= size, (o["model_size"], size)
PY
    then ok "json lines"; else bad "json output: $(cat "$tmp/out.json")"; fi
else
    bad "tela bench --json failed: $(cat "$tmp/err.txt")"
fi

F32=${TELA_SOURCE_DIR}/tests/fixtures/llama/llama-gqa-f32.gguf
if "$TELA" bench -m "$F32" --tensor-parallel 2 -p 8 -n 4 -r 1 -t 2 --device cpu >"$tmp/tp.txt" 2>"$tmp/err.txt"; then
    grep -Eq '\| +tg4 \| +[0-9.]+ ± [0-9.]+ \|$' "$tmp/tp.txt" && ok "--tensor-parallel 2" || bad "no tg4 row with --tensor-parallel 2"
    grep -q '^tensor parallelism: 2 ranks' "$tmp/tp.txt" && ok "--tensor-parallel 2 said" || bad "no tensor parallelism line"
else
    bad "tela bench --tensor-parallel 2 failed: $(cat "$tmp/err.txt")"
fi
if "$TELA" bench -m "$F32" --tensor-parallel 3 -p 8 -n 4 -r 1 --device cpu >/dev/null 2>"$tmp/err.txt"; then
    bad "--tensor-parallel 3 accepted (2 KV heads)"
else
    grep -q '2 KV heads do not split over 3 ranks' "$tmp/err.txt" && ok "--tensor-parallel 3 refused" || bad "--tensor-parallel 3 message: $(cat "$tmp/err.txt")"
fi

# the batched rows, greedy and sampled (--temp: drawn on the host)
for temp in 0 0.8; do
    want="tg4 x 2"; [ "$temp" = 0 ] || want="tg4 x 2, temp $temp"
    if "$TELA" bench -m "$M" -p 0 -n 4 -np 2 --temp "$temp" -r 1 -t 2 >"$tmp/np.txt" 2>"$tmp/err.txt"; then
        grep -Eq "\| +$want \| +[0-9.]+ ± [0-9.]+ \|\$" "$tmp/np.txt" && ok "$want row" || bad "no $want row: $(cat "$tmp/np.txt")"
    else
        bad "tela bench -np 2 --temp $temp failed: $(cat "$tmp/err.txt")"
    fi
done
if "$TELA" bench -m "$M" -np 2 --temp -1 2>"$tmp/err.txt"; then bad "--temp -1 accepted"; else
    grep -q 'out of range' "$tmp/err.txt" && ok "--temp -1 rejected" || bad "--temp -1 message: $(cat "$tmp/err.txt")"; fi

"$TELA" bench --help | grep -q 'usage: tela bench' && ok "--help" || bad "--help"
if "$TELA" bench -m "$M" -p x 2>"$tmp/err.txt"; then bad "-p x accepted"; else ok "-p x rejected"; fi
if "$TELA" bench 2>"$tmp/err.txt"; then bad "no model accepted"; else grep -q 'no model' "$tmp/err.txt" && ok "no model" || bad "no model message"; fi
if "$TELA" bench -m /nonexistent.gguf -p 8 -n 0 -r 1 2>"$tmp/err.txt"; then bad "missing file accepted"; else ok "missing file rejected"; fi
exit $fail
