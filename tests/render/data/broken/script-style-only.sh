#!/usr/bin/env bash
# Broken on purpose, at style severity only: `$((` ... `))` does not need `$` on a
# variable (shellcheck SC2004), which only --severity=style reports.
set -euo pipefail
gpus=8
echo "$(( $gpus * 2 ))"
