// Structured output through the official openai client against a real
// `strata serve` (stories260K, a random-ish small model): whatever the
// weights, a reply under `response_format` json_schema is JSON that follows
// the schema, streamed and not; `json_object` gives a JSON object; a schema
// keyword Strata cannot enforce is a 400 naming it and its path; vLLM's
// guided_* and structured_outputs forms hold the same way.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { MODEL_NAME, skipReason, startServer } from './harness.mjs';

const skip = skipReason();

const schema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    pets: { type: 'array', items: { enum: ['cat', 'dog'] }, maxItems: 3 },
  },
  required: ['name', 'age', 'pets'],
  additionalProperties: false,
};

function checkPerson(text, what) {
  let v;
  assert.doesNotThrow(() => { v = JSON.parse(text); }, `${what}: ${JSON.stringify(text)} is JSON`);
  assert.deepEqual(Object.keys(v), ['name', 'age', 'pets'], what);
  assert.equal(typeof v.name, 'string');
  assert.ok(v.name.length <= 12, what);
  assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 120, what);
  assert.ok(Array.isArray(v.pets) && v.pets.length <= 3, what);
  for (const p of v.pets) assert.ok(p === 'cat' || p === 'dog', what);
}

describe('structured output', { skip: skip ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer({ replicas: 1, slots: 2 });
    client = server.client();
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0, 'strata serve exits 0 on SIGTERM');
  });

  const base = {
    model: MODEL_NAME, messages: [{ role: 'user', content: 'Describe a person' }], max_tokens: 120,
    temperature: 1,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema, strict: true } },
  };

  test('json_schema: every reply parses and follows the schema', async () => {
    for (let seed = 1; seed <= 6; seed++) {
      const r = await client.chat.completions.create({ ...base, seed });
      assert.equal(r.choices[0].finish_reason, 'stop', `seed ${seed}`);
      checkPerson(r.choices[0].message.content, `seed ${seed}`);
    }
  });

  test('json_schema streamed gives the same reply', async () => {
    const whole = await client.chat.completions.create({ ...base, seed: 3 });
    const stream = await client.chat.completions.create({ ...base, seed: 3, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, whole.choices[0].message.content);
    checkPerson(text, 'streamed');
  });

  test('json_object gives a JSON object', async () => {
    const r = await client.chat.completions.create({
      ...base, max_tokens: 200, seed: 9, response_format: { type: 'json_object' },
    });
    if (r.choices[0].finish_reason === 'stop') {
      const v = JSON.parse(r.choices[0].message.content);
      assert.equal(typeof v, 'object');
      assert.ok(v !== null && !Array.isArray(v));
    } else {
      assert.equal(r.choices[0].finish_reason, 'length');
      assert.ok(r.choices[0].message.content.startsWith('{'));
    }
  });

  test('a GBNF grammar is enforced, and one that does not parse is a 400 saying where', async () => {
    const r = await client.completions.create({
      model: MODEL_NAME, prompt: 'Once upon a time', max_tokens: 16, temperature: 1, seed: 4,
      grammar: 'root ::= ("yes" | "no") "!"',
    });
    assert.ok(['yes!', 'no!'].includes(r.choices[0].text), JSON.stringify(r.choices[0].text));
    assert.equal(r.choices[0].finish_reason, 'stop');
    await assert.rejects(
      client.completions.create({
        model: MODEL_NAME, prompt: 'Once upon a time', max_tokens: 4, grammar: 'root ::= answer',
      }),
      (e) => e instanceof OpenAI.BadRequestError && /answer/.test(e.message) && /line 1/.test(e.message),
    );
  });

  test("vLLM's guided_choice, guided_regex, guided_json and structured_outputs are enforced", async () => {
    const cmpl = (extra, seed) => client.completions.create({
      model: MODEL_NAME, prompt: 'Once upon a time', max_tokens: 40, temperature: 1, seed, ...extra,
    });
    for (let seed = 1; seed <= 3; seed++) {
      const c = await cmpl({ guided_choice: ['happy', 'sad', 'a "quoted" one'] }, seed);
      assert.ok(['happy', 'sad', 'a "quoted" one'].includes(c.choices[0].text), c.choices[0].text);
      assert.equal(c.choices[0].finish_reason, 'stop');
      const r = await cmpl({ guided_regex: '[A-Z][a-z]{2,8} (is|was) \\d{1,3}' }, seed);
      assert.match(r.choices[0].text, /^[A-Z][a-z]{2,8} (is|was) \d{1,3}$/);
      const so = await cmpl({ structured_outputs: { regex: '(cat|dog)s?!' } }, seed);
      assert.match(so.choices[0].text, /^(cat|dog)s?!$/);
    }
    const chat = await client.chat.completions.create({ ...base, response_format: undefined, guided_json: schema });
    checkPerson(chat.choices[0].message.content, 'guided_json');
    await assert.rejects(
      cmpl({ guided_regex: 'a(?=b)' }, 1),
      (e) => e instanceof OpenAI.BadRequestError && /guided_regex/.test(e.message) && /lookarounds/.test(e.message),
    );
  });

  test('an unsupported keyword is a 400 naming it and its path', async () => {
    const bad = { type: 'object', properties: { n: { type: 'integer', multipleOf: 2 } } };
    await assert.rejects(
      client.chat.completions.create({
        ...base, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: bad } },
      }),
      (e) => e instanceof OpenAI.BadRequestError && /multipleOf/.test(e.message) &&
        /\/properties\/n\/multipleOf/.test(e.message),
    );
  });
});
