#!/usr/bin/env bash
# cli_chat.sh: 'tela chat' driven through a pipe, and 'tela run --chat', on
# the shared reference models llama-d1 (Llama 3 template and tokenizer) and
# qwen35-d1 (Qwen3 template; hybrid recurrent model, so reuse goes through
# snapshots). Weights are random, so replies are gibberish, but greedy
# replies are deterministic and the mechanics are checkable:
#  - each turn's rendering (--show-prompt) is the template's format written
#    out by hand here (Llama 3 trims the reply; Qwen3 keeps it);
#  - turn 2 reuses turn 1's state (reused > 0) and evaluates exactly the
#    rest: new + reused == the token count 'tela run' reports for the whole
#    rendered conversation, evaluated from scratch;
#  - turn 2's greedy reply equals 'tela run' on that rendered conversation
#    (so reuse changes nothing), turn 1's equals 'tela run --chat', and the
#    turn after /reset equals turn 1; --no-reuse gives the same output;
#  - /exit stops reading; a full context is reported with a /reset hint and
#    the chat goes on; --template-file replaces the template; errors.
# Skips (77) without ../shared (a model missing there is skipped alone).
set -u
TELA=${TELA_BIN:?TELA_BIN is not set}
FIX=${TELA_SHARED_DIR:-/nonexistent}/reference/fixtures
SRC=${TELA_SOURCE_DIR:-$(dirname "$0")/..}
models=""
for model in llama-d1 qwen35-d1; do [ -f "$FIX/$model.gguf" ] && models="$models $model"; done
if [ -z "$models" ]; then
    echo "SKIP: no ../shared/reference/fixtures"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

SYS="You answer briefly."
U1="Hello, who are you?"
U2="Tell me a story about a cat."

for model in $models; do
    M="$FIX/$model.gguf"
    common=(-m "$M" --system "$SYS" -n 16 --temp 0 -t 1)
    # turn 1 alone gives reply 1 (all of stdout but the final newline)
    printf '%s\n' "$U1" | "$TELA" chat "${common[@]}" >"$tmp/r1.out" 2>"$tmp/r1.err" ||
        bad "$model: chat, one turn: $(tail -3 "$tmp/r1.err")"
    # two turns, /reset, turn 1 again, /exit, a line that must not be read
    printf '%s\n%s\n/reset\n%s\n/exit\n%s\n' "$U1" "$U2" "$U1" "never read" |
        "$TELA" chat "${common[@]}" --show-prompt >"$tmp/chat.out" 2>"$tmp/chat.err" ||
        bad "$model: chat: $(tail -3 "$tmp/chat.err")"
    printf '%s\n%s\n/reset\n%s\n/exit\n' "$U1" "$U2" "$U1" |
        "$TELA" chat "${common[@]}" --no-reuse >"$tmp/noreuse.out" 2>"$tmp/noreuse.err" ||
        bad "$model: chat --no-reuse: $(tail -3 "$tmp/noreuse.err")"
    "$TELA" run --chat "${common[@]}" -p "$U1" >"$tmp/runchat.out" 2>"$tmp/runchat.err" ||
        bad "$model: run --chat: $(tail -3 "$tmp/runchat.err")"
    # The rest needs the rendered conversation: python builds it by hand and
    # runs 'tela run' on it.
    if python3 - "$TELA" "$M" "$model" "$tmp" "$SYS" "$U1" "$U2" <<'EOF'
import re, subprocess, sys
tela, model_path, model, tmp, sys_msg, u1, u2 = sys.argv[1:8]
llama = model.startswith('llama')
def read(name):
    return open(tmp + '/' + name, encoding='utf-8', errors='surrogateescape', newline='').read()
def render(turns):  # turns: [(user, reply or None)], last reply None
    if llama:
        s = '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n' + sys_msg + '<|eot_id|>'
        for u, a in turns:
            s += '<|start_header_id|>user<|end_header_id|>\n\n' + u + '<|eot_id|>'
            s += '<|start_header_id|>assistant<|end_header_id|>\n\n'
            if a is not None:
                s += a.strip() + '<|eot_id|>'
    else:
        s = '<|im_start|>system\n' + sys_msg + '<|im_end|>\n'
        for u, a in turns:
            s += '<|im_start|>user\n' + u + '<|im_end|>\n<|im_start|>assistant\n'
            if a is not None:
                s += a + '<|im_end|>\n'
    return s
