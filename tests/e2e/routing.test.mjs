// Prefix-aware routing against a real `strata serve` (stories260K, 3
// replicas x 2 slots): 6 conversations of 5 turns, interleaved, each turn's
// prompt its conversation's previous prompt plus new tokens.
// Every turn after the first must reach the replica that served its
// conversation before, and the engine must say it reused the history
// (cached_tokens), as the router expected (timings.route_cached_n). With
// --route load the same run is served too, and the decision metrics say
// which rule routed each request.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { MODEL_NAME, skipReason, startServer } from './harness.mjs';

const skip = skipReason();
const N_CONV = 6;
const TURNS = 5;

// A deterministic stream of token ids inside stories260K's vocabulary
// (3..258: its byte tokens).
function idsFor(conv, turn, n) {
  const out = [];
  let x = (conv + 1) * 7919 + turn * 104729;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out.push(3 + (x % 256));
  }
  return out;
}

async function complete(server, prompt) {
  const r = await server.fetch('/v1/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL_NAME, prompt, max_tokens: 8, temperature: 0}),
  });
  const body = await r.json();
  assert.equal(r.status, 200, JSON.stringify(body));
  return body;
}

async function conversations(server) {
  const history = Array.from({ length: N_CONV }, (_, c) => idsFor(c, 0, 80));
  const replicaOf = new Array(N_CONV).fill(-1);
  const turns = [];
  for (let t = 0; t < TURNS; t++) {
    for (let c = 0; c < N_CONV; c++) {
      const prompt = history[c];
      const r = await complete(server, prompt);
      turns.push({ conv: c, turn: t, replica: r.timings.replica,
        cached: r.usage.prompt_tokens_details?.cached_tokens ?? 0,
        expected: r.timings.route_cached_n, prompt_n: prompt.length });
      if (t === 0) replicaOf[c] = r.timings.replica;
      // the next turn: this prompt, then new user tokens
      history[c] = prompt.concat(idsFor(c, t + 1, 40));
    }
  }
  return { turns, replicaOf };
}

describe('prefix-aware routing', { skip: skip ?? false }, () => {
  let server;
  before(async () => {
    server = await startServer({ replicas: 3, slots: 2 });
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0, 'strata serve exits 0 on SIGTERM');
  });

  test('every later turn reaches its conversation\'s replica and reuses its cache', async () => {
    const { turns, replicaOf } = await conversations(server);
    // new conversations spread over the idle replicas
    assert.equal(new Set(replicaOf).size, 3, `first turns on ${replicaOf}`);
    for (const t of turns) {
      if (t.turn === 0) {
        assert.equal(t.expected, 0);
        continue;
      }
      const what = `conversation ${t.conv} turn ${t.turn + 1}`;
      assert.equal(t.replica, replicaOf[t.conv], what);
      assert.ok(t.expected >= 64, `${what}: the router expected ${t.expected}`);
      assert.ok(t.cached >= t.expected - 32 && t.cached > 0,
        `${what}: cached ${t.cached}, expected ${t.expected}`);
    }
    const prefix = await server.metric('strata_route_decisions_total{reason="prefix"}');
    assert.ok(prefix >= N_CONV * (TURNS - 1), `prefix decisions ${prefix}`);
  });
});

describe('load routing', { skip: skip ?? false }, () => {
  let server;
  before(async () => {
    server = await startServer({ replicas: 3, slots: 2, args: ['--route', 'load'] });
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0, 'strata serve exits 0 on SIGTERM');
  });

  test('serves the same conversations, routed by load alone', async () => {
    const { turns } = await conversations(server);
    assert.equal(turns.length, N_CONV * TURNS);
    for (const t of turns) assert.equal(t.expected, 0);
    assert.equal(await server.metric('strata_route_decisions_total{reason="load"}'), N_CONV * TURNS);
    assert.equal(await server.metric('strata_route_decisions_total{reason="prefix"}'), 0);
  });
});
