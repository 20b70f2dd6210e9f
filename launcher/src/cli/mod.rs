//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::policy::model::{MountKind, NetworkMode};

mod fast;

#[derive(Parser, Debug)]
#[command(
    name = "sandbox-launch",
    version,
    about = "Run an AI coding agent, and everything it starts, inside a kernel-enforced Linux sandbox",
    long_about = "Run an AI coding agent, and every process it starts (shell commands, MCP stdio servers, \
subagents), inside a sandbox built from user, mount, PID, IPC, UTS, cgroup and network namespaces, \
Landlock and a seccomp-bpf filter. Every layer is verified from inside before the program starts; if \
any layer fails to take effect, the program is not started.",
    after_help = "Exit codes: the program's own status (128+N when it died of signal N); 2 bad usage; \
110-118 and 127 when the sandbox could not be set up (see README). Run `sandbox-launch doctor` to \
check this host."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// `whole-process`'s arguments.
#[derive(Args, Debug)]
pub struct WholeProcessArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// The program and its arguments (options after PROGRAM are the program's).
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    pub command: Vec<String>,
}

/// `whole-process` alone: what a launch parses. Building the whole tree (every subcommand's
/// options, `SandboxArgs` four times over) costs more than the rest of the parse, on every
/// launch; anything this parser does not accept is parsed again by [`Cli`], whose errors and
/// help are the ones shown.
#[derive(Parser, Debug)]
#[command(name = "whole-process")]
struct WholeProcessOnly {
    #[command(flatten)]
    args: WholeProcessArgs,
}

/// The command line `args` (with the program's name first), as [`Cli`] parses it; exits with
/// clap's message for a command line it does not accept (or for `--help`). An ordinary
/// `whole-process` line is read by [`fast`], without building clap's command.
pub fn parse(args: &[String]) -> Cli {
    if args.get(1).map(String::as_str) == Some("whole-process") {
        if let Some(w) = fast::parse(&args[2..]) {
            return Cli {
                command: Command::WholeProcess(w),
            };
        }
        if let Ok(w) = WholeProcessOnly::try_parse_from(&args[1..]) {
            return Cli {
                command: Command::WholeProcess(w.args),
            };
        }
    }
    Cli::parse_from(args)
}

