#!/usr/bin/env python3
# Time to first token of a repeated prompt with and without the engine's prefix cache,
# at the engine protocol: from writing a gen line to reading its first tok line, on
# `strata engine --slots 1 -t 2`. Prints one line; asserts nothing.
#   python3 bench/prefix_ttft.py MODEL.gguf PROMPT_TOKENS REPEATS [STRATA_BIN]
import json, subprocess, sys, time, random
model, n_prompt, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
strata = sys.argv[4] if len(sys.argv) > 4 else "build/strata"
p = subprocess.Popen([strata, "engine", "-m", model, "--slots", "1", "--ctx", str(n_prompt + 64), "-t", "2"],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
ready = json.loads(p.stdout.readline())
random.seed(1)
prompt = [1] + [random.randrange(3, 500) for _ in range(n_prompt - 1)]
def run(i, cache):
    m = {"op": "gen", "id": i, "tokens": prompt, "max_tokens": 1, "sampling": {"temperature": 0}, "ignore_eos": True}
    if not cache: m["cache"] = False
    t0 = time.perf_counter(); p.stdin.write(json.dumps(m) + "\n"); p.stdin.flush()
    ttft = None
    while True:
        l = json.loads(p.stdout.readline())
        if l["op"] == "tok" and ttft is None: ttft = (time.perf_counter() - t0) * 1000
        if l["op"] in ("done", "err"): return ttft, l.get("stats", {}).get("cached_n")
cold = [run(10 + k, False) for k in range(reps)]
run(1, True)  # leaves the prompt cached
warm = [run(20 + k, True) for k in range(reps)]
med = lambda xs: sorted(x[0] for x in xs)[len(xs) // 2]
print(f"{model.split('/')[-1]}: prompt {n_prompt} tokens: TTFT cold (cache off) {med(cold):.1f} ms, "
      f"repeated (cached_n {warm[0][1]}) {med(warm):.1f} ms, median of {reps}")
p.stdin.close(); p.wait()
