// Requests never mix: 16 requests with different prompts and seeds, sent
// at once to 2 replicas x 2 slots (so most of them queue), give exactly the
// texts they give one at a time. Sampling is seeded per request and the
// forward pass is batch-invariant, so any difference is a bug: a token,
// a seed or a slot handed to the wrong request.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { MODEL_NAME, drain, skipReason, startServer } from './harness.mjs';

const skip = skipReason();
const SUBJECTS = ['a cat', 'the sun', 'a boy named Tom', 'a red ball', 'the old tree', 'a little bird',
  'the big dog', 'a girl named Sue', 'the happy fish', 'a toy car', 'the moon', 'a kind bear',
  'the small frog', 'a funny clown', 'the blue sky', 'a brave mouse'];

describe('16 concurrent requests', { skip: skip ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = server.client();
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0);
  });

  const request = (i, stream) => {
    const body = {
      model: MODEL_NAME, max_tokens: 40 + (i % 4) * 8, temperature: 0.9, seed: 1000 + i * 7,
      logit_bias: { 2: -100 }, stream,
    };
    if (i % 2 === 0) {
      return client.completions.create({ ...body, prompt: `Once upon a time there was ${SUBJECTS[i]}.` });
    }
    return client.chat.completions.create({
      ...body, messages: [{ role: 'user', content: `Tell me about ${SUBJECTS[i]}.` }],
    });
  };
  const textOf = (i, r) => (i % 2 === 0 ? r.choices[0].text : r.choices[0].message.content);

  test('give exactly what they give one at a time', async () => {
    const alone = [];
    for (let i = 0; i < 16; i++) alone.push(textOf(i, await request(i, false)));
    assert.equal(new Set(alone).size, 16, 'sixteen different texts');

    const together = await Promise.all(SUBJECTS.map((_, i) => request(i, false)));
    const replicas = new Set();
    together.forEach((r, i) => {
      assert.equal(textOf(i, r), alone[i], `request ${i}`);
      assert.equal(r.usage.completion_tokens, 40 + (i % 4) * 8, `request ${i} usage`);
      assert.equal(r.timings.predicted_n, 40 + (i % 4) * 8, `request ${i} timings`);
      replicas.add(r.timings.replica);
    });
    assert.deepEqual([...replicas].sort(), [0, 1], 'both replicas served');

    // streamed at once, the same again
    const streams = await Promise.all(SUBJECTS.map((_, i) => request(i, true)));
    const drained = await Promise.all(streams.map((s, i) => drain(s, i % 2 === 1)));
    drained.forEach((d, i) => {
      assert.equal(d.error, null, `stream ${i}`);
      assert.equal(d.text, alone[i], `stream ${i}`);
      assert.equal(d.finish, 'length');
    });
  });
});
