#!/usr/bin/env bash
# Load benchmark of `strata serve`: starts a server on a free port of
# 127.0.0.1, waits for /health, runs bench/loadgen (streaming completions)
# at concurrency 1, 4 and 16, prints its Markdown table, and stops the
# server whatever happens (a trap on exit, SIGINT and SIGTERM).
#
#   bench/load.sh [BUILD_DIR] [--replicas N] [--slots K] [-t THREADS]
#                 [--ctx C] [-c 1,4,16] [--requests N] [--duration S]
#                 [--max-tokens N] [-- more loadgen options]
#
# BUILD_DIR (default: build) must hold strata and bench/loadgen already;
# this script builds nothing. MODEL=path picks the model (default:
# ../shared/data/models/stories260K.gguf), e.g. build/models/llama-1b-Q4_0.gguf
# from `strata mkmodel --preset llama-1b --type Q4_0 -o ...`. Defaults:
# 2 replicas x 8 slots, 1 thread per engine, 32 requests of 64 tokens per
# level (with --duration alone: as many as fit in that time).
# SERVE_ARGS="..." adds options to `strata serve` (e.g. --ping-timeout 60000
# for a big model whose prefill steps outlast the default 10 s). The
# server's log goes to a temporary file; its end is printed on failure.
# --llama-server PATH then runs the same loadgen levels against
# llama-server (PATH: its binary) on the same model, threads and port range:
# -np replicas x slots, -c that many times the per-request context (--ctx,
# default 2048), -t replicas x threads; one table per server.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

build=build
replicas=2 slots=8 threads=1 ctx=""
levels=1,4,16 requests="" duration="" max_tokens=64
llama_server=""
extra=()
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    build=$1
    shift
fi
while [ $# -gt 0 ]; do
    case "$1" in
        --replicas) replicas=$2; shift 2 ;;
        --slots) slots=$2; shift 2 ;;
        -t|--threads) threads=$2; shift 2 ;;
        --ctx) ctx=$2; shift 2 ;;
        -c) levels=$2; shift 2 ;;
        --requests) requests=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --max-tokens) max_tokens=$2; shift 2 ;;
        --llama-server) llama_server=$2; shift 2 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        --) shift; extra=("$@"); break ;;
        *) echo "load.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

case "$build" in /*) ;; *) build="$here/$build" ;; esac
strata="$build/strata"
loadgen="$build/bench/loadgen"
model=${MODEL:-$here/../shared/data/models/stories260K.gguf}
for f in "$strata" "$loadgen"; do
    if [ ! -x "$f" ]; then
        echo "load.sh: $f is missing; build first (cmake --build $build)" >&2
        exit 1
    fi
done
if [ ! -f "$model" ]; then
    echo "load.sh: no model at $model (set MODEL=path)" >&2
    exit 1
fi

tmp=$(mktemp -d)
server_pid="" loadgen_pid=""
# shellcheck disable=SC2317 # reached through the trap
stop_server() {
    if [ -n "$loadgen_pid" ]; then
        kill -TERM "$loadgen_pid" 2>/dev/null || true
        wait "$loadgen_pid" 2>/dev/null || true
    fi
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid" 2>/dev/null || true
        # SIGTERM drains in-flight requests (up to 10 s); then it must be gone.
        for _ in $(seq 1 150); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    server_pid=""
    rm -rf "$tmp"
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

serve_args=(serve -m "$model" --host 127.0.0.1 --port 0 --port-file "$tmp/port"
            --replicas "$replicas" --slots "$slots" -t "$threads")
[ -n "$ctx" ] && serve_args+=(--ctx "$ctx")
# shellcheck disable=SC2206 # split on purpose: several options
[ -n "${SERVE_ARGS:-}" ] && serve_args+=($SERVE_ARGS)
"$strata" "${serve_args[@]}" >"$tmp/server.log" 2>&1 &
server_pid=$!

# The port file appears once the server listens (engines may still load;
# loadgen --wait covers that).
for _ in $(seq 1 1200); do
    [ -s "$tmp/port" ] && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "load.sh: the server exited before listening; its log:" >&2
        cat "$tmp/server.log" >&2
        exit 1
    fi
    sleep 0.1
done
if [ ! -s "$tmp/port" ]; then
    echo "load.sh: the server did not start listening within 120 s; its log:" >&2
    tail -n 40 "$tmp/server.log" >&2
    exit 1
fi
port=$(cat "$tmp/port")

# --duration alone runs for that time; neither: 32 requests per level.
[ -z "$requests" ] && [ -z "$duration" ] && requests=32
lg_args=(--port "$port" -c "$levels" --max-tokens "$max_tokens" --wait 300)
[ -n "$requests" ] && lg_args+=(--requests "$requests")
[ -n "$duration" ] && lg_args+=(--duration "$duration")
echo "# MODEL=$model${SERVE_ARGS:+ SERVE_ARGS=\"$SERVE_ARGS\"} bench/load.sh --replicas $replicas --slots $slots -t $threads" \
     "-c $levels${requests:+ --requests $requests}${duration:+ --duration $duration}" \
     "--max-tokens $max_tokens" \
     "${extra[*]:-}"
echo "# $(date -u +%Y-%m-%d), $(nproc) CPUs, server on 127.0.0.1:$port"
# Runs loadgen against the server on $port; its status. In the background
# and waited for, so that a signal to this script runs the trap at once
# instead of after loadgen's last request.
run_loadgen() {
    local st=0
    lg_args[1]=$port
    "$loadgen" "${lg_args[@]}" "${extra[@]}" &
    loadgen_pid=$!
    wait "$loadgen_pid" || st=$?
    loadgen_pid=""
    if [ "$st" -ne 0 ]; then
        echo "load.sh: loadgen exited with $st; the server log's last lines:" >&2
        tail -n 20 "$tmp/server.log" >&2
    fi
    return "$st"
}
status=0
run_loadgen || status=$?
[ -z "$llama_server" ] && exit "$status"

# The same levels against llama-server, after strata serve has stopped.
stop_server
tmp=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
np=$((replicas * slots))
"$llama_server" -m "$model" --host 127.0.0.1 --port "$port" -np "$np" -c $((np * ${ctx:-2048})) \
    -t $((replicas * threads)) >"$tmp/server.log" 2>&1 &
server_pid=$!
# /health answers 200 once the model is loaded
for _ in $(seq 1 3000); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "load.sh: llama-server exited before it was ready; its log:" >&2
        tail -n 40 "$tmp/server.log" >&2
        exit 1
    fi
    python3 - "$port" <<'PY' && break
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2).status == 200 else 1)
except Exception:
    sys.exit(1)
PY
    sleep 0.1
done
echo "# llama-server ($llama_server) -np $np -c $((np * ${ctx:-2048})) -t $((replicas * threads)), 127.0.0.1:$port"
status2=0
run_loadgen || status2=$?
[ "$status" -ne 0 ] && exit "$status"
exit "$status2"
