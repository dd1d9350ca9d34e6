#!/usr/bin/env bash
# The main job behind `make run`: describe MODEL with `strata info`.
# Without MODEL it uses the small real model of the reference data
# ($STRATA_TEST_DATA or ../shared/data), when that is there.
set -euo pipefail
bin=$1
model=${2:-}
if [ -z "$model" ]; then
    for d in "${STRATA_TEST_DATA:-}" "$(dirname "$0")/../../shared/data"; do
        if [ -n "$d" ] && [ -f "$d/models/stories260K.gguf" ]; then
            model="$d/models/stories260K.gguf"
            break
        fi
    done
fi
if [ -z "$model" ]; then
    echo "make run: no model given and no reference data found; use: make run MODEL=path/to/model.gguf" >&2
    exit 2
fi
exec "$bin" info "$model"
