// The end-to-end tests' server: each test file starts its own real
// `strata serve` of stories260K on 127.0.0.1 (a port the kernel picks, read
// back through --port-file), with an API key, and stops it when done.
//
// Environment:
//   STRATA_BIN        the strata binary (default: <repo>/build/strata)
//   STRATA_TEST_DATA  the reference data (default: <repo>/../shared/data)
//   STRATA_E2E_PIDS   a file that gets each server's pid, one a line, so the
//                     script that runs the tests can stop any left behind
//
// Every wait here is a bounded poll; nothing depends on how fast the
// machine is beyond those generous bounds.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');
export const API_KEY = 'strata-e2e-key';
export const MODEL_NAME = 'stories260K';

export function strataBin() {
  return process.env.STRATA_BIN || path.join(repoRoot, 'build', 'strata');
}

// The model file, or null (the tests then skip, saying why).
export function modelPath() {
  const dirs = [process.env.STRATA_TEST_DATA, path.resolve(repoRoot, '..', 'shared', 'data')];
  for (const d of dirs) {
    if (d && fs.existsSync(path.join(d, 'models', 'stories260K.gguf'))) {
      return path.join(d, 'models', 'stories260K.gguf');
    }
  }
  return null;
}

// Why the tests cannot run here, or null when they can.
export function skipReason() {
  if (!modelPath()) {
    return 'reference data not found (set STRATA_TEST_DATA or place it at ../shared/data)';
  }
  if (!fs.existsSync(strataBin())) return `no strata binary at ${strataBin()} (set STRATA_BIN)`;
  return null;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls fn (async, returns a truthy value when done) every stepMs up to
// limitMs; returns its value or throws with `what`.
export async function waitFor(what, fn, limitMs = 30000, stepMs = 50) {
  const end = Date.now() + limitMs;
  for (;;) {
    let v;
    try {
      v = await fn();
    } catch {
      v = undefined;
    }
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(stepMs);
  }
}

const live = new Set();
process.on('exit', () => {
  for (const child of live) {
    try {
      child.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
});

export class Server {
  constructor(child, dir, port, replicas) {
    this.child = child;
    this.pid = child.pid;
    this.dir = dir;
    this.port = port;
    this.replicas = replicas;
    this.origin = `http://127.0.0.1:${port}`;
    this.baseURL = `${this.origin}/v1`;
    this.logPath = path.join(dir, 'serve.log');
  }

  // An openai client for this server; retries off so that each call is one
  // request and errors surface as they are.
  client(opts = {}) {
    return new OpenAI({ baseURL: this.baseURL, apiKey: API_KEY, maxRetries: 0, timeout: 60000, ...opts });
  }

  // fetch on this server, with the key unless auth is false.
  fetch(route, { auth = true, headers = {}, ...init } = {}) {
    const h = { ...headers };
    if (auth) h.Authorization = `Bearer ${API_KEY}`;
    return fetch(this.origin + route, { ...init, headers: h });
  }

  async health() {
    const r = await fetch(`${this.origin}/health`);
    const body = await r.json();
    return { ...body, httpStatus: r.status };
  }

  async metrics() {
    const r = await this.fetch('/metrics');
    if (r.status !== 200) throw new Error(`/metrics answered ${r.status}`);
    return r.text();
  }

  // The value of one metric line (name with its labels, exactly), or null.
  async metric(series) {
    const text = await this.metrics();
    for (const line of text.split('\n')) {
      if (line.startsWith(series + ' ')) return Number(line.slice(series.length + 1));
    }
    return null;
  }

  log() {
    try {
      return fs.readFileSync(this.logPath, 'utf8');
    } catch {
      return '';
    }
  }

  // replica index -> pid of its engine, from the server's log: the latest
  // "replica N: ready (pid P" line of each.
  enginePids() {
    const pids = new Map();
    for (const m of this.log().matchAll(/replica (\d+): ready \(pid (\d+)/g)) {
      pids.set(Number(m[1]), Number(m[2]));
    }
    return pids;
  }

  // The server's live child processes (from /proc), to check that a pid
  // about to be signalled is one of ours.
  childPids() {
    const out = new Set();
    const taskDir = `/proc/${this.pid}/task`;
    for (const t of fs.readdirSync(taskDir)) {
      let text = '';
      try {
        text = fs.readFileSync(path.join(taskDir, t, 'children'), 'utf8');
      } catch {
        continue;
      }
      for (const p of text.split(/\s+/)) if (p) out.add(Number(p));
    }
    return out;
  }

  async stop() {
    if (this.child.exitCode !== null || this.child.signalCode !== null) {
      live.delete(this.child);
      return this.child.exitCode;
    }
    const exited = new Promise((r) => this.child.once('exit', (code, sig) => r(code ?? sig)));
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 15000);
    const code = await exited;
    clearTimeout(timer);
    live.delete(this.child);
    if (code !== 0) process.stderr.write(`strata serve exited with ${code}; its log ends:\n${this.log().slice(-3000)}\n`);
    fs.rmSync(this.dir, { recursive: true, force: true });
    return code;
  }
}

// Starts `strata serve` and waits until every replica is ready.
export async function startServer({ replicas = 2, slots = 2, args = [] } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-e2e-'));
  const portFile = path.join(dir, 'port');
  const log = fs.openSync(path.join(dir, 'serve.log'), 'w');
  const argv = ['serve', '-m', modelPath(), '--replicas', String(replicas), '--slots', String(slots),
    '--host', '127.0.0.1', '--port', '0', '--port-file', portFile, '-t', '1',
    '--api-key', API_KEY, ...args];
  const child = spawn(strataBin(), argv, { stdio: ['ignore', 'ignore', log] });
  fs.closeSync(log);
  live.add(child);
  if (process.env.STRATA_E2E_PIDS) fs.appendFileSync(process.env.STRATA_E2E_PIDS, `${child.pid}\n`);
  const failed = new Promise((_, reject) => child.once('exit', (code, sig) => {
    reject(new Error(`strata serve exited early (${code ?? sig}): ${fs.readFileSync(path.join(dir, 'serve.log'), 'utf8').slice(-2000)}`));
  }));
  failed.catch(() => {}); // only awaited while starting
  const port = await Promise.race([failed, waitFor('the port file', async () => {
    const t = fs.existsSync(portFile) ? fs.readFileSync(portFile, 'utf8').trim() : '';
    return t ? Number(t) : 0;
  })]);
  const s = new Server(child, dir, port, replicas);
  await Promise.race([failed, waitFor('every replica to be ready', async () => {
    const h = await s.health();
    return h.httpStatus === 200 && h.replicas_ready === replicas;
  })]);
  return s;
}

// Reads a completions or chat stream to its end: the text, the chunks, and
// the error it ended with (null when it ended normally).
export async function drain(stream, chat = false) {
  const out = { text: '', chunks: [], error: null, finish: null, usage: null, timings: null };
  try {
    for await (const c of stream) {
      out.chunks.push(c);
      const choice = c.choices?.[0];
      if (choice) {
        out.text += (chat ? choice.delta?.content : choice.text) ?? '';
        if (choice.finish_reason) out.finish = choice.finish_reason;
      }
      if (c.usage) out.usage = c.usage;
      if (c.timings) out.timings = c.timings;
    }
  } catch (e) {
    out.error = e;
  }
  return out;
}
