'use strict';
// api.test.cjs: tela serve's API through the official openai client (and
// plain HTTP where the client would hide the answer): models, chat and
// completions, streamed and not, against tela run's greedy output; stop
// strings; predicted outputs; seeds; n; logit_bias; log-probabilities; usage; errors; 8
// concurrent streams, each giving what it gives alone.
const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const c = require('./common.cjs');

const OpenAI = c.loadOpenAI();
let srv;
let client;

const Q = 'Who was Moses?';
const chatMsg = (content) => [{ role: 'user', content }];

before(async () => {
  srv = await c.startServer(['--parallel', '8', '--max-body', '256K']);
  client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});

after(async () => {
  const { code } = await srv.stop();
  assert.equal(code, 0, 'tela serve exits 0 after SIGTERM\n' + srv.log());
});

describe('basics', () => {
  it('prints one startup line with the URL, model, device, parallel and ctx', () => {
    assert.match(srv.startLine, /^tela serve: listening on http:\/\/127\.0\.0\.1:\d+\/ \| model tela-kjv-q8_0\.gguf \(llama\) \| cpu .* \| parallel 8 \| ctx 512\n$/);
  });

  it('GET /health', async () => {
    const r = await c.request(srv.url, { path: '/health' });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { status: 'ok' });
  });

  it('lists and retrieves the model', async () => {
    const list = await client.models.list();
    assert.equal(list.data.length, 1);
    assert.equal(list.data[0].id, c.MODEL_ID);
    assert.equal(list.data[0].object, 'model');
    assert.equal(list.data[0].owned_by, 'tela');
    const m = await client.models.retrieve(c.MODEL_ID);
    assert.equal(m.id, c.MODEL_ID);
    const r = await c.request(srv.url, { path: '/v1/models/no-such-model' });
    assert.equal(r.status, 404);
  });

  it('tokenizes and detokenizes (llama-server shapes), as tela tokenize does', async () => {
    const cliIds = (args) => JSON.parse(c.telaCli(['tokenize', '-m', c.MODEL, '-p', 'And God said', '--json', ...args]).trim().split('\n').pop());
    const ids = cliIds(['--add-special']);
    assert.equal(ids[0], 0, 'the demo model adds BOS (id 0, models/README.md)');
    let r = await c.request(srv.url, { method: 'POST', path: '/tokenize', body: { content: 'And God said', add_special: true } });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json.tokens, ids);
    r = await c.request(srv.url, { method: 'POST', path: '/tokenize', body: { content: 'And God said' } });
    assert.deepEqual(r.json, { tokens: cliIds([]) });
    assert.deepEqual(cliIds([]), ids.slice(1));
    r = await c.request(srv.url, { method: 'POST', path: '/tokenize', body: { content: '<|im_start|>user', with_pieces: true } });
    assert.equal(r.json.tokens[0].id, 2, '<|im_start|> is id 2 (models/README.md)');
    assert.equal(r.json.tokens[0].piece, '<|im_start|>');
    assert.equal(r.json.tokens.map((t) => t.piece).join(''), '<|im_start|>user');
    r = await c.request(srv.url, { method: 'POST', path: '/tokenize', body: { content: '<|im_start|>', parse_special: false } });
    assert.ok(r.json.tokens.length > 1 && !r.json.tokens.includes(2));
    r = await c.request(srv.url, { method: 'POST', path: '/detokenize', body: { tokens: ids.slice(1) } });
    assert.deepEqual(r.json, { content: 'And God said' });
    r = await c.request(srv.url, { method: 'POST', path: '/detokenize', body: { tokens: [4096] } });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'tokens[0]');
  });

  it('serves the chat page at /', async () => {
    const r = await c.request(srv.url, { path: '/' });
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /^text\/html/);
    assert.match(r.text, /<title>tela chat<\/title>/);
    assert.match(r.text, /v1\/chat\/completions/);
  });
});

