//! `whole-process`'s command line without clap, for the launch's sake.
//!
//! Every launch parses its command line, and clap builds `whole-process`'s ~40-option command
//! first: 80-100 µs of CPU in a fresh process, page faults included, where bwrap spends next
//! to nothing. This parser reads the lines people write (long options as `--opt VALUE` or
//! `--opt=VALUE`, `-v`, repeats of repeatable options, `--`, PROGRAM and its arguments, where
//! options after PROGRAM are the program's) in 10-16 µs, most of it the page faults of the
//! code it runs for the first time (so it avoids running more of it than it must).
//!
//! clap stays the reference: it defines the options, and its errors and help are the only ones
//! users see. Whatever this parser is not sure of (an option it does not know, `--help`, a value
//! that is empty, starts with `-` or does not read, a second `--policy`, clustered shorts, no
//! PROGRAM) it hands back as "not mine" and clap parses the line. The tests hold the two
//! together: every option clap defines is in [`OPTIONS`] with the same shape, and on generated
//! lines this parser either declines or gives exactly what clap gives.

use std::path::PathBuf;
use std::str::FromStr;

use super::{CompatArg, EgressArg, NetworkArg, SandboxArgs, WholeProcessArgs};

/// How an option reads the command line, and where it puts what it read.
pub(super) enum Takes {
    /// `--name`, at most once (clap's `SetTrue`).
    Flag(fn(&mut SandboxArgs)),
    /// `--name` or its short, counted (clap's `Count`); `None` when the count would overflow.
    Count(fn(&mut SandboxArgs) -> Option<()>),
    /// `--name VALUE`, at most once (clap's `Set`); `None` when VALUE does not read.
    Once(fn(&mut SandboxArgs, &str) -> Option<()>),
    /// `--name VALUE`, repeatable (clap's `Append`); `None` when VALUE does not read.
    Many(fn(&mut SandboxArgs, &str) -> Option<()>),
}

/// One option of [`SandboxArgs`]: its long name (as clap spells it), its short, what it takes.
pub(super) struct Opt {
    pub long: &'static str,
    pub short: Option<char>,
    pub takes: Takes,
}

const fn opt(long: &'static str, takes: Takes) -> Opt {
    Opt {
        long,
        short: None,
        takes,
    }
}