problems = []
def check(cond, what):
    if not cond:
        problems.append(what)

r1 = read('r1.out')
check(r1.endswith('\n') and len(r1) > 1, 'reply 1 is empty')
r1 = r1[:-1]
timing = re.compile(r'^\[prompt: (\d+) new tokens \((\d+) reused\) in [0-9.]+ s \| reply: (\d+) tokens in [0-9.]+ s, [0-9.]+ tok/s\]$', re.M)
err = read('chat.err')
t = [tuple(map(int, m)) for m in timing.findall(err)]
tn = [tuple(map(int, m)) for m in timing.findall(read('noreuse.err'))]
check(len(t) == 3, 'expected 3 timing lines, got %d:\n%s' % (len(t), err))
check(len(tn) == 3, 'expected 3 timing lines with --no-reuse, got %d' % len(tn))
check('never read' not in err and 'never read' not in read('chat.out'), 'a line after /exit was read')
shown = re.findall(r'\[rendered conversation: (\d+) tokens, (\d+) of them reused\]\n(.*?)\[end of rendered conversation\]\n', err, re.S)
check(len(shown) == 3, 'expected 3 renderings from --show-prompt, got %d' % len(shown))
if len(t) == 3 and len(tn) == 3 and len(shown) == 3:
    want1, want2 = render([(u1, None)]), render([(u1, r1), (u2, None)])
    check(shown[0][2] == want1, 'turn 1 rendered as %r, expected %r' % (shown[0][2], want1))
    check(shown[1][2] == want2, 'turn 2 rendered as %r, expected %r' % (shown[1][2], want2))
    check(shown[2][2] == want1, 'the turn after /reset rendered as %r' % shown[2][2])
    # from scratch: tela run on the whole rendered text (BOS is in the text)
    run = subprocess.run([tela, 'run', '-m', model_path, '-p', want2, '--no-bos', '-n', '16', '--temp', '0', '-t', '1'],
                         capture_output=True)
    check(run.returncode == 0, 'tela run on the rendering failed: %r' % run.stderr[-300:])
    m = re.search(rb'prompt: (\d+) tokens', run.stderr)
    full2 = int(m.group(1)) if m else -1
    r2 = run.stdout.decode('utf-8', 'surrogateescape')[:-1]
    new1, reused1, _ = t[0]
    new2, reused2, _ = t[1]
    check(reused1 == 0, 'turn 1 reused %d tokens' % reused1)
    check(reused2 > 0 and reused2 >= new1, 'turn 2 reused %d tokens (turn 1 evaluated %d)' % (reused2, new1))
    check(new2 + reused2 == full2, 'turn 2: %d new + %d reused, but the whole rendering is %d tokens' % (new2, reused2, full2))
    check(int(shown[1][0]) == full2 and int(shown[1][1]) == reused2, 'turn 2 --show-prompt counts %r' % (shown[1][:2],))
    check(all(x[1] == 0 for x in tn), '--no-reuse reused tokens: %r' % tn)
    check(tn[1][0] == full2, '--no-reuse turn 2 evaluated %d tokens, the rendering is %d' % (tn[1][0], full2))
    check(t[2][0] + t[2][1] == new1, 'after /reset: %r, turn 1 was %d tokens' % (t[2], new1))
    want_out = r1 + '\n' + r2 + '\n' + r1 + '\n'
    check(read('chat.out') == want_out, 'chat output %r\nexpected (reply 2 from tela run on the rendering) %r' % (read('chat.out'), want_out))
    check(read('noreuse.out') == want_out, '--no-reuse output differs: %r' % read('noreuse.out'))
    check(read('runchat.out') == r1 + '\n', 'run --chat gave %r, chat turn 1 %r' % (read('runchat.out'), r1))
    m = re.search(r'prompt: (\d+) tokens', read('runchat.err'))
    check(m is not None and int(m.group(1)) == new1, 'run --chat prompt tokens: %s' % read('runchat.err')[-200:])