describe('chat completions', () => {
  let ref;

  it('greedy: the same reply as tela run --chat, with usage', async () => {
    ref = c.telaRun(['--chat', '-p', Q, '-n', '40', '--temp', '0']);
    assert.ok(ref.length > 0);
    const r = await client.chat.completions.create({ model: c.MODEL_ID, messages: chatMsg(Q), max_tokens: 40, temperature: 0 });
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.model, c.MODEL_ID);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].index, 0);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(r.choices[0].message.content, ref);
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.equal(r.choices[0].logprobs, null);
    // the ChatML rendering of one user message: 16 tokens with BOS (tela run --chat says the same)
    assert.equal(r.usage.prompt_tokens, 16);
    assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 40);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
    if (r.choices[0].finish_reason === 'length') assert.equal(r.usage.completion_tokens, 40);
  });

  it('streamed: role first, then deltas that add up to the same reply, then finish_reason and usage', async () => {
    const s = await client.chat.completions.create({
      model: c.MODEL_ID, messages: chatMsg(Q), max_tokens: 40, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const ch of s) chunks.push(ch);
    assert.ok(chunks.length >= 3);
    for (const ch of chunks) {
      assert.equal(ch.object, 'chat.completion.chunk');
      assert.equal(ch.id, chunks[0].id);
    }
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.prompt_tokens, 16);
    assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
    const fin = chunks[chunks.length - 2];
    assert.ok(['stop', 'length'].includes(fin.choices[0].finish_reason));
    let text = '';
    for (const ch of chunks.slice(0, -1)) {
      assert.equal(ch.usage, null);
      for (const choice of ch.choices) text += choice.delta.content || '';
    }
    assert.equal(text, ref);
  });

  it('sends data: [DONE] last, without usage chunks unless asked', async () => {
    const r = await c.stream(srv.url, '/v1/chat/completions', { messages: chatMsg(Q), max_tokens: 5, temperature: 0, stream: true });
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /^text\/event-stream/);
    assert.equal(r.events[r.events.length - 1], '[DONE]');
    assert.ok(r.events.slice(0, -1).every((e) => !('usage' in e) && e.choices.length === 1));
  });

  it('content as an array of text parts, and a system message', async () => {
    const a = await client.chat.completions.create({
      messages: [{ role: 'system', content: 'You are a prophet.' }, { role: 'user', content: [{ type: 'text', text: 'Who was ' }, { type: 'text', text: 'Moses?' }] }],
      max_tokens: 20, temperature: 0,
    });
    const b = c.telaRun(['--chat', '--system', 'You are a prophet.', '-p', Q, '-n', '20', '--temp', '0']);
    assert.equal(a.choices[0].message.content, b);
  });

  it('a multi-turn conversation renders through the template', async () => {
    const r = await client.chat.completions.create({
      messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Peace be unto thee.' }, { role: 'user', content: Q }],
      max_tokens: 10, temperature: 0,
    });
    // <|begin_of_text|> + 3 x (<|im_start|>role\ntext<|im_end|>\n) + <|im_start|>assistant\n: more than one turn's 16
    assert.ok(r.usage.prompt_tokens > 16);
    assert.equal(r.choices.length, 1);
  });

  it('stop strings: the reply ends before the first one, finish_reason stop', async () => {
    const words = ref.split(' ');
    assert.ok(words.length >= 4, ref);
    const stop = ' ' + words[2];
    const cut = ref.slice(0, ref.indexOf(stop));
    const r = await client.chat.completions.create({ messages: chatMsg(Q), max_tokens: 40, temperature: 0, stop: [stop, 'zzzz'] });
    assert.equal(r.choices[0].message.content, cut);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const r2 = await client.chat.completions.create({ messages: chatMsg(Q), max_tokens: 40, temperature: 0, stop });
    assert.equal(r2.choices[0].message.content, cut);
    const s = await c.stream(srv.url, '/v1/chat/completions', { messages: chatMsg(Q), max_tokens: 40, temperature: 0, stop, stream: true });
    const text = s.events.filter((e) => e !== '[DONE]').map((e) => e.choices[0].delta.content || '').join('');
    assert.equal(text, cut);
  });

  it('predicted outputs: the reply as prediction is drafted from, the output unchanged, usage counts it', async () => {
    const plain = await client.chat.completions.create({ messages: chatMsg(Q), max_tokens: 40, temperature: 0 });
    const text = plain.choices[0].message.content;
    assert.equal(plain.usage.completion_tokens_details, undefined, 'no details without speculation');
    const r = await client.chat.completions.create({
      messages: chatMsg(Q), max_tokens: 40, temperature: 0, prediction: { type: 'content', content: text },
    });
    assert.equal(r.choices[0].message.content, text);
    const d = r.usage.completion_tokens_details;
    assert.ok(d.accepted_prediction_tokens >= r.usage.completion_tokens / 2, JSON.stringify(d));
    // a prediction with nothing to do with the reply: rejected drafts, the same reply
    const other = await client.chat.completions.create({
      messages: chatMsg(Q), max_tokens: 40, temperature: 0,
      prediction: { type: 'content', content: [{ type: 'text', text: 'the the the of of of and and and' }] },
    });
    assert.equal(other.choices[0].message.content, text);
    const bad = await c.request(srv.url, { method: 'POST', path: '/v1/chat/completions',
                                           body: { messages: chatMsg(Q), prediction: { type: 'image', content: 'x' } } });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'prediction.type');
  });

  it('seeds: the same seed twice gives the same text; different seeds differ', async () => {
    const ask = (seed) => client.chat.completions.create({ messages: chatMsg(Q), max_tokens: 30, temperature: 1, seed })
      .then((r) => r.choices[0].message.content);
    const a = await ask(42);
    const b = await ask(42);
    assert.equal(a, b);
    const others = new Set();
    for (const seed of [1, 2, 3, 4, 5]) others.add(await ask(seed));
    assert.ok(others.size >= 2, 'five seeds gave one text');
  });

  it('n choices: choice k is what seed + k gives alone', async () => {
    const r = await client.chat.completions.create({ messages: chatMsg(Q), max_tokens: 20, temperature: 1, seed: 7, n: 3 });
    assert.equal(r.choices.length, 3);
    assert.deepEqual(r.choices.map((ch) => ch.index), [0, 1, 2]);
    for (let k = 0; k < 3; k++) {
      const one = await client.chat.completions.create({ messages: chatMsg(Q), max_tokens: 20, temperature: 1, seed: 7 + k });
      assert.equal(r.choices[k].message.content, one.choices[0].message.content);
    }
    assert.equal(r.usage.prompt_tokens, 16, 'the prompt counts once');
  });

  it('n choices streamed: every index gets its role, deltas and finish_reason', async () => {
    const s = await c.stream(srv.url, '/v1/chat/completions', { messages: chatMsg(Q), max_tokens: 8, temperature: 1, seed: 3, n: 2, stream: true });
    const byIndex = { 0: [], 1: [] };
    for (const e of s.events) if (e !== '[DONE]') for (const ch of e.choices) byIndex[ch.index].push(ch);
    for (const i of [0, 1]) {
      assert.equal(byIndex[i][0].delta.role, 'assistant');
      assert.ok(byIndex[i].at(-1).finish_reason);
    }
  });

  it('max_completion_tokens, ignore_eos and finish_reason length', async () => {
    const r = await client.chat.completions.create({ messages: chatMsg(Q), max_completion_tokens: 7, temperature: 0, ignore_eos: true });
    assert.equal(r.usage.completion_tokens, 7);
    assert.equal(r.choices[0].finish_reason, 'length');
  });

  it('logprobs: one entry per token, with bytes and the top alternatives', async () => {
    const r = await client.chat.completions.create({ messages: chatMsg(Q), max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3, ignore_eos: true });
    const ch = r.choices[0];
    const lp = ch.logprobs.content;
    assert.equal(lp.length, r.usage.completion_tokens);
    let joined = '';
    for (const e of lp) {
      assert.equal(typeof e.token, 'string');
      assert.ok(e.logprob <= 0);
      assert.deepEqual(Buffer.from(e.bytes).toString('utf8'), e.token);
      assert.equal(e.top_logprobs.length, 3);
      for (let k = 1; k < 3; k++) assert.ok(e.top_logprobs[k - 1].logprob >= e.top_logprobs[k].logprob);
      // greedy: the chosen token is the likeliest
      assert.equal(e.top_logprobs[0].token, e.token);
      assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4);
      joined += e.token;
    }
    assert.equal(joined, ch.message.content);
    const s = await c.stream(srv.url, '/v1/chat/completions', { messages: chatMsg(Q), max_tokens: 5, temperature: 0, logprobs: true, ignore_eos: true, stream: true });
    const entries = s.events.filter((e) => e !== '[DONE]' && e.choices[0].logprobs).flatMap((e) => e.choices[0].logprobs.content);
    assert.equal(entries.length, 5);
    assert.ok(entries.every((e) => Array.isArray(e.top_logprobs) && e.top_logprobs.length === 0));
    assert.deepEqual(entries.map((e) => e.token), lp.slice(0, 5).map((e) => e.token));
  });

  it('logit_bias bans a token', async () => {
    const a = await client.chat.completions.create({ messages: chatMsg(Q), max_tokens: 1, temperature: 0, logprobs: true, ignore_eos: true });
    const first = a.choices[0].logprobs.content[0].token;
    const ids = (await c.request(srv.url, { method: 'POST', path: '/tokenize', body: { content: first } })).json.tokens;
    assert.equal(ids.length, 1);
    const b = await client.chat.completions.create({ messages: chatMsg(Q), max_tokens: 1, temperature: 0, ignore_eos: true, logit_bias: { [ids[0]]: -100 } });
    assert.notEqual(b.choices[0].message.content, first);
  });

  it('a repeated prompt is taken from the prefix cache (cached_tokens)', async () => {
    const long = 'In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep.';
    const ask = () => client.chat.completions.create({ messages: chatMsg(long), max_tokens: 2, temperature: 0 });
    const a = await ask();
    const b = await ask();
    assert.ok(a.usage.prompt_tokens > 32);
    assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens);
    assert.ok(b.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(b.usage));
    assert.ok(b.usage.prompt_tokens_details.cached_tokens < b.usage.prompt_tokens);
    assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  });
});

