#!/usr/bin/env python3
"""Write launcher/hot-code.ld: the functions a launch runs, for the linker to place together.

A launch runs about a megabyte of the binary's six megabytes of code, spread over all of it, and
each process faults its code in by 64 KiB groups (the launcher, and init with its threads and
the program's process before its exec, which share init's memory: a fork copies no page table of
a file's mapping). Placed together, init's code first, then what both run, then the launcher's,
each process faults in fewer than half as many groups (traced: 90 to 39 in a launch).

This script finds those functions by running launches with an entry probe (a uprobe) on every
function of the binary, and writes the linker script that `launcher/build.rs` gives release
builds. Its patterns name functions by their v0-mangled names with the compiler's hashes
(crate disambiguators, back-references) left out, so the script holds across compiler versions;
functions that no longer exist simply match nothing. Run it again when the launch's path has
changed (the integration test `the_hot_code_script_still_names_the_functions_of_the_build`
says when more than a tenth of the script no longer names anything).

    sudo scripts/hot-code.py                  # build (scripts/build.sh), profile, write the script
    sudo scripts/hot-code.py --binary PATH    # profile PATH (a v0-mangled build) instead

Needs root: uprobes are set through tracefs. The launches run in a directory of their own under
/var/cache/sandbox-launch-tests, removed afterwards; as root and as uid 65534, in an empty
setting and in a developer's (agents' state in HOME, a git checkout), with `--network
restricted` and `none`.
"""
import argparse
import collections
import datetime
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACING = "/sys/kernel/tracing"
GROUP = "sl_hot"
SCRATCH = "/var/cache/sandbox-launch-tests/hot-code"
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--"]
# Archives a static build links; their functions are named by member (glibc is not built with
# a section per function).
ARCHIVES = ["libc.a", "libm.a", "libgcc.a", "libgcc_eh.a"]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def functions(binary):
    """(address, size, name) of every function symbol."""
    out = []
    for line in run(["nm", "-S", "--defined-only", binary]).splitlines():
        p = line.split()
        if len(p) == 4 and p[2] in "tTwW" and int(p[1], 16) > 0:
            out.append((int(p[0], 16), int(p[1], 16), p[3]))
    return out


def loads(binary):
    """(file offset, address, size) of each LOAD segment."""
    out = []
    for line in run(["readelf", "-lW", binary]).splitlines():
        p = line.split()
        if p and p[0] == "LOAD":
            out.append((int(p[1], 16), int(p[2], 16), int(p[5], 16)))
    return out


def file_offset(segments, vaddr):
    for off, va, size in segments:
        if va <= vaddr < va + size:
            return vaddr - va + off
    return None


def ifunc_stubs(binary, by_address):
    """(stub address, [resolver names]) of each .iplt entry: static glibc calls its string
    functions through these, to the variant chosen for the CPU at start-up."""
    iplt = None
    for line in run(["readelf", "-SW", binary]).splitlines():
        m = re.search(r"\]\s+\.iplt\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", line)
        if m:
            iplt = (int(m.group(1), 16), int(m.group(2), 16))
    if not iplt:
        return []
    slots = []
    for line in run(["readelf", "-rW", binary]).splitlines():
        p = line.split()
        if len(p) >= 4 and "IRELATIV" in p[2]:
            slots.append(int(p[-1], 16))
    # The stubs are 16 bytes each, in the order of the relocations.
    return [(iplt[0] + 16 * i, by_address.get(r, [])) for i, r in enumerate(slots)
            if 16 * i < iplt[1]]


def probe_safe(name):
    # A uprobe steps the function's first instruction out of line; on an EVEX-encoded one
    # (glibc's AVX-512 string functions) that went wrong in testing: memset corrupted memory.
    return not re.search(r"avx512|evex", name) and name not in ("_start", "_init", "_fini")


