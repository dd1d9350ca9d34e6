// Schema conformance through the official openai client: 20 JSON Schemas,
// from flat objects to recursive ones with enums, formats and patterns, each
// asked of a real `strata serve` (stories260K) with several seeds at
// temperature 1, so the model's own preferences are all over the place.
// Every reply must parse and validate against its schema with ajv (and
// ajv-formats for `format`), a validator independent of Strata's compiler.
// Also the client's zod helper: `chat.completions.parse` with
// `zodResponseFormat` gives a parsed object that the zod schema accepts.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { MODEL_NAME, skipReason, startServer } from './harness.mjs';

const skip = skipReason();

const str = (n) => ({ type: 'string', maxLength: n });
const obj = (properties, required = Object.keys(properties)) => ({
  type: 'object', properties, required, additionalProperties: false,
});

const schemas = {
  flat: obj({ a: str(8), b: { type: 'integer' }, c: { type: 'boolean' } }),
  optional: obj({ id: { type: 'integer', minimum: 1, maximum: 999 }, note: str(10) }, ['id']),
  types: obj({ n: { type: 'number' }, z: { type: 'null' }, s: str(5), i: { type: 'integer' } }),
  type_list: obj({ v: { type: ['string', 'integer', 'null'], maxLength: 6 } }),
  enum_mixed: obj({ e: { enum: ['red', 'green', 3, null, true] } }),
  const_: obj({ kind: { const: 'point' }, x: { type: 'integer' } }),
  int_range: obj({ neg: { type: 'integer', minimum: -50, maximum: -3 },
    big: { type: 'integer', minimum: 1000, exclusiveMaximum: 1234 } }),
  string_len: obj({ s: { type: 'string', minLength: 3, maxLength: 7 } }),
  pattern: obj({ code: { type: 'string', pattern: '^[A-Z]{2}-\\d{3,4}$' },
    hex: { type: 'string', pattern: '^(0x)?[0-9a-f]{1,8}$' } }),
  formats: obj({ day: { type: 'string', format: 'date' }, at: { type: 'string', format: 'time' },
    when: { type: 'string', format: 'date-time' } }),
  uuid_email: obj({ id: { type: 'string', format: 'uuid' }, mail: { type: 'string', format: 'email' } }),
  array_bounds: obj({ xs: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 9 },
    minItems: 2, maxItems: 5 } }),
  prefix_items: { type: 'array', prefixItems: [str(4), { type: 'integer' }, { type: 'boolean' }],
    items: false },
  array_of_objects: obj({ people: { type: 'array', maxItems: 3,
    items: obj({ name: str(6), age: { type: 'integer', minimum: 0, maximum: 120 } }) } }),
  nested: obj({ outer: obj({ inner: obj({ leaf: { enum: ['x', 'y'] } }) }) }),
  any_of: obj({ v: { anyOf: [{ type: 'integer', minimum: 0, maximum: 5 }, str(3), { type: 'null' }] } }),
  one_of: { oneOf: [obj({ cat: str(5) }), obj({ dog: { type: 'integer' } })] },
  all_of: { allOf: [obj({ a: str(4) }), obj({ b: { type: 'boolean' } })] },
  unicode_enum: obj({ w: { enum: ['naïve', 'größe', '日本語'] }, n: { type: 'integer', minimum: 0, maximum: 3 } }),
  recursive: {
    $defs: {
      node: { type: 'object', properties: { v: { type: 'integer', minimum: 0, maximum: 9 },
        kids: { type: 'array', maxItems: 2, items: { $ref: '#/$defs/node' } } },
        required: ['v'], additionalProperties: false },
    },
    $ref: '#/$defs/node',
  },
};

// allOf of objects with additionalProperties false each would reject the
// merged object under plain JSON Schema rules; Strata merges them (as its
// README says), so validate that schema as the merged object it means.
const validateAs = {
  all_of: obj({ a: str(4), b: { type: 'boolean' } }),
};

// draft 2020-12: prefixItems, $defs
const ajv = new Ajv2020({ allErrors: true });
addFormats(ajv);
const SEEDS = [1, 2, 3, 4, 5];

describe('schema conformance', { skip: skip ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer({ replicas: 1, slots: 4 });
    client = server.client();
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0, 'strata serve exits 0 on SIGTERM');
  });

  test(`${Object.keys(schemas).length} schemas x ${SEEDS.length} seeds: every reply validates`, async () => {
    assert.equal(Object.keys(schemas).length, 20);
    const jobs = []; // functions, run 8 at a time (the server's queue is bounded)
    for (const [name, schema] of Object.entries(schemas)) {
      const validate = ajv.compile(validateAs[name] ?? schema);
      for (const seed of SEEDS) {
        jobs.push(() => client.chat.completions.create({
          model: MODEL_NAME, messages: [{ role: 'user', content: `Give me ${name}` }],
          max_tokens: 400, temperature: 1, seed,
          response_format: { type: 'json_schema', json_schema: { name, schema } },
        }).then((r) => {
          const what = `${name}, seed ${seed}`;
          const text = r.choices[0].message.content;
          assert.equal(r.choices[0].finish_reason, 'stop', `${what}: ${JSON.stringify(text)}`);
          let v;
          assert.doesNotThrow(() => { v = JSON.parse(text); }, `${what}: ${JSON.stringify(text)} is JSON`);
          assert.ok(validate(v), `${what}: ${text} fails: ${ajv.errorsText(validate.errors)}`);
        }));
      }
    }
    const failures = [];
    for (let i = 0; i < jobs.length; i += 8) {
      const done = await Promise.allSettled(jobs.slice(i, i + 8).map((f) => f()));
      for (const d of done) if (d.status === 'rejected') failures.push(d.reason.message);
    }
    assert.deepEqual(failures, [], `${failures.length} of ${jobs.length} replies failed`);
  });

  test('chat.completions.parse with zodResponseFormat', async () => {
    const Person = z.object({
      name: z.string().max(12),
      age: z.number().int().min(0).max(120),
      pets: z.array(z.enum(['cat', 'dog'])).max(3),
    });
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.parse({
        model: MODEL_NAME, messages: [{ role: 'user', content: 'Describe a person' }],
        max_tokens: 200, temperature: 1, seed,
        response_format: zodResponseFormat(Person, 'person'),
      });
      const m = r.choices[0].message;
      assert.ok(m.parsed, `seed ${seed}: parsed (${m.content})`);
      assert.deepEqual(Person.parse(m.parsed), m.parsed, `seed ${seed}`);
    }
  });
});
