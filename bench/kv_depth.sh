#!/usr/bin/env bash
# Prompt processing and decode at depth with f16 and q8_0 KV: strata bench
# next to llama-bench, in one run, so both see the same machine load.
#
#   bench/kv_depth.sh MODEL.gguf [DEPTHS] [REPS] [THREADS] [PROMPT] [GEN]
#   (defaults: 0,2048,8192  3  2  512  128)
#
# For each depth, strata runs f16 and q8_0 (one process: the depth prefill
# is untimed, done once per type), then llama-bench runs -ctk/-ctv f16 and
# q8_0. Prints one markdown table of medians of the repetitions (tokens per
# second) and the q8_0 / f16 ratio of each tool. STRATA (default
# build/strata) and LLAMA_BENCH (default: llama-bench on the PATH; a llama.cpp
# build's build/bin/llama-bench; skipped when missing) pick the binaries. Raw JSON lines stay
# in $OUT_DIR (default: a new temporary folder, printed at the end).
set -euo pipefail

model=${1:?usage: bench/kv_depth.sh MODEL.gguf [DEPTHS] [REPS] [THREADS] [PROMPT] [GEN]}
depths=${2:-0,2048,8192}
reps=${3:-3}
threads=${4:-2}
n_prompt=${5:-512}
n_gen=${6:-128}
strata=${STRATA:-build/strata}
llama_bench=${LLAMA_BENCH:-$(command -v llama-bench || true)}
out=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$out"
: > "$out/strata.jsonl"
: > "$out/llama.jsonl"

have_llama=0
[ -x "$llama_bench" ] && have_llama=1

for d in ${depths//,/ }; do
    "$strata" bench -m "$model" -p "$n_prompt" -n "$n_gen" -d "$d" --kv-type f16,q8_0 \
        -r "$reps" -t "$threads" --json 2>>"$out/strata.log" >> "$out/strata.jsonl"
    if [ "$have_llama" = 1 ]; then
        for t in f16 q8_0; do
            "$llama_bench" -m "$model" -p "$n_prompt" -n "$n_gen" -d "$d" -ctk "$t" -ctv "$t" \
                -r "$reps" -t "$threads" -o jsonl 2>>"$out/llama.log" >> "$out/llama.jsonl"
        done
    fi
done

# One row per (test, depth): medians, tokens per second.
jq -rn --slurpfile s "$out/strata.jsonl" --slurpfile l "$out/llama.jsonl" '
  def med: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
           else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def f: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
  def r: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
  ($s | map({key: "\(.test)|\(.type_k)", value: .median}) | from_entries) as $S |
  ($l | map({key: "\(if .n_prompt > 0 then "pp\(.n_prompt)" else "tg\(.n_gen)" end)\(if .n_depth > 0 then " @ d\(.n_depth)" else "" end)|\(.type_k)",
             value: (.samples_ts | med)}) | from_entries) as $L |
  ($s | map(.test) | unique_by(.) ) as $tests |
  "| test | strata f16 | strata q8_0 | strata q8_0/f16 | llama.cpp f16 | llama.cpp q8_0 | llama.cpp q8_0/f16 | strata/llama.cpp q8_0 |",
  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  ($s | map(.test) | reduce .[] as $t ([]; if index([$t]) then . else . + [$t] end) | .[] as $t |
   ($S["\($t)|f16"]) as $sf | ($S["\($t)|q8_0"]) as $sq |
   ($L["\($t)|f16"]) as $lf | ($L["\($t)|q8_0"]) as $lq |
   "| \($t) | \($sf | f) | \($sq | f) | \(if $sf and $sq then $sq / $sf else null end | r) | \($lf | f) | \($lq | f) | \(if $lf and $lq then $lq / $lf else null end | r) | \(if $sq and $lq then $sq / $lq else null end | r) |")
'
echo
echo "raw results: $out (strata.jsonl, llama.jsonl, logs)"
