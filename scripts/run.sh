#!/usr/bin/env bash
# Build sandbox-launch (release) and run it with the arguments given, e.g.
#   scripts/run.sh whole-process -- bash
#   scripts/run.sh doctor
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh"
cargo build --release --locked --manifest-path "$root/Cargo.toml" -p sandbox-launch >&2
exec "$root/target/release/sandbox-launch" "$@"
