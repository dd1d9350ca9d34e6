#!/usr/bin/env python3
# Decode speed with and without a grammar, on one engine, side by side.
#
# Starts `strata engine` on the model (1 slot) and sends seeded requests of
# the same prompt, alternating: without a grammar, then with a JSON grammar
# (the rules of tests/engine/json_gbnf.h), so the machine's load falls on
# both alike. The grammar's root is an object of 16 members (values any
# JSON), so that a random model cannot close it after a few tokens and the
# constrained requests run about as long as the free ones. A request's decode rate is predicted_n / predicted_ms of its
# `done` stats (the engine's own clock: steps, sampling and masks). Prints
# medians per mode and their ratio. Only talks to the engine over its
# stdin/stdout.
#
#   bench/grammar_decode.py MODEL.gguf --strata build/strata --reps 5 --tokens 64
import argparse, json, statistics, subprocess, sys

JSON_GBNF = r'''root   ::= "{" ws member ( "," ws member ){15} "}" ws
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}" ws
member ::= string ":" ws value
array  ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"" ws
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ws
ws     ::= [ \t\n]{0,2}
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    p = subprocess.Popen([a.strata, "engine", "-m", a.model, "--slots", "1", "-t",
                          str(a.threads), "--ctx", "1024"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def wait(op_ids):
        while True:
            line = p.stdout.readline()
            if not line:
                sys.exit("engine exited")
            m = json.loads(line)
            if m.get("op") in ("done", "err") and m.get("id") in op_ids:
                return m
            if m.get("op") == "ready":
                return m

    ready = wait(())
    prompt = [1] + [100 + i for i in range(15)]
    rates = {"none": [], "json": []}
    counts = {"none": [], "json": []}
    rid = 0
    try:
        for r in range(a.reps):
            for mode in ("none", "json"):
                rid += 1
                g = {"op": "gen", "id": rid, "tokens": prompt, "max_tokens": a.tokens,
                     "cache": False, "sampling": {"temperature": 1.0, "seed": 1000 + r}}
                if mode == "json":
                    g["grammar"] = JSON_GBNF
                p.stdin.write(json.dumps(g) + "\n")
                p.stdin.flush()
                m = wait((rid,))
                if m["op"] == "err":
                    sys.exit(f"engine error: {m}")
                s = m["stats"]
                if s["predicted_n"] > 1 and s["predicted_ms"] > 0:
                    rates[mode].append(s["predicted_n"] / s["predicted_ms"] * 1000.0)
                    counts[mode].append(s["predicted_n"])
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    print(f"model: {ready['model']['arch']}, {ready['model']['n_vocab']} tokens of vocabulary;"
          f" {a.reps} requests per mode of at most {a.tokens} tokens, {a.threads} threads\n")
    print("| grammar | requests | tokens (median) | decode tok/s (median) |")
    print("|---|---:|---:|---:|")
    for mode in ("none", "json"):
        print(f"| {mode} | {len(rates[mode])} | {statistics.median(counts[mode]):.0f} |"
              f" {statistics.median(rates[mode]):.2f} |")
    print(f"\nwith / without: {statistics.median(rates['json']) / statistics.median(rates['none']):.3f}")


if __name__ == "__main__":
    main()