/// Every option of [`SandboxArgs`]; each value read as clap's value parser for the field reads
/// it (the same function, or the same conversion restricted to plain digits).
pub(super) const OPTIONS: &[Opt] = &[
    opt("policy", Takes::Once(|a, v| set(&mut a.policy, path(v)))),
    opt(
        "settings",
        Takes::Once(|a, v| set(&mut a.settings, path(v))),
    ),
    opt("cwd", Takes::Once(|a, v| set(&mut a.cwd, path(v)))),
    opt(
        "allow-write",
        Takes::Many(|a, v| push(&mut a.allow_write, path(v))),
    ),
    opt(
        "deny-write",
        Takes::Many(|a, v| push(&mut a.deny_write, path(v))),
    ),
    opt(
        "deny-read",
        Takes::Many(|a, v| push(&mut a.deny_read, path(v))),
    ),
    opt(
        "allow-unix-socket",
        Takes::Many(|a, v| push(&mut a.allow_unix_socket, path(v))),
    ),
    opt("bind", Takes::Many(|a, v| push(&mut a.bind, text(v)))),
    opt("ro-bind", Takes::Many(|a, v| push(&mut a.ro_bind, text(v)))),
    opt("overlay", Takes::Many(|a, v| push(&mut a.overlay, text(v)))),
    opt("tmpfs", Takes::Many(|a, v| push(&mut a.tmpfs, text(v)))),
    opt("empty-root", Takes::Flag(|a| a.empty_root = true)),
    opt(
        "network",
        Takes::Once(|a, v| set(&mut a.network, choice(NETWORK, v))),
    ),
    opt(
        "allow-domain",
        Takes::Many(|a, v| push(&mut a.allow_domain, text(v))),
    ),
    opt(
        "allow-loopback-port",
        Takes::Many(|a, v| push(&mut a.allow_loopback_port, digits(v))),
    ),
    opt(
        "egress",
        Takes::Once(|a, v| {
            a.egress = choice(EGRESS, v)?;
            Some(())
        }),
    ),
    opt("resolve", Takes::Many(|a, v| push(&mut a.resolve, text(v)))),
    opt(
        "tunnel-idle-timeout",
        Takes::Once(|a, v| {
            let limit = crate::proxy::idle::parse_limit(v).ok();
            set(&mut a.tunnel_idle_timeout, limit)
        }),
    ),
    opt("events", Takes::Once(|a, v| set(&mut a.events, text(v)))),
    opt(
        "seccomp-policy",
        Takes::Once(|a, v| set(&mut a.seccomp_policy, text(v))),
    ),
    opt(
        "json-status-fd",
        Takes::Once(|a, v| set(&mut a.json_status_fd, digits(v))),
    ),
    opt(
        "preserve-fd",
        Takes::Many(|a, v| push(&mut a.preserve_fd, digits(v))),
    ),
    opt(
        "env",
        Takes::Many(|a, v| push(&mut a.env, crate::environment::parse_flag(v).ok())),
    ),
    opt("env-all", Takes::Flag(|a| a.env_all = true)),
    opt(
        "credential",
        Takes::Many(|a, v| {
            let flag = crate::policy::credentials::parse_flag(v).ok();
            push(&mut a.credential, flag)
        }),
    ),
    opt(
        "timeout",
        Takes::Once(|a, v| set(&mut a.timeout, crate::limits::quantity::duration(v).ok())),
    ),
    opt(
        "rlimit",
        Takes::Many(|a, v| push(&mut a.rlimit, crate::limits::rlimit::parse_flag(v).ok())),
    ),
    opt(
        "memory",
        Takes::Once(|a, v| set(&mut a.memory, crate::limits::quantity::size(v).ok())),
    ),
    opt(
        "pids",
        Takes::Once(|a, v| set(&mut a.pids, crate::limits::quantity::count(v).ok())),
    ),
    opt(
        "cpus",
        Takes::Once(|a, v| set(&mut a.cpus, crate::limits::quantity::cpus(v).ok())),
    ),
    opt(
        "tmp-size",
        Takes::Once(|a, v| set(&mut a.tmp_size, crate::limits::quantity::size(v).ok())),
    ),
    opt(
        "limits-compatibility",
        Takes::Once(|a, v| set(&mut a.limits_compatibility, choice(COMPAT, v))),
    ),
    Opt {
        long: "verbose",
        short: Some('v'),
        takes: Takes::Count(|a| {
            a.verbose = a.verbose.checked_add(1)?;
            Some(())
        }),
    },
    opt("name", Takes::Once(|a, v| set(&mut a.name, text(v)))),
    opt("prompts", Takes::Flag(|a| a.prompts = true)),
    opt(
        "prompt-timeout",
        Takes::Once(|a, v| set(&mut a.prompt_timeout, f64::from_str(v).ok())),
    ),
    opt("non-interactive", Takes::Flag(|a| a.non_interactive = true)),
    opt("worktree", Takes::Flag(|a| a.worktree = true)),
];

/// The values of `--network`, `--egress` and `--limits-compatibility`, as clap's `ValueEnum`s
/// name them (a test holds them equal). Asking the `ValueEnum`s instead costs an allocation per
/// variant and clap's pages.
pub(super) const NETWORK: &[(&str, NetworkArg)] = &[
    ("none", NetworkArg::None),
    ("restricted", NetworkArg::Restricted),
    ("full", NetworkArg::Full),
];
pub(super) const EGRESS: &[(&str, EgressArg)] = &[
    ("transparent", EgressArg::Transparent),
    ("proxy-only", EgressArg::ProxyOnly),
];
pub(super) const COMPAT: &[(&str, CompatArg)] = &[
    ("hard_requirement", CompatArg::HardRequirement),
    ("best_effort", CompatArg::BestEffort),
];

fn choice<T: Copy>(values: &[(&str, T)], v: &str) -> Option<T> {
    values
        .iter()
        .find(|(name, _)| *name == v)
        .map(|&(_, value)| value)
}

// Which options were given is kept in one u64.
const _: () = assert!(OPTIONS.len() <= 64);