def tracefs(path, text, append=False):
    # No seek: tracefs files refuse one, which Python's append mode makes.
    flags = os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(os.path.join(TRACING, path), flags)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def profile(binary):
    """Hits of the probes in launches, with the processes' fork and exec events."""
    funcs = functions(binary)
    by_address = collections.defaultdict(list)
    for a, _, n in funcs:
        by_address[a].append(n)
    every_name = collections.defaultdict(list)
    for line in run(["nm", "--defined-only", binary]).splitlines():
        p = line.split()
        if len(p) == 3:
            every_name[int(p[0], 16)].append(p[2])
    segments = loads(binary)
    probes = {}  # probe name -> ("fn", name) | ("ifunc", [resolver names])
    lines = []
    for a in sorted(by_address):
        names = [n for n in by_address[a] if probe_safe(n)]
        off = file_offset(segments, a) if names else None
        if off is None:
            continue
        p = f"f{len(probes)}"
        probes[p] = ("fn", names[0])
        lines.append(f"p:{GROUP}/{p} {binary}:0x{off:x}\n")
    for a, resolvers in ifunc_stubs(binary, every_name):
        p = f"f{len(probes)}"
        probes[p] = ("ifunc", resolvers)
        lines.append(f"p:{GROUP}/{p} {binary}:0x{file_offset(segments, a):x}\n")
    print(f"hot-code: {len(probes)} probes on {binary}", file=sys.stderr)
    tracefs("tracing_on", "0")
    tracefs("trace", "")
    tracefs("set_event", "")
    saved_size = open(os.path.join(TRACING, "buffer_size_kb")).read().strip()
    try:
        # Inside the try: probes written before a refusal are removed with the rest.
        fd = os.open(os.path.join(TRACING, "uprobe_events"), os.O_WRONLY | os.O_APPEND)
        try:
            for chunk in range(0, len(lines), 500):
                os.write(fd, "".join(lines[chunk:chunk + 500]).encode())
        finally:
            os.close(fd)
        tracefs("buffer_size_kb", "300000")
        for e in ("sched:sched_process_fork", "sched:sched_process_exec"):
            tracefs("set_event", e + "\n", append=True)
        tracefs(f"events/{GROUP}/enable", "1")
        tracefs("tracing_on", "1")
        try:
            launches(binary)
        finally:
            tracefs("tracing_on", "0")
        trace = open(os.path.join(TRACING, "trace")).read()
    finally:
        print("hot-code: removing the probes (this takes a few minutes)", file=sys.stderr)
        if os.path.exists(os.path.join(TRACING, "events", GROUP)):  # none if no probe was set
            tracefs(f"events/{GROUP}/enable", "0")
        tracefs("set_event", "")
        tracefs("trace", "")
        tracefs("uprobe_events", "")
        tracefs("buffer_size_kb", saved_size.split()[0])
        tracefs("tracing_on", "1")
    return probes, trace


def launches(binary):
    """The launches profiled: both callers, both settings, two network modes."""
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    try:
        settings = []
        for who in ("0", "65534"):
            empty_home, empty_work = f"{SCRATCH}/home-{who}", f"{SCRATCH}/work-{who}"
            dev_home, dev_work = f"{SCRATCH}/dev-home-{who}", f"{SCRATCH}/dev-work-{who}"
            for d in (empty_home, empty_work, dev_work + "/src"):
                os.makedirs(d)
            for d in (".config", ".claude/projects", ".codex", ".cargo/bin"):
                os.makedirs(f"{dev_home}/{d}")
            for name, text in ((".bashrc", "export EDITOR=vi\n"), (".profile", ". ~/.bashrc\n"),
                               (".gitconfig", "[user]\n\tname = hot\n\temail = hot@example.invalid\n")):
                with open(f"{dev_home}/{name}", "w") as f:
                    f.write(text)
            run(["git", "init", "-q", dev_work], env=dict(os.environ, HOME=dev_home))
            if who != "0":
                for top in (empty_home, empty_work, dev_home, dev_work):
                    run(["chown", "-R", f"{who}:{who}", top])
            settings += [(who, empty_home, empty_work), (who, dev_home, dev_work)]
        os.chmod(SCRATCH, 0o755)
        for who, home, work in settings:
            for network in ("restricted", "none"):
                cmd = [binary, "whole-process", "--network", network, "--", "/bin/true"]
                if who != "0":
                    cmd = NOBODY + cmd
                env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home}
                p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
                if p.returncode != 0:
                    sys.exit(f"hot-code: a launch failed ({' '.join(cmd)}): {p.stderr.strip()}")
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)


