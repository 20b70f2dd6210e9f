#!/usr/bin/env bash
# Install what the tests need, then check formatting and lints and run every test: the unit tests
# and the integration tests, which run the real binary as the invoking user and, when run as root,
# as an unprivileged user (uid 65534) too. A missing prerequisite is a failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --tests
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --workspace --all-targets --locked
# The sandbox tests start many namespaces; two at a time keeps a 2-core machine responsive.
cargo test --workspace --locked --no-fail-fast -- --test-threads="${TEST_THREADS:-2}"
echo "test.sh: all tests passed"