/// `whole-process`'s arguments (`args` is what follows `whole-process`) as clap would give
/// them, or `None`: not sure, ask clap.
pub(super) fn parse(args: &[String]) -> Option<WholeProcessArgs> {
    let mut sandbox = nothing_given();
    let mut given = 0u64;
    let mut next = 0;
    while let Some(arg) = args.get(next) {
        if arg == "--" {
            return with_program(sandbox, &args[next + 1..]);
        }
        let (index, inline) = if let Some(long) = arg.strip_prefix("--") {
            // By hand: `split_once('=')` runs a char searcher whose code is one more page
            // fault away (each ~2 µs on a cold start).
            let (name, inline) = match long.bytes().position(|b| b == b'=') {
                Some(at) => (&long[..at], Some(&long[at + 1..])),
                None => (long, None),
            };
            (OPTIONS.iter().position(|o| o.long == name)?, inline)
        } else if let Some(short) = arg.strip_prefix('-') {
            let mut chars = short.chars();
            let (Some(c), None) = (chars.next(), chars.next()) else {
                return None; // `-`, or shorts clustered or with their value attached
            };
            (OPTIONS.iter().position(|o| o.short == Some(c))?, None)
        } else {
            return with_program(sandbox, &args[next..]);
        };
        next += 1;
        let bit = 1u64 << index;
        let once = given & bit == 0;
        match OPTIONS[index].takes {
            Takes::Flag(put) if once && inline.is_none() => put(&mut sandbox),
            Takes::Count(add) if inline.is_none() => add(&mut sandbox)?,
            Takes::Once(put) if once => put(&mut sandbox, value(inline, args, &mut next)?)?,
            Takes::Many(put) => put(&mut sandbox, value(inline, args, &mut next)?)?,
            _ => return None,
        }
        given |= bit;
    }
    None // no PROGRAM: clap says so
}

/// An option's value: after `=`, or the next argument. `None` for one clap might read otherwise
/// (empty, or starting with `-`, which clap takes for an option).
fn value<'a>(inline: Option<&'a str>, args: &'a [String], next: &mut usize) -> Option<&'a str> {
    let value = match inline {
        Some(v) => v,
        None => {
            let v = args.get(*next)?;
            *next += 1;
            v.as_str()
        }
    };
    (!value.is_empty() && !value.starts_with('-')).then_some(value)
}

/// PROGRAM and its arguments, taken as they are (clap's `trailing_var_arg`).
fn with_program(sandbox: SandboxArgs, command: &[String]) -> Option<WholeProcessArgs> {
    match command.first() {
        Some(program) if !program.is_empty() => Some(WholeProcessArgs {
            sandbox,
            command: command.to_vec(),
        }),
        _ => None,
    }
}

/// [`SandboxArgs`] when no option is given: clap's defaults.
fn nothing_given() -> SandboxArgs {
    SandboxArgs {
        policy: None,
        settings: None,
        cwd: None,
        allow_write: Vec::new(),
        deny_write: Vec::new(),
        deny_read: Vec::new(),
        allow_unix_socket: Vec::new(),
        bind: Vec::new(),
        ro_bind: Vec::new(),
        overlay: Vec::new(),
        tmpfs: Vec::new(),
        empty_root: false,
        network: None,
        allow_domain: Vec::new(),
        allow_loopback_port: Vec::new(),
        egress: EgressArg::Transparent,
        resolve: Vec::new(),
        tunnel_idle_timeout: None,
        events: None,
        seccomp_policy: None,
        json_status_fd: None,
        preserve_fd: Vec::new(),
        env: Vec::new(),
        env_all: false,
        credential: Vec::new(),
        timeout: None,
        rlimit: Vec::new(),
        memory: None,
        pids: None,
        cpus: None,
        tmp_size: None,
        limits_compatibility: None,
        verbose: 0,
        name: None,
        prompts: false,
        prompt_timeout: None,
        non_interactive: false,
        worktree: false,
    }
}

fn set<T>(field: &mut Option<T>, value: Option<T>) -> Option<()> {
    *field = Some(value?);
    Some(())
}

fn push<T>(field: &mut Vec<T>, value: Option<T>) -> Option<()> {
    if field.capacity() == 0 {
        // Growing an empty Vec runs code no launch has touched yet (page faults); allocating
        // runs the code collecting the arguments just ran.
        *field = Vec::with_capacity(4);
    }
    field.push(value?);
    Some(())
}

fn path(v: &str) -> Option<PathBuf> {
    Some(PathBuf::from(v))
}

fn text(v: &str) -> Option<String> {
    Some(v.to_string())
}

/// A number clap's integer parser reads the same: plain decimal digits (clap also takes `+5`
/// and checks the range after reading an i64; those go to clap).
fn digits<T: FromStr>(v: &str) -> Option<T> {
    if v.bytes().all(|b| b.is_ascii_digit()) {
        v.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
