'use strict';
// spec.test.cjs: tela serve --spec ngram (speculative decoding by prompt
// lookup inside the batching engine), --spec mtp (the hybrid demo's own
// MTP block) and --draft (a draft model) through the official openai
// client: greedy replies are tela run's plain greedy text; seeded sampled
// replies are tela run --spec's (or --draft's) with the same seed and sampler (the engine verifies drafts by
// tela_generate's rule); usage reports the drafts as OpenAI's
// completion_tokens_details; four concurrent streams each give what they
// give alone; /metrics counts drafts and acceptances.
const path = require('node:path');
const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const c = require('./common.cjs');

const OpenAI = c.loadOpenAI();
let srv;
let client;

// Text that repeats, so that prompt lookup finds drafts.
const VERSE = 'And God said, Let there be light: and there was light. And God saw the light, that it was good: ' +
              'and God divided the light from the darkness. ';
const P = VERSE + VERSE + 'And God said,';

before(async () => {
  srv = await c.startServer(['--parallel', '4', '--spec', 'ngram', '--draft-max', '3']);
  client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});

after(async () => {
  const { code } = await srv.stop();
  assert.equal(code, 0, 'tela serve exits 0 after SIGTERM\n' + srv.log());
});

describe('speculative decoding (prompt lookup)', () => {
  it('announces itself at start', () => {
    assert.match(srv.startLine, /speculative: prompt lookup, up to 3 drafts/);
  });

  it('greedy: plain greedy text (tela run without speculation), with the drafts in usage', async () => {
    const ref = c.telaRun(['-p', P, '-n', '48', '--temp', '0']);
    const r = await client.completions.create({ prompt: P, max_tokens: 48, temperature: 0 });
    assert.equal(r.choices[0].text, ref);
    const d = r.usage.completion_tokens_details;
    assert.equal(typeof d.accepted_prediction_tokens, 'number');
    assert.ok(d.accepted_prediction_tokens > 0, 'no draft accepted on repeated text');
    assert.ok(d.rejected_prediction_tokens >= 0);
    assert.ok(d.accepted_prediction_tokens < r.usage.completion_tokens);
  });

  it('sampled: what tela run --spec ngram gives with the same seed and sampler', async () => {
    for (const seed of [5, 6]) {
      const ref = c.telaRun(['-p', P, '-n', '40', '--temp', '0.9', '--top-k', '0', '--top-p', '1', '--min-p', '0',
                             '--seed', String(seed), '--spec', 'ngram', '--draft-max', '3']);
      const r = await client.completions.create({ prompt: P, max_tokens: 40, temperature: 0.9, seed });
      assert.equal(r.choices[0].text, ref, `seed ${seed}`);
    }
  });

  it('4 concurrent streams, each what it gives alone, and the metrics', async () => {
    const prompts = [P, VERSE + 'And God saw', VERSE + VERSE + VERSE, 'In the beginning God created the heaven and the earth. In the beginning'];
    const run = async (i) => {
      const s = await client.completions.create({ prompt: prompts[i], max_tokens: 40, temperature: i % 2 ? 1 : 0, seed: 30 + i,
                                                  ignore_eos: true, stream: true, stream_options: { include_usage: true } });
      let text = '';
      let usage;
      for await (const ch of s) {
        if (ch.usage) usage = ch.usage;
        for (const choice of ch.choices) text += choice.text;
      }
      return { text, usage };
    };
    const alone = [];
    for (let i = 0; i < 4; i++) alone.push(await run(i));
    const together = await Promise.all([0, 1, 2, 3].map(run));
    for (let i = 0; i < 4; i++) {
      assert.equal(together[i].usage.completion_tokens, 40);
      assert.equal(together[i].text, alone[i].text, `stream ${i} differs when batched`);
    }
    const m = await c.metricsUntil(srv.url, (v) => v.tela_running_sequences === 0);
    assert.equal(m.tela_kv_blocks_used, 0);
    assert.ok(m.tela_spec_accepted_tokens_total > 0 && m.tela_spec_draft_tokens_total >= m.tela_spec_accepted_tokens_total);
  });
});

