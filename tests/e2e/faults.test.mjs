// An engine killed with SIGKILL in the middle of a stream: that stream ends
// with an error (the client raises), a stream on the other replica finishes
// intact, the server restarts the engine, and requests succeed on it again.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { MODEL_NAME, drain, skipReason, startServer, waitFor } from './harness.mjs';

const skip = skipReason();
const LONG = 2000; // tokens (the context holds 2048): mid-stream at the kill, seconds at most

describe('an engine killed during a stream', { skip: skip ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = server.client();
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0);
  });

  const inFlight = async (replica) => server.metric(`strata_replica_in_flight{replica="${replica}"}`);

  // Starts a long stream and waits for its first chunk, so that it is
  // running on an engine. Returns the iterator and that chunk.
  async function startStream(seed) {
    const stream = await client.completions.create({
      model: MODEL_NAME, prompt: 'Once upon a time', max_tokens: LONG, temperature: 0.8, seed,
      logit_bias: { 2: -100 }, stream: true,
    });
    const it = stream[Symbol.asyncIterator]();
    const first = await it.next();
    assert.equal(first.done, false);
    return { it, first: first.value };
  }

  async function rest({ it, first }) {
    const s = await drain({ [Symbol.asyncIterator]: () => it });
    s.text = first.choices[0].text + s.text;
    return s;
  }

  test('fails that stream only, and the engine comes back', async () => {
    // A goes to some replica; B to the other (the router picks the one with
    // the most free slots): the in-flight gauges say which is which.
    const a = await startStream(11);
    const ra = await waitFor('A in flight', async () => {
      const f0 = await inFlight(0);
      const f1 = await inFlight(1);
      return f0 + f1 === 1 ? (f0 === 1 ? '0' : '1') : null;
    }, 10000, 5);
    const b = await startStream(22);
    const rb = ra === '0' ? 1 : 0;
    assert.equal(await inFlight(rb), 1, 'B runs on the other replica');

    const pid = server.enginePids().get(Number(ra));
    assert.ok(pid, `the engine pid of replica ${ra} is in the log`);
    assert.ok(server.childPids().has(pid), `${pid} is a child of strata serve`);
    process.kill(pid, 'SIGKILL');

    const [sa, sb] = await Promise.all([rest(a), rest(b)]);
    assert.ok(sa.error, 'the stream on the killed engine ends with an error');
    assert.match(String(sa.error.message), /engine/i);
    assert.ok(sa.text.length > 0 && sa.finish === null);
    assert.equal(sb.error, null, `the other stream finishes: ${sb.error}`);
    assert.equal(sb.finish, 'length');
    assert.equal(sb.timings.predicted_n, LONG);
    assert.equal(sb.timings.replica, rb);

    // restarted: a new engine, counted, both replicas ready again
    await waitFor('the restart', async () => {
      const h = await server.health();
      const pids = server.enginePids();
      return h.replicas_ready === 2 && pids.get(Number(ra)) !== pid;
    }, 30000, 50);
    assert.equal(await server.metric(`strata_engine_restarts_total{replica="${ra}"}`), 1);
    assert.equal(await server.metric(`strata_engine_restarts_total{replica="${rb}"}`), 0);

    // requests succeed again, on the restarted replica too: four at once
    // fill both replicas' two slots
    const served = new Set();
    for (let round = 0; round < 5 && !served.has(Number(ra)); round++) {
      const rs = await Promise.all([1, 2, 3, 4].map((k) => client.completions.create({
        model: MODEL_NAME, prompt: `A story number ${k}`, max_tokens: 200, seed: k,
        logit_bias: { 2: -100 },
      })));
      for (const r of rs) {
        assert.equal(r.choices[0].finish_reason, 'length');
        served.add(r.timings.replica);
      }
    }
    assert.ok(served.has(Number(ra)), 'the restarted replica serves again');
  });
});
