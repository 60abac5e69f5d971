'use strict';
// common.cjs: what tela serve's node tests share: starting a server on the
// demo model (tela serve --port 0, the port read from its startup line),
// plain HTTP requests over fresh connections (node:http, no keep-alive),
// server-sent events read by hand, the openai client, and tela run for the
// reference outputs. Written for Node 18 (Debian 12's): CommonJS, no fetch.
const { spawn, execFileSync } = require('node:child_process');
const http = require('node:http');
const path = require('node:path');

const TELA = process.env.TELA_BIN;
const SRC = process.env.TELA_SOURCE_DIR || path.join(__dirname, '..', '..');
const MODEL = path.join(SRC, 'models', 'tela-kjv-q8_0.gguf');
const MODEL_ID = 'tela-kjv-q8_0.gguf';
const NODE_MODULES = process.env.TELA_SERVER_NODE_MODULES || path.join(SRC, 'build-data', 'server', 'node_modules');
// Slower under the sanitizers: longer waits there.
const SLOW = process.env.TELA_SERVE_SLOW === '1';

function loadOpenAI() {
  return require(path.join(NODE_MODULES, 'openai'));
}

// Starts tela serve with extra arguments; resolves once it prints where it listens.
function startServer(args = [], env = {}) {
  const argv = ['serve', '-m', MODEL, '--port', '0', '-t', '1', ...args];
  const proc = spawn(TELA, argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TELA_API_KEY: '', ...env } });
  let out = '';
  let log = '';
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error('tela serve did not start:\n' + log)); },
                             SLOW ? 180000 : 60000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/[^\s]+?)\/ /.exec(out);
      if (m) {
        clearTimeout(timer);
        const url = m[1];
        resolve({
          url, proc, exited, startLine: out,
          log: () => log,
          alive: () => proc.exitCode === null && proc.signalCode === null,
          async stop(signal = 'SIGTERM') { if (proc.exitCode === null) proc.kill(signal); return exited; },
        });
      }
    });
    exited.then(({ code, signal }) => { clearTimeout(timer); reject(new Error(`tela serve exited (${code}, ${signal}):\n${log}`)); });
  });
}

// One HTTP request on a new connection: {status, headers, text, json}.
function request(base, { method = 'GET', path: p = '/', headers = {}, body, timeout = 120000 } = {}) {
  const u = new URL(p, base);
  const data = body === undefined ? undefined : (Buffer.isBuffer(body) ? body :
                                                 Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)));
  const h = { ...headers };
  if (data !== undefined && !Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) h['Content-Type'] = 'application/json';
  if (data !== undefined) h['Content-Length'] = data.length;
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname + u.search, method, headers: h, agent: false, timeout },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json;
          try { json = JSON.parse(text); } catch (_) { json = undefined; }
          resolve({ status: res.statusCode, headers: res.headers, text, json });
        });
        res.on('error', reject);
      });
    req.on('timeout', () => req.destroy(new Error('request timed out')));
    req.on('error', reject);
    if (data !== undefined) req.write(data);
    req.end();
  });
}

// A streamed request: resolves with the parsed "data:" payloads (objects,
// or the string '[DONE]') and the raw text.
async function stream(base, p, body, headers = {}) {
  const r = await request(base, { method: 'POST', path: p, body, headers });
  const events = [];
  for (const block of r.text.split('\n\n')) {
    if (!block.trim()) continue;
    for (const line of block.split('\n')) {
      if (!line.startsWith('data: ')) continue;
      const d = line.slice(6);
      events.push(d === '[DONE]' ? d : JSON.parse(d));
    }
  }
  return { ...r, events };
}

// What tela run prints for these arguments (stdout, the last newline dropped).
function telaRun(args) {
  const out = execFileSync(TELA, ['run', '-m', MODEL, '-t', '1', ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  return out.endsWith('\n') ? out.slice(0, -1) : out;
}

// Another tela command's stdout.
function telaCli(args) {
  return execFileSync(TELA, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

// Polls /metrics until pred(values) holds (or the time is up); returns the last values.
async function metricsUntil(base, pred, ms = 10000, headers = {}) {
  const until = Date.now() + ms;
  let vals = {};
  for (;;) {
    const r = await request(base, { path: '/metrics', headers });
    vals = {};
    for (const line of r.text.split('\n')) {
      const m = /^([a-z_]+(?:\{[^}]*\})?) ([0-9.eE+-]+)$/.exec(line);
      if (m) vals[m[1]] = Number(m[2]);
    }
    if (pred(vals) || Date.now() > until) return vals;
    await new Promise((r2) => setTimeout(r2, 50));
  }
}

module.exports = { TELA, SRC, MODEL, MODEL_ID, NODE_MODULES, SLOW, loadOpenAI, startServer, request, stream, telaRun, telaCli, metricsUntil };
