#!/usr/bin/env bash
# Strata against llama.cpp on the same GGUF files, the same thread count,
# side by side in one run: prompt processing (ppN) and decode (tgN) tokens
# per second and their ratio (strata / llama.cpp).
#
#   bench/compare.sh [-t THREADS] [-p N] [-n N] [-r REPS] [MODEL.gguf ...]
#
# Without models it makes (once, in build/models/) the issue's set with
# `strata mkmodel`: llama-1b in Q4_0, Q8_0 and Q4_K, qwen-0.5b in Q8_0.
# llama.cpp is node-llama-cpp 3.21.1's prebuilt CPU build, installed into
# bench/llamacpp/node_modules on first use.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
threads=2 prompt=512 gen=128 reps=3
models=()
while [ $# -gt 0 ]; do
    case "$1" in
        -t) threads=$2; shift 2 ;;
        -p) prompt=$2; shift 2 ;;
        -n) gen=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) models+=("$1"); shift ;;
    esac
done

strata="$here/build/strata"
[ -x "$strata" ] || make -C "$here" build >/dev/null
if [ ! -d "$here/bench/llamacpp/node_modules/node-llama-cpp" ]; then
    echo "compare: installing node-llama-cpp 3.21.1 (once)" >&2
    (cd "$here/bench/llamacpp" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi

if [ ${#models[@]} -eq 0 ]; then
    mkdir -p "$here/build/models"
    for spec in llama-1b:Q4_0 llama-1b:Q8_0 llama-1b:Q4_K qwen-0.5b:Q8_0; do
        preset=${spec%%:*} type=${spec##*:}
        f="$here/build/models/$preset-$type.gguf"
        if [ ! -f "$f" ]; then
            echo "compare: making $f (once)" >&2
            "$strata" mkmodel --preset "$preset" --type "$type" -t "$threads" --quiet -o "$f"
        fi
        models+=("$f")
    done
fi

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for m in "${models[@]}"; do
    # Interleave the two engines per model so drifting machine load hits both.
    "$strata" bench -m "$m" -p "$prompt" -n "$gen" -t "$threads" -r "$reps" --json \
        | sed 's/^{/{"engine": "strata", /' >> "$results"
    node "$here/bench/llamacpp/bench.mjs" "$m" -p "$prompt" -n "$gen" -t "$threads" -r "$reps" \
        >> "$results"
done

echo "# bench/compare.sh -t $threads -p $prompt -n $gen -r $reps   ($(date -u +%Y-%m-%d), $(nproc) CPUs)"
node - "$results" <<'JS'
const fs = require("fs");
const rows = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map((l) => JSON.parse(l));
const key = (r) => `${r.model}\t${r.test}`;
const by = new Map();
for (const r of rows) {
    if (!by.has(key(r))) by.set(key(r), {});
    by.get(key(r))[r.engine] = r;
}
const fmt = (r) => r ? `${r.tokens_per_second.toFixed(2)} ± ${r.stddev.toFixed(2)}` : "-";
console.log("| model | test | strata t/s | llama.cpp t/s | strata / llama.cpp |");
console.log("|---|---|---:|---:|---:|");
for (const [k, e] of by) {
    const [model, test] = k.split("\t");
    const ratio = e.strata && e["llama.cpp"] ? (e.strata.tokens_per_second / e["llama.cpp"].tokens_per_second).toFixed(2) : "-";
    console.log(`| ${model.split("/").pop()} | ${test} | ${fmt(e.strata)} | ${fmt(e["llama.cpp"])} | ${ratio} |`);
}
JS
