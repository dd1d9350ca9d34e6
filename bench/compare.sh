#!/usr/bin/env bash
# Strata against llama.cpp on the same GGUF files, the same thread count,
# side by side in one run: prompt processing (ppN) and decode (tgN) tokens
# per second, their ratio (strata / llama.cpp), and for decode the GB/s of
# weights streamed (bytes one step reads x tokens/s; for a mixture of experts
# only the experts a token uses, strata bench's decode_bytes) as a share of
# this machine's read bandwidth, measured in the same run.
#
#   bench/compare.sh [-t THREADS] [-p N] [-n N] [-r REPS] [--rounds K] [MODEL.gguf ...]
#
# llama.cpp: LLAMA_BENCH (a llama.cpp build's build/bin/llama-bench, or
# llama-bench on the PATH) runs as `llama-bench -o jsonl`; without one,
# node-llama-cpp's prebuilt CPU build (bench/llamacpp, installed on first use).
# Without models it makes (once, in build/models/) llama-1b in Q4_0, Q8_0 and
# F16 with `strata mkmodel`, and, when LLAMA_QUANTIZE (default: llama-quantize
# beside LLAMA_BENCH) exists, Q4_K_M, Q5_K_M and Q6_K from that F16 file, so
# the mixes are llama.cpp's own. Each round runs every model once with both
# engines, interleaved so drifting machine load hits both; the table holds
# the median over rounds of each round's median of REPS runs.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
threads=2 prompt=512 gen=128 reps=3 rounds=1
models=()
while [ $# -gt 0 ]; do
    case "$1" in
        -t) threads=$2; shift 2 ;;
        -p) prompt=$2; shift 2 ;;
        -n) gen=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) models+=("$1"); shift ;;
    esac
done

