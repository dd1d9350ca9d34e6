// Requests of several results through the official openai client against a
// real `strata serve` (stories260K, 2 replicas x 2 slots): `n` choices of
// completions and chat (choice i is the single request with seed + i;
// streamed the same; usage counts the prompt once), batched embeddings (the
// arrays the clients, LangChain and LlamaIndex send: one item per input, in
// order, each the vector of that input alone), and fields Strata does not
// implement refused by name rather than ignored.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { MODEL_NAME, skipReason, startServer } from './harness.mjs';

const skip = skipReason();
const PROMPT = 'Once upon a time';

describe('several results per request', { skip: skip ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = server.client();
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0, 'strata serve exits 0 on SIGTERM');
  });

  test('completions with n: 3: each choice is the request with seed + i', async () => {
    const req = { model: MODEL_NAME, prompt: PROMPT, max_tokens: 24, temperature: 1, seed: 11 };
    const r = await client.completions.create({ ...req, n: 3 });
    assert.equal(r.choices.length, 3);
    let completion = 0;
    for (let i = 0; i < 3; i++) {
      assert.equal(r.choices[i].index, i);
      const one = await client.completions.create({ ...req, seed: 11 + i });
      assert.equal(r.choices[i].text, one.choices[0].text, `choice ${i}`);
      assert.equal(r.choices[i].finish_reason, one.choices[0].finish_reason);
      assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
      completion += one.usage.completion_tokens;
    }
    assert.equal(r.usage.completion_tokens, completion);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + completion);
    // the choices differ from each other (temperature 1, different seeds)
    assert.ok(new Set(r.choices.map((c) => c.text)).size > 1, 'choices differ');
  });

  test('chat with n: 3 streamed gives the non-streamed choices, by index', async () => {
    const req = {
      model: MODEL_NAME, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 16,
      temperature: 1, seed: 5, n: 3,
    };
    const whole = await client.chat.completions.create(req);
    assert.equal(whole.choices.length, 3);
    const stream = await client.chat.completions.create({
      ...req, stream: true, stream_options: { include_usage: true },
    });
    const text = ['', '', ''];
    const finish = [null, null, null];
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text[c.index] += c.delta?.content ?? '';
        if (c.finish_reason) {
          assert.equal(finish[c.index], null, `one finish for choice ${c.index}`);
          finish[c.index] = c.finish_reason;
        }
      }
    }
    for (let i = 0; i < 3; i++) {
      assert.equal(text[i], whole.choices[i].message.content, `choice ${i}`);
      assert.equal(finish[i], whole.choices[i].finish_reason);
    }
    // the same counts; cached_tokens may differ: the engine's prefix cache holds the prompt now
    for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens']) assert.equal(usage[k], whole.usage[k], k);
  });

  test('embeddings of an array of strings, and of token arrays', async () => {
    const inputs = ['A cat sat on the mat.', 'Rain fell all night.', 'Once upon a time'];
    const batch = await client.embeddings.create({ model: MODEL_NAME, input: inputs });
    assert.equal(batch.data.length, inputs.length);
    let tokens = 0;
    for (let i = 0; i < inputs.length; i++) {
      assert.equal(batch.data[i].index, i);
      const one = await client.embeddings.create({ model: MODEL_NAME, input: inputs[i] });
      assert.deepEqual(batch.data[i].embedding, one.data[0].embedding, `input ${i}`);
      tokens += one.usage.prompt_tokens;
    }
    assert.equal(batch.usage.prompt_tokens, tokens);
    const ids = await client.embeddings.create({
      model: MODEL_NAME, input: [[1, 300, 301], [1, 400]], encoding_format: 'float',
    });
    assert.equal(ids.data.length, 2);
    assert.equal(ids.usage.prompt_tokens, 5);
    await assert.rejects(
      client.embeddings.create({ model: MODEL_NAME, input: ['fine', ''] }),
      (e) => e instanceof OpenAI.BadRequestError && /`input\[1\]`/.test(e.message),
    );
  });

  test('unimplemented fields are refused by name; harmless ones accepted', async () => {
    const chat = { model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 };
    const refused = [
      [{ reasoning_effort: 'high' }, 'reasoning_effort'],
      [{ functions: [{ name: 'f', parameters: {} }] }, 'functions'],
      [{ tool_choice: 'required' }, 'tool_choice'], // without tools
      [{ modalities: ['text', 'audio'] }, 'modalities'],
    ];
    for (const [extra, field] of refused) {
      await assert.rejects(
        client.chat.completions.create({ ...chat, ...extra }),
        (e) => e instanceof OpenAI.BadRequestError && e.message.includes('`' + field + '`'),
        field,
      );
    }
    const r = await client.chat.completions.create({
      ...chat, user: 'u-1', metadata: { k: 'v' }, store: false, response_format: { type: 'text' },
      parallel_tool_calls: false,
    });
    assert.equal(r.choices.length, 1);
  });
});
