#!/usr/bin/env python3
# Multi-turn conversations through `strata serve` with several replicas,
# once per routing policy (`--route prefix` and `--route load`), to see
# whether a conversation's next turn reaches the replica that holds its
# history in the prefix cache. Prompts are token ids (random byte tokens
# after a BOS, seeded), so no tokenizer or template is involved and random
# weights need no logit bias. Prints Markdown tables; asserts nothing.
#
#   bench/route.py MODEL.gguf [--strata build/strata] [--replicas 4] [--slots 2]
#                  [--conversations 16] [--turns 6] [--system-tokens 96]
#                  [--turn-tokens 64] [--max-tokens 8] [--think-ms 300]
#                  [--seed 1] [--routes prefix,load] [-t 1] [--block-tokens 32]
#                  [--serve-arg=ARG ...]
#
# Conversation c (all run at once, one client thread each) has its own
# --system-tokens prefix; turn i's prompt is turn i-1's plus --turn-tokens new
# tokens (the replies are not fed back: the prompt alone is what the cache
# can hold). Between turns a client sleeps a seeded random think time in
# [0, --think-ms] ms. Every request streams (TTFT: from sending it to the
# first content chunk, client side) and asks for usage, so its last chunk
# carries usage.prompt_tokens_details.cached_tokens and timings.replica.
#
# Hit rate: cached tokens over cacheable prompt tokens, turns 2.. only; turn
# i's cacheable tokens are turn i-1's prompt in whole --block-tokens blocks
# (what the engine's prefix cache can hold of it). Load: requests per replica
# (timings.replica), and the largest over the mean. Tokens/s: generated
# tokens over the run's wall time (think time included). p50 is the median,
# p99 the nearest rank. A policy the binary does not know (no --route in
# `strata serve --help`) is skipped with a note.
#
# The server listens on a free port of 127.0.0.1 only, each request has a
# timeout, and the server is stopped on exit, error or Ctrl-C.
import argparse, http.client, json, random, signal, statistics, subprocess, sys
import threading, time

from benchlib import free_port, request, start, stop_all


def start_server(a, route, ctx):
    port = free_port()
    argv = [a.strata, "serve", "-m", a.model, "--port", str(port), "--replicas", str(a.replicas),
            "--slots", str(a.slots), "--ctx", str(ctx), "-t", str(a.threads),
            "--ping-timeout", "60000"] + a.serve_arg
    if route is not None:
        argv += ["--route", route]
    want = a.replicas
    start(f"serve-{route}", argv, port,
          lambda st, raw: st == 200 and json.loads(raw).get("replicas_ready") == want, 600)
    return port


def turn(port, ids, max_tokens):
    """Streams one completion of ids; returns (ttft ms, completion tokens,
    cached tokens, replica)."""
    body = {"prompt": ids, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    try:
        t0 = time.perf_counter()
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
        ttft = None
        usage, timings = None, {}
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if "error" in j:
                raise RuntimeError(f"stream error: {j['error']}")
            ch = j.get("choices") or []
            if ttft is None and ch and ch[0].get("text"):
                ttft = (time.perf_counter() - t0) * 1000
            if j.get("usage"):
                usage = j["usage"]
            if j.get("timings"):
                timings = j["timings"]
        if ttft is None:
            ttft = (time.perf_counter() - t0) * 1000
        cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
        return ttft, (usage or {}).get("completion_tokens", 0), cached, timings.get("replica")
    finally:
        c.close()


def p99(xs):
    s = sorted(xs)
    return s[max(0, -(-len(s) * 99 // 100) - 1)] if s else float("nan")


def run(a, route, ctx):
    port = start_server(a, route, ctx)
    results = []  # (conversation, turn, ttft, gen, cached, cacheable, replica)
    lock = threading.Lock()
    errors = []

    def conversation(ci):
        rng = random.Random(a.seed * 1000 + ci)
        ids = [1] + [rng.randrange(3, 259) for _ in range(a.system_tokens)]
        prev_len = 0
        for t in range(a.turns):
            ids = ids + [rng.randrange(3, 259) for _ in range(a.turn_tokens)]
            try:
                ttft, gen, cached, rep = turn(port, ids, a.max_tokens)
            except (OSError, RuntimeError, ValueError) as e:
                with lock:
                    errors.append(f"conversation {ci} turn {t + 1}: {e}")
                return
            cacheable = prev_len // a.block_tokens * a.block_tokens
            with lock:
                results.append((ci, t, ttft, gen, cached, cacheable, rep))
            prev_len = len(ids)
            time.sleep(rng.uniform(0, a.think_ms) / 1000)

    t0 = time.perf_counter()
    th = [threading.Thread(target=conversation, args=(ci,)) for ci in range(a.conversations)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    wall = time.perf_counter() - t0
    stop_all()
    if errors:
        sys.exit("\n".join(errors[:5]))
    return results, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--conversations", type=int, default=16)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--system-tokens", type=int, default=96)
    ap.add_argument("--turn-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--think-ms", type=float, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--routes", default="prefix,load")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--block-tokens", type=int, default=32)
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="one more argument for strata serve (repeat: --serve-arg=--kv-max --serve-arg=8192)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    ctx = 1 + a.system_tokens + a.turns * a.turn_tokens + a.max_tokens + 8
    helptext = subprocess.run([a.strata, "serve", "--help"], capture_output=True, text=True)
    has_route = "--route" in helptext.stdout + helptext.stderr
    rows = []
    try:
        for route in a.routes.split(","):
            if not has_route and route != "load":
                print(f"(skipped --route {route}: this strata has no --route)\n")
                continue
            res, wall = run(a, route if has_route else None, ctx)
            rows.append((route, res, wall))
    finally:
        stop_all()
    print(f"{a.replicas} replicas x {a.slots} slots, {a.conversations} conversations x "
          f"{a.turns} turns, system {a.system_tokens} + {a.turn_tokens} tokens a turn, "
          f"max_tokens {a.max_tokens}, think 0..{a.think_ms:g} ms, seed {a.seed}\n")
    print("| route | hit rate | tokens/s | requests per replica | max / mean |")
    print("|---|---:|---:|---|---:|")
    for route, res, wall in rows:
        cached = sum(min(r[4], r[5]) for r in res if r[1] > 0)
        cacheable = sum(r[5] for r in res if r[1] > 0)
        gen = sum(r[3] for r in res)
        per = [sum(1 for r in res if r[6] == i) for i in range(a.replicas)]
        mean = len(res) / a.replicas
        print(f"| {route} | {100 * cached / cacheable if cacheable else float('nan'):.1f} % | "
              f"{gen / wall:.1f} | {' / '.join(map(str, per))} | {max(per) / mean:.2f} |")
    print("\nTTFT ms by turn, p50 / p99:\n")
    print("| route | " + " | ".join(f"turn {t + 1}" for t in range(a.turns)) + " |")
    print("|---|" + "---:|" * a.turns)
    for route, res, _ in rows:
        cells = []
        for t in range(a.turns):
            xs = [r[2] for r in res if r[1] == t]
            cells.append(f"{statistics.median(xs):.0f} / {p99(xs):.0f}" if xs else "-")
        print(f"| {route} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