describe('completions', () => {
  const P = 'And God said';
  let ref;

  it('greedy: the same text as tela run, streamed or not', async () => {
    ref = c.telaRun(['-p', P, '-n', '24', '--temp', '0']);
    const r = await client.completions.create({ model: c.MODEL_ID, prompt: P, max_tokens: 24, temperature: 0 });
    assert.equal(r.object, 'text_completion');
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.choices[0].text, ref);
    assert.equal(r.usage.prompt_tokens, 4);
    const s = await client.completions.create({ prompt: P, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage;
    let finish;
    for await (const ch of s) {
      assert.equal(ch.object, 'text_completion');
      if (ch.usage) usage = ch.usage;
      for (const choice of ch.choices) {
        text += choice.text;
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
    assert.equal(text, ref);
    assert.ok(finish === 'stop' || finish === 'length');
    assert.equal(usage.prompt_tokens, 4);
  });

  it('max_tokens defaults to 16', async () => {
    const r = await client.completions.create({ prompt: P, temperature: 0, ignore_eos: true });
    assert.equal(r.usage.completion_tokens, 16);
    assert.equal(r.choices[0].finish_reason, 'length');
  });

  it('prompts as token ids, arrays of strings and arrays of arrays', async () => {
    const ids = [0, 300, 391, 392];
    const a = await client.completions.create({ prompt: ids, max_tokens: 24, temperature: 0 });
    assert.equal(a.choices[0].text, ref);
    const b = await client.completions.create({ prompt: [P, 'In the beginning'], max_tokens: 8, temperature: 0, n: 2 });
    assert.equal(b.choices.length, 4);
    assert.deepEqual(b.choices.map((ch) => ch.index), [0, 1, 2, 3]);
    assert.equal(b.choices[0].text, b.choices[1].text);
    assert.equal(b.choices[2].text, b.choices[3].text);
    assert.equal(b.choices[0].text, ref.slice(0, b.choices[0].text.length));
    assert.equal(b.usage.prompt_tokens, 4 + 4);
    const d = await client.completions.create({ prompt: [ids, [0, 300]], max_tokens: 8, temperature: 0 });
    assert.equal(d.choices.length, 2);
    assert.equal(d.choices[0].text, b.choices[0].text);
  });

  it('logprobs: tokens, token_logprobs, top_logprobs and text_offset', async () => {
    const r = await client.completions.create({ prompt: P, max_tokens: 10, temperature: 0, logprobs: 2, ignore_eos: true });
    const ch = r.choices[0];
    const lp = ch.logprobs;
    assert.equal(lp.tokens.length, 10);
    assert.equal(lp.token_logprobs.length, 10);
    assert.equal(lp.top_logprobs.length, 10);
    assert.equal(lp.tokens.join(''), ch.text);
    let off = 0;
    for (let i = 0; i < 10; i++) {
      assert.equal(lp.text_offset[i], off);
      off += lp.tokens[i].length;
      const top = lp.top_logprobs[i];
      const keys = Object.keys(top);
      assert.ok(keys.length >= 1 && keys.length <= 3);
      assert.ok(Math.abs(top[lp.tokens[i]] - lp.token_logprobs[i]) < 1e-4);
      for (const k of keys) assert.ok(top[k] <= lp.token_logprobs[i] + 1e-4, 'greedy picks the likeliest');
    }
  });

  it('echo and suffix are refused, naming the field', async () => {
    for (const [field, value] of [['echo', true], ['suffix', 'x'], ['best_of', 3]]) {
      const r = await c.request(srv.url, { method: 'POST', path: '/v1/completions', body: { prompt: P, [field]: value } });
      assert.equal(r.status, 400);
      assert.equal(r.json.error.param, field);
      assert.match(r.json.error.message, /not supported/);
    }
  });
});

describe('errors', () => {
  const post = (path, body, headers) => c.request(srv.url, { method: 'POST', path, body, headers });

  it('invalid JSON: 400 with the byte offset', async () => {
    const bad = '{"messages": [{"role": "user", "content": "hi"}] "max_tokens": 3}';
    let r = await post('/v1/chat/completions', bad);
    assert.equal(r.status, 400);
    assert.equal(r.json.error.type, 'invalid_request_error');
    assert.equal(r.json.error.code, 'invalid_json');
    // the parser stops where a ',' or '}' should be: at the space before "max_tokens", or at its quote
    const at = Number(/at byte (\d+)/.exec(r.json.error.message)[1]);
    assert.ok(at === bad.indexOf(' "max_tokens"') || at === bad.indexOf('"max_tokens"'), r.json.error.message);
    r = await post('/v1/chat/completions', '{"messages": [');
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /ends early, at byte 14 of 14/);
    r = await post('/v1/chat/completions', '{"messages": []} trailing');
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /at byte 17\b/);
    r = await post('/v1/chat/completions', '');
    assert.equal(r.status, 400);
    r = await post('/v1/chat/completions', '[1, 2]');
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /JSON object/);
  });

  it('invalid UTF-8: 400', async () => {
    const head = '{"messages": [{"role": "user", "content": "';
    const body = Buffer.concat([Buffer.from(head), Buffer.from([0xc3, 0x28]), Buffer.from('"}]}')]);
    const r = await post('/v1/chat/completions', body);
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'invalid_utf8');
    assert.match(r.json.error.message, new RegExp(`at byte ${head.length}\\b`));
    // an overlong encoding of '/' and a UTF-16 surrogate written in UTF-8 are not UTF-8 either
    for (const bytes of [[0xc0, 0xaf], [0xed, 0xa0, 0x80]]) {
      const r2 = await post('/v1/chat/completions', Buffer.concat([Buffer.from(head), Buffer.from(bytes), Buffer.from('"}]}')]));
      assert.equal(r2.status, 400);
      assert.equal(r2.json.error.code, 'invalid_utf8');
    }
  });

  it('wrong types and values: 400 naming the field', async () => {
    const m = chatMsg('hi');
    const cases = [
      [{ messages: 'hi' }, 'messages'],
      [{ messages: [] }, 'messages'],
      [{}, 'messages'],
      [{ messages: m, temperature: 'hot' }, 'temperature'],
      [{ messages: m, temperature: 2.5 }, 'temperature'],
      [{ messages: m, top_p: -0.1 }, 'top_p'],
      [{ messages: m, max_tokens: 0 }, 'max_tokens'],
      [{ messages: m, max_tokens: 1.5 }, 'max_tokens'],
      [{ messages: m, n: 0 }, 'n'],
      [{ messages: m, stream: 'yes' }, 'stream'],
      [{ messages: m, stop: [1] }, 'stop[0]'],
      [{ messages: m, seed: 'x' }, 'seed'],
      [{ messages: m, logit_bias: { abc: 1 } }, 'logit_bias.abc'],
      [{ messages: m, logit_bias: { 5: 1000 } }, 'logit_bias.5'],
      [{ messages: m, logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
      [{ messages: m, top_logprobs: 2 }, 'top_logprobs'],
      [{ messages: m, stream_options: { include_usage: true } }, 'stream_options'],
      [{ messages: [{ role: 'wizard', content: 'hi' }] }, 'messages[0].role'],
      [{ messages: [{ role: 'user' }] }, 'messages[0].content'],
      [{ messages: [{ role: 'user', content: 5 }] }, 'messages[0].content'],
      [{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'messages[0].content[0].type'],
      [{ messages: m, frobnicate: 1 }, 'frobnicate'],
      [{ messages: m, tools: [{ type: 'function', function: { name: 'f' } }] }, 'tools'],
      [{ messages: m, response_format: { type: 'json_object' } }, 'response_format'],
    ];
    for (const [body, param] of cases) {
      const r = await post('/v1/chat/completions', body);
      assert.equal(r.status, 400, JSON.stringify(body) + ' -> ' + r.text);
      assert.equal(r.json.error.param, param, JSON.stringify(body) + ' -> ' + r.text);
      assert.equal(typeof r.json.error.message, 'string');
    }
    const r = await post('/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] });
    assert.match(r.json.error.message, /image_url/);
    const t = await post('/v1/completions', { prompt: [1, 'a'] });
    assert.equal(t.status, 400);
    assert.equal(t.json.error.param, 'prompt[1]');
    const l = await post('/v1/completions', { prompt: 'x', logprobs: 6 });
    assert.equal(l.json.error.param, 'logprobs');
  });

  it('the openai client sees the 400 as BadRequestError with param', async () => {
    await assert.rejects(client.chat.completions.create({ messages: chatMsg('hi'), temperature: 5 }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, 'temperature');
      return true;
    });
  });

  it('a prompt longer than the context: 400 with both numbers', async () => {
    const text = 'And the LORD spake unto Moses, saying, '.repeat(80);
    const n = (await c.request(srv.url, { method: 'POST', path: '/tokenize', body: { content: text, add_special: true } })).json.tokens.length;
    assert.ok(n > 512);
    const r = await post('/v1/completions', { prompt: text, max_tokens: 4 });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'context_length_exceeded');
    assert.match(r.json.error.message, new RegExp(`\\b${n}\\b`));
    assert.match(r.json.error.message, /\b512\b/);
    await assert.rejects(client.chat.completions.create({ messages: chatMsg(text) }), (e) => e.status === 400 && e.code === 'context_length_exceeded');
  });

  it('max_tokens that does not fit beside the prompt: 400 (as OpenAI), not cut', async () => {
    const r = await post('/v1/completions', { prompt: 'And God said', max_tokens: 509 });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'max_tokens');
    assert.match(r.json.error.message, /512/);
    const ok = await post('/v1/completions', { prompt: 'And God said', max_tokens: 508, temperature: 0 });
    assert.equal(ok.status, 200);
  });

  it('404 for an unknown route, 405 for a wrong method, 415 for another content type', async () => {
    let r = await c.request(srv.url, { path: '/v1/nothing' });
    assert.equal(r.status, 404);
    assert.equal(r.json.error.type, 'invalid_request_error');
    r = await c.request(srv.url, { path: '/v1/chat/completions' });
    assert.equal(r.status, 405);
    assert.equal(r.headers.allow, 'POST');
    r = await post('/v1/chat/completions', JSON.stringify({ messages: chatMsg('hi') }), { 'Content-Type': 'text/plain' });
    assert.equal(r.status, 415);
    r = await post('/v1/chat/completions', JSON.stringify({ messages: chatMsg('hi'), max_tokens: 1 }), { 'Content-Type': 'application/json; charset=utf-8' });
    assert.equal(r.status, 200);
  });

  it('a body over --max-body: 413', async () => {
    const r = await post('/v1/chat/completions', { messages: chatMsg('x'.repeat(300 * 1024)) });
    assert.equal(r.status, 413);
    assert.match(r.json.error.message, /262144/);
  });
});

