#!/usr/bin/env python3
# Speculative decoding with n-gram drafts: decode tokens/s with and without
# `--draft-ngram`, and the acceptance rate, from the engine's own `done`
# statistics (predicted_n / predicted_ms, draft_n / draft_accepted_n).
#
# One `strata engine` per configuration, driven over its pipes; requests run
# one at a time (single-stream decode, where speculation matters most), all
# greedy, so both configurations produce the same tokens (checked).
# Tasks:
#   stories  the golden prompts of stories260K, max_tokens each
#   echo     each prompt followed by its greedy story and the prompt again:
#            the model re-tells text it has just seen (input echo), where
#            n-gram drafts shine
#
#   python3 bench/spec_decode.py --strata build/strata \
#       --model DATA/models/stories260K.gguf \
#       --golden DATA/golden/stories260K-greedy.json [-t 1] [--max-tokens 256]
import argparse, json, subprocess, sys


def run_engine(strata, model, threads, extra, jobs):
    argv = [strata, "engine", "-m", model, "-t", str(threads), "--slots", "1"] + extra
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, bufsize=1)
    json.loads(p.stdout.readline())  # ready
    out = []
    for i, (toks, max_tokens) in enumerate(jobs):
        p.stdin.write(json.dumps({"op": "gen", "id": i + 1, "tokens": toks,
                                  "max_tokens": max_tokens, "ignore_eos": True,
                                  "sampling": {"temperature": 0}}) + "\n")
        got = []
        while True:
            m = json.loads(p.stdout.readline())
            if m["op"] == "tok":
                got += m["tokens"]
            elif m["op"] in ("done", "err"):
                if m["op"] == "err":
                    sys.exit("engine error: %s" % m["message"])
                out.append((got, m["stats"]))
                break
    p.stdin.close()
    p.wait(timeout=30)
    return out


def summary(res):
    n = sum(s["predicted_n"] for _, s in res)
    ms = sum(s["predicted_ms"] for _, s in res)
    drafted = sum(s["draft_n"] for _, s in res)
    acc = sum(s["draft_accepted_n"] for _, s in res)
    return n, ms, drafted, acc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--model", required=True)
    ap.add_argument("--golden", required=True)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each task (best is kept)")
    a = ap.parse_args()
    results = json.load(open(a.golden))["results"]
    tasks = {
        "stories": [(r["prompt_ids"], a.max_tokens) for r in results],
        "echo": [(r["prompt_ids"] + r["gen_ids"][:200] + r["prompt_ids"][1:], a.max_tokens)
                 for r in results],
    }
    print("| task | drafts | decode tok/s | speed-up | drafted | accepted | acceptance |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, jobs in tasks.items():
        base = None
        for label, extra in (("none", []), ("ngram", ["--draft-ngram"])):
            best = None
            for _ in range(a.repeat):
                res = run_engine(a.strata, a.model, a.threads, extra, jobs)
                n, ms, d, acc = summary(res)
                if best is None or ms < best[1]:
                    best = (n, ms, d, acc, [g for g, _ in res])
            n, ms, d, acc, toks = best
            tps = n * 1000.0 / ms if ms > 0 else 0.0
            if base is None:
                base = (tps, toks)
            elif toks != base[1]:
                sys.exit("%s: the tokens differ with drafts: not exact" % name)
            print("| %s | %s | %.0f | %.2fx | %d | %d | %s |" % (
                name, label, tps, tps / base[0], d, acc,
                "%.0f %%" % (100.0 * acc / d) if d else "-"))


if __name__ == "__main__":
    main()
