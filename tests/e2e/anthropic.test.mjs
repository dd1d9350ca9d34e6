// Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens)
// through the official @anthropic-ai/sdk client against a real `strata
// serve` (stories260K with Qwen 2.5's chat template, so that tools render
// and calls use the Hermes syntax): text replies equal the chat endpoint's
// for the same conversation, streamed the same; stop sequences; forced
// tool_use blocks whose input validates against the tool's schema, and a
// tool_result round trip; token counting; errors in Anthropic's shape.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import Ajv from 'ajv';
import { API_KEY, MODEL_NAME, repoRoot, skipReason, startServer } from './harness.mjs';

const skip = skipReason();
const dataDir = process.env.STRATA_TEST_DATA ?? path.resolve(repoRoot, '..', 'shared', 'data');
const qwenTemplate = path.join(dataDir, 'chat-templates', 'llama.cpp-jinja', 'Qwen-Qwen2.5-7B-Instruct.jinja');

const weather = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 16 }, unit: { enum: ['celsius', 'fahrenheit'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
};

describe('Anthropic Messages API with the official client', { skip: skip ?? false }, () => {
  let server;
  let client;
  let openai;
  before(async () => {
    server = await startServer({ replicas: 1, slots: 2, args: ['--chat-template-file', qwenTemplate] });
    client = new Anthropic({ baseURL: server.origin, apiKey: API_KEY, maxRetries: 0, timeout: 60000 });
    openai = server.client();
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0, 'strata serve exits 0 on SIGTERM');
  });

  const conversation = {
    system: 'You tell stories.',
    messages: [{ role: 'user', content: 'Once upon a time' }],
  };

  test('a text reply: the chat endpoint\'s text, usage, stop_reason; streamed the same', async () => {
    const m = await client.messages.create({
      model: 'claude-any', max_tokens: 24, temperature: 0, ...conversation,
    });
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.model, MODEL_NAME);
    assert.match(m.id, /^msg_/);
    assert.equal(m.content.length, 1);
    assert.equal(m.content[0].type, 'text');
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.stop_sequence, null);
    assert.equal(m.usage.output_tokens, 24);
    const chat = await openai.chat.completions.create({
      model: MODEL_NAME, max_tokens: 24, temperature: 0,
      messages: [{ role: 'system', content: conversation.system }, ...conversation.messages],
    });
    assert.equal(m.content[0].text, chat.choices[0].message.content);
    assert.equal(m.usage.input_tokens, chat.usage.prompt_tokens);
    const counted = await client.messages.countTokens({ model: 'claude-any', ...conversation });
    assert.equal(counted.input_tokens, m.usage.input_tokens);

    const stream = client.messages.stream({ model: 'claude-any', max_tokens: 24, temperature: 0, ...conversation });
    let text = '';
    const kinds = [];
    stream.on('text', (t) => { text += t; });
    stream.on('streamEvent', (e) => kinds.push(e.type));
    const final = await stream.finalMessage();
    assert.equal(text, m.content[0].text);
    assert.deepEqual(final.content, m.content);
    assert.equal(final.stop_reason, 'max_tokens');
    assert.equal(final.usage.output_tokens, 24);
    assert.equal(kinds[0], 'message_start');
    assert.equal(kinds.at(-1), 'message_stop');
    assert.ok(kinds.includes('content_block_start') && kinds.includes('content_block_stop'));
  });

  test('stop_sequences: the reply ends before it, and says which', async () => {
    const whole = await client.messages.create({ model: 'm', max_tokens: 40, temperature: 0, ...conversation });
    const text = whole.content[0].text;
    const stop = text.slice(6, 9);
    assert.ok(stop.length === 3 && text.indexOf(stop) >= 0, `a stop from "${text}"`);
    const m = await client.messages.create({
      model: 'm', max_tokens: 40, temperature: 0, stop_sequences: ['zzzz', stop], ...conversation,
    });
    assert.equal(m.stop_reason, 'stop_sequence');
    assert.equal(m.stop_sequence, stop);
    assert.equal(m.content[0].text, text.slice(0, text.indexOf(stop)));
  });

  test('a forced tool call: a tool_use block whose input fits the schema; then a tool_result turn', async () => {
    const validate = new Ajv().compile(weather);
    const tools = [{ name: 'get_weather', description: 'Current weather of a city', input_schema: weather }];
    const req = {
      model: 'm', max_tokens: 200, temperature: 1, tools,
      tool_choice: { type: 'tool', name: 'get_weather' },
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
    };
    const m = await client.messages.create(req);
    assert.equal(m.stop_reason, 'tool_use');
    const use = m.content.find((b) => b.type === 'tool_use');
    assert.ok(use, JSON.stringify(m.content));
    assert.equal(use.name, 'get_weather');
    assert.ok(validate(use.input), `${JSON.stringify(use.input)} ${JSON.stringify(validate.errors)}`);
    // streamed: the same kind of block, assembled by the client from input_json_delta
    const s = await client.messages.stream(req).finalMessage();
    const suse = s.content.find((b) => b.type === 'tool_use');
    assert.ok(suse && validate(suse.input), JSON.stringify(s.content));
    assert.equal(s.stop_reason, 'tool_use');
    // the result goes back; the next turn is text
    const next = await client.messages.create({
      model: 'm', max_tokens: 8, temperature: 0, tools,
      messages: [
        ...req.messages,
        { role: 'assistant', content: m.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '21 degrees' }] },
      ],
    });
    assert.equal(next.type, 'message');
    assert.ok(next.usage.input_tokens > m.usage.input_tokens);
  });

  test('errors come in Anthropic\'s shape', async () => {
    await assert.rejects(
      client.messages.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
      (e) => e instanceof Anthropic.BadRequestError && e.error?.type === 'error' &&
        e.error?.error?.type === 'invalid_request_error' && /max_tokens/.test(e.error.error.message),
    );
    await assert.rejects(
      client.messages.create({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }),
      (e) => e instanceof Anthropic.BadRequestError && /image/.test(e.error.error.message),
    );
    const bad = new Anthropic({ baseURL: server.origin, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(
      bad.messages.create({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
      (e) => e instanceof Anthropic.AuthenticationError && e.error?.error?.type === 'authentication_error',
    );
  });
});