def hits_by_process(probes, trace, binary):
    """First-hit order of the probes, and which of the two memories ran each: "init" (init, its
    threads and the program's process before its exec) or "launcher"."""
    parent, launchers, programs = {}, set(), set()
    hits = []
    pattern = re.compile(r"\s*(.+)-(\d+)\s+\[\d+\]\s+\S+\s+[\d.]+:\s+(\S+):\s*(.*)")
    for line in trace.splitlines():
        if line.startswith("#"):
            continue
        m = pattern.match(line)
        if not m:
            continue
        tid, event, rest = int(m.group(2)), m.group(3), m.group(4)
        if event == "sched_process_exec":
            f = rest.split()[0][len("filename="):]
            if f == binary:
                launchers.add(tid)
            elif f == "/bin/true":
                programs.add(tid)
        elif event == "sched_process_fork":
            parent[int(re.search(r"child_pid=(\d+)", rest).group(1))] = int(
                re.search(r" pid=(\d+)", rest).group(1))
        elif event in probes:
            hits.append((tid, event))
    inits = {parent[t] for t in programs if t in parent}

    def memory(t):
        while t is not None:
            if t in inits:
                return "init"
            if t in launchers:
                return "launcher"
            t = parent.get(t)
        return None

    order, users, cache = [], collections.defaultdict(set), {}
    for tid, p in hits:
        if tid not in cache:
            cache[tid] = memory(tid)
        if p not in users:
            order.append(p)
        if cache[tid]:
            users[p].add(cache[tid])
    return order, users


def v0_glob(name):
    """A v0-mangled name with what the compiler's version changes (crate disambiguators
    `Cs<hash>_`, back-references `B<offset>_`) as `*`; identifiers are kept as they are."""
    out, i = ["_R"], 2
    while i < len(name):
        c = name[i]
        if c.isdigit():
            j = i
            while j < len(name) and name[j].isdigit():
                j += 1
            k = j + 1 if j < len(name) and name[j] == "_" else j
            end = k + int(name[i:j])
            out.append(name[i:end])
            i = end
            continue
        if name.startswith("Cs", i) or c == "B":
            j = i + (2 if c == "C" else 1)
            while j < len(name) and name[j].isalnum():
                j += 1
            if j < len(name) and name[j] == "_":
                out.append("Cs*_" if c == "C" else "*")
                i = j + 1
                continue
        out.append(c)
        i += 1
    return re.sub(r"\*+", "*", "".join(out))


