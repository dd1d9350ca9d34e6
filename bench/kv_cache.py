#!/usr/bin/env python3
# Benchmarks of the engine's prefix cache through `strata serve`, against the
# cache turned off (`--prefix-cache-mib 0`) and, for the chat, llama-server on
# the same file and threads. Prompts are token ids (random byte tokens after a
# BOS), sent as the same array to every server, so no tokenizer or chat
# template differs between them and random weights need no logit bias. A
# request asks for one token (max_tokens / n_predict 1): the client's time
# from sending it to having the whole response is its time to first token
# (prefill plus one sampled token plus the HTTP round trip, alike for both
# servers). Prints Markdown tables; asserts nothing.
#
#   bench/kv_cache.py chat   MODEL.gguf [--strata build/strata] [--llama-server PATH]
#                            [--turns 8] [--turn-tokens 250] [--reps 3] [-t 2]
#   bench/kv_cache.py shared MODEL.gguf [--strata build/strata] [--prefix 2000]
#                            [--question 50] [--requests 16] [--concurrency 4]
#                            [--requests-off N] [--reps 1] [-t 2]
#
# chat: --reps conversations of --turns turns; turn i's prompt is turn i-1's
#   plus --turn-tokens new tokens. Every turn goes to each server in turn
#   (strata with the cache, strata without, llama-server with its own
#   cache_prompt), so load from elsewhere on the machine falls on all alike.
#   Also a cold --turn-tokens prompt on strata (the target's yardstick).
# shared: --requests requests, --concurrency at a time, each a --prefix-token
#   system prompt (new for every repetition, so each starts cold) and its own
#   --question-token question; cache on, then off (with --requests-off
#   requests, default the same, to bound a slow cold run), alternating over
#   --reps. p50 is the median, p99 the nearest rank (the largest of up to 99).
#
# LLAMA_SERVER=path works as --llama-server. Servers listen on free ports of
# 127.0.0.1 only, each request has a timeout, and every server is stopped on
# exit, error or Ctrl-C.
import argparse, json, os, random, signal, statistics, sys
import threading, time

from benchlib import free_port, request, start, stop_all

class Server:
    def __init__(self, name, port, kind):
        self.name, self.port, self.kind = name, port, kind

    def ttft(self, ids, cache=True):
        """Client ms of a one-token completion of ids, and the tokens the
        server says it reused (None when it does not say)."""
        if self.kind == "strata":
            body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "cache_prompt": cache}
            path = "/v1/completions"
        else:
            body = {"prompt": ids, "n_predict": 1, "temperature": 0, "cache_prompt": cache}
            path = "/completion"
        t0 = time.perf_counter()
        st, raw = request(self.port, "POST", path, body, 900)
        ms = (time.perf_counter() - t0) * 1000
        if st != 200:
            sys.exit(f"{self.name}: HTTP {st}: {raw[:300]!r}")
        j = json.loads(raw)
        if self.kind == "strata":
            reused = j.get("timings", {}).get("cached_n")
        else:
            t = j.get("timings", {})
            reused = len(ids) - t["prompt_n"] if "prompt_n" in t else None
        return ms, reused


def strata_server(a, name, extra, slots, ctx):
    port = free_port()
    start(name, [a.strata, "serve", "-m", a.model, "--port", str(port), "--slots", str(slots),
                 "--ctx", str(ctx), "-t", str(a.threads), "--ping-timeout", "60000"] + extra,
          port)
    return Server(name, port, "strata")


def llama_server(a, name, slots, ctx):
    port = free_port()
    start(name, [a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--port", str(port),
                 "-t", str(a.threads), "-tb", str(a.threads), "-np", str(slots),
                 "-c", str(ctx * slots), "--no-webui"], port)
    return Server(name, port, "llama")


