#!/usr/bin/env bash
# Install what the tests need, then check formatting and lints and run every test: the unit tests
# and the integration tests, which run the real binary as the invoking user and, when run as root,
# as an unprivileged user (uid 65534) too. A missing prerequisite is a failure, never a skip.
# The tests leave nothing in /tmp or /var/tmp: checked at the end (a failure under CI=true; on a
# shared development machine, where others write there too, a list of what appeared).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --tests
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --workspace --all-targets --locked
# The static release build: what container images get and what the benchmarks measure; the
# tests run it too (scripts/build.sh prints its directory).
SANDBOX_LAUNCH_STATIC_DIR="$(scripts/build.sh)"
export SANDBOX_LAUNCH_STATIC_DIR
# What `cargo install --path launcher` gives (the same static build; the tests check it is).
cargo install --quiet --locked --force --path launcher --target-dir target \
    --root /var/cache/sandbox-launch-tests/cargo-install
export SANDBOX_LAUNCH_INSTALLED_DIR=/var/cache/sandbox-launch-tests/cargo-install/bin

listing() { find /tmp /var/tmp -mindepth 1 -maxdepth 1 2>/dev/null | sort; }
listing_before="$(listing)"
# The sandbox tests start many namespaces; two at a time keeps a 2-core machine responsive.
cargo test --workspace --locked --no-fail-fast -- --test-threads="${TEST_THREADS:-2}"
left="$(comm -13 <(echo "$listing_before") <(listing))"
if [[ -n "$left" ]]; then
    echo "test.sh: these appeared in /tmp or /var/tmp during the tests:" >&2
    echo "$left" >&2
    if [[ "${CI:-}" == "true" ]]; then
        exit 1
    fi
fi
echo "test.sh: all tests passed"
