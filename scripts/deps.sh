#!/usr/bin/env bash
# Installs the Debian packages that Strata's build and tests need, and only
# those that are missing: running it twice does nothing the second time.
# `make run` and `make test` call it, so a fresh Debian 12 machine needs
# nothing else. Set STRATA_SKIP_DEPS=1 to skip it (e.g. on a machine that
# is not Debian and has the libraries already).
set -euo pipefail

if [ "${STRATA_SKIP_DEPS:-0}" = 1 ]; then
    exit 0
fi

packages=(
    cmake make gcc pkg-config
    clang libclang-rt-14-dev       # libFuzzer, AddressSanitizer, UBSan
    libmicrohttpd-dev              # HTTP server
    libjansson-dev                 # JSON
    libpcre2-dev                   # pre-tokenizer regular expressions
    libutf8proc-dev                # Unicode normalization and categories
    libcmocka-dev                  # unit tests
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "deps.sh: missing packages (${missing[*]}) and no apt-get; install them by hand" >&2
    exit 1
fi

sudo=""
if [ "$(id -u)" != 0 ]; then
    sudo="sudo"
fi

echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps.sh: done" >&2