def tokens(rng, n):
    return [rng.randrange(3, 259) for _ in range(n)]  # byte tokens of the preset's vocabulary


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def chat(a):
    ctx = a.turns * a.turn_tokens + 64
    servers = [strata_server(a, "strata cache on", [], 1, ctx),
               strata_server(a, "strata cache off", ["--prefix-cache-mib", "0"], 1, ctx)]
    if a.llama_server:
        servers.append(llama_server(a, "llama-server", 1, ctx))
    ms = {s.name: [[] for _ in range(a.turns)] for s in servers}
    reused = {s.name: [None] * a.turns for s in servers}
    cold = []
    for rep in range(a.reps):
        rng = random.Random(1000 + rep)
        cold.append(servers[0].ttft([1] + tokens(rng, a.turn_tokens - 1), cache=False)[0])
        hist = [1]
        for t in range(a.turns):
            hist = hist + tokens(rng, a.turn_tokens - (1 if t == 0 else 0))
            order = servers if (rep + t) % 2 == 0 else servers[::-1]  # alternate who goes first
            for s in order:
                m, r = s.ttft(hist)
                ms[s.name][t].append(m)
                reused[s.name][t] = r
            print(f"rep {rep} turn {t + 1}: " + ", ".join(f"{s.name} {ms[s.name][t][-1]:.0f} ms"
                                                          for s in servers), file=sys.stderr)
    c = med(cold)
    print(f"\nMulti-turn chat: {os.path.basename(a.model)}, -t {a.threads}, {a.turns} turns of "
          f"{a.turn_tokens} tokens, median of {a.reps} conversations; TTFT in ms (reused tokens).")
    print(f"Cold {a.turn_tokens}-token prompt on strata: {c:.0f} ms.\n")
    head = "| turn | prompt | " + " | ".join(s.name for s in servers) + " | on / cold |"
    if a.llama_server:
        head += " on / llama-server |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for t in range(a.turns):
        on = med(ms[servers[0].name][t])
        row = f"| {t + 1} | {(t + 1) * a.turn_tokens} | " + " | ".join(
            f"{med(ms[s.name][t]):.0f} ({reused[s.name][t]})" for s in servers)
        row += f" | {on / c:.2f} |"
        if a.llama_server:
            row += f" {on / med(ms['llama-server'][t]):.2f} |"
        print(row)


def shared(a):
    ctx = a.prefix + a.question + 64
    on = strata_server(a, "strata cache on", [], a.concurrency, ctx)
    off = strata_server(a, "strata cache off", ["--prefix-cache-mib", "0"], a.concurrency, ctx)
    res = {on.name: [], off.name: []}
    for rep in range(a.reps):
        for s in ([on, off] if rep % 2 == 0 else [off, on]):
            n = a.requests if s is on else (a.requests_off or a.requests)
            rng = random.Random(5000 + rep)
            system = [1] + tokens(rng, a.prefix - 1)
            qs = [system + tokens(rng, a.question) for _ in range(n)]
            out, lock, nxt = [None] * n, threading.Lock(), [0]

            def worker():
                while True:
                    with lock:
                        i = nxt[0]
                        nxt[0] += 1
                    if i >= n:
                        return
                    out[i] = s.ttft(qs[i])

            t0 = time.perf_counter()
            th = [threading.Thread(target=worker) for _ in range(a.concurrency)]
            for x in th:
                x.start()
            for x in th:
                x.join()
            wall = time.perf_counter() - t0
            lat = sorted(o[0] for o in out)
            p99 = lat[min(len(lat) - 1, max(0, -(-99 * len(lat) // 100) - 1))]
            res[s.name].append((statistics.median(lat), p99, wall, n, sum(o[1] or 0 for o in out)))
            print(f"rep {rep} {s.name}: {n} requests, p50 {statistics.median(lat):.0f} ms, "
                  f"p99 {p99:.0f} ms, wall {wall:.1f} s", file=sys.stderr)
    print(f"\nShared prefix: {os.path.basename(a.model)}, -t {a.threads}, {a.prefix}-token system "
          f"prompt + {a.question}-token questions, {a.concurrency} at a time, "
          f"{a.concurrency} slots; median over {a.reps} repetitions.\n")
    print("| server | requests | TTFT p50 ms | TTFT p99 ms | wall s | wall per request s | reused tokens |")
    print("|---|---|---|---|---|---|---|")
    for name, rs in res.items():
        print(f"| {name} | {rs[0][3]} | {med([r[0] for r in rs]):.0f} | {med([r[1] for r in rs]):.0f} "
              f"| {med([r[2] for r in rs]):.1f} | {med([r[2] / r[3] for r in rs]):.2f} "
              f"| {med([r[4] for r in rs]):.0f} |")
    p_on, p_off = med([r[0] for r in res[on.name]]), med([r[0] for r in res[off.name]])
    print(f"\nTTFT p50, off / on: {p_off / p_on:.1f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["chat", "shared"])
    ap.add_argument("model")
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--turn-tokens", type=int, default=250)
    ap.add_argument("--prefix", type=int, default=2000)
    ap.add_argument("--question", type=int, default=50)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--requests-off", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=4)
    a = ap.parse_args()
    if a.reps is None:
        a.reps = 3 if a.mode == "chat" else 1
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: sys.exit(130))
    try:
        chat(a) if a.mode == "chat" else shared(a)
    finally:
        stop_all()


if __name__ == "__main__":
    main()
