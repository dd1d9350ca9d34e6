#!/usr/bin/env bash
# The main job behind `make run`: describe MODEL with `strata info`.
# Without MODEL it makes a small random-weight model once
# (BUILD/models/tiny-Q4_K.gguf, with `strata mkmodel`) and uses that.
set -euo pipefail
bin=$1
model=${2:-}
if [ -z "$model" ]; then
    model="$(dirname "$bin")/models/tiny-Q4_K.gguf"
    if [ ! -f "$model" ]; then
        mkdir -p "$(dirname "$model")"
        "$bin" mkmodel --preset tiny --type Q4_K --quiet -o "$model"
    fi
fi
exec "$bin" info "$model"