strata="$here/build/strata"
[ -x "$strata" ] || make -C "$here" build >/dev/null
llama_bench=${LLAMA_BENCH:-$(command -v llama-bench || true)}
use_node=0
if [ -z "$llama_bench" ] || [ ! -x "$llama_bench" ]; then
    use_node=1
    if [ ! -d "$here/bench/llamacpp/node_modules/node-llama-cpp" ]; then
        echo "compare: no LLAMA_BENCH; installing node-llama-cpp (once)" >&2
        (cd "$here/bench/llamacpp" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
    fi
fi
quantize=${LLAMA_QUANTIZE:-}
if [ -z "$quantize" ] && [ "$use_node" = 0 ]; then quantize="$(dirname "$llama_bench")/llama-quantize"; fi

if [ ${#models[@]} -eq 0 ]; then
    mkdir -p "$here/build/models"
    for type in Q4_0 Q8_0 F16; do
        f="$here/build/models/llama-1b-$type.gguf"
        if [ ! -f "$f" ]; then
            echo "compare: making $f (once)" >&2
            "$strata" mkmodel --preset llama-1b --type "$type" -t "$threads" --quiet -o "$f.part"
            mv "$f.part" "$f"
        fi
        models+=("$f")
    done
    if [ -n "$quantize" ] && [ -x "$quantize" ]; then
        for type in Q4_K_M Q5_K_M Q6_K; do
            f="$here/build/models/llama-1b-$type.gguf"
            if [ ! -f "$f" ]; then
                echo "compare: making $f with llama-quantize (once)" >&2
                "$quantize" "$here/build/models/llama-1b-F16.gguf" "$f.part" "$type" "$threads" \
                    >/dev/null 2>&1
                mv "$f.part" "$f"
            fi
            models+=("$f")
        done
    else
        echo "compare: no llama-quantize (LLAMA_QUANTIZE): Q4_K_M, Q5_K_M and Q6_K skipped" >&2
    fi
fi

results=$(mktemp)
trap 'rm -f "$results"' EXIT
# The machine's read bandwidth: bench_matmul's read loop over 4x the LLC,
# measured right before each model's runs (a shared machine's bandwidth
# drifts by a third within minutes), so each decode row is set against the
# median of the loops that ran beside it.
read_bw() {
    "$here/build/bench/bench_matmul" --bandwidth-only --threads "$threads" --reps 3 2>/dev/null \
        | sed -n 's/^# read bandwidth.*: \([0-9.]*\) GB\/s.*/\1/p'
}
cpu_line=$("$here/build/bench/bench_matmul" --bandwidth-only --threads "$threads" 2>/dev/null \
    | grep -E '^# cpu' || true)

for round in $(seq 1 "$rounds"); do
    for m in "${models[@]}"; do
        bw=$(read_bw)
        [ -n "$bw" ] && jq -nc --arg m "$m" --argjson bw "$bw" --argjson round "$round" \
            '{engine: "read loop", round: $round, model: $m, bw: $bw}' >> "$results"
        "$strata" bench -m "$m" -p "$prompt" -n "$gen" -t "$threads" -r "$reps" --json \
            | jq -c --argjson round "$round" \
                '{engine: "strata", round: $round, model, test, decode_bytes, tps: .median}' \
            >> "$results"
        if [ "$use_node" = 1 ]; then
            node "$here/bench/llamacpp/bench.mjs" "$m" -p "$prompt" -n "$gen" -t "$threads" \
                -r "$reps" | jq -c --argjson round "$round" \
                '{engine: "llama.cpp", round: $round, model, test, tps: .tokens_per_second}' \
                >> "$results"
        else
            "$llama_bench" -m "$m" -p "$prompt" -n "$gen" -t "$threads" -r "$reps" -o jsonl \
                2>/dev/null | jq -c --arg m "$m" --argjson round "$round" \
                '{engine: "llama.cpp", round: $round, model: $m,
                  test: (if .n_prompt > 0 then "pp\(.n_prompt)" else "tg\(.n_gen)" end),
                  tps: (.samples_ts | sort | .[length / 2 | floor])}' >> "$results"
        fi
    done
done

echo "# bench/compare.sh -t $threads -p $prompt -n $gen -r $reps --rounds $rounds   ($(date -u +%Y-%m-%d), $(nproc) CPUs)"
printf '%s\n' "$cpu_line"
jq -rn --slurpfile r "$results" --arg t "$threads" '
  [$r[] | select(.engine == "read loop") | .bw] | sort |
  if length == 0 then "# read bandwidth: not measured" else
  "# read bandwidth, \($t) thread(s): median \(.[length / 2 | floor]) GB/s of \(length) read loops (\(.[0]) to \(.[-1])), one before each model of each round"
  end'
if [ "$use_node" = 1 ]; then echo "# llama.cpp: node-llama-cpp's prebuilt build"
else echo "# llama.cpp: $("$llama_bench" --version 2>&1 | grep -m1 -i version || echo llama-bench)"; fi
jq -rn --slurpfile r "$results" '
  def med: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
           else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def f: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
  "| model | test | strata t/s | llama.cpp t/s | strata / llama.cpp | strata GB/s (% bw) | llama.cpp GB/s (% bw) |",
  "|---|---|---:|---:|---:|---:|---:|",
  ($r | group_by(.model) | .[] | . as $m |
   ($m | map(.decode_bytes // empty) | .[0]) as $bytes |
   ($m | map(select(.engine == "read loop") | .bw) | med // 0) as $bw |
   ($m | map(select(.engine != "read loop")) | group_by(.test) | .[] |
    (map(select(.engine == "strata") | .tps) | med) as $s |
    (map(select(.engine == "llama.cpp") | .tps) | med) as $l |
    (.[0].test) as $t |
    def gbs($x): if $x == null or $bytes == null or ($t | startswith("tg") | not) then "-"
                 else ($x * $bytes / 1e9) as $g |
                      "\($g | f)\(if $bw > 0 then " (\($g / $bw * 100 | round)%)" else "" end)" end;
    "| \(.[0].model | split("/") | last) | \($t) | \($s | f) | \($l | f) | \(if $s and $l then $s / $l else null end | f) | \(gbs($s)) | \(gbs($l)) |"))
'
