#!/usr/bin/env python3
"""Measure sandbox-launch and its peers in one run and print one markdown table.

Called by scripts/bench.sh, which installs the peers and builds the binaries into $BENCH_DIR.
Every number comes from this run; ratios compare rows measured minutes apart on the same machine.
"""
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

B = os.environ.get("BENCH_DIR", "/var/cache/sandbox-launch-tests/bench")
QUICK = os.environ.get("QUICK") == "1"
RUNS = 20 if QUICK else 60
SL = f"{B}/sandbox-launch"
SL_INSTALLED = f"{B}/cargo-install/bin/sandbox-launch"
SL_READ_BACK = f"{B}/read-back/sandbox-launch"
SRT = f"{B}/srt/node_modules/.bin/srt"
SYSLOOP = f"{B}/sysloop"
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--"]
IS_ROOT = os.geteuid() == 0

WORK = f"{B}/work"
HOME = f"{B}/home"
BIG = f"{B}/tree-100k"
# srt leaves a socket (srt-mux-PID-N.sock) in its TMPDIR per run: it gets one of its own here,
# emptied at the end, rather than the host's /tmp.
SRT_TMP = f"{B}/srt-tmp"
for d in (WORK, HOME, SRT_TMP):
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o1777 if d == SRT_TMP else 0o777)
with open(f"{B}/srt.json", "w") as f:
    json.dump({"network": {"allowedDomains": [], "deniedDomains": []},
               "filesystem": {"denyRead": [], "allowWrite": [WORK], "denyWrite": []}}, f)
os.chmod(f"{B}/srt.json", 0o644)

def env_for_srt(home=HOME):
    e = dict(os.environ)
    e["PATH"] = f"{B}/srt/node_modules/.bin:" + e.get("PATH", "")
    e["HOME"] = home
    e["TMPDIR"] = SRT_TMP
    return e

# The launch rows run in an empty HOME and an empty working directory: the least a launch can
# have to plan. Where people run an agent, HOME holds the agents' state (each agent's directory
# is a writable tree, with its own persistence plan) and the working directory is a git checkout
# (its hooks and configuration are looked at): this row measures that.
IN_PROJECT = "sandbox-launch (restricted, agents' HOME, git checkout)"

def project_setting(unpriv):
    """(HOME, working directory) like a developer's, owned by the user who runs the launch."""
    who = "65534" if (unpriv and IS_ROOT) else str(os.geteuid())
    home, work = f"{B}/project-home-{who}", f"{B}/project-work-{who}"
    if not os.path.exists(f"{work}/.git/config"):
        for d in ("", ".config", ".claude/projects", ".codex", ".cargo/bin"):
            os.makedirs(f"{home}/{d}", exist_ok=True)
        for name, text in ((".bashrc", "export EDITOR=vi\n"), (".profile", ". ~/.bashrc\n"),
                           (".gitconfig", "[user]\n\tname = bench\n\temail = bench@example.invalid\n")):
            with open(f"{home}/{name}", "w") as f:
                f.write(text)
        os.makedirs(f"{work}/src", exist_ok=True)
        with open(f"{work}/src/main.rs", "w") as f:
            f.write("fn main() {}\n")
        subprocess.run(["git", "init", "-q", work], check=True, env=dict(os.environ, HOME=home))
        # Made by root for uid 65534's rows; anyone else makes their own.
        if IS_ROOT and who != "0":
            for top in (home, work):
                subprocess.run(["chown", "-R", f"{who}:{who}", top], check=True)
    return home, work

# The page cache of a freshly written binary (every other row's: bench.sh has just installed
# them) holds it in 64 KiB folios; after a reboot, or once the kernel has dropped its pages, an
# exec reads it back in 4 KiB pages. A launch faults its code in by the same 64 KiB groups
# either way, but each fault over small pages costs more (0.03-0.06x of bwrap's launch on the
# development VM). This row's copy of the installed build is dropped and read back first.
READ_BACK = "sandbox-launch (cargo install, restricted, read back from disk)"

