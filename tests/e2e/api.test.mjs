// The OpenAI API of a real `strata serve` (stories260K, 2 replicas x 2
// slots) through the official openai client: completions and chat, streamed
// and not, usage and timings, stop strings, seeds, logprobs, embeddings,
// models and the metrics scrape.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { MODEL_NAME, drain, skipReason, startServer } from './harness.mjs';

const skip = skipReason();
const PROMPT = 'Once upon a time';
const TIMING_FIELDS = ['queue_ms', 'prompt_n', 'cached_n', 'prompt_ms', 'ttft_ms', 'predicted_n',
  'predicted_ms', 'predicted_per_second', 'replica', 'draft_n', 'draft_n_accepted'];

function checkTimings(t, usage) {
  assert.ok(t, 'a timings object');
  for (const f of TIMING_FIELDS) assert.equal(typeof t[f], 'number', `timings.${f}`);
  assert.ok(t.replica === 0 || t.replica === 1, `timings.replica ${t.replica}`);
  assert.equal(t.prompt_n, usage.prompt_tokens);
  assert.ok(t.cached_n >= 0 && t.cached_n <= t.prompt_n);
  for (const f of ['queue_ms', 'prompt_ms', 'ttft_ms', 'predicted_ms', 'predicted_per_second']) {
    assert.ok(t[f] >= 0, `timings.${f} >= 0`);
  }
}

function checkUsage(u) {
  assert.ok(u, 'a usage object');
  assert.ok(Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0);
  assert.ok(Number.isInteger(u.completion_tokens) && u.completion_tokens >= 0);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.ok(Number.isInteger(u.prompt_tokens_details?.cached_tokens), 'usage.prompt_tokens_details.cached_tokens');
}

