// Errors as an OpenAI client sees them: 401 for a wrong or missing key,
// 400 for a bad parameter (BadRequestError naming it), 404 for an unknown
// route or model, 405, 413 for a body over the limit; each an OpenAI-style
// error object, and the server keeps serving after each.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { MODEL_NAME, skipReason, startServer } from './harness.mjs';

const skip = skipReason();

async function errorBody(r) {
  const j = await r.json();
  assert.ok(j.error, 'an error object');
  for (const f of ['message', 'type', 'code']) assert.equal(typeof j.error[f], 'string', `error.${f}`);
  return j.error;
}

describe('errors', { skip: skip ?? false }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer();
    client = server.client();
  });
  after(async () => {
    if (server) assert.equal(await server.stop(), 0);
  });

  test('401: wrong key, and no key', async () => {
    const wrong = server.client({ apiKey: 'not-the-key' });
    await assert.rejects(
      wrong.completions.create({ model: MODEL_NAME, prompt: 'Hi', max_tokens: 2 }),
      (e) => e instanceof OpenAI.AuthenticationError && e.status === 401,
    );
    await assert.rejects(wrong.models.list(), OpenAI.AuthenticationError);
    const r = await server.fetch('/v1/models', { auth: false });
    assert.equal(r.status, 401);
    assert.equal((await errorBody(r)).type, 'authentication_error');
    // /health needs no key
    assert.equal((await server.fetch('/health', { auth: false })).status, 200);
  });

  test('400: a bad parameter, named', async () => {
    const cases = [
      [{ temperature: -1 }, 'temperature'],
      [{ top_p: 2 }, 'top_p'],
      [{ max_tokens: -5 }, 'max_tokens'],
      [{ n: 17 }, 'n'],
      [{ prompt_logprobs: 21 }, 'prompt_logprobs'],
      [{ suffix: ' the end' }, 'suffix'],
      [{ best_of: 3 }, 'best_of'],
      [{ logprobs: 6 }, 'logprobs'],
      [{ stop: Array(9).fill('x') }, 'stop'],
      [{ logit_bias: { 99999: 1 } }, 'logit_bias'],
    ];
    for (const [extra, param] of cases) {
      await assert.rejects(
        client.completions.create({ model: MODEL_NAME, prompt: 'Hi', max_tokens: 2, ...extra }),
        (e) => {
          assert.ok(e instanceof OpenAI.BadRequestError, `${param}: ${e}`);
          assert.equal(e.status, 400);
          assert.equal(e.type, 'invalid_request_error');
          assert.match(e.message, new RegExp('`' + param + '`'));
          return true;
        },
      );
    }
    await assert.rejects(
      client.chat.completions.create({
        model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }], top_logprobs: 2,
      }),
      (e) => e instanceof OpenAI.BadRequestError && /`top_logprobs`/.test(e.message),
    );
    await assert.rejects(
      client.chat.completions.create({ model: MODEL_NAME, messages: [] }),
      (e) => e instanceof OpenAI.BadRequestError && /`messages`/.test(e.message),
    );
    // malformed JSON: 400, never 500
    const r = await server.fetch('/v1/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"prompt": "Hi",',
    });
    assert.equal(r.status, 400);
    assert.equal((await errorBody(r)).code, 'invalid_json');
    // a prompt longer than the context: 400 with the numbers
    await assert.rejects(
      client.completions.create({ model: MODEL_NAME, prompt: 'a '.repeat(5000), max_tokens: 1 }),
      (e) => e instanceof OpenAI.BadRequestError && /tokens/.test(e.message),
    );
  });

  test('404: an unknown route, and an unknown model', async () => {
    const r = await server.fetch('/v1/nothing-here', { method: 'POST', body: '{}' });
    assert.equal(r.status, 404);
    assert.equal((await errorBody(r)).type, 'not_found_error');
    await assert.rejects(
      client.completions.create({ model: 'gpt-nothing', prompt: 'Hi', max_tokens: 2 }),
      (e) => e instanceof OpenAI.NotFoundError && /gpt-nothing/.test(e.message),
    );
  });

  test('405: the wrong method', async () => {
    const r = await server.fetch('/v1/completions', { method: 'GET' });
    assert.equal(r.status, 405);
    assert.equal(r.headers.get('allow'), 'POST');
    await errorBody(r);
  });

  test('413: a body over 8 MiB', async () => {
    const big = JSON.stringify({ model: MODEL_NAME, prompt: 'x'.repeat(9 << 20), max_tokens: 1 });
    const r = await server.fetch('/v1/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: big,
    });
    assert.equal(r.status, 413);
    assert.equal((await errorBody(r)).code, 'body_too_large');
    // through the client too
    await assert.rejects(
      client.completions.create({ model: MODEL_NAME, prompt: 'x'.repeat(9 << 20), max_tokens: 1 }),
      (e) => e instanceof OpenAI.APIError && e.status === 413,
    );
    // announced far over the limit: answered at once, before any body
    const head = await new Promise((resolve, reject) => {
      const sock = net.connect(server.port, '127.0.0.1', () => {
        sock.write('POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n'
          + 'Authorization: Bearer strata-e2e-key\r\nContent-Length: 1073741824\r\n\r\n');
      });
      let got = '';
      sock.setTimeout(10000, () => reject(new Error('no answer')));
      sock.on('data', (d) => { got += d; });
      sock.on('error', () => resolve(got));
      sock.on('close', () => resolve(got));
    });
    assert.match(head, /^HTTP\/1\.1 413 /);
    // and the server goes on
    const ok = await client.completions.create({ model: MODEL_NAME, prompt: 'Hi', max_tokens: 2 });
    assert.equal(ok.choices.length, 1);
  });

  test('errors are counted by status', async () => {
    const text = await server.metrics();
    assert.match(text, /^strata_requests_total\{endpoint="\/v1\/completions",status="400"\} [1-9]/m);
    assert.match(text, /^strata_requests_total\{endpoint="\/v1\/completions",status="401"\} [1-9]/m);
  });
});
