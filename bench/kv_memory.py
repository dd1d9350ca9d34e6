#!/usr/bin/env python3
# The engine's resident memory (VmRSS) as its KV pool fills and empties.
#
# For each KV type and pool profile, starts `strata engine` on the model,
# reads VmRSS from /proc when it is ready (weights + initial pool), sends one
# request whose prompt holds N tokens (random ids, max_tokens 1, cache off so
# that its blocks are free once it is done), reads VmRSS when it is done, then
# waits past the pool's hold time, pings (the engine gives memory back
# between steps and on its idle tick) and reads VmRSS again. Prints a
# Markdown table. Only talks to the engine over its stdin/stdout.
#
#   bench/kv_memory.py MODEL.gguf --strata build/strata --tokens 8192,32768
import argparse, json, os, random, subprocess, tempfile, time


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


class Engine:
    def __init__(self, argv):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, text=True, bufsize=1)
        self.ready = self.wait_op("ready")

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()

    def wait_op(self, op, timeout_s=3600):
        end = time.time() + timeout_s
        while time.time() < end:
            line = self.p.stdout.readline()
            if not line:
                self.p.wait()
                self.log.seek(0)
                raise RuntimeError(f"engine exited before {op}: {self.log.read()[-500:]}")
            m = json.loads(line)
            if m.get("op") == "err":
                raise RuntimeError(f"engine error: {line.strip()}")
            if m.get("op") == op:
                return m
        raise RuntimeError(f"no {op} within {timeout_s} s")

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=30)
        except Exception:
            self.p.kill()
            self.p.wait()


def run(a, kv_type, profile, n):
    cap = n + 64
    argv = [a.strata, "engine", "-m", a.model, "--slots", "1", "--ctx", str(cap), "-t",
            str(a.threads), "--kv-type", kv_type]
    if profile == "resident":
        argv += ["--kv-resident", str(cap)]
    else:
        argv += ["--kv-max", str(cap), "--kv-hold-ms", str(a.hold_ms)]
    e = Engine(argv)
    try:
        kv = e.ready.get("kv", {})
        r0 = rss_mib(e.p.pid)
        rng = random.Random(n)
        vocab = e.ready["model"]["n_vocab"]
        toks = [rng.randrange(1, min(vocab, 30000)) for _ in range(n)]
        t0 = time.time()
        e.send({"op": "gen", "id": 1, "tokens": toks, "max_tokens": 1, "cache": False,
                "sampling": {"temperature": 0}})
        e.wait_op("done")
        secs = time.time() - t0
        r1 = rss_mib(e.p.pid)
        time.sleep(a.hold_ms / 1000.0 + 1.5)
        e.send({"op": "ping", "id": 2})
        e.wait_op("pong")
        time.sleep(1.0)
        r2 = rss_mib(e.p.pid)
        per_tok = kv.get("bytes", 0) / max(1, kv.get("max_tokens", 1))
        return r0, r1, r2, per_tok * n / 2**20, secs
    finally:
        e.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--tokens", default="8192")
    ap.add_argument("--types", default="f16,q8_0")
    ap.add_argument("--profiles", default="elastic,resident")
    ap.add_argument("--hold-ms", type=int, default=2000)
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    size = os.path.getsize(a.model) / 2**20
    print(f"model {os.path.basename(a.model)}: {size:.0f} MiB file; hold {a.hold_ms} ms\n")
    print("| tokens | KV type | pool | KV MiB of the tokens | RSS ready MiB | RSS in use MiB"
          " | RSS idle MiB | in use - ready | prefill s |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for n in [int(x) for x in a.tokens.split(",")]:
        for kt in a.types.split(","):
            for prof in a.profiles.split(","):
                r0, r1, r2, kvm, secs = run(a, kt, prof, n)
                print(f"| {n} | {kt} | {prof} | {kvm:.1f} | {r0:.1f} | {r1:.1f} | {r2:.1f}"
                      f" | {r1 - r0:.1f} | {secs:.1f} |", flush=True)


if __name__ == "__main__":
    main()