describe('strata serve with the openai client', { skip: skip ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = server.client();
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0, 'strata serve exits 0 on SIGTERM');
  });

  // The greedy answer a few tests build on.
  const greedy = (extra = {}) => client.completions.create({
    model: MODEL_NAME, prompt: PROMPT, max_tokens: 40, temperature: 0, ...extra,
  });

  test('models lists the one model', async () => {
    const list = await client.models.list();
    const ids = [];
    for await (const m of list) ids.push(m.id);
    assert.deepEqual(ids, [MODEL_NAME]);
    // and retrieved by name
    const m = await client.models.retrieve(MODEL_NAME);
    assert.equal(m.id, MODEL_NAME);
    assert.equal(m.object, 'model');
    await assert.rejects(client.models.retrieve('no-such-model'), (e) => e instanceof OpenAI.NotFoundError);
  });

  test('completion: text, finish_reason, usage, timings', async () => {
    const r = await greedy();
    assert.equal(r.object, 'text_completion');
    assert.equal(r.model, MODEL_NAME);
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'length');
    assert.ok(c.text.length > 20, `some text: ${JSON.stringify(c.text)}`);
    assert.equal(c.logprobs, null);
    checkUsage(r.usage);
    assert.equal(r.usage.completion_tokens, 40);
    checkTimings(r.timings, r.usage);
    assert.equal(r.timings.predicted_n, 40);
    // greedy is greedy: the same again
    assert.equal((await greedy()).choices[0].text, c.text);
  });

  test('completion streamed: the same text, then usage and timings', async () => {
    const whole = (await greedy()).choices[0].text;
    const stream = await greedy({ stream: true, stream_options: { include_usage: true } });
    const s = await drain(stream);
    assert.equal(s.error, null);
    assert.equal(s.text, whole);
    assert.equal(s.finish, 'length');
    assert.ok(s.chunks.length > 2, 'several chunks');
    checkUsage(s.usage);
    assert.equal(s.usage.completion_tokens, 40);
    checkTimings(s.timings, s.usage);
    // the usage chunk has no choices
    const last = s.chunks[s.chunks.length - 1];
    assert.deepEqual(last.choices, []);
  });

  test('chat: message, usage, timings; streamed the same', async () => {
    const req = {
      model: MODEL_NAME, messages: [{ role: 'user', content: 'Tell me a story' }],
      max_tokens: 32, temperature: 0,
    };
    const r = await client.chat.completions.create(req);
    assert.equal(r.object, 'chat.completion');
    const m = r.choices[0].message;
    assert.equal(m.role, 'assistant');
    assert.ok(m.content.length > 0);
    checkUsage(r.usage);
    checkTimings(r.timings, r.usage);
    const s = await drain(await client.chat.completions.create({
      ...req, stream: true, stream_options: { include_usage: true },
    }), true);
    assert.equal(s.error, null);
    assert.equal(s.text, m.content);
    assert.equal(s.chunks[0].object, 'chat.completion.chunk');
    assert.equal(s.chunks[0].choices[0].delta.role, 'assistant');
    assert.equal(s.finish, r.choices[0].finish_reason);
    checkUsage(s.usage);
    // the same counts; cached_tokens may differ: the engine's prefix cache holds the prompt now
    for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens']) assert.equal(s.usage[k], r.usage[k], k);
  });

  test('max_completion_tokens limits chat too', async () => {
    const r = await client.chat.completions.create({
      model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }], max_completion_tokens: 5,
      logit_bias: { 2: -100 }, // no end of text: the limit ends it
    });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 5);
  });

  test('stop strings: the text ends before the stop, which is not returned', async () => {
    const whole = (await greedy()).choices[0].text;
    const stop = whole.slice(12, 17); // from the middle of the greedy answer
    const at = whole.indexOf(stop);
    assert.ok(at > 0, `stop ${JSON.stringify(stop)} in ${JSON.stringify(whole)}`);
    const r = await greedy({ stop });
    assert.equal(r.choices[0].text, whole.slice(0, at));
    assert.equal(r.choices[0].finish_reason, 'stop');
    // several stops: the earliest match wins; streamed the same
    const stops = ['zzzz', stop, whole.slice(at + 2, at + 8)];
    const s = await drain(await greedy({ stop: stops, stream: true }));
    assert.equal(s.error, null);
    assert.equal(s.text, whole.slice(0, at));
    assert.equal(s.finish, 'stop');
  });

  test('ignore_eos: the end-of-text token is never sampled, max_tokens ends the reply', async () => {
    // a bias that makes the model's EOS (id 2) certain: the reply ends at once...
    const eos = { logit_bias: { 2: 100 } };
    const ended = await greedy(eos);
    assert.equal(ended.choices[0].finish_reason, 'stop');
    assert.equal(ended.usage.completion_tokens, 0);
    // ...unless ignore_eos (llama-server's and vLLM's field) bans it
    const r = await greedy({ ...eos, ignore_eos: true, max_tokens: 12 });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 12);
    assert.ok(r.choices[0].text.length > 0);
  });

  test("vLLM's bad_words and allowed_token_ids", async () => {
    const lp = { logprobs: 0 };
    const whole = await greedy(lp);
    assert.ok(whole.choices[0].logprobs.tokens.includes(' was'));
    const r = await greedy({ ...lp, bad_words: ['was'] });
    assert.ok(!r.choices[0].logprobs.tokens.includes(' was'), r.choices[0].text);
    assert.notEqual(r.choices[0].text, whole.choices[0].text);
    const tok = await (await server.fetch('/tokenize', {
      method: 'POST', body: JSON.stringify({ content: 'a b', add_special: false }),
    })).json();
    const only = await greedy({ allowed_token_ids: tok.tokens, max_tokens: 6 });
    assert.equal(only.usage.completion_tokens, 6);
    for (const ch of only.choices[0].text) assert.ok('ab '.includes(ch), only.choices[0].text);
  });

  test("vLLM's min_tokens: no end before that many tokens", async () => {
    const eos = { logit_bias: { 2: 100 } }; // the EOS certain at every step
    const r = await greedy({ ...eos, min_tokens: 6 });
    assert.equal(r.usage.completion_tokens, 6);
    assert.equal(r.choices[0].finish_reason, 'stop');
    await assert.rejects(greedy({ min_tokens: 50, max_tokens: 10 }), (e) => e.status === 400 && /min_tokens/.test(e.message));
  });

  test("vLLM's stop_token_ids and include_stop_str_in_output", async () => {
    const whole = (await greedy()).choices[0].text;
    const at = whole.indexOf(' was');
    assert.ok(at > 0, whole);
    const tok = await (await server.fetch('/tokenize', {
      // SentencePiece adds the leading space: the one token " was"
      method: 'POST', body: JSON.stringify({ content: 'was', add_special: false }),
    })).json();
    assert.equal(tok.tokens.length, 1);
    // the reply ends after the stop token, whose text it keeps (as vLLM does)
    const r = await greedy({ stop_token_ids: [tok.tokens[0]] });
    assert.equal(r.choices[0].text, whole.slice(0, at + 4));
    assert.equal(r.choices[0].finish_reason, 'stop');
    const s = await drain(await greedy({ stop_token_ids: [tok.tokens[0]], stream: true }));
    assert.equal(s.text, whole.slice(0, at + 4));
    // a stop string, returned with the text before it
    const inc = await greedy({ stop: 'was', include_stop_str_in_output: true });
    assert.equal(inc.choices[0].text, whole.slice(0, at + 4));
    assert.equal(inc.choices[0].finish_reason, 'stop');
  });

  test("vLLM's continue_final_message: the reply continues the assistant's text", async () => {
    const messages = [{ role: 'user', content: 'Tell me a story.' }, { role: 'assistant', content: 'Once upon a time' }];
    const base = { model: MODEL_NAME, messages, max_tokens: 12, temperature: 0 };
    const next = await client.chat.completions.create(base);
    const cont = await client.chat.completions.create({ ...base, continue_final_message: true, add_generation_prompt: false });
    assert.ok(cont.usage.prompt_tokens < next.usage.prompt_tokens, 'no end of turn, no new header');
    assert.ok(cont.choices[0].message.content.length > 0);
    await assert.rejects(
      client.chat.completions.create({ ...base, continue_final_message: true, add_generation_prompt: true }),
      (e) => e.status === 400 && /cannot both be true/.test(e.message),
    );
  });

  test('a seed with temperature > 0 gives the same text again', async () => {
    const run = (seed) => client.completions.create({
      model: MODEL_NAME, prompt: 'The little dog', max_tokens: 48, temperature: 1.0, seed,
    }).then((r) => r.choices[0].text);
    const a = await run(1234);
    assert.equal(await run(1234), a);
    // and streamed
    const s = await drain(await client.completions.create({
      model: MODEL_NAME, prompt: 'The little dog', max_tokens: 48, temperature: 1.0, seed: 1234, stream: true,
    }));
    assert.equal(s.text, a);
    // other seeds sample other texts
    const others = await Promise.all([1, 2, 3].map(run));
    assert.ok(others.some((t) => t !== a), 'three other seeds all gave the same text');
  });

  test('completion logprobs: tokens spell the text; the stream carries the same', async () => {
    const r = await greedy({ logprobs: 3 });
    const c = r.choices[0];
    const lp = c.logprobs;
    assert.ok(lp, 'logprobs object');
    const n = lp.tokens.length;
    assert.equal(n, 40);
    assert.equal(lp.token_logprobs.length, n);
    assert.equal(lp.top_logprobs.length, n);
    assert.equal(lp.text_offset.length, n);
    assert.equal(lp.tokens.join(''), c.text);
    let offset = 0;
    for (let i = 0; i < n; i++) {
      assert.equal(lp.text_offset[i], offset);
      offset += [...lp.tokens[i]].length;
      const v = lp.token_logprobs[i];
      assert.ok(Number.isFinite(v) && v <= 0);
      const alts = Object.entries(lp.top_logprobs[i]);
      assert.ok(alts.length >= 1 && alts.length <= 3);
      // greedy: the chosen token is the most likely one
      for (const [, a] of alts) assert.ok(a <= v + 1e-6);
      assert.ok(Math.abs(lp.top_logprobs[i][lp.tokens[i]] - v) < 1e-6);
    }
    const s = await drain(await greedy({ logprobs: 3, stream: true }));
    const joined = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const ch of s.chunks) {
      const l = ch.choices[0]?.logprobs;
      if (!l) continue;
      for (const k of Object.keys(joined)) joined[k].push(...l[k]);
      // a chunk's tokens begin in its own text
      assert.ok(ch.choices[0].text.length > 0);
    }
    assert.deepEqual(joined, lp);
  });

  test('completion logprobs with a stop string: only the returned tokens', async () => {
    const plain = await greedy({ logprobs: 0 });
    const toks = plain.choices[0].logprobs.tokens;
    assert.deepEqual(plain.choices[0].logprobs.top_logprobs[0], {}, 'logprobs 0: no alternatives');
    // stop at the start of the 6th token: 5 tokens returned
    const text5 = toks.slice(0, 5).join('');
    const stop = toks[5] + toks[6];
    const r = await greedy({ logprobs: 0, stop });
    assert.equal(r.choices[0].text, text5);
    assert.deepEqual(r.choices[0].logprobs.tokens, toks.slice(0, 5));
    const s = await drain(await greedy({ logprobs: 0, stop, stream: true }));
    assert.deepEqual(s.chunks.flatMap((c) => c.choices[0]?.logprobs?.tokens ?? []), toks.slice(0, 5));
  });

  test('chat logprobs with top_logprobs, streamed and not', async () => {
    const req = {
      model: MODEL_NAME, messages: [{ role: 'user', content: 'Tell me a story' }],
      max_tokens: 24, temperature: 0, logprobs: true, top_logprobs: 2,
    };
    const r = await client.chat.completions.create(req);
    const content = r.choices[0].logprobs.content;
    assert.ok(content.length > 0);
    assert.equal(content.map((t) => t.token).join(''), r.choices[0].message.content);
    for (const t of content) {
      assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
      assert.ok(t.logprob <= 0);
      assert.equal(t.top_logprobs.length, 2);
      assert.equal(t.top_logprobs[0].token, t.token);
      assert.ok(t.top_logprobs[1].logprob <= t.top_logprobs[0].logprob);
    }
    const s = await drain(await client.chat.completions.create({ ...req, stream: true }), true);
    assert.equal(s.error, null);
    assert.deepEqual(s.chunks.flatMap((c) => c.choices[0]?.logprobs?.content ?? []), content);
    // without top_logprobs: each token's own, no alternatives
    const plain = await client.chat.completions.create({ ...req, top_logprobs: undefined });
    assert.ok(plain.choices[0].logprobs.content.every((t) => t.top_logprobs.length === 0));
    // not asked: null
    const none = await client.chat.completions.create({ ...req, logprobs: undefined, top_logprobs: undefined });
    assert.equal(none.choices[0].logprobs, null);
  });

  test('prompt as token ids', async () => {
    const tok = await (await server.fetch('/tokenize', {
      method: 'POST', body: JSON.stringify({ content: PROMPT, add_special: true }),
    })).json();
    assert.ok(tok.tokens.length > 1);
    const r = await greedy({ prompt: tok.tokens });
    assert.equal(r.choices[0].text, (await greedy()).choices[0].text);
  });

  test('echo with logprobs over batched token-id prompts: a continuation scored as evaluation harnesses do', async () => {
    const tokenize = async (content, add_special) => (await (await server.fetch('/tokenize', {
      method: 'POST', body: JSON.stringify({ content, add_special }),
    })).json()).tokens;
    // the continuation's tokens: those of context + continuation after the context's
    const ctx = await tokenize(PROMPT, true);
    const cont = (await greedy({ max_tokens: 6 })).choices[0].text;
    const after = async (text) => {
      const all = await tokenize(PROMPT + text, true);
      assert.deepEqual(all.slice(0, ctx.length), ctx);
      return all.slice(ctx.length);
    };
    const good = await after(cont);
    const bad = await after(' the dog ate a big pie');
    // as lm-evaluation-harness's local-completions: echo, logprobs 1, max_tokens 1
    const r = await client.completions.create({
      model: MODEL_NAME, prompt: [ctx.concat(good), ctx.concat(bad)], max_tokens: 1,
      temperature: 0, echo: true, logprobs: 1,
    });
    assert.equal(r.choices.length, 2);
    const score = (choice, n) => {
      const lp = choice.logprobs;
      assert.equal(lp.token_logprobs[0], null);
      assert.equal(lp.top_logprobs[0], null);
      assert.equal(lp.tokens.length, ctx.length + n + 1);
      let sum = 0;
      let greedyAll = true;
      for (let i = ctx.length; i < ctx.length + n; i++) {
        sum += lp.token_logprobs[i];
        const [[top]] = Object.entries(lp.top_logprobs[i]).sort((a, b) => b[1] - a[1]);
        greedyAll &&= top === lp.tokens[i];
      }
      return { sum, greedyAll };
    };
    const a = score(r.choices[0], good.length);
    const b = score(r.choices[1], bad.length);
    assert.ok(a.greedyAll, 'the greedy continuation is greedy');
    assert.ok(!b.greedyAll);
    assert.ok(a.sum > b.sum, `${a.sum} > ${b.sum}`);
    assert.equal(r.choices[0].text, PROMPT + cont + r.choices[0].text.slice((PROMPT + cont).length));
    // vLLM's prompt_logprobs gives the same numbers
    const v = await client.completions.create({
      model: MODEL_NAME, prompt: ctx.concat(good), max_tokens: 1, prompt_logprobs: 1,
    });
    const plp = v.choices[0].prompt_logprobs;
    assert.equal(plp.length, ctx.length + good.length);
    assert.equal(plp[0], null);
    const all = ctx.concat(good);
    for (let i = 1; i < plp.length; i++) {
      assert.equal(plp[i][String(all[i])].logprob, r.choices[0].logprobs.token_logprobs[i]);
    }
  });

  test('embeddings: base64 (the client default) and float agree', async () => {
    const r = await client.embeddings.create({ model: MODEL_NAME, input: 'A cat sat on the mat.' });
    assert.equal(r.object, 'list');
    const v = r.data[0].embedding;
    assert.equal(v.length, 64); // n_embd of stories260K
    const norm = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-4, `L2-normalised (${norm})`);
    assert.ok(r.usage.prompt_tokens > 0);
    const f = await client.embeddings.create({ model: MODEL_NAME, input: 'A cat sat on the mat.', encoding_format: 'float' });
    assert.equal(f.data[0].embedding.length, 64);
    for (let i = 0; i < 64; i++) assert.ok(Math.abs(f.data[0].embedding[i] - v[i]) < 1e-6);
    const other = await client.embeddings.create({ model: MODEL_NAME, input: 'Rain fell all night.', encoding_format: 'float' });
    assert.notDeepEqual(other.data[0].embedding, f.data[0].embedding);
  });

  test('metrics: every documented name, and the requests made', async () => {
    await greedy({ max_tokens: 4 });
    const text = await server.metrics();
    for (const name of ['strata_requests_total', 'strata_prompt_tokens_total',
      'strata_generated_tokens_total', 'strata_time_to_first_token_seconds',
      'strata_inter_token_latency_seconds', 'strata_queue_depth', 'strata_replica_in_flight',
      'strata_replica_ready', 'strata_engine_restarts_total', 'strata_draft_tokens_total',
      'strata_draft_accepted_tokens_total', 'strata_draft_acceptance_rate']) {
      assert.match(text, new RegExp(`^# TYPE ${name} `, 'm'), `# TYPE ${name}`);
    }
    assert.match(text, /^strata_time_to_first_token_seconds_bucket\{le="\+Inf"\} [1-9]/m);
    assert.match(text, /^strata_replica_ready\{replica="0"\} 1$/m);
    assert.match(text, /^strata_replica_ready\{replica="1"\} 1$/m);
    const m = text.match(/^strata_requests_total\{endpoint="\/v1\/completions",status="200"\} (\d+)$/m);
    assert.ok(m && Number(m[1]) >= 1, 'completions counted');
    assert.ok(Number(text.match(/^strata_generated_tokens_total (\d+)$/m)[1]) >= 4);
  });
});