#[derive(Subcommand, Debug)]
#[allow(clippy::enum_variant_names)] // `per-command` is the documented name
pub enum Command {
    /// Run PROGRAM and its whole process tree inside the sandbox.
    ///
    /// Example: sandbox-launch whole-process droid --some-flag
    #[command(name = "whole-process")]
    WholeProcess(WholeProcessArgs),
    /// Run one shell command (`sh -c COMMAND`) inside the sandbox.
    #[command(name = "per-command")]
    PerCommand {
        #[command(flatten)]
        sandbox: SandboxArgs,
        /// The shell command.
        #[arg(short = 'c', value_name = "COMMAND")]
        command: String,
    },
    /// Can this host run a sandbox? Checks each kernel feature and says how to fix what is missing.
    ///
    /// The last check launches a sandbox for real with the options given here (the same as
    /// `whole-process` takes), up to the point where the program would start.
    Doctor {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// Print the effective policy (after merging every source) and where each rule came from.
    Check {
        #[command(flatten)]
        sandbox: SandboxArgs,
    },
    /// List this user's running sandboxes: id, name, pid, program, mode, pending prompts,
    /// denials. Control sockets left by launchers that were killed are removed.
    Ps {
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Stop a sandbox: SIGTERM to its program, SIGKILL to everything inside after the grace.
    Stop {
        /// The sandbox's id or name (`sandbox-launch ps`).
        #[arg(value_name = "ID|NAME")]
        target: String,
        /// Seconds between SIGTERM and SIGKILL.
        #[arg(long, value_name = "S", default_value_t = crate::control::protocol::default_grace())]
        grace: f64,
    },
    /// Answer a running sandbox's prompts: interactively, or with --answer the next one.
    ///
    /// Without ID|NAME, the only running sandbox.
    Prompt {
        #[arg(value_name = "ID|NAME")]
        target: Option<String>,
        /// Answer the next prompt (an open one, else the next to open) and exit:
        /// allow-once, allow-always, remove-from-deny-list or deny.
        #[arg(long, value_name = "ANSWER")]
        answer: Option<String>,
        /// With --answer: give up (exit 1) when no prompt opens within S seconds.
        #[arg(long, value_name = "S", requires = "answer")]
        timeout: Option<f64>,
        /// With --answer: print the sandbox's reply as JSON.
        #[arg(long, requires = "answer")]
        json: bool,
    },
    /// Change a running sandbox's network rules.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Allow a domain in a running sandbox, until it ends (written nowhere).
    Allow {
        #[arg(value_name = "ID|NAME")]
        target: String,
        /// `example.com`, `*.example.com` or `host:port`.
        domain: String,
    },
    /// Deny a domain in a running sandbox, until it ends (written nowhere); open connections
    /// to it are closed.
    Deny {
        #[arg(value_name = "ID|NAME")]
        target: String,
        /// `example.com`, `*.example.com`, `host:port`, `*` or `*:PORT`.
        domain: String,
    },
    /// List this user's kept worktrees (`whole-process --worktree`): id, name, whether its
    /// sandbox still runs, the checkout, the program.
    Worktrees {
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print what a worktree's sandbox changed as a git-style patch (`git apply` takes it);
    /// persistence surfaces last, each under a comment; a summary on stderr.
    Diff {
        /// The worktree's id or name (`sandbox-launch worktrees`).
        #[arg(value_name = "ID|NAME")]
        target: String,
        /// One line per changed path instead of the patch: `A` added, `M` modified, `D`
        /// deleted, `T` type changed, `X` not applicable (fifo, device); persistence surfaces
        /// marked `persistence`.
        #[arg(long)]
        stat: bool,
    },
    /// Apply a worktree's changes to its checkout: all or nothing, refused when a path it
    /// changes was changed in the checkout since the sandbox started, and refused when it
    /// changes a persistence surface that is not named.
    Apply {
        /// The worktree's id or name (`sandbox-launch worktrees`).
        #[arg(value_name = "ID|NAME")]
        target: String,
        /// Apply this persistence surface too (a path relative to the checkout, or a
        /// directory of them; repeatable). It can run code on the host: read it first.
        #[arg(long, value_name = "PATH")]
        include_persistence: Vec<PathBuf>,
        /// Apply everything else and leave the persistence surfaces not named in the
        /// worktree.
        #[arg(long)]
        skip_persistence: bool,
    },
    /// Remove a worktree and everything it holds.
    Discard {
        /// The worktree's id or name (`sandbox-launch worktrees`).
        #[arg(value_name = "ID|NAME")]
        target: String,
    },
    /// Print a sandbox's recent events (lifecycle, denials, prompts, reloads); with --follow,
    /// every event as it happens until the sandbox ends.
    Events {
        /// The sandbox's id or name (`sandbox-launch ps`).
        #[arg(value_name = "ID|NAME")]
        target: String,
        #[arg(short, long)]
        follow: bool,
        /// The JSON Lines the sandbox sends, as `--events` writes them.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum PolicyAction {
    /// Replace the network rules with FILE's: an OpenShell policy YAML (in place of
    /// `--policy`) or a settings JSON (in place of `--settings`). Only network rules may differ
    /// from the launch; the whole policy is checked before anything changes, then it is in
    /// force at once and connections it no longer allows are closed.
    Set {
        #[arg(value_name = "ID|NAME")]
        target: String,
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum NetworkArg {
    /// A network namespace with only `lo`: no network at all.
    None,
    /// A network namespace plus the domain-filtering proxy.
    Restricted,
    /// The host's network (no isolation; reported as a warning).
    Full,
}

impl From<NetworkArg> for NetworkMode {
    fn from(n: NetworkArg) -> Self {
        match n {
            NetworkArg::None => NetworkMode::None,
            NetworkArg::Restricted => NetworkMode::Restricted,
            NetworkArg::Full => NetworkMode::Full,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct SandboxArgs {
    /// OpenShell policy YAML (filesystem_policy, landlock, process, network_policies).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Agent settings JSON; its `sandbox` object is used.
    #[arg(long, value_name = "FILE")]
    pub settings: Option<PathBuf>,
    /// Working directory of the program (default: the current directory). Writable unless the
    /// policy says otherwise.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Make PATH writable (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_write: Vec<PathBuf>,
    /// Keep PATH read-only even inside a writable tree (repeatable; beats --allow-write).
    #[arg(long, value_name = "PATH")]
    pub deny_write: Vec<PathBuf>,
    /// Make PATH unreadable (repeatable; beats everything).
    #[arg(long, value_name = "PATH")]
    pub deny_read: Vec<PathBuf>,
    /// Hand the pathname unix socket PATH into the sandbox (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_unix_socket: Vec<PathBuf>,
    /// Mount the host path SRC at DST inside (default: where SRC really is), writable
    /// (repeatable). The persistence protections apply in it as in the working directory.
    #[arg(long, value_name = "SRC[:DST]")]
    pub bind: Vec<String>,
    /// Mount the host path SRC at DST inside (default: where SRC really is), read-only for
    /// every user inside, root included (repeatable).
    #[arg(long, value_name = "SRC[:DST]")]
    pub ro_bind: Vec<String>,
    /// Mount the host directory SRC at DST inside (default: where SRC really is) under a
    /// writable layer: writes stay in the sandbox's memory (bounded like /tmp, --tmp-size) and
    /// are gone when it ends; SRC is never written (repeatable).
    #[arg(long, value_name = "SRC[:DST]")]
    pub overlay: Vec<String>,
    /// Mount an empty, writable tmpfs at DST inside (repeatable; sized like /tmp).
    #[arg(long, value_name = "DST")]
    pub tmpfs: Vec<String>,
    /// Start from an empty root: only what is mounted exists (--bind, --ro-bind, --overlay,
    /// --tmpfs, the policy's read_only/read_write), plus /proc, /dev and what the sandbox
    /// needs itself. Mount the program's directories (e.g. --ro-bind /usr) and the working
    /// directory (or pass --cwd).
    #[arg(long)]
    pub empty_root: bool,
    /// Network mode (default: restricted, with only the allowed domains reachable).
    #[arg(long, value_enum)]
    pub network: Option<NetworkArg>,
    /// Allow a domain through the proxy (`example.com`, `*.example.com`, `host:port`; repeatable).
    #[arg(long, value_name = "DOMAIN")]
    pub allow_domain: Vec<String>,
    /// Let programs inside connect to TCP PORT on the sandbox's own loopback, e.g. a server the
    /// agent starts itself (repeatable). Other TCP connects are refused by Landlock, except to
    /// the proxy.
    #[arg(long, value_name = "PORT")]
    pub allow_loopback_port: Vec<u16>,
    /// How programs reach the proxy in `restricted` mode. `transparent` (default): through the
    /// proxy variables, and programs that ignore them are redirected to the proxy inside the
    /// sandbox (nftables in the sandbox's own namespace, a DNS stub that answers only allowed
    /// names). `proxy-only`: the variables only; anything else has no route.
    #[arg(long, value_enum, default_value = "transparent", value_name = "MODE")]
    pub egress: EgressArg,
    /// Let the proxy resolve HOST to ADDR without asking DNS (curl's `--resolve`; repeatable).
    #[arg(long, value_name = "HOST:ADDR")]
    pub resolve: Vec<String>,
    /// Close an established proxy tunnel (CONNECT, SOCKS5, transparent) in which no byte has
    /// moved either way for DURATION (`90`, `10m`, `2h`; `0` or `none`: never). Default: 1h.
    #[arg(long, value_name = "DURATION", value_parser = crate::proxy::idle::parse_limit)]
    pub tunnel_idle_timeout: Option<crate::proxy::idle::IdleLimit>,
    /// Write JSON Lines to FILE (appended) or to descriptor N (`fd:N`): the sandbox's lifecycle
    /// (launch, warning, verified, running, exited, failed) and every network decision (time,
    /// host, port, binary, decision, reason, rule, protocol).
    #[arg(long, value_name = "FILE|fd:N")]
    pub events: Option<String>,
    /// seccomp policy: the name of an embedded one (default: `default`) or a seccompiler JSON file.
    #[arg(long, value_name = "NAME|FILE")]
    pub seccomp_policy: Option<String>,
    /// Write JSON Lines about the sandbox's life (verified facts, running, exited, failed) to fd N.
    #[arg(long, value_name = "N")]
    pub json_status_fd: Option<i32>,
    /// Let descriptor N cross into the sandbox (repeatable; only 0-2 do by default).
    #[arg(long, value_name = "N")]
    pub preserve_fd: Vec<i32>,
    /// Pass NAME from the launcher's environment (`--env NAME`) or set it (`--env NAME=VALUE`)
    /// (repeatable). Only a short allowlist (PATH, HOME, USER, LANG, TERM, ...) crosses
    /// otherwise.
    #[arg(long, value_name = "NAME[=VALUE]", value_parser = crate::environment::parse_flag)]
    pub env: Vec<crate::environment::EnvFlag>,
    /// Give the program the launcher's whole environment, secrets included (warned).
    #[arg(long)]
    pub env_all: bool,
    /// The program gets NAME (from the launcher's environment) only as a random placeholder;
    /// the proxy puts the real value in place of it in requests to these hosts (headers, Basic
    /// credentials, path, query; HTTPS is opened for them) and refuses requests that carry it
    /// anywhere else (repeatable).
    #[arg(long, value_name = "NAME=HOST[,HOST...]", value_parser = crate::policy::credentials::parse_flag)]
    pub credential: Vec<(String, Vec<String>)>,
    /// Stop the program after DURATION (`90`, `90s`, `10m`, `1h30m`): SIGTERM, then everything
    /// inside is killed 2 s later; the exit code is 124, as with timeout(1).
    #[arg(long, value_name = "DURATION", value_parser = crate::limits::quantity::duration)]
    pub timeout: Option<std::time::Duration>,
    /// A resource limit of the program's processes, as prlimit(1) names them: nofile, nproc,
    /// as, core, fsize, stack, cpu, ... (repeatable; core is 0 unless given).
    #[arg(long, value_name = "NAME=SOFT[:HARD]", value_parser = crate::limits::rlimit::parse_flag)]
    pub rlimit: Vec<(String, crate::limits::rlimit::Value)>,
    /// Memory limit of the whole sandbox (cgroup), e.g. `2G`; past it the kernel kills inside.
    #[arg(long, value_name = "SIZE", value_parser = crate::limits::quantity::size)]
    pub memory: Option<u64>,
    /// Most processes and threads the sandbox may have at once (cgroup).
    #[arg(long, value_name = "N", value_parser = crate::limits::quantity::count)]
    pub pids: Option<u64>,
    /// CPU time of the whole sandbox, in CPUs (cgroup), e.g. `1.5`.
    #[arg(long, value_name = "N", value_parser = crate::limits::quantity::cpus)]
    pub cpus: Option<u64>,
    /// Size of each of /tmp and /dev/shm inside (default: a quarter of the RAM, at most half
    /// of --memory).
    #[arg(long, value_name = "SIZE", value_parser = crate::limits::quantity::size)]
    pub tmp_size: Option<u64>,
    /// When a limit cannot be applied on this host: refuse to start (`hard_requirement`, the
    /// default) or start without it, reported (`best_effort`).
    #[arg(long, value_enum, value_name = "MODE")]
    pub limits_compatibility: Option<CompatArg>,
    /// More output on stderr (the verified facts, planned mounts; at exit, the denied requests).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// A name for this sandbox, unique among the user's running ones (`sandbox-launch ps`,
    /// `stop NAME`, `prompt NAME`, ...); without it, its id.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Hold a denied network request until someone answers (`sandbox-launch prompt`) or
    /// --prompt-timeout passes (then it is denied). Also `sandbox.prompts` in settings.
    #[arg(long)]
    pub prompts: bool,
    /// Seconds a prompt waits for an answer before the request is denied (default 60).
    #[arg(long, value_name = "S")]
    pub prompt_timeout: Option<f64>,
    /// Never hold a request for an answer: denied at once, even with --prompts or
    /// `sandbox.prompts`.
    #[arg(long)]
    pub non_interactive: bool,
    /// Mount the working directory as a copy-on-write overlay: the program writes freely,
    /// the checkout stays untouched, and the writes are kept (under
    /// `$XDG_STATE_HOME/sandbox-launch/worktrees/`, named by the sandbox's id and --name)
    /// for `sandbox-launch diff`, `apply` and `discard`.
    #[arg(long)]
    pub worktree: bool,
}

impl SandboxArgs {
    /// The mounts placed by name, as written.
    pub fn mounts(&self) -> Vec<(MountKind, String)> {
        let kinds = [
            (MountKind::Bind, &self.bind),
            (MountKind::RoBind, &self.ro_bind),
            (MountKind::Overlay, &self.overlay),
            (MountKind::Tmpfs, &self.tmpfs),
        ];
        kinds
            .into_iter()
            .flat_map(|(k, v)| v.iter().map(move |s| (k, s.clone())))
            .collect()
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EgressArg {
    Transparent,
    ProxyOnly,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program_of(args: &[&str]) -> Vec<String> {
        match Cli::try_parse_from(args).unwrap().command {
            Command::WholeProcess(w) => w.command,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn a_misspelt_option_before_the_program_is_an_unknown_option() {
        let e = Cli::try_parse_from([
            "sandbox-launch",
            "whole-process",
            "--polcy",
            "x",
            "--",
            "id",
        ])
        .unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
        assert!(e.to_string().contains("--polcy"), "{e}");
    }

    /// The launch's own parser gives what the whole tree gives, and refuses what it refuses
    /// (so that the whole tree's message is the one shown).
    #[test]
    fn whole_process_alone_parses_as_the_whole_tree_does() {
        let lines: &[&[&str]] = &[
            &["whole-process", "id"],
            &["whole-process", "--network", "none", "--", "id", "-u"],
            &[
                "whole-process",
                "-v",
                "-v",
                "--allow-write",
                "/w",
                "--deny-write",
                "/w/x",
                "droid",
                "--x",
            ],
            &[
                "whole-process",
                "--allow-domain",
                "a.example",
                "--bind",
                "/a:/b",
                "--tmpfs",
                "/t",
                "sh",
            ],
            &[
                "whole-process",
                "--worktree",
                "--name",
                "n",
                "--",
                "--looks-like-an-option",
            ],
            &[
                "whole-process",
                "--egress",
                "proxy-only",
                "--timeout",
                "5s",
                "true",
            ],
            &["whole-process", "--polcy", "x", "--", "id"],
            &["whole-process"],
            &["whole-process", "--network", "nonsense", "id"],
            &["whole-process", "--help"],
            &["whole-process", "-h"],
            &["whole-process", "--version"],
            &["whole-process", "-V"],
        ];
        let mut parsed = 0;
        for line in lines {
            let full =
                Cli::try_parse_from(std::iter::once("sandbox-launch").chain(line.iter().copied()));
            let alone = WholeProcessOnly::try_parse_from(line.iter().copied());
            match (full, alone) {
                (Ok(f), Ok(a)) => {
                    parsed += 1;
                    assert_eq!(
                        format!("{:?}", f.command),
                        format!("{:?}", Command::WholeProcess(a.args)),
                        "{line:?}"
                    )
                }
                (Err(_), Err(_)) => {}
                (f, a) => panic!("{line:?}: the whole tree gives {f:?}, the launch's parser {a:?}"),
            }
        }
        assert_eq!(parsed, 6, "the lines meant to parse must parse");
    }

    #[test]
    fn options_after_the_program_are_the_programs() {
        assert_eq!(
            program_of(&[
                "sandbox-launch",
                "whole-process",
                "droid",
                "--some-flag",
                "-v"
            ]),
            ["droid", "--some-flag", "-v"]
        );
        assert_eq!(
            program_of(&[
                "sandbox-launch",
                "whole-process",
                "-v",
                "--",
                "-x",
                "--network"
            ]),
            ["-x", "--network"]
        );
    }
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
#[value(rename_all = "snake_case")]
pub enum CompatArg {
    HardRequirement,
    BestEffort,
}

impl From<CompatArg> for crate::policy::runtime::LimitsCompat {
    fn from(c: CompatArg) -> Self {
        match c {
            CompatArg::HardRequirement => Self::HardRequirement,
            CompatArg::BestEffort => Self::BestEffort,
        }
    }
}
