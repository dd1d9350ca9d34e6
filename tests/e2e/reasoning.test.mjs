// Reasoning replies through the official openai client against a real
// `strata serve` (stories260K with Qwen 3.5's chat template, whose prompt
// ends inside an open <think> block): the model's text is reasoning until
// it closes the block, which this small model never does, so the whole
// reply is `reasoning_content` and `content` is empty; streamed, the
// reasoning_content deltas concatenate to the same text; `reasoning_format:
// "none"` returns the same text as content; `chat_template_kwargs:
// {enable_thinking: false}` makes the template close the block in the
// prompt, and the reply is content; a `response_format` holds the answer
// after the block, not the text inside it.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { MODEL_NAME, repoRoot, skipReason, startServer } from './harness.mjs';

const skip = skipReason();
const dataDir = process.env.STRATA_TEST_DATA ?? path.resolve(repoRoot, '..', 'shared', 'data');
const template = path.join(dataDir, 'chat-templates', 'llama.cpp-jinja', 'Qwen3.5-4B.jinja');

describe('reasoning', { skip: skip ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer({ replicas: 1, slots: 2, args: ['--chat-template-file', template] });
    client = server.client();
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0, 'strata serve exits 0 on SIGTERM');
  });

  const base = {
    model: MODEL_NAME, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 40, temperature: 0,
  };

  test('an open <think> block: the reply is reasoning_content, streamed the same', async () => {
    const r = await client.chat.completions.create(base);
    const m = r.choices[0].message;
    assert.equal(typeof m.reasoning_content, 'string');
    assert.ok(m.reasoning_content.length > 20, m.reasoning_content);
    assert.equal(m.reasoning_content, m.reasoning_content.trim(), 'trimmed');
    assert.equal(m.content, '');
    assert.equal(r.usage.completion_tokens, 40);

    let reasoning = '';
    let content = '';
    let roles = 0;
    const stream = await client.chat.completions.create({ ...base, stream: true });
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta ?? {};
      if (d.role) roles++;
      if (d.reasoning_content) reasoning += d.reasoning_content;
      if (d.content) content += d.content;
    }
    assert.equal(reasoning, m.reasoning_content);
    assert.equal(content, '');
    assert.equal(roles, 1);
  });

  test('reasoning_format "none" leaves the text in content', async () => {
    const split = await client.chat.completions.create(base);
    const whole = await client.chat.completions.create({ ...base, reasoning_format: 'none' });
    const m = whole.choices[0].message;
    assert.equal(m.reasoning_content, undefined);
    assert.equal(m.content.trim(), split.choices[0].message.reasoning_content);
  });

  test('chat_template_kwargs reach the template: enable_thinking false closes the block', async () => {
    const open = await client.chat.completions.create(base);
    const r = await client.chat.completions.create({ ...base, chat_template_kwargs: { enable_thinking: false } });
    const m = r.choices[0].message;
    assert.equal(m.reasoning_content, undefined);
    assert.ok(m.content.length > 0);
    assert.ok(r.usage.prompt_tokens > open.usage.prompt_tokens, 'the empty block is in the prompt');
    await assert.rejects(
      client.chat.completions.create({ ...base, reasoning_effort: 'high' }),
      (e) => e.status === 400 && e.message.includes('`reasoning_effort`'),
      'Qwen 3.5\'s template does not read reasoning_effort',
    );
  });

  test('response_format: the JSON answer comes after the reasoning block', async () => {
    const json = { ...base, response_format: { type: 'json_object' }, max_tokens: 60 };
    // the block open: the model's text is reasoning (it never closes the
    // block), not JSON written inside it
    const open = await client.chat.completions.create(json);
    assert.equal(open.choices[0].finish_reason, 'length');
    assert.ok(open.choices[0].message.reasoning_content.length > 0);
    assert.equal(open.choices[0].message.content, '');
    // the block closed by the template: the content is the JSON object
    const r = await client.chat.completions.create({ ...json, chat_template_kwargs: { enable_thinking: false } });
    const m = r.choices[0].message;
    assert.equal(m.reasoning_content, undefined);
    if (r.choices[0].finish_reason === 'stop') {
      const v = JSON.parse(m.content);
      assert.equal(typeof v, 'object');
      assert.ok(v !== null && !Array.isArray(v));
    } else {
      assert.equal(r.choices[0].finish_reason, 'length');
      assert.ok(m.content.startsWith('{'), m.content);
    }
  });
});
