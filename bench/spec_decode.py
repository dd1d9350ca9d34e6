#!/usr/bin/env python3
# Speculative decoding, measured: decode tokens/s with and without drafts, and the
# acceptance rate, from the engine's own `done` statistics (predicted_n /
# predicted_ms, draft_n / draft_accepted_n); optionally llama.cpp's
# llama-server on the same model pair.
#
# One `strata engine` per configuration, driven over its pipes; requests run
# one at a time (single-stream decode, where speculation matters most), all
# greedy with ignore_eos, so every configuration produces the same tokens
# (checked: a difference is an exactness bug and stops the script).
#
# Suites (each runs when its options are given):
#   --stories MODEL --golden GOLDEN   stories260K, n-gram drafts:
#       stories  the golden prompts, max_tokens each
#       echo     input echo: each prompt, a 300-token text made of golden
#                stories, and the prompt again: the model re-tells the text
#                it has just read, where n-gram drafts shine
#   --target T --draft D [--unrelated U]   a target with draft models:
#       D: the target's weights quantized coarser (same mkmodel seed): the
#       realistic high-acceptance pair; U: a smaller model of other weights
#       with the target's vocabulary (mkmodel --vocab-from): acceptance near
#       0, the cost of drafts that fail (the throttle's case)
#       each draft with --draft-max 4 and every --p-min value (default
#       0.5 and 0)
#   --gate on|off|both   the engine's cost gate (`--draft-gate`): on (its
#       default), off, or every drafting row twice, with it and without
#   --llama-server BIN (or $LLAMA_SERVER)   the pair suite on llama-server
#       too: without a draft, and with `--model-draft F --draft-max 4
#       --draft-p-min P` for D (and U; `--spec-draft-n-max 4` where the
#       binary has renamed --draft-max, and `--spec-type draft-simple` where it has
#       that option, without which it does not speculate), over HTTP on 127.0.0.1, each
#       request bounded by --timeout seconds
#
#   python3 bench/spec_decode.py --strata build/strata -t 4 \
#       --stories DATA/models/stories260K.gguf \
#       --golden DATA/golden/stories260K-greedy.json \
#       --target MODELS/llama-1b-Q8_0.gguf --draft MODELS/llama-1b-Q4_0.gguf \
#       --unrelated MODELS/qwen-0.5b-llamavocab-Q4_0.gguf \
#       --llama-server LLAMA_CPP/build/bin/llama-server
import argparse, json, os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

# The pair suite's prompts: plain English, tokenized by the target's own
# tokenizer (`strata tokenize --ids`), so that they are valid ids whatever
# the vocabulary.
PAIR_PROMPTS = [
    "The history of the printing press begins in the fifteenth century, when",
    "Here is a short guide to keeping a vegetable garden healthy through the summer:",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
]


def run_engine(strata, model, threads, extra, jobs, timeout_s):
    argv = [strata, "engine", "-m", model, "-t", str(threads), "--slots", "1",
            "--ctx", "4096"] + extra
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, bufsize=1)
    first = p.stdout.readline()
    if not first:
        sys.exit("strata engine %s failed to start: %s" % (" ".join(extra), p.stderr.read()))
    json.loads(first)  # ready
    out = []
    t0 = time.time()
    for i, (toks, max_tokens) in enumerate(jobs):
        p.stdin.write(json.dumps({"op": "gen", "id": i + 1, "tokens": toks,
                                  "max_tokens": max_tokens, "ignore_eos": True,
                                  "sampling": {"temperature": 0}}) + "\n")
        got = []
        while True:
            line = p.stdout.readline()
            if not line:
                sys.exit("strata engine died: %s" % p.stderr.read())
            m = json.loads(line)
            if m["op"] == "tok":
                got += m["tokens"]
            elif m["op"] in ("done", "err"):
                if m["op"] == "err":
                    sys.exit("engine error: %s" % m["message"])
                out.append((got, m["stats"]))
                break
            if time.time() - t0 > timeout_s * len(jobs):
                p.kill()
                sys.exit("strata engine: over %d s" % (timeout_s * len(jobs)))
    p.stdin.close()
    p.wait(timeout=60)
    return out