def read_back(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)  # pages still to be written are not dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    subprocess.run([path, "--version"], stdout=subprocess.DEVNULL, check=True)

def setting(tool, unpriv):
    """The HOME and working directory a launch row runs in."""
    return project_setting(unpriv) if tool == IN_PROJECT else (HOME, WORK)

# The runners: a prefix that runs a command in that sandbox. None = not available here.
def runners():
    r = {
        "bare": [],
        "unshare": ["unshare", "--user", "--mount", "--net", "--pid", "--fork"],
        "bwrap": ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"],
        "srt": [SRT, "-s", f"{B}/srt.json"] if os.access(SRT, os.X_OK) else None,
        "nsjail": None,  # not packaged in Debian 12 and no source registry here
        "sandbox-launch (none)": [SL, "whole-process", "--network", "none", "--"],
        "sandbox-launch (restricted)": [SL, "whole-process", "--network", "restricted", "--"],
        # The build users install: `cargo install --path launcher` (bench.sh installs it).
        "sandbox-launch (cargo install, restricted)":
            [SL_INSTALLED, "whole-process", "--network", "restricted", "--"],
        READ_BACK: [SL_READ_BACK, "whole-process", "--network", "restricted", "--"],
        IN_PROJECT: [SL, "whole-process", "--network", "restricted", "--"],
    }
    return r

PEERS = ["bwrap", "srt", "nsjail"]
OURS = ["sandbox-launch (none)", "sandbox-launch (restricted)",
        "sandbox-launch (cargo install, restricted)", READ_BACK, IN_PROJECT]
NOTES = {"nsjail": "not available: not packaged in Debian 12"}

def as_user(cmd, unpriv):
    return (NOBODY + cmd) if (unpriv and IS_ROOT) else cmd

