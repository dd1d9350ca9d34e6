#!/usr/bin/env bash
# The end-to-end tests (tests/e2e/): the official `openai` npm client against
# real `strata serve` processes of stories260K on 127.0.0.1.
#
#   scripts/e2e.sh [BUILD]     BUILD holds the strata binary (default: build)
#
# It installs Node.js and npm (Debian packages) when they are missing, the
# pinned npm packages (`npm ci`) when tests/e2e/node_modules is missing or
# older than package-lock.json, then runs `node --test tests/e2e/` bounded by
# E2E_TIMEOUT seconds (default 180). Each test file starts its own server
# (tests/e2e/harness.mjs) and stops it; whatever is left when this script
# ends, by failure or timeout, is stopped here. Without the reference data
# ($STRATA_TEST_DATA, else ../shared/data) it says so and exits 0.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
bin="$build/strata"
timeout_s=${E2E_TIMEOUT:-180}

data=""
for d in "${STRATA_TEST_DATA:-}" "$root/../shared/data"; do
    if [ -n "$d" ] && [ -f "$d/models/stories260K.gguf" ]; then
        data=$(cd "$d" && pwd)
        break
    fi
done
if [ -z "$data" ]; then
    echo "e2e: skipped: reference data not found (set STRATA_TEST_DATA or place it at ../shared/data)"
    exit 0
fi
if [ ! -x "$bin" ]; then
    echo "e2e: no strata binary at $bin (build it first: make build)" >&2
    exit 1
fi

# Node.js 20 or later, and npm.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "e2e: Node.js and npm are missing and there is no apt-get; install them by hand" >&2
        exit 1
    fi
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        sudo="sudo"
    fi
    echo "e2e: installing nodejs npm" >&2
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
    echo "e2e: Node.js $(node --version) is too old; the openai client needs 20 or later" >&2
    exit 1
fi

# The pinned packages, installed again when the lock file changed.
e2e="$root/tests/e2e"
if [ ! -d "$e2e/node_modules/openai" ] || [ "$e2e/package-lock.json" -nt "$e2e/node_modules/.package-lock.json" ]; then
    echo "e2e: npm ci in tests/e2e" >&2
    (cd "$e2e" && npm ci --no-audit --no-fund --loglevel=error)
fi

# Servers the tests start are written to this file; any still running when
# the script ends are stopped: SIGTERM, then SIGKILL for the stubborn. Only
# pids that are still a `strata serve` are signalled (a pid can be reused).
scratch=$(mktemp -d "${TMPDIR:-/tmp}/strata-e2e.XXXXXX")
pids_file="$scratch/pids"
: >"$pids_file"
is_our_server() {
    local cmd
    [ -r "/proc/$1/cmdline" ] || return 1
    cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") || return 1
    [[ "$cmd" == "$bin serve "* ]]
}
cleanup() {
    local pid left=()
    while read -r pid; do
        if [ -n "$pid" ] && is_our_server "$pid"; then
            kill -TERM "$pid" 2>/dev/null || true
            left+=("$pid")
        fi
    done <"$pids_file"
    for pid in "${left[@]}"; do
        for _ in $(seq 50); do
            is_our_server "$pid" || break
            sleep 0.1
        done
        if is_our_server "$pid"; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cd "$root"
echo "e2e: node --test tests/e2e/ with $bin (at most ${timeout_s} s)"
rc=0
STRATA_BIN="$bin" STRATA_TEST_DATA="$data" STRATA_E2E_PIDS="$pids_file" \
    timeout -k 10 "$timeout_s" node --test tests/e2e/ || rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "e2e: timed out after ${timeout_s} s" >&2
fi
exit "$rc"
