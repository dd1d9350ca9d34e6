// OpenAI's Responses API (/v1/responses) through the official openai
// client against a real `strata serve` (stories260K with Qwen 2.5's chat
// template): the text equals the chat endpoint's for the same input,
// streamed the same (the client assembles it from the events); a reply cut
// by max_output_tokens is "incomplete"; forced function calls whose
// arguments validate against the schema, streamed too, and a
// function_call_output round trip; text.format json_schema; what needs
// stored responses is refused.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import Ajv from 'ajv';
import OpenAI from 'openai';
import { MODEL_NAME, repoRoot, skipReason, startServer } from './harness.mjs';

const skip = skipReason();
const dataDir = process.env.STRATA_TEST_DATA ?? path.resolve(repoRoot, '..', 'shared', 'data');
const qwenTemplate = path.join(dataDir, 'chat-templates', 'llama.cpp-jinja', 'Qwen-Qwen2.5-7B-Instruct.jinja');

const weather = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 16 }, unit: { enum: ['celsius', 'fahrenheit'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
};

describe('Responses API with the openai client', { skip: skip ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer({ replicas: 1, slots: 2, args: ['--chat-template-file', qwenTemplate] });
    client = server.client();
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0, 'strata serve exits 0 on SIGTERM');
  });

  test('text: the chat endpoint\'s reply, usage, status; streamed the same', async () => {
    const r = await client.responses.create({
      model: MODEL_NAME, instructions: 'You tell stories.', input: 'Once upon a time', max_output_tokens: 20,
      temperature: 0,
    });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.equal(r.status, 'incomplete');
    assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    assert.equal(r.output.length, 1);
    assert.equal(r.output[0].type, 'message');
    const chat = await client.chat.completions.create({
      model: MODEL_NAME, max_tokens: 20, temperature: 0,
      messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Once upon a time' }],
    });
    assert.equal(r.output_text, chat.choices[0].message.content);
    assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
    assert.equal(r.usage.output_tokens, 20);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + 20);

    const s = client.responses.stream({
      model: MODEL_NAME, instructions: 'You tell stories.', max_output_tokens: 20, temperature: 0,
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'Once upon a time' }] }],
    });
    const types = [];
    let seq = -1;
    s.on('event', (e) => {
      types.push(e.type);
      assert.equal(e.sequence_number, seq + 1);
      seq = e.sequence_number;
    });
    const f = await s.finalResponse();
    assert.equal(f.output_text, r.output_text);
    assert.equal(f.status, 'incomplete');
    assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added',
      'response.content_part.added']);
    assert.equal(types.at(-1), 'response.incomplete');
    assert.ok(types.includes('response.output_text.done') && types.includes('response.output_item.done'));
  });

  test('a forced function call, streamed too; then its output goes back', async () => {
    const validate = new Ajv().compile(weather);
    const tools = [{ type: 'function', name: 'get_weather', description: 'Current weather of a city', parameters: weather }];
    const req = {
      model: MODEL_NAME, input: 'What is the weather in Paris?', max_output_tokens: 200, temperature: 1, tools,
      tool_choice: { type: 'function', name: 'get_weather' },
    };
    const r = await client.responses.create(req);
    const call = r.output.find((i) => i.type === 'function_call');
    assert.ok(call, JSON.stringify(r.output));
    assert.equal(call.name, 'get_weather');
    assert.ok(call.call_id.length > 0);
    const args = JSON.parse(call.arguments);
    assert.ok(validate(args), `${call.arguments} ${JSON.stringify(validate.errors)}`);
    const f = await client.responses.stream(req).finalResponse();
    const scall = f.output.find((i) => i.type === 'function_call');
    assert.ok(scall && validate(JSON.parse(scall.arguments)), JSON.stringify(f.output));
    const next = await client.responses.create({
      model: MODEL_NAME, max_output_tokens: 8, temperature: 0, tools,
      input: [
        { role: 'user', content: 'What is the weather in Paris?' },
        { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
        { type: 'function_call_output', call_id: call.call_id, output: '21 degrees' },
      ],
    });
    assert.equal(next.object, 'response');
    assert.ok(next.usage.input_tokens > r.usage.input_tokens);
  });

  test('text.format json_schema: the output parses and follows the schema', async () => {
    const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 } }, required: ['name'],
      additionalProperties: false };
    const r = await client.responses.create({
      model: MODEL_NAME, input: 'Name a cat.', max_output_tokens: 60, temperature: 0.7, seed: 3,
      text: { format: { type: 'json_schema', name: 'cat', schema, strict: true } },
    });
    assert.equal(r.status, 'completed');
    assert.ok(new Ajv().compile(schema)(JSON.parse(r.output_text)), r.output_text);
  });

  test('stored responses are refused', async () => {
    await assert.rejects(
      client.responses.create({ model: MODEL_NAME, input: 'x', previous_response_id: 'resp_1' }),
      (e) => e instanceof OpenAI.BadRequestError && /previous_response_id/.test(e.message),
    );
    await assert.rejects(
      client.responses.create({ model: MODEL_NAME, input: 'x', tools: [{ type: 'web_search' }] }),
      (e) => e instanceof OpenAI.BadRequestError && /tools\[0\]/.test(e.message),
    );
  });
});
