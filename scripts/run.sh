#!/usr/bin/env bash
# Build sandbox-launch (release) and run it with the arguments given, e.g.
#   scripts/run.sh whole-process -- bash
#   scripts/run.sh doctor
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh"
bin="$("$root/scripts/build.sh")"
exec "$bin/sandbox-launch" "$@"