describe('concurrency', () => {
  it('8 concurrent streams complete, each with what it gives alone (seeded)', async () => {
    const prompts = ['Who was Moses?', 'Tell me of David.', 'What is love?', 'Who built the ark?',
                     'Where is Egypt?', 'Who was Abraham?', 'What did Jesus say?', 'Sing a psalm.'];
    const body = (i) => ({ messages: chatMsg(prompts[i]), max_tokens: 48, temperature: 1, seed: 100 + i, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
    const run = async (i) => {
      const s = await client.chat.completions.create(body(i));
      let text = '';
      let finish;
      let usage;
      for await (const ch of s) {
        if (ch.usage) usage = ch.usage;
        for (const choice of ch.choices) {
          text += choice.delta.content || '';
          if (choice.finish_reason) finish = choice.finish_reason;
        }
      }
      return { text, finish, usage };
    };
    const alone = [];
    for (let i = 0; i < 8; i++) alone.push(await run(i));
    const together = await Promise.all([0, 1, 2, 3, 4, 5, 6, 7].map(run));
    for (let i = 0; i < 8; i++) {
      assert.equal(together[i].finish, 'length');
      assert.equal(together[i].usage.completion_tokens, 48);
      assert.ok(together[i].text.length > 0);
      assert.equal(together[i].text, alone[i].text, `stream ${i} differs when batched`);
    }
    const m = await c.metricsUntil(srv.url, (v) => v.tela_running_sequences === 0);
    assert.equal(m.tela_running_sequences, 0);
    assert.equal(m.tela_kv_blocks_used, 0);
  });

  it('/metrics counts requests by endpoint and status and shows the engine', async () => {
    const r = await c.request(srv.url, { path: '/metrics' });
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /^text\/plain/);
    assert.match(r.text, /^tela_http_requests_total\{endpoint="\/v1\/chat\/completions",status="200"\} \d+$/m);
    assert.match(r.text, /^tela_http_requests_total\{endpoint="\/v1\/chat\/completions",status="400"\} \d+$/m);
    assert.match(r.text, /^tela_http_requests_total\{endpoint="other",status="404"\} \d+$/m);
    for (const name of ['tela_prompt_tokens_total', 'tela_cached_tokens_total', 'tela_generated_tokens_total', 'tela_running_sequences',
                        'tela_waiting_requests', 'tela_kv_blocks_total', 'tela_kv_blocks_used', 'tela_kv_blocks_cached',
                        'tela_prefix_cache_hits_total', 'tela_preemptions_total', 'tela_checkpoints'])
      assert.match(r.text, new RegExp(`^# TYPE ${name} (counter|gauge)\\n${name} \\d+$`, 'm'));
    const gen = Number(/^tela_generated_tokens_total (\d+)$/m.exec(r.text)[1]);
    assert.ok(gen > 8 * 48);
  });
});
