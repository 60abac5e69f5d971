'use strict';
// page.test.cjs: tela serve's chat page (GET /) in headless Chromium,
// driven through the DevTools protocol over --remote-debugging-pipe (file
// descriptors 3 and 4, NUL-delimited JSON; no npm package): type a message,
// press Send, and wait for the streamed reply to be in the DOM; it must be
// what the API answers for the same conversation (greedy), and a second
// turn must carry the first.
const { it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const c = require('./common.cjs');

const CHROMIUM = process.env.TELA_CHROMIUM || 'chromium';
let srv;
let browser;
let profile;
let browserExit;

// The DevTools protocol over the pipe: send(method, params, sessionId) -> result.
function devtools(proc) {
  const out = proc.stdio[3];
  const inp = proc.stdio[4];
  let buf = '';
  let next = 1;
  const waiting = new Map();
  inp.on('data', (d) => {
    buf += d.toString('utf8');
    let end;
    while ((end = buf.indexOf('\0')) >= 0) {
      const msg = JSON.parse(buf.slice(0, end));
      buf = buf.slice(end + 1);
      if (msg.id && waiting.has(msg.id)) {
        const { resolve, reject } = waiting.get(msg.id);
        waiting.delete(msg.id);
        if (msg.error) reject(new Error(JSON.stringify(msg.error)));
        else resolve(msg.result);
      }
    }
  });
  return (method, params = {}, sessionId) => new Promise((resolve, reject) => {
    const id = next++;
    waiting.set(id, { resolve, reject });
    out.write(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }) + '\0');
  });
}

async function evaluate(send, session, expression) {
  const r = await send('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true }, session);
  if (r.exceptionDetails) throw new Error('page: ' + JSON.stringify(r.exceptionDetails));
  return r.result.value;
}

async function until(fn, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== null && v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await new Promise((r) => setTimeout(r, 50));
  }
}

before(async () => {
  srv = await c.startServer();
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'tela-chromium-'));
  browser = spawn(CHROMIUM, ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
                             '--no-default-browser-check', '--disable-extensions', '--user-data-dir=' + profile,
                             '--remote-debugging-pipe', 'about:blank'],
                  { stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'], env: { ...process.env, HOME: profile }, detached: true });
  browserExit = new Promise((resolve) => browser.on('exit', resolve));
});

after(async () => {
  const code = srv ? (await srv.stop()).code : 0;
  if (browser) {
    // Browser.close was asked; what is left of Chromium's process group goes now.
    const t = setTimeout(() => { try { process.kill(-browser.pid, 'SIGKILL'); } catch (_) { /* gone */ } }, 3000);
    await browserExit;
    clearTimeout(t);
    try { process.kill(-browser.pid, 'SIGKILL'); } catch (_) { /* gone */ }
    for (const s of [browser.stdio[3], browser.stdio[4]]) if (s) s.destroy();
  }
  if (profile) fs.rmSync(profile, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
  assert.equal(code, 0, 'tela serve exits 0 after SIGTERM');
});

it('sends a message and shows the streamed reply', async () => {
  const send = devtools(browser);
  const { targetId } = await send('Target.createTarget', { url: srv.url + '/' });
  const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
  const ev = (expr) => evaluate(send, sessionId, expr);
  await until(() => ev(`document.readyState === 'complete' && !!document.getElementById('send')`), 30000, 'the page');
  // '' until /v1/models has answered ('' counts as an answer for until: ask for null instead)
  await until(() => ev(`document.getElementById('model').textContent || null`), 10000, 'the model name from /v1/models');
  assert.equal(await ev(`document.getElementById('model').textContent`), c.MODEL_ID);

  const turn = async (text) => {
    const before = await ev(`document.querySelectorAll('.msg.assistant').length`);
    await ev(`(() => {
      document.getElementById('temperature').value = '0';
      document.getElementById('max_tokens').value = '24';
      document.getElementById('input').value = ${JSON.stringify(text)};
      document.getElementById('send').click();
      return true; })()`);
    return until(() => ev(`(() => {
      const all = document.querySelectorAll('.msg.assistant');
      if (all.length <= ${before} || all[all.length - 1].dataset.done !== '1') return null;
      const m = all[all.length - 1];
      return { text: m.querySelector('.text').textContent, error: m.classList.contains('error'), meta: m.querySelector('.meta').textContent };
    })()`), 60000, 'the reply');
  };
  const ask = (messages) => c.request(srv.url, { method: 'POST', path: '/v1/chat/completions', body: { messages, max_tokens: 24, temperature: 0 } })
    .then((r) => r.json.choices[0].message.content);

  const q1 = 'Who was Moses?';
  const r1 = await turn(q1);
  assert.equal(r1.error, false, r1.text);
  assert.ok(r1.text.length > 0);
  assert.equal(r1.text, await ask([{ role: 'user', content: q1 }]));
  assert.match(r1.meta, /\d+ tokens, [\d.]+ s, (stop|length)/);
  const users = await ev(`[...document.querySelectorAll('.msg.user .text')].map((e) => e.textContent)`);
  assert.deepEqual(users, [q1]);

  const q2 = 'And what did he say?';
  const r2 = await turn(q2);
  assert.equal(r2.error, false, r2.text);
  assert.equal(r2.text, await ask([{ role: 'user', content: q1 }, { role: 'assistant', content: r1.text }, { role: 'user', content: q2 }]));
  send('Browser.close').catch(() => {});
});