for p in problems:
    print('  ' + p)
sys.exit(1 if problems else 0)
EOF
    then ok "$model: two turns with reuse, /reset, /exit: renderings, counts and replies"; else bad "$model: chat"; fi
done

set -- $models
M="$FIX/$1.gguf" # llama-d1 when there
# a context that fills up: reported with a hint, and /reset recovers
printf 'first message\nsecond message that is a bit longer\nthird\n/reset\nagain\n' |
    "$TELA" chat -m "$M" -c 48 -n 12 --temp 0 -t 1 >"$tmp/full.out" 2>"$tmp/full.err"
rc=$?
if [ $rc -eq 0 ] && grep -q "no longer fits in the context" "$tmp/full.err" && grep -q "/reset" "$tmp/full.err" &&
   [ "$(grep -c '^\[prompt: ' "$tmp/full.err")" -ge 2 ] &&
   tail -1 "$tmp/full.err" | grep -q '^\[prompt: .* (0 reused)'; then
    ok "a full context is reported with a /reset hint, and /reset recovers"
else
    bad "full context (rc $rc): $(grep -v '^  ' "$tmp/full.err" | tail -5)"
fi

# --template-file replaces the model's template (ChatML here)
printf 'hi\n' | "$TELA" chat -m "$M" --template-file "$SRC/tests/fixtures/chat/chatml.jinja" --system "S" -n 2 \
    --temp 0 -t 1 --show-prompt >/dev/null 2>"$tmp/tf.err"
if python3 - "$tmp/tf.err" <<'EOF'
import sys
err = open(sys.argv[1], encoding='utf-8', errors='replace').read()
want = '<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n'
sys.exit(0 if '\n' + want + '[end of rendered conversation]' in err else 1)
EOF
then ok "--template-file"; else bad "--template-file: $(tail -5 "$tmp/tf.err")"; fi
"$TELA" run --chat -m "$M" --template-file "$SRC/tests/fixtures/chat/chatml.jinja" -p hi -n 4 --temp 0 -t 1 --print-ids \
    >"$tmp/tf1.ids" 2>/dev/null
"$TELA" run -m "$M" -p $'<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n' -n 4 --temp 0 -t 1 --print-ids \
    >"$tmp/tf2.ids" 2>/dev/null
# the ChatML text has no BOS, and Llama 3's tokenizer adds one: both ways
[ -s "$tmp/tf1.ids" ] && cmp -s "$tmp/tf1.ids" "$tmp/tf2.ids" && ok "run --chat --template-file == run on the rendered text" ||
    bad "run --chat --template-file: $(cat "$tmp/tf1.ids") vs $(cat "$tmp/tf2.ids")"

# commands, help and errors
printf '/help\n/bogus\n/exit\n' | "$TELA" chat -m "$M" -t 1 >"$tmp/cmd.out" 2>"$tmp/cmd.err"
grep -q "/reset" "$tmp/cmd.err" && grep -q "unknown command '/bogus'" "$tmp/cmd.err" && [ ! -s "$tmp/cmd.out" ] &&
    ok "/help and unknown commands" || bad "/help: $(cat "$tmp/cmd.err" | tail -3)"
