#!/usr/bin/env bash
# Run one cargo-fuzz target for a while: scripts/fuzz.sh TARGET SECONDS (not part of CI).
# Targets: `cargo fuzz list` in fuzz/ (http_head, client_hello, socks5, dns_stub, ...).
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). The working corpus
# lives outside the repository, seeded from fuzz/seeds/TARGET; crashes land in
# fuzz/artifacts/TARGET (reproduce with `cargo +nightly fuzz run TARGET FILE` in fuzz/).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

if [ $# -ne 2 ]; then
    echo "usage: scripts/fuzz.sh TARGET SECONDS   (targets: $(ls fuzz_targets | sed 's/\.rs$//' | tr '\n' ' '))" >&2
    exit 2
fi
target=$1 seconds=$2
if [ ! -f "fuzz_targets/$target.rs" ]; then
    echo "fuzz.sh: no target $target (have: $(ls fuzz_targets | sed 's/\.rs$//' | tr '\n' ' '))" >&2
    exit 2
fi
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: cargo-fuzz needs a nightly toolchain: rustup toolchain install nightly" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-fuzz is missing: cargo install cargo-fuzz" >&2
    exit 1
fi
corpus=/var/cache/sandbox-launch-tests/fuzz-corpus/$target
mkdir -p "$corpus"
seeds=seeds/$target
[ -d "$seeds" ] || seeds=
exec cargo +nightly fuzz run "$target" "$corpus" $seeds -- -max_total_time="$seconds" -timeout=10
