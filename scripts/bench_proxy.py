#!/usr/bin/env python3
"""Proxy rows of the benchmark table (called by bench.py when `--network restricted` works).

Servers run on the host's 127.0.0.1 only. Inside the sandbox, curl reaches them through the
supervisor's proxy (HTTP_PROXY etc. are set by the launcher); outside, curl reaches them
directly. Prints one JSON row per line: [section, what, tool, median, lo, hi, unit, ratio, note].
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

B = os.environ.get("BENCH_DIR", "/var/cache/sandbox-launch-tests/bench")
SL = os.environ.get("SL", f"{B}/sandbox-launch")
QUICK = os.environ.get("QUICK") == "1"
WORK = f"{B}/work"
BULK_PORT, SMALL_PORT, RELAY_PORT = 18931, 18932, 18934  # SMALL_PORT + 1: the echo server
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


SRT = os.environ.get("SRT", f"{B}/srt/node_modules/.bin/srt")


def srt(script):
    """Run `script` under srt with localhost allowed through its proxy (it lists localhost in
    NO_PROXY, so curl is told to use the proxy explicitly)."""
    cfg = f"{B}/srt-net.json"
    with open(cfg, "w") as f:
        json.dump({"network": {"allowedDomains": ["localhost"], "deniedDomains": []},
                   "filesystem": {"denyRead": [], "allowWrite": [WORK], "denyWrite": []}}, f)
    # srt leaves its socket in TMPDIR: bench.py's directory for it, emptied when bench.py ends.
    env = dict(os.environ, PATH=f"{B}/srt/node_modules/.bin:" + os.environ["PATH"], HOME=f"{B}/home",
               TMPDIR=f"{B}/srt-tmp")
    p = subprocess.run([SRT, "-s", cfg, "sh", "-c", script], cwd=WORK, capture_output=True, text=True,
                       timeout=900, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"srt failed: {p.stderr.strip()[-200:]}")
    return p.stdout


def host(script):
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=True).stdout


def med(vals):
    return statistics.median(vals), min(vals), max(vals)


def row(what, tool, v, unit, ratio="", note=""):
    print(json.dumps(["proxy", what, tool, v[0], v[1], v[2], unit, ratio, note]))


TUNNELS_CLIENT = r"""
import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
socks = []
for i in range(N):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT bulk.test:PORT HTTP/1.1\r\nHost: bulk.test:PORT\r\n\r\n")
    if b" 200" not in s.recv(100):
        sys.exit("tunnel refused")
    socks.append(s)
print("open", flush=True)
time.sleep(3)
"""


def tunnels_row():
    """Supervisor memory idle and with N CONNECT tunnels held open (to an echo server)."""
    n = 1000
    echo = subprocess.Popen([sys.executable, "-c", (
        "import socket,threading\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(('127.0.0.1',{SMALL_PORT + 1})); s.listen(4096)\n"
        "conns=[]\n"
        "while True:\n c,_=s.accept(); conns.append(c)\n")])
    time.sleep(0.3)
    client = TUNNELS_CLIENT.replace("N)", f"{n})").replace("PORT", str(SMALL_PORT + 1))
    with open(f"{WORK}/tunnels.py", "w") as f:
        f.write(client)
    p = subprocess.Popen([SL, "whole-process", "--network", "restricted", "--resolve", "bulk.test:127.0.0.1",
                          "--allow-domain", "bulk.test", "--", "python3", "tunnels.py"],
                         cwd=WORK, stdout=subprocess.PIPE, text=True)
    idle_p = subprocess.Popen([SL, "whole-process", "--network", "restricted", "--", "sleep", "2"], cwd=WORK)
    time.sleep(1)
    idle = rss_mib(idle_p.pid)
    idle_p.wait()
    try:
        line = p.stdout.readline()
        busy = rss_mib(p.pid) if "open" in line else None
        p.wait(timeout=60)
    finally:
        echo.kill()
    what = "supervisor memory (MiB RSS)"
    if idle is not None:
        row(what, "sandbox-launch, proxy up, idle", (idle, idle, idle), "MiB")
    if busy is not None:
        row(what, f"sandbox-launch, {n} CONNECT tunnels open", (busy, busy, busy), "MiB",
            note=f"+{(busy - idle) * 1024 / n:.1f} KiB per tunnel" if idle else "")
    else:
        row(what, f"sandbox-launch, {n} CONNECT tunnels", (None, None, None), "MiB", note="tunnels failed to open")


LOAD_LUA = """
wrk.method = "GET"
wrk.path = "http://bulk.test:PORT/"
wrk.headers["Host"] = "bulk.test:PORT"
wrk.headers["Connection"] = "close"
"""

SLOW_CLIENT = r"""
import resource, socket, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
socks = []
for i in range(N):
    s = socket.create_connection(("127.0.0.1", 3128))
    # A request head that never ends, 4 KiB of it sent: the slow client grows the proxy's buffers.
    s.sendall(b"GET http://bulk.test:PORT/ HTTP/1.1\r\nHost: bulk.test\r\nX-Pad: " + b"a" * 4000)
    socks.append(s)
