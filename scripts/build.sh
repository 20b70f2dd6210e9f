#!/usr/bin/env bash
# Build the release binaries, statically linked (static-pie): a launch then maps no shared
# libraries, which saves about a millisecond per launch (the dynamic loader was a third of the
# launcher's user time). Prints the directory that holds sandbox-launch and fault-inject.
#   scripts/build.sh [cargo build options]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
host="$(rustc -vV | sed -n 's/^host: //p')"
# An explicit --target keeps these flags away from build scripts and proc-macros.
export RUSTFLAGS="-C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs -C symbol-mangling-version=v0"
cargo build --release --locked --manifest-path "$root/Cargo.toml" --target "$host" --workspace --bins "$@" >&2
echo "$root/target/$host/release"