def works(prefix, unpriv, home=HOME, cwd=WORK):
    try:
        p = subprocess.run(as_user(prefix + ["/bin/true"], unpriv), cwd=cwd, env=env_for_srt(home),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
    except Exception as e:  # noqa: BLE001 - reported in the table
        return str(e)
    return None if p.returncode == 0 else (p.stderr.decode(errors="replace").strip().splitlines() or ["exit %d" % p.returncode])[-1]

def hyperfine_times(cmd, unpriv, cwd=WORK, runs=RUNS, warmup=3, home=HOME):
    """Every run's wall time in ms of `cmd`, run by hyperfine (itself as the user, so no setpriv cost)."""
    out = tempfile.NamedTemporaryFile(dir=B, suffix=".json", delete=False)
    out.close()
    os.chmod(out.name, 0o666)
    quoted = " ".join(shlex_quote(c) for c in cmd)
    hf = ["hyperfine", "-N", "--warmup", str(warmup), "--runs", str(runs), "--export-json", out.name,
          quoted]
    try:
        subprocess.run(as_user(hf, unpriv), cwd=cwd, env=env_for_srt(home), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out.name) as f:
            res = json.load(f)["results"][0]
    finally:
        # Also when hyperfine fails (a peer that exits non-zero is a row, not the end of the run).
        os.unlink(out.name)
    return [t * 1e3 for t in res["times"]]

def summary(times):
    return statistics.median(times), min(times), max(times)

def hyperfine(cmd, unpriv, cwd=WORK, runs=RUNS):
    """Median, min, max in ms of `cmd`."""
    return summary(hyperfine_times(cmd, unpriv, cwd, runs))

def shlex_quote(s):
    import shlex
    return shlex.quote(s)

def sysloop(prefix, op, n, unpriv, reps=3 if QUICK else 5):
    vals = []
    for _ in range(reps):
        p = subprocess.run(as_user(prefix + [SYSLOOP, op, str(n)], unpriv), cwd=WORK, env=env_for_srt(),
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            return None
        vals.append(float(p.stdout.strip().splitlines()[-1]))
    return statistics.median(vals), min(vals), max(vals)

rows = []  # (section, what, tool, median, lo, hi, unit, ratio_text, note)

def fmt(v, unit):
    if unit == "ms":
        return f"{v:.2f}"
    if unit == "ns":
        return f"{v:.0f}" if v >= 100 else f"{v:.1f}"
    return f"{v:.2f}"

def add_group(section, what, unit, results, lower_is_better=True, baseline=None, ratios=None):
    """results: tool -> (median, lo, hi) or str (why not measured); ratios: tool -> its ratio to
    the best peer when measured otherwise than from the medians (the launch rows')."""
    peer_meds = [v[0] for k, v in results.items() if k in PEERS and isinstance(v, tuple)]
    best = (min(peer_meds) if lower_is_better else max(peer_meds)) if peer_meds else None
    for tool, v in results.items():
        if not isinstance(v, tuple):
            rows.append((section, what, tool, None, None, None, unit, "", v))
            continue
        ratio = ""
        if best and tool not in ("bare", "unshare", "direct", "any seccomp filter"):
            ratio = f"{(ratios or {}).get(tool, v[0] / best):.2f}×"
        note = ""
        if baseline and baseline in results and isinstance(results[baseline], tuple) and tool != baseline:
            b = results[baseline][0]
            note = f"{v[0] / b:.2f}× {baseline}" if unit != "ms" else f"+{v[0] - b:.2f} ms vs {baseline}"
        rows.append((section, what, tool, v[0], v[1], v[2], unit, ratio, note))

# Launch times drift on a shared VM by more than the differences measured (the same row moved by
# 10-20% between two runs minutes apart with 6 rounds of 10): the tools take turns in many short
# rounds (3 runs each), each round in an order drawn anew, and a launch row's ratio is the median
# over the rounds of its round's median against the best peer's in the same round, so drift
# between rounds cancels. Drawn, not rotated: a launch leaves work behind (the kernel tears its
# network and IPC namespaces down afterwards, on its workers), which lands on the next one, and
# a rotation keeps the same tool before each tool in every round (two copies of one build
# measured 0.945x and 0.931x bwrap so; drawn, 0.938x and 0.939x). The median column pools every
# run of every round. Sixty rounds: with twenty, two rows of one binary landed 0.06x apart in
# one run on a loaded host (bwrap at 5.6-6.3 ms).
ROUNDS = 4 if QUICK else 20
LAUNCH_ROUNDS = 4 if QUICK else 60

def launch_rows():
    if os.access(SL_READ_BACK, os.X_OK):
        read_back(SL_READ_BACK)
    for unpriv in ([False, True] if IS_ROOT else [False]):
        who = "uid 65534" if (unpriv or not IS_ROOT) else "root"
        res, times = {}, {}
        for tool, prefix in runners().items():
            if prefix is None:
                res[tool] = NOTES.get(tool, "not available")
                continue
            try:
                home, cwd = setting(tool, unpriv)
            except (OSError, subprocess.CalledProcessError) as e:
                res[tool] = f"not measured: its HOME and checkout could not be made ({e})"
                continue
            why = works(prefix, unpriv, home, cwd)
            if why:
                res[tool] = f"fails here: {why[:80]}"
                continue
            times[tool] = []
        order = random.Random(f"launch {who}")  # the same draws in every run of the script
        by_round = {tool: {} for tool in times}  # tool -> round -> that round's median
        for r in range(LAUNCH_ROUNDS):
            tools = list(times)
            order.shuffle(tools)
            for tool in tools:
                if tool not in times:
                    continue
                home, cwd = setting(tool, unpriv)
                try:
                    t = hyperfine_times(runners()[tool] + ["/bin/true"], unpriv, cwd=cwd,
                                        runs=3, warmup=1, home=home)
                except subprocess.CalledProcessError:
                    res[tool] = "fails here: some of the runs exited non-zero"
                    del times[tool]
                    continue
                times[tool] += t
                by_round[tool][r] = statistics.median(t)
        for tool, t in times.items():
            res[tool] = summary(t)
        # Keep the runners' order in the table.
        res = {tool: res[tool] for tool in runners() if tool in res}
        add_group("launch", f"/bin/true, as {who}", "ms", res, baseline="unshare",
                  ratios=round_ratios(by_round, times))

def round_ratios(by_round, times):
    """Each measured tool's median over the rounds of (its round median / the best peer's round
    median), the best peer being the one with the lowest pooled median."""
    peers = [p for p in PEERS if p in times]
    if not peers:
        return {}
    best = min(peers, key=lambda p: statistics.median(times[p]))
    ratios = {}
    for tool in times:
        per = [m / by_round[best][r] for r, m in by_round[tool].items() if r in by_round[best]]
        if per:
            ratios[tool] = statistics.median(per)
    return ratios

def syscall_rows():
    ops = [("getppid", 2_000_000 if not QUICK else 500_000), ("openclose", 200_000 if not QUICK else 50_000),
           ("forkexec", 300 if not QUICK else 100), ("create", 20_000 if not QUICK else 5_000),
           ("openwrite", 20_000 if not QUICK else 5_000), ("connect", 5_000 if not QUICK else 1_000),
           ("sendto", 20_000 if not QUICK else 5_000)]
    rs = runners()
    for op, n in ops:
        res = {}
        for tool in ["bare", "any seccomp filter", "bwrap", "srt", "sandbox-launch (none)"]:
            # The floor for any seccomp sandbox: a one-rule filter (acct) makes every syscall
            # take the kernel's slow entry path, whatever the filter says.
            prefix = [f"{B}/fault-inject", "--errno", "163=EPERM", "--"] if tool == "any seccomp filter" else rs[tool]
            if op == "connect" and prefix and tool.startswith("sandbox-launch"):
                # Landlock allows no TCP connect under `none` unless the port is named.
                prefix = prefix[:-1] + ["--allow-loopback-port", "47999", "--"]
            if prefix is None:
                res[tool] = NOTES.get(tool, "not available")
                continue
            v = sysloop(prefix, op, n, unpriv=False)
            res[tool] = v if v else "fails here"
        add_group("syscall cost", f"{op} (ns/op)", "ns", res, baseline="bare")

def footprint_rows():
    size = os.path.getsize(SL) / (1 << 20)
    rows.append(("footprint", "binary size", "sandbox-launch", size, size, size, "MiB", "", "release, stripped=no"))
    # Supervisor RSS while the sandbox idles.
    p = subprocess.Popen([SL, "whole-process", "--network", "none", "--", "sleep", "3"], cwd=WORK)
    time.sleep(1.0)
    rss = None
    try:
        for line in open(f"/proc/{p.pid}/status"):
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    finally:
        p.wait()
    if rss is not None:
        rows.append(("footprint", "supervisor RSS, idle (network none)", "sandbox-launch", rss, rss, rss, "MiB", "", ""))
    # Launch cost must not depend on the size of the working tree (no tree walks at launch).
    if not os.path.exists(f"{BIG}/.done"):
        os.makedirs(BIG, exist_ok=True)
        for i in range(100):
            d = f"{BIG}/d{i}"
            os.makedirs(d, exist_ok=True)
            for j in range(1000):
                open(f"{d}/f{j}", "w").close()
        open(f"{BIG}/.done", "w").close()
    empty = tempfile.mkdtemp(dir=B)
    os.chmod(empty, 0o755)
    cmd = [SL, "whole-process", "--network", "none", "--", "/bin/true"]
    trees = {"empty tree": empty, "100,000 files": BIG}
    times = {name: [] for name in trees}
    for _ in range(ROUNDS):  # interleaved, as the launch rows
        for name, cwd in trees.items():
            times[name] += hyperfine_times(cmd, False, cwd=cwd, runs=max(RUNS // ROUNDS, 3))
    # The direct evidence: the same filesystem syscalls, whatever the tree holds.
    calls = {name: syscall_count(cmd, cwd) for name, cwd in trees.items()}
    shutil.rmtree(empty)
    res = {name: summary(t) for name, t in times.items()}
    add_group("footprint", "launch, working tree of", "ms", res, baseline="empty tree")
    if None not in calls.values():
        for i, row in enumerate(rows):
            if row[0] == "footprint" and row[1] == "launch, working tree of":
                n = calls[row[2]]
                rows[i] = row[:8] + (f"{row[8]}; {n} filesystem syscalls".lstrip("; "),)


# What a walk of the tree would show up in (the total varies by one or two with timing: a poll
# that wakes twice, an interrupted wait).
FS_SYSCALLS = ["openat", "open", "statx", "newfstatat", "getdents64", "readlink", "readlinkat",
               "access", "faccessat2"]


def syscall_count(cmd, cwd):
    """Filesystem syscalls made by a whole launch (launcher, shim and target), by strace -f."""
    if not shutil.which("strace"):
        return None
    p = subprocess.run(["strace", "-f", "-c", "-e", "trace=" + ",".join(FS_SYSCALLS), "-o", "/dev/stdout"]
                       + cmd, cwd=cwd, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.rstrip().endswith("total"):
            return int(line.split()[3])
    return None

def proxy_rows():
    why = works(runners()["sandbox-launch (restricted)"], False)
    if why:
        rows.append(("proxy", "all proxy rows", "sandbox-launch", None, None, None, "", "", f"not measured: {why[:80]}"))
        return
    bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_proxy.py")
    if not os.path.exists(bench):
        rows.append(("proxy", "all proxy rows", "sandbox-launch", None, None, None, "", "", "not measured: no proxy benchmark yet"))
        return
    out = subprocess.run([sys.executable, bench], capture_output=True, text=True, env=dict(os.environ, SL=SL, SRT=SRT))
    for line in out.stdout.splitlines():
        r = json.loads(line)
        rows.append(tuple(r))

def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}, {os.cpu_count()} cores ({cpu}), {time.strftime('%Y-%m-%d')}"

LOAD_START = os.getloadavg()[0]

# BENCH_SECTIONS=syscall,footprint runs only those sections (default: all).
SECTIONS = [s for s in os.environ.get("BENCH_SECTIONS", "launch,syscall,proxy,footprint").split(",") if s]

def main():
    print(f"machine: {machine()}", file=sys.stderr)
    for name, run in [("launch", launch_rows), ("syscall", syscall_rows), ("proxy", proxy_rows),
                      ("footprint", footprint_rows)]:
        if name in SECTIONS:
            print(f"bench: {name}...", file=sys.stderr)
            run()
    for left in os.listdir(SRT_TMP):
        if left.startswith("srt-mux-") and left.endswith(".sock"):
            os.unlink(os.path.join(SRT_TMP, left))
    # Others' load on a shared machine moves every row; the table says how much there was.
    print(f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {machine()}; medians of {RUNS} runs (hyperfine; "
          f"launch rows: {LAUNCH_ROUNDS} rounds of 3 in drawn order) "
          "or 5 loops (syscalls); ratio = median / best peer's median (peers: bwrap, srt, nsjail; "
          "launch rows: the median over the rounds of the round's medians' ratio); "
          f"load average {LOAD_START:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.\n")
    print("| section | measurement | tool | median | min–max | unit | × best peer | note |")
    print("| --- | --- | --- | ---: | ---: | --- | ---: | --- |")
    for (sec, what, tool, med, lo, hi, unit, ratio, note) in rows:
        if med is None:
            print(f"| {sec} | {what} | {tool} | — | — | {unit} | | {note} |")
        else:
            print(f"| {sec} | {what} | {tool} | {fmt(med, unit)} | {fmt(lo, unit)}–{fmt(hi, unit)} | {unit} | {ratio} | {note} |")

if __name__ == "__main__":
    main()