print("held", flush=True)
time.sleep(3)
for s in socks:
    s.close()
print("closed", flush=True)
time.sleep(4)
"""


def sandbox_watch(opts, script, marks):
    """Run `script` in a sandbox; at each marker line it prints, read the supervisor's RSS (after
    `delay` seconds). Returns (stdout lines, {marker: MiB})."""
    p = subprocess.Popen([SL, "whole-process", "--network", "restricted", "--resolve", "bulk.test:127.0.0.1",
                          "--allow-domain", "bulk.test", *opts, "--", "/bin/sh", "-c", script],
                         cwd=WORK, stdout=subprocess.PIPE, text=True)
    lines, rss = [], {}
    for line in p.stdout:
        lines.append(line)
        for mark, delay in marks:
            if line.strip() == mark:
                time.sleep(delay)
                rss[mark] = rss_mib(p.pid)
    p.wait(timeout=120)
    return lines, rss


def load_rows():
    """Requests/s at 500 concurrent clients (a new connection per request, plain HTTP through
    the proxy) with and without --events, interleaved; supervisor RSS idle, after the burst, and
    while 1,000 slow clients hold half-sent request heads and after they go."""
    if not shutil.which("wrk"):
        row("requests/s at 500 concurrent clients", "sandbox-launch", (None, None, None), "req/s",
            note="not measured: wrk is missing")
        return
    with open(f"{WORK}/load.lua", "w") as f:
        f.write(LOAD_LUA.replace("PORT", str(SMALL_PORT)))
    dur = 5 if QUICK else 10
    wrk = f"sleep 1; echo idle; wrk -t2 -c500 -d{dur}s -s load.lua http://127.0.0.1:3128/; echo burst-done; sleep 3"
    events = f"{WORK}/load-events.jsonl"
    rps = {False: [], True: []}
    mem = {"idle": [], "burst-done": []}
    for _ in range(REPS if not QUICK else 2):
        for with_events in (False, True):
            opts = ["--events", events] if with_events else []
            lines, rss = sandbox_watch(opts, wrk, [("idle", 0), ("burst-done", 2)])
            for line in lines:
                if line.startswith("Requests/sec:"):
                    rps[with_events].append(float(line.split()[1]))
            if not with_events:
                for k in mem:
                    if rss.get(k) is not None:
                        mem[k].append(rss[k])
            if os.path.exists(events):
                os.remove(events)
    what = "requests/s at 500 concurrent clients, a connection per request (higher is better)"
    if rps[False] and rps[True]:
        off, on = med(rps[False]), med(rps[True])
        row(what, "sandbox-launch plain HTTP", off, "req/s")
        row(what, "sandbox-launch plain HTTP, --events FILE", on, "req/s",
            ratio=f"{on[0] / off[0]:.2f}× without", note="target ≥ 0.90× (program identified per connection)")
    else:
        row(what, "sandbox-launch", (None, None, None), "req/s", note="wrk printed no rate")
    what = "supervisor memory (MiB RSS)"
    if mem["idle"] and mem["burst-done"]:
        row(what, "sandbox-launch, before the 500-client burst", med(mem["idle"]), "MiB")
        row(what, "sandbox-launch, 2 s after the burst", med(mem["burst-done"]), "MiB",
            note=f"{med(mem['burst-done'])[0] / med(mem['idle'])[0]:.2f}× before")
    n = 1000
    with open(f"{WORK}/slow.py", "w") as f:
        f.write(SLOW_CLIENT.replace("range(N)", f"range({n})").replace("PORT", str(SMALL_PORT)))
    lines, rss = sandbox_watch([], "sleep 1; echo idle; python3 slow.py",
                               [("idle", 0), ("held", 1), ("closed", 3)])
    if all(rss.get(k) is not None for k in ("idle", "held", "closed")):
        row(what, f"sandbox-launch, {n} slowloris clients holding 4 KiB half-heads", (rss["held"],) * 3, "MiB",
            note=f"idle {rss['idle']:.1f} MiB")
        row(what, f"sandbox-launch, 3 s after the {n} slowloris clients left", (rss["closed"],) * 3, "MiB",
            note=f"{rss['closed'] / rss['idle']:.2f}× idle")
    else:
        row(what, f"sandbox-launch, {n} slowloris clients", (None, None, None), "MiB", note="not measured")


def rss_mib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def main():
    serve = f"{B}/bulkserve"
    servers = [subprocess.Popen([serve, str(BULK_PORT), str(BULK)]),
               subprocess.Popen([serve, str(SMALL_PORT), "64"]),
               # The least any user-space relay does (splice both ways, no checks): the ceiling
               # for a proxy on this machine.
               subprocess.Popen([f"{B}/splice_relay", str(RELAY_PORT), str(BULK_PORT)])]
    time.sleep(0.3)
    try:
        speed = "curl -s -o /dev/null -w '%{speed_download}\\n'"
        # Bulk throughput (bytes/s -> MiB/s).
        direct = [float(host(f"{speed} http://127.0.0.1:{BULK_PORT}/")) / 2**20 for _ in range(REPS)]
        relayed = [float(host(f"{speed} http://127.0.0.1:{RELAY_PORT}/")) / 2**20 for _ in range(REPS)]
        tunnel = [float(x) / 2**20 for x in sandbox(
            f"for i in $(seq {REPS}); do {speed} -p http://bulk.test:{BULK_PORT}/; done").split()]
        socks = [float(x) / 2**20 for x in sandbox(
            f"for i in $(seq {REPS}); do {speed} -x socks5h://127.0.0.1:1080 http://bulk.test:{BULK_PORT}/; done").split()]
        plain = [float(x) / 2**20 for x in sandbox(
            f"for i in $(seq {REPS}); do {speed} http://bulk.test:{BULK_PORT}/; done").split()]
        d = med(direct)
        what = "bulk throughput (MiB/s, higher is better)"
        row(what, "direct loopback", d, "MiB/s")
        c = med(relayed)
        row(what, "minimal splice relay in C, no checks", c, "MiB/s",
            note=f"{c[0] / d[0]:.2f}× direct: the ceiling of a user-space relay here")
        srt_rows = {}
        if os.access(SRT, os.X_OK):
            via = "--noproxy '' -x \"$HTTP_PROXY\""
            try:
                for name, flags in [("CONNECT tunnel", f"-p {via}"), ("SOCKS5", "--noproxy '' -x \"$ALL_PROXY\""),
                                    ("plain HTTP", via)]:
                    srt_rows[name] = med([float(x) / 2**20 for x in srt(
                        f"for i in $(seq {REPS}); do {speed} {flags} http://localhost:{BULK_PORT}/; done").split()])
            except Exception as e:  # noqa: BLE001 - reported as a note
                srt_rows = {"error": str(e)[:80]}
        for name, vals in [("CONNECT tunnel", tunnel), ("SOCKS5", socks), ("plain HTTP", plain)]:
            v = med(vals)
            note = f"{v[0] / d[0]:.2f}× direct (target ≥ 0.90×), {v[0] / c[0]:.2f}× the C relay"
            ratio = ""
            if name in srt_rows:
                s_ = srt_rows[name]
                row(what, f"srt {name}", s_, "MiB/s", note=f"{s_[0] / d[0]:.2f}× direct")
                ratio = f"{v[0] / s_[0]:.2f}× srt"
            row(what, f"sandbox-launch {name}", v, "MiB/s", ratio=ratio, note=note)
        if "error" in srt_rows:
            row(what, "srt", (None, None, None), "MiB/s", note=f"not measured: {srt_rows['error']}")
        # Added latency of a new connection: connect + first byte, direct vs through the proxy.
        ttfb = "curl -s -o /dev/null -H 'Connection: close' -w '%{time_starttransfer}\\n'"
        direct = [float(x) * 1e3 for x in host(
            f"for i in $(seq {LAT_N}); do {ttfb} http://127.0.0.1:{SMALL_PORT}/; done").split()]
        proxied = [float(x) * 1e3 for x in sandbox(
            f"for i in $(seq {LAT_N}); do {ttfb} -p http://bulk.test:{SMALL_PORT}/; done").split()]
        dm, pm = med(direct), med(proxied)
        what = "new connection, connect+first byte (ms)"
        row(what, "direct loopback", dm, "ms")
        ratio = ""
        if os.access(SRT, os.X_OK):
            try:
                sm = med([float(x) * 1e3 for x in srt(
                    f"for i in $(seq {LAT_N}); do {ttfb} -p --noproxy '' -x \"$HTTP_PROXY\" http://localhost:{SMALL_PORT}/; done").split()])
                row(what, "srt CONNECT", sm, "ms", note=f"+{sm[0] - dm[0]:.3f} ms added")
                ratio = f"{(pm[0] - dm[0]) / max(sm[0] - dm[0], 1e-9):.2f}× srt's added"
            except Exception as e:  # noqa: BLE001
                row(what, "srt CONNECT", (None, None, None), "ms", note=f"not measured: {str(e)[:80]}")
        row(what, "sandbox-launch CONNECT", pm, "ms", ratio=ratio,
            note=f"+{pm[0] - dm[0]:.3f} ms added (target < 1 ms)")
        # Small plain-HTTP requests per second over one kept-alive client connection.
        rps_py = (f"import http.client,time\n"
                  f"c=http.client.HTTPConnection('{{h}}',{{p}})\n"
                  f"n={LAT_N * 10}\nt=time.perf_counter()\n"
                  f"for i in range(n):\n c.request('GET','{{u}}'); r=c.getresponse(); r.read()\n"
                  f"print(n/(time.perf_counter()-t))\n")
        d_rps = [float(host("python3 -c \"" + rps_py.format(h="127.0.0.1", p=SMALL_PORT, u="/") + "\""))
                 for _ in range(REPS)]
        p_rps = [float(x) for x in sandbox("for i in $(seq %d); do python3 -c \"%s\"; done" % (
            REPS, rps_py.format(h="127.0.0.1", p=3128, u=f"http://bulk.test:{SMALL_PORT}/"))).split()]
        what = "small plain-HTTP requests per second (higher is better)"
        row(what, "direct loopback", med(d_rps), "req/s")
        row(what, "sandbox-launch plain HTTP", med(p_rps), "req/s",
            note=f"{med(p_rps)[0] / med(d_rps)[0]:.2f}× direct")
        tunnels_row()
        load_rows()
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
