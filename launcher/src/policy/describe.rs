//! The effective policy in words, with where each rule came from (`sandbox-launch check`).

use std::fmt::Write;
use std::path::PathBuf;

use super::merge::{describe_source, show_fs, show_landlock, show_network};
use super::model::{Endpoint, Enforcement, FsMode, HttpRule, Policy, Source, Sourced};

/// A multi-line, human-readable account of `policy`.
pub fn describe(policy: &Policy) -> String {
    let mut out = String::new();
    sources(&mut out, policy);
    filesystem(&mut out, policy);
    process(&mut out, policy);
    network(&mut out, policy);
    super::runtime::describe(&mut out, &policy.runtime);
    let _ = writeln!(
        out,
        "seccomp: {}{}",
        policy.seccomp.as_deref().unwrap_or("default"),
        origin(policy.origins.seccomp.as_ref())
    );
    if !policy.warnings.is_empty() {
        let _ = writeln!(out, "\nwarnings:");
        for w in &policy.warnings {
            let _ = writeln!(out, "  - {w}");
        }
    }
    out
}

fn sources(out: &mut String, p: &Policy) {
    let _ = writeln!(out, "policy files (highest precedence first):");
    if p.loaded.is_empty() {
        let _ = writeln!(
            out,
            "  (none; command-line flags and built-in defaults only)"
        );
    }
    for f in &p.loaded {
        let note = if f.narrowing_only {
            "  [untrusted project: denies and narrowing only]"
        } else {
            ""
        };
        let _ = writeln!(out, "  {}{note}", describe_source(&f.source));
    }
    let _ = writeln!(out);
}

fn filesystem(out: &mut String, p: &Policy) {
    let fs = &p.filesystem;
    let meaning = match fs.mode {
        FsMode::HostReadable => {
            "the host is readable except deny-read; writable: the working directory, read-write and a private /tmp"
        }
        FsMode::AllowListOnly => {
            "only read-only and read-write paths (and the working directory if included) exist"
        }
    };
    let _ = writeln!(
        out,
        "filesystem: {}{}\n  ({meaning})",
        show_fs(&fs.mode),
        origin(p.origins.fs_mode.as_ref())
    );
    let _ = writeln!(
        out,
        "  working directory writable: {}{}",
        if fs.include_workdir { "yes" } else { "no" },
        match (&fs.mode, &p.origins.include_workdir) {
            (FsMode::HostReadable, _) => String::new(),
            (_, o) => origin(o.as_ref()),
        }
    );
    paths(
        out,
        "read-only",
        &fs.read_only,
        fs.mode == FsMode::HostReadable,
    );
    paths(out, "read-write", &fs.read_write, false);
    paths(out, "deny-write (beats read-write)", &fs.deny_write, false);
    paths(out, "deny-read (beats everything)", &fs.deny_read, false);
    paths(out, "unix sockets handed in", &fs.unix_sockets, false);
    if !fs.mounts.is_empty() {
        let _ = writeln!(out, "  mounts asked for:");
        for m in &fs.mounts {
            let _ = writeln!(
                out,
                "    {}  [{}]",
                m.value.describe(),
                describe_source(&m.source)
            );
        }
    }
    let _ = writeln!(
        out,
        "landlock: {}{}\n",
        show_landlock(&p.landlock),
        origin(p.origins.landlock.as_ref())
    );
}

fn paths(out: &mut String, title: &str, list: &[Sourced<PathBuf>], unused: bool) {
    if list.is_empty() {
        return;
    }
    let note = if unused {
        " (no effect: the host is readable anyway)"
    } else {
        ""
    };
    let _ = writeln!(out, "  {title}{note}:");
    let width = list
        .iter()
        .map(|s| s.value.as_os_str().len())
        .max()
        .unwrap_or(0);
    for s in list {
        let _ = writeln!(
            out,
            "    {:<width$}  [{}]",
            s.value.display().to_string(),
            describe_source(&s.source)
        );
    }
}