def archive_members():
    """Function name -> (archive, member) for the archives a static build links."""
    members = {}
    for archive in ARCHIVES:
        path = run(["gcc", f"-print-file-name={archive}"]).strip()
        if not os.path.isabs(path):
            continue
        # libm.a is a linker script naming libm-<version>.a.
        if archive == "libm.a" and open(path, "rb").read(2) != b"!<":
            m = re.search(r"(\S*libm-[\d.]+\.a)", open(path).read())
            if not m:
                continue
            path = m.group(1)
        out = subprocess.run(["nm", "-A", "--defined-only", path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            p = line.rsplit(" ", 2)
            if len(p) == 3 and p[1] in "tTwWi":
                where = p[0].split(":")
                members.setdefault(p[2], (os.path.basename(path), where[-2]))
    return members


def patterns(probes, order, users):
    """The script's input-section patterns, in groups: init's, both, the launcher's."""
    members = archive_members()
    variants = collections.defaultdict(set)  # string function -> members of its variants
    for name, (archive, member) in members.items():
        m = re.match(r"__([a-z]+)_(?:sse|avx|evex|erms|ssse3)", name)
        if m and archive == "libc.a":
            variants[m.group(1)].add(member)
    entries = []  # (pattern, users)
    index = {}
    missing_v0 = 0

    def add(pat, who):
        if pat not in index:
            index[pat] = len(entries)
            entries.append((pat, set()))
        entries[index[pat]][1].update(who)

    for p in order:
        kind, what = probes[p]
        who = users.get(p, set())
        if kind == "ifunc":
            for resolver in what:
                family = re.sub(r"^(__new_|__libc_|__)?(.*?)(_ifunc)?$", r"\2", resolver)
                for member in sorted(variants.get(family, ())):
                    add(f"*libc.a:{member}(.text .text.*)", who)
            continue
        if what in members:
            archive, member = members[what]
            glob = re.sub(r"-[\d.]+\.a$", "*.a", archive)
            add(f"*{glob}:{member}(.text .text.*)", who)
        elif what.startswith("_R"):
            add(f"*(.text.{v0_glob(what)})", who)
        elif what.startswith("_ZN"):
            missing_v0 += 1
        else:
            add(f"*(.text.{what})", who)
    if missing_v0:
        sys.exit("hot-code: the binary has legacy-mangled Rust symbols; profile a build with "
                 "-C symbol-mangling-version=v0 (scripts/build.sh makes one)")
    groups = {"init": [], "both": [], "launcher": []}
    for pat, who in entries:
        key = "both" if len(who) == 2 else (next(iter(who)) if who else "launcher")
        groups[key].append(pat)
    return groups


def write(groups, binary, path):
    comment = run(["readelf", "-p", ".comment", binary])
    rustc = next((m.group(0) for m in [re.search(r"rustc version \S+", comment)] if m), "rustc")
    n = sum(len(g) for g in groups.values())
    heads = {
        "init": "Init's: its own steps, its threads', and the program's process before its exec.",
        "both": "Run by both the launcher and init.",
        "launcher": "The launcher's: the command line, the policy, the plan, the supervisor.",
    }
    with open(path, "w") as f:
        f.write(f"""/* The code a launch runs, placed together ahead of the rest of .text (launcher/build.rs
 * gives this script to release builds). Written by scripts/hot-code.py on
 * {datetime.date.today()}, from launches of {os.path.basename(binary)} built by {rustc}:
 * {n} patterns. Do not edit by hand: run the script again. */
SECTIONS
{{
  .text.launch : {{
""")
        for key in ("init", "both", "launcher"):
            f.write(f"    /* {heads[key]} */\n")
            for pat in groups[key]:
                f.write(f"    {pat}\n")
        f.write("  }\n}\nINSERT BEFORE .text;\n")
    print(f"hot-code: wrote {path}: {n} patterns ({', '.join(f'{k} {len(v)}' for k, v in groups.items())})",
          file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", help="the build to profile (default: scripts/build.sh's)")
    ap.add_argument("--out", default=os.path.join(ROOT, "launcher", "hot-code.ld"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("hot-code: run as root (uprobes are set through tracefs)")
    if not os.path.exists(os.path.join(TRACING, "uprobe_events")):
        sys.exit(f"hot-code: no uprobes here ({TRACING}/uprobe_events is missing)")
    binary = args.binary
    if not binary:
        built = run([os.path.join(ROOT, "scripts", "build.sh")]).strip()
        binary = os.path.join(built, "sandbox-launch")
    binary = os.path.realpath(binary)
    probes, trace = profile(binary)
    order, users = hits_by_process(probes, trace, binary)
    if not order:
        sys.exit("hot-code: no probe was hit: nothing written")
    write(patterns(probes, order, users), binary, args.out)


if __name__ == "__main__":
    main()
