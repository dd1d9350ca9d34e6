#!/usr/bin/env bash
# Runs every libFuzzer target built in BUILD for SECONDS each, seeded with
# the reference data where it exists. New inputs go to BUILD/corpus/NAME;
# a crash leaves its input in BUILD/crashes/ and fails the run.
set -euo pipefail
build=$1
seconds=${2:-30}
here=$(cd "$(dirname "$0")/.." && pwd)
data=${STRATA_TEST_DATA:-$here/../shared/data}

seeds_for() {
    case "$1" in
        fuzz_gguf) echo "$here/tests/fuzz/corpus $data/models $data/tokenizer $data/tokenizer/legacy" ;;
        fuzz_template) echo "$here/tests/fuzz/corpus-template $data/chat-templates/llama.cpp-jinja" ;;
        fuzz_tokenize) echo "$here/tests/fuzz/corpus-tokenize" ;;
        fuzz_protocol) echo "$here/tests/fuzz/corpus-protocol" ;;
        fuzz_request) echo "$here/tests/fuzz/corpus-request" ;;
        fuzz_grammar) echo "$here/tests/fuzz/corpus-grammar" ;;
        fuzz_tool_calls) echo "$here/tests/fuzz/corpus-tool-calls" ;;
        *) echo "" ;;
    esac
}

status=0
shopt -s nullglob
targets=("$build"/tests/fuzz/fuzz_*)
if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzz.sh: no fuzz targets in $build/tests/fuzz" >&2
    exit 1
fi
for target in "${targets[@]}"; do
    [ -x "$target" ] || continue
    name=$(basename "$target")
    corpus="$build/corpus/$name"
    mkdir -p "$corpus" "$build/crashes"
    seeds=()
    for d in $(seeds_for "$name"); do
        [ -d "$d" ] && seeds+=("$d")
    done
    echo "fuzz: $name for ${seconds}s (${#seeds[@]} seed folders)"
    if ! "$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
            -artifact_prefix="$build/crashes/$name-" -print_final_stats=1 \
            "$corpus" "${seeds[@]}" > "$build/$name.log" 2>&1; then
        echo "fuzz: $name FAILED; log: $build/$name.log" >&2
        tail -n 40 "$build/$name.log" >&2
        status=1
    else
        grep -E 'stat::number_of_executed_runs|cov:' "$build/$name.log" | tail -n 2 || true
    fi
done
exit $status
