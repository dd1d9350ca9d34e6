#!/usr/bin/env bash
# The main job behind `make run`: `strata serve` on MODEL, on 127.0.0.1:PORT
# (default 8080), until Ctrl-C. Without MODEL it serves the small real model
# of the reference data ($STRATA_TEST_DATA or ../shared/data) when that is
# there, else a small random-weight model it makes once with `strata mkmodel`
# (BUILD/models/tiny-Q4_K.gguf).
set -euo pipefail
bin=$1
model=${2:-}
port=${PORT:-8080}
if [ -z "$model" ]; then
    for d in "${STRATA_TEST_DATA:-}" "$(dirname "$0")/../../shared/data"; do
        if [ -n "$d" ] && [ -f "$d/models/stories260K.gguf" ]; then
            model="$d/models/stories260K.gguf"
            break
        fi
    done
fi
if [ -z "$model" ]; then
    model="$(dirname "$bin")/models/tiny-Q4_K.gguf"
    if [ ! -f "$model" ]; then
        mkdir -p "$(dirname "$model")"
        "$bin" mkmodel --preset tiny --type Q4_K --quiet -o "$model"
    fi
fi
cat >&2 <<MSG
strata: serving $model on http://127.0.0.1:$port (Ctrl-C to stop). Try:
  curl http://127.0.0.1:$port/v1/completions -H 'Content-Type: application/json' \\
       -d '{"prompt": "Once upon a time", "max_tokens": 32}'
  curl http://127.0.0.1:$port/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"messages": [{"role": "user", "content": "Tell me a story"}], "stream": true}'
MSG
exec "$bin" serve -m "$model" --host 127.0.0.1 --port "$port" --replicas 1 --slots 4
