#!/usr/bin/env python3
"""Proxy rows of the benchmark table (called by bench.py when `--network restricted` works).

Servers run on the host's 127.0.0.1 only. Inside the sandbox, curl reaches them through the
supervisor's proxy (HTTP_PROXY etc. are set by the launcher); outside, curl reaches them
directly. Prints one JSON row per line: [section, what, tool, median, lo, hi, unit, ratio, note].
"""
import json
import os
import statistics
import subprocess
import sys
import time

B = os.environ.get("BENCH_DIR", "/var/tmp/sl-bench")
SL = os.environ.get("SL", f"{B}/sandbox-launch")
QUICK = os.environ.get("QUICK") == "1"
WORK = f"{B}/work"
BULK_PORT, SMALL_PORT = 18931, 18932
BULK = 1_000_000_000 if not QUICK else 300_000_000
REPS = 5 if not QUICK else 3
LAT_N = 200 if not QUICK else 50


def sandbox(script):
    cmd = [SL, "whole-process", "--network", "restricted", "--resolve", "bulk.test:127.0.0.1",
           "--allow-domain", "bulk.test", "--", "/bin/sh", "-c", script]
    p = subprocess.run(cmd, cwd=WORK, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"sandbox run failed ({p.returncode}): {p.stderr.strip()[-300:]}")
    return p.stdout


def host(script):
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True).stdout


def med(vals):
    return statistics.median(vals), min(vals), max(vals)


def row(what, tool, v, unit, ratio="", note=""):
    print(json.dumps(["proxy", what, tool, v[0], v[1], v[2], unit, ratio, note]))


def main():
    serve = f"{B}/bulkserve"
    servers = [subprocess.Popen([serve, str(BULK_PORT), str(BULK)]),
               subprocess.Popen([serve, str(SMALL_PORT), "64"])]
    time.sleep(0.3)
    try:
        speed = "curl -s -o /dev/null -w '%{speed_download}\\n'"
        # Bulk throughput (bytes/s -> MiB/s).
        direct = [float(host(f"{speed} http://127.0.0.1:{BULK_PORT}/")) / 2**20 for _ in range(REPS)]
        tunnel = [float(x) / 2**20 for x in sandbox(
            f"for i in $(seq {REPS}); do {speed} -p http://bulk.test:{BULK_PORT}/; done").split()]
        socks = [float(x) / 2**20 for x in sandbox(
            f"for i in $(seq {REPS}); do {speed} -x socks5h://127.0.0.1:1080 http://bulk.test:{BULK_PORT}/; done").split()]
        plain = [float(x) / 2**20 for x in sandbox(
            f"for i in $(seq {REPS}); do {speed} http://bulk.test:{BULK_PORT}/; done").split()]
        d = med(direct)
        row("bulk throughput (MiB/s, higher is better)", "direct loopback", d, "MiB/s")
        for name, vals in [("CONNECT tunnel", tunnel), ("SOCKS5", socks), ("plain HTTP", plain)]:
            v = med(vals)
            row("bulk throughput (MiB/s, higher is better)", f"sandbox-launch {name}", v, "MiB/s",
                note=f"{v[0] / d[0]:.2f}× direct (target ≥ 0.90×)")
        # Added latency of a new connection: connect + first byte, direct vs through the proxy.
        ttfb = "curl -s -o /dev/null -H 'Connection: close' -w '%{time_starttransfer}\\n'"
        direct = [float(x) * 1e3 for x in host(
            f"for i in $(seq {LAT_N}); do {ttfb} http://127.0.0.1:{SMALL_PORT}/; done").split()]
        proxied = [float(x) * 1e3 for x in sandbox(
            f"for i in $(seq {LAT_N}); do {ttfb} -p http://bulk.test:{SMALL_PORT}/; done").split()]
        dm, pm = med(direct), med(proxied)
        row("new connection, connect+first byte (ms)", "direct loopback", dm, "ms")
        row("new connection, connect+first byte (ms)", "sandbox-launch CONNECT", pm, "ms",
            note=f"+{pm[0] - dm[0]:.3f} ms added (target < 1 ms)")
    finally:
        for s in servers:
            s.kill()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - reported as a row
        print(json.dumps(["proxy", "all proxy rows", "sandbox-launch", None, None, None, "", "",
                          f"failed: {str(e)[:120]}"]))
        sys.exit(0)
