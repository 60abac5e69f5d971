'use strict';
// lifecycle.test.cjs: tela serve's edges, each on a server of its own: the
// API key (401), a full queue (429), SIGTERM while a stream runs (the stream
// finishes, new connections are refused, exit 0) and a second signal (what
// runs is cancelled at once, the stream ends with an error event, exit 0).
const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const http = require('node:http');
const c = require('./common.cjs');

const OpenAI = c.loadOpenAI();
const msg = [{ role: 'user', content: 'Who was Moses?' }];

describe('API key', () => {
  it('401 without the key or with a wrong one; /health and / stay open', async () => {
    const srv = await c.startServer(['--api-key', 'sesame']);
    try {
      assert.match(srv.startLine, /API key required/);
      let r = await c.request(srv.url, { method: 'POST', path: '/v1/chat/completions', body: { messages: msg, max_tokens: 2 } });
      assert.equal(r.status, 401);
      assert.equal(r.json.error.code, 'invalid_api_key');
      assert.equal(r.headers['www-authenticate'], 'Bearer');
      r = await c.request(srv.url, { path: '/v1/models', headers: { Authorization: 'Bearer wrong' } });
      assert.equal(r.status, 401);
      r = await c.request(srv.url, { path: '/metrics' });
      assert.equal(r.status, 401);
      r = await c.request(srv.url, { path: '/health' });
      assert.equal(r.status, 200);
      r = await c.request(srv.url, { path: '/' });
      assert.equal(r.status, 200);
      const bad = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'sesam', maxRetries: 0 });
      await assert.rejects(bad.models.list(), (e) => e.status === 401);
      const good = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'sesame', maxRetries: 0 });
      const out = await good.chat.completions.create({ messages: msg, max_tokens: 3, temperature: 0 });
      assert.equal(out.choices.length, 1);
    } finally {
      assert.equal((await srv.stop()).code, 0);
    }
  });
});

describe('queue full', () => {
  it('429 once --max-queue requests wait', async () => {
    const srv = await c.startServer(['--parallel', '1', '--max-queue', '1']);
    try {
      const body = { messages: msg, max_tokens: 400, temperature: 0, ignore_eos: true };
      const rs = await Promise.all(Array.from({ length: 8 }, () =>
        c.request(srv.url, { method: 'POST', path: '/v1/chat/completions', body })));
      const busy = rs.filter((r) => r.status === 429);
      const ok = rs.filter((r) => r.status === 200);
      assert.ok(busy.length >= 1, 'some request got 429: ' + rs.map((r) => r.status));
      assert.ok(ok.length >= 1);
      assert.equal(busy.length + ok.length, 8);
      assert.equal(busy[0].json.error.code, 'queue_full');
      for (const r of ok) assert.equal(r.json.usage.completion_tokens, 400);
      const client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0 });
      const e = await Promise.allSettled(Array.from({ length: 8 }, () => client.chat.completions.create(body)));
      assert.ok(e.some((x) => x.status === 'rejected' && x.reason.status === 429));
    } finally {
      assert.equal((await srv.stop()).code, 0);
    }
  });
});

// Starts a long stream; resolves once its first chunk is in, with a promise of the whole text.
function longStream(url, maxTokens) {
  return new Promise((resolveStart, reject) => {
    const u = new URL('/v1/chat/completions', url);
    const body = JSON.stringify({ messages: msg, max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent: false,
                               headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      let started = false;
      const done = new Promise((resolve) => {
        res.on('data', (d) => {
          text += d;
          if (!started) { started = true; resolveStart({ done }); }
        });
        res.on('end', () => resolve(text));
        res.on('error', () => resolve(text));
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

function refused(url) {
  const u = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect({ host: u.hostname, port: Number(u.port) });
    s.on('connect', () => { s.destroy(); resolve(false); });
    s.on('error', () => resolve(true));
  });
}

describe('SIGTERM', () => {
  it('lets a stream under way finish, refuses new connections, exits 0', async () => {
    /* long enough to be under way at the signal, short enough to end within
     * the 30 s the server gives it (a sanitizer build is 10-20x slower) */
    const n = c.SLOW ? 400 : 2000;
    const srv = await c.startServer(['-c', '2048']);
    const { done } = await longStream(srv.url, n);
    srv.proc.kill('SIGTERM');
    const t0 = Date.now();
    while (!/stopping/.test(srv.log()) && Date.now() - t0 < 10000) await new Promise((r) => setTimeout(r, 10));
    assert.ok(await refused(srv.url), 'a new connection is refused while stopping');
    const text = await done;
    const { code } = await srv.exited;
    assert.equal(code, 0, srv.log());
    assert.match(srv.log(), /SIGTERM: stopping; 1 request under way/);
    assert.ok(text.endsWith('data: [DONE]\n\n'), 'the stream ran to its end');
    assert.match(text, /"finish_reason":"length"/);
    assert.match(text, new RegExp(`"completion_tokens":${n}`));
  });

  it('a second signal cancels what runs: the stream ends with an error event', async () => {
    const srv = await c.startServer(['-c', '4096']);
    const { done } = await longStream(srv.url, 4000);
    srv.proc.kill('SIGTERM');
    const t0 = Date.now();
    while (!/stopping/.test(srv.log()) && Date.now() - t0 < 10000) await new Promise((r) => setTimeout(r, 10));
    srv.proc.kill('SIGINT');
    const text = await done;
    const { code } = await srv.exited;
    assert.equal(code, 0, srv.log());
    assert.match(srv.log(), /cancelling 1 request \(second signal\)/);
    assert.match(text, /data: \{"error":\{"message":"[^"]*shutting down/);
    assert.ok(!text.includes('[DONE]'));
  });
});
