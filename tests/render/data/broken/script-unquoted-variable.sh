#!/usr/bin/env bash
# Broken on purpose: $MODEL_PATH is unquoted, so a path with a space becomes two
# arguments (shellcheck SC2086, severity info).
set -euo pipefail
MODEL_PATH="/models/My Model"
exec vllm serve $MODEL_PATH --port 8000