fn process(out: &mut String, p: &Policy) {
    let user = p.process.run_as_user.as_deref();
    let group = p.process.run_as_group.as_deref();
    let _ = writeln!(
        out,
        "process (applies when started as root):\n  run as user:  {}{}\n  run as group: {}{}\n",
        user.unwrap_or("nobody"),
        origin(p.origins.run_as_user.as_ref()),
        group.unwrap_or("nogroup"),
        origin(p.origins.run_as_group.as_ref()),
    );
}

fn network(out: &mut String, p: &Policy) {
    let n = &p.network;
    let mode = match n.mode {
        Some(m) => format!(
            "{}{}",
            show_network(m),
            origin(p.origins.network_mode.as_ref())
        ),
        None => "not set (the launcher's default applies)".into(),
    };
    let _ = writeln!(out, "network: {mode}");
    strings(out, "allowed domains", &n.allowed_domains);
    strings(out, "denied domains (beat allowed ones)", &n.denied_domains);
    if !n.rules.is_empty() {
        let _ = writeln!(out, "  network policies:");
    }
    for (key, rule) in &n.rules {
        let r = &rule.value;
        let name = if r.name == *key {
            String::new()
        } else {
            format!(" ({})", r.name)
        };
        let _ = writeln!(out, "    {key}{name}  [{}]", describe_source(&rule.source));
        for e in &r.endpoints {
            let _ = writeln!(out, "      {}", endpoint(e));
            for (verb, list) in [("allow", &e.rules), ("deny ", &e.deny_rules)] {
                for h in list {
                    let _ = writeln!(out, "        {verb} {}", request(h));
                }
            }
        }
        let bins = if r.binaries.is_empty() {
            "any".to_string()
        } else {
            r.binaries.join(", ")
        };
        let _ = writeln!(out, "      binaries: {bins}");
    }
    let _ = writeln!(out);
}

fn request(h: &HttpRule) -> String {
    let q: Vec<String> = h
        .query
        .iter()
        .map(|(k, v)| format!("{k}={}", v.join("|")))
        .collect();
    let q = if q.is_empty() {
        String::new()
    } else {
        format!(" ?{}", q.join("&"))
    };
    format!("{} {}{q}", h.method, h.path)
}

fn endpoint(e: &Endpoint) -> String {
    let host = if e.host.contains(':') {
        format!("[{}]", e.host)
    } else {
        e.host.clone()
    };
    let ports = match e.ports.as_slice() {
        [] => "*".to_string(),
        ps => ps.iter().map(u16::to_string).collect::<Vec<_>>().join(","),
    };
    let mut s = format!("{host}:{ports}");
    if let Some(p) = &e.protocol {
        let _ = write!(s, " protocol={p}");
    }
    if let Some(t) = &e.tls {
        let _ = write!(s, " tls={t}");
    }
    if let Some(a) = &e.access {
        let _ = write!(s, " access={a}");
    }
    if let Some(p) = &e.path {
        let _ = write!(s, " path={p}");
    }
    if e.allow_encoded_slash {
        s.push_str(" allow_encoded_slash");
    }
    if e.enforcement == Enforcement::Audit {
        s.push_str(" enforcement=audit (logged, not blocked)");
    }
    s
}

fn strings(out: &mut String, title: &str, list: &[Sourced<String>]) {
    if list.is_empty() {
        return;
    }
    let _ = writeln!(out, "  {title}:");
    let width = list.iter().map(|s| s.value.len()).max().unwrap_or(0);
    for s in list {
        let _ = writeln!(
            out,
            "    {:<width$}  [{}]",
            s.value,
            describe_source(&s.source)
        );
    }
}

fn origin(src: Option<&Source>) -> String {
    match src {
        Some(s) => format!("  [{}]", describe_source(s)),
        None => "  [built-in default]".into(),
    }
}