"$TELA" chat --help | grep -q "usage: tela chat" && ok "chat --help" || bad "chat --help"
"$TELA" run --help | grep -q -- "--chat" && ok "run --help mentions --chat" || bad "run --help"
expect_error() { # description, expected stderr pattern, command...
    local what=$1 pat=$2; shift 2
    if "$@" </dev/null >"$tmp/out" 2>"$tmp/err"; then bad "$what: exit status 0"; return; fi
    grep -qi -- "$pat" "$tmp/err" && ok "$what" || bad "$what: stderr was: $(cat "$tmp/err")"
}
expect_error "chat with a bad option" "unknown option" "$TELA" chat -m "$M" --bogus
expect_error "chat on a model without a tokenizer" "no tokenizer" "$TELA" chat -m "$SRC/tests/fixtures/llama/llama-gqa-f32.gguf"
expect_error "chat with a missing template file" "cannot open" "$TELA" chat -m "$M" --template-file "$tmp/none.jinja"
expect_error "chat with a missing model" "no such file" "$TELA" chat -m "$tmp/none.gguf"
expect_error "chat -n 0" "positive" "$TELA" chat -m "$M" -n 0
expect_error "run --chat with --tokens" "--chat" "$TELA" run -m "$M" --chat --tokens 1,2
expect_error "--system without --chat" "--chat" "$TELA" run -m "$M" -p hi --system S
expect_error "no model and TELA_MODEL set empty" "-m MODEL" env TELA_MODEL= "$TELA" chat
expect_error "run: no model and TELA_MODEL set empty" "-m MODEL" env TELA_MODEL= "$TELA" run -p hi

# the default model: $TELA_MODEL
if TELA_MODEL="$M" "$TELA" run -p "hi" -n 2 --temp 0 -t 1 >"$tmp/def.out" 2>"$tmp/def.err" &&
   grep -q "using the default model $M" "$tmp/def.err"; then
    ok "run without -m uses \$TELA_MODEL and says so"
else
    bad "default model: $(tail -3 "$tmp/def.err")"
fi
printf 'hi\n' | TELA_MODEL="$M" "$TELA" chat -n 2 --temp 0 -t 1 >/dev/null 2>"$tmp/def2.err" &&
    grep -q "using the default model $M" "$tmp/def2.err" && ok "chat without -m uses \$TELA_MODEL" ||
    bad "chat default model: $(tail -3 "$tmp/def2.err")"

# the default model without $TELA_MODEL: models/ of the source tree the
# binary was built in (when this binary was built in one, as ctest's is)
DEMO="$SRC/models/tela-kjv-q8_0.gguf"
if [ -f "$DEMO" ] && [ "$(cd "$(dirname "$TELA")/../../models" 2>/dev/null && pwd -P)" = "$(cd "$SRC/models" && pwd -P)" ]; then
    if env -u TELA_MODEL "$TELA" run -p "In the beginning" -n 2 --temp 0 -t 1 >/dev/null 2>"$tmp/demo.err" &&
       grep -q "using the default model $(cd "$SRC/models" && pwd -P)/tela-kjv-q8_0.gguf" "$tmp/demo.err"; then
        ok "run without -m or \$TELA_MODEL uses models/tela-kjv-q8_0.gguf"
    else
        bad "default demo model: $(tail -3 "$tmp/demo.err")"
    fi
    # the demo model's ChatML template writes no BOS; its tokenizer adds one
    for flag in "" --no-reuse; do
        printf 'Who was Moses?\nWhat did he do?\n' |
            "$TELA" chat -m "$DEMO" -n 24 --temp 0 -t 1 $flag >"$tmp/d$flag.out" 2>"$tmp/d$flag.err"
    done
    if python3 - "$tmp" <<'EOF'
import re, sys
tmp = sys.argv[1]
timing = re.compile(r'^\[prompt: (\d+) new tokens \((\d+) reused\)', re.M)
a = [tuple(map(int, m)) for m in timing.findall(open(tmp + '/d.err').read())]
b = [tuple(map(int, m)) for m in timing.findall(open(tmp + '/d--no-reuse.err').read())]
same = open(tmp + '/d.out', 'rb').read() == open(tmp + '/d--no-reuse.out', 'rb').read()
sys.exit(0 if len(a) == 2 and len(b) == 2 and a[1][1] > 0 and a[1][0] + a[1][1] == b[1][0] and b[1][1] == 0
         and same else 1)
EOF
    then ok "demo model: chat turn 2 reuses turn 1 and replies as a fresh evaluation does"
    else bad "demo model chat: $(grep -h '^\[prompt' "$tmp/d.err" "$tmp/d--no-reuse.err")"; fi
fi
exit $fail