describe('speculative decoding (MTP, the Qwen3.5 demo)', () => {
  const HYB = path.join(c.SRC, 'models', 'tela-kjv-qwen35-f16.gguf');
  let hsrv;
  let hclient;
  before(async () => {
    hsrv = await c.startServer(['-m', HYB, '--parallel', '4', '--spec', 'mtp', '--draft-max', '2']);
    hclient = new OpenAI({ baseURL: hsrv.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  });
  after(async () => {
    const { code } = await hsrv.stop();
    assert.equal(code, 0, 'tela serve exits 0 after SIGTERM\n' + hsrv.log());
  });

  it('greedy: plain greedy text, most drafts accepted', async () => {
    assert.match(hsrv.startLine, /speculative: MTP, up to 2 drafts/);
    const ref = c.telaRun(['-m', HYB, '-p', 'In the beginning', '-n', '48', '--temp', '0']);
    const r = await hclient.completions.create({ prompt: 'In the beginning', max_tokens: 48, temperature: 0 });
    assert.equal(r.choices[0].text, ref);
    const d = r.usage.completion_tokens_details;
    assert.ok(d.accepted_prediction_tokens > d.rejected_prediction_tokens, JSON.stringify(d));
  });

  it('sampled: what tela run --spec mtp gives with the same seed and sampler, batched or alone', async () => {
    const ask = (seed) => hclient.completions.create({ prompt: 'And God said', max_tokens: 40, temperature: 0.9, seed });
    const together = await Promise.all([8, 9, 10].map(ask));
    for (const [i, seed] of [8, 9, 10].entries()) {
      const ref = c.telaRun(['-m', HYB, '-p', 'And God said', '-n', '40', '--temp', '0.9', '--top-k', '0', '--top-p', '1',
                             '--min-p', '0', '--seed', String(seed), '--spec', 'mtp', '--draft-max', '2']);
      assert.equal(together[i].choices[0].text, ref, `seed ${seed}`);
    }
  });
});

for (const spec of ['ngram', 'mtp']) {
  describe(`tensor parallelism (the Qwen3.5 demo split over 2 ranks on one device) with --spec ${spec}`, () => {
    const HYB = path.join(c.SRC, 'models', 'tela-kjv-qwen35-f16.gguf');
    let tsrv;
    let tclient;
    before(async () => {
      tsrv = await c.startServer(['-m', HYB, '--parallel', '4', '--tensor-parallel', '2', '--spec', spec, '--draft-max', '3']);
      tclient = new OpenAI({ baseURL: tsrv.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });
    });
    after(async () => {
      const { code } = await tsrv.stop();
      assert.equal(code, 0, 'tela serve exits 0 after SIGTERM\n' + tsrv.log());
    });

    it('greedy, batched: the whole model\'s text (split DeltaNet states rewound after rejected drafts)', async () => {
      const prompts = ['In the beginning', 'And the LORD said unto Moses,', 'Blessed are'];
      const got = await Promise.all(prompts.map((prompt) => tclient.completions.create({ prompt, max_tokens: 40, temperature: 0 })));
      for (const [i, prompt] of prompts.entries()) {
        const ref = c.telaRun(['-m', HYB, '-p', prompt, '-n', '40', '--temp', '0']);
        assert.equal(got[i].choices[0].text, ref, prompt);
        const d = got[i].usage.completion_tokens_details;
        assert.ok(d.accepted_prediction_tokens > 0, JSON.stringify(d));
      }
    });
  });
}

describe('speculative decoding (a draft model: the 8-bit demo drafting for the f16 one)', () => {
  const F16 = path.join(c.SRC, 'models', 'tela-kjv-f16.gguf');
  let dsrv;
  let dclient;
  before(async () => {
    dsrv = await c.startServer(['-m', F16, '--parallel', '4', '--draft', c.MODEL, '--draft-max', '3']);
    dclient = new OpenAI({ baseURL: dsrv.url + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  });
  after(async () => {
    const { code } = await dsrv.stop();
    assert.equal(code, 0, 'tela serve exits 0 after SIGTERM\n' + dsrv.log());
  });

  it('greedy: plain greedy text, most drafts accepted', async () => {
    assert.match(dsrv.startLine, /speculative: draft model .*tela-kjv-q8_0\.gguf, up to 3 drafts/);
    const ref = c.telaRun(['-m', F16, '-p', 'In the beginning', '-n', '48', '--temp', '0']);
    const r = await dclient.completions.create({ prompt: 'In the beginning', max_tokens: 48, temperature: 0 });
    assert.equal(r.choices[0].text, ref);
    const d = r.usage.completion_tokens_details;
    assert.ok(d.accepted_prediction_tokens > d.rejected_prediction_tokens, JSON.stringify(d));
  });

  it('sampled: what tela run --draft gives with the same seed and sampler, batched or alone', async () => {
    const ask = (seed) => dclient.completions.create({ prompt: 'And God said', max_tokens: 40, temperature: 0.9, seed });
    const together = await Promise.all([12, 13, 14].map(ask));
    for (const [i, seed] of [12, 13, 14].entries()) {
      const ref = c.telaRun(['-m', F16, '-p', 'And God said', '-n', '40', '--temp', '0.9', '--top-k', '0', '--top-p', '1',
                             '--min-p', '0', '--seed', String(seed), '--draft', c.MODEL, '--draft-max', '3']);
      assert.equal(together[i].choices[0].text, ref, `seed ${seed}`);
    }
  });
});