_help_text = {}


def help_text(server):
    """llama-server --help, read once per binary."""
    if server not in _help_text:
        h = subprocess.run([server, "--help"], capture_output=True, text=True, timeout=60)
        _help_text[server] = h.stdout + h.stderr
    return _help_text[server]


def spec_type_flags(server):
    """Newer llama-servers speculate only when --spec-type names a method:
    a --model-draft alone loads the draft and never drafts."""
    return ["--spec-type", "draft-simple"] if "--spec-type" in help_text(server) else []


def draft_max_flag(server):
    """llama-server's name for the most drafted tokens: --draft-max, which
    newer versions replaced with --spec-draft-n-max."""
    return "--spec-draft-n-max" if "--spec-draft-n-max" in help_text(server) else "--draft-max"


def run_llama(server, target, threads, draft, p_min, jobs, timeout_s):
    port = benchlib.free_port()
    argv = [server, "-m", target, "-t", str(threads), "-c", "4096", "-np", "1",
            "--host", "127.0.0.1", "--port", str(port)]
    if draft is not None:
        argv += spec_type_flags(server) + [
            "--model-draft", draft, draft_max_flag(server), "4", "--draft-p-min", str(p_min),
            "-td", str(threads)]
    benchlib.start("llama-server", argv, port)
    out = []
    try:
        for toks, max_tokens in jobs:
            st, raw = benchlib.request(port, "POST", "/completion",
                                       {"prompt": toks, "n_predict": max_tokens,
                                        "temperature": 0, "top_k": 1, "ignore_eos": True,
                                        "cache_prompt": False}, timeout_s)
            if st != 200:
                sys.exit("llama-server: status %d: %s" % (st, raw[:300]))
            t = json.loads(raw)["timings"]
            out.append((None, {"predicted_n": t["predicted_n"], "predicted_ms": t["predicted_ms"],
                               "draft_n": t.get("draft_n", 0),
                               "draft_accepted_n": t.get("draft_n_accepted", 0)}))
    finally:
        benchlib.stop_all()
    return out


def summary(res):
    n = sum(s["predicted_n"] for _, s in res)
    ms = sum(s["predicted_ms"] for _, s in res)
    drafted = sum(s["draft_n"] for _, s in res)
    acc = sum(s["draft_accepted_n"] for _, s in res)
    return n, ms, drafted, acc


def best_of(repeat, fn):
    best = None
    for _ in range(repeat):
        res = fn()
        n, ms, d, acc = summary(res)
        if best is None or ms < best[1]:
            best = (n, ms, d, acc, [g for g, _ in res])
    return best


def table(title, rows):
    """rows: (task, engine, drafts, best) with best from best_of; speed-ups
    are against the first row of the same task and engine."""
    print("\n%s\n" % title)
    print("| task | engine | drafts | decode tok/s | speed-up | drafted | accepted | acceptance |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    base = {}
    for task, eng, label, (n, ms, d, acc, _) in rows:
        tps = n * 1000.0 / ms if ms > 0 else 0.0
        base.setdefault((task, eng), tps)
        print("| %s | %s | %s | %.1f | %.2fx | %d | %d | %s |" % (
            task, eng, label, tps, tps / base[(task, eng)] if base[(task, eng)] else 0.0, d, acc,
            "%.0f %%" % (100.0 * acc / d) if d else "-"))
    sys.stdout.flush()


def check_same(task, label, ref, got):
    if got[4] != ref[4]:
        sys.exit("%s, %s: the tokens differ from those without drafts: not exact" % (task, label))


def stories_suite(a):
    results = json.load(open(a.golden))["results"]
    pool = [t for r in results for t in r["gen_ids"]]
    echo = []
    for i, r in enumerate(results):
        text = (pool[i * 97:] + pool)[:300]
        echo.append((r["prompt_ids"] + text + r["prompt_ids"][1:], a.max_tokens))
    tasks = {"stories": [(r["prompt_ids"], a.max_tokens) for r in results], "echo": echo}
    rows = []
    for name, jobs in tasks.items():
        ref = None
        for label, extra in [("none", [])] + gated("ngram", ["--draft-ngram"], a.gate):
            got = best_of(a.repeat, lambda: run_engine(a.strata, a.stories, a.threads, extra, jobs,
                                                       a.timeout))
            if ref is None:
                ref = got
            else:
                check_same(name, label, ref, got)
            rows.append((name, "strata", label, got))
    table("stories260K, n-gram drafts (%d tokens per request, %d threads)" %
          (a.max_tokens, a.threads), rows)


def gated(label, extra, gate):
    """The drafting configuration as the --gate option asks: (label, argv) pairs."""
    on = [(label, extra)]
    off = [(label + ", gate off", extra + ["--draft-gate", "off"])]
    return {"on": on, "off": off, "both": on + off}[gate]


def tokenize(strata, model, text):
    out = subprocess.run([strata, "tokenize", "-m", model, "--ids", text], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    return [int(x) for x in out.split()]


def pair_suite(a):
    jobs = [(tokenize(a.strata, a.target, p), a.max_tokens) for p in PAIR_PROMPTS]
    p_mins = [float(x) for x in a.p_min.split(",")]
    drafts = [("none", None, None)]
    for path in (a.draft, a.unrelated):
        if path:
            for p in p_mins:
                drafts.append(("%s, p-min %g" % (os.path.basename(path), p), path, p))
    runs = [("none", [])]
    for label, path, p in drafts[1:]:
        runs += gated(label, ["--draft-model", path, "--draft-max", "4", "--draft-p-min", str(p)],
                      a.gate)
    rows = []
    ref = None
    for label, extra in runs:
        got = best_of(a.repeat, lambda: run_engine(a.strata, a.target, a.threads, extra, jobs,
                                                   a.timeout))
        if ref is None:
            ref = got
        else:
            check_same("pair", label, ref, got)
        rows.append(("decode", "strata", label, got))
    if a.llama_server:
        for label, path, p in drafts:
            got = best_of(a.repeat, lambda: run_llama(a.llama_server, a.target, a.threads, path,
                                                      p, jobs, a.timeout))
            rows.append(("decode", "llama.cpp", label, got))
    table("%s as target (%d tokens per request, %d prompts, %d threads; draft-max 4)" %
          (os.path.basename(a.target), a.max_tokens, len(jobs), a.threads), rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--stories", help="stories260K.gguf: the n-gram suite")
    ap.add_argument("--golden", help="stories260K-greedy.json (with --stories)")
    ap.add_argument("--model", help="the same as --stories (older name)")
    ap.add_argument("--target", help="the draft-model suite's target")
    ap.add_argument("--draft", help="its draft of the same weights (with --target)")
    ap.add_argument("--unrelated", help="a smaller draft of other weights, same vocabulary")
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"),
                    help="llama-server binary for the comparison (default $LLAMA_SERVER)")
    ap.add_argument("--p-min", default="0.5,0",
                    help="draft-p-min values of the draft-model suite, comma-separated (a "
                         "random-weight model's softmax rarely reaches 0.5: 0 shows its "
                         "acceptance)")
    ap.add_argument("--gate", choices=("on", "off", "both"), default="on",
                    help="the engines' cost gate (--draft-gate): on (default), off, or both")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each task (best is kept)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per request at most")
    a = ap.parse_args()
    if a.model and not a.stories:
        a.stories = a.model
    if not a.stories and not a.target:
        ap.error("give --stories MODEL --golden G and/or --target T --draft D")
    if a.stories:
        if not a.golden:
            ap.error("--stories needs --golden")
        stories_suite(a)
    if a.target:
        if not a.draft:
            ap.error("--target needs --draft")
        if a.llama_server and not os.access(a.llama_server, os.X_OK):
            ap.error("--llama-server %s is not an executable" % a.llama_server)
        pair_suite(a)


if __name__ == "__main__":
    try:
        main()
    finally:
        benchlib.stop_all()
