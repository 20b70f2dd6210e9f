//! Nesting narrows (DESIGN §1.6): a `sandbox-launch` started inside a sandbox cannot build
//! namespaces — the outer seccomp filter refuses them, and Landlock refuses every mount to a
//! process it confines — so it stacks its own layers on its program instead:
//!
//! * a Landlock layer from the nested policy (`landlock`), which only takes away;
//! * the nested policy's seccomp filter, plus one for its network (`network`);
//! * its write set registered with the outer sandbox's create guard (`register`): the program's
//!   creations and write-opens are performed by the outer init, in the outer Landlock domain,
//!   where the nested layer would not apply;
//! * its own proxy, with its own rules, dialling through whatever the outer sandbox allows.
//!
//! Every layer of the outer sandbox stays in force beneath, so a nested policy that allows what
//! the outer denies gets nothing more. The launcher then stays with its program as its init
//! (`reaper`).
//!
//! **Detection** cannot be fooled into *fewer* layers: nested mode needs the kernel's facts that
//! only a confined process has — a seccomp filter (mode 2) and no_new_privs — and the outer
//! sandbox's registration socket in its `/dev`, which only the sandbox (or root, on a host)
//! can make, served by PID 1 (checked when registering); an environment variable alone proves
//! nothing. The inside cannot forge a widening: whatever it claims, the outer layers hold, and
//! a launcher that does not detect nesting tries namespaces, which the outer filter refuses.

mod child;
mod landlock;
mod network;
mod reaper;
mod register;
mod tmp;

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use shim::channel::{Step, StepError};
use shim::create_guard::nested::SOCKET;
use shim::spec::{Access, MountOp};

use crate::cli::SandboxArgs;
use crate::policy::model::{NetworkMode, Policy};
use crate::proxy::events::EventSink;
use crate::status::StatusSink;
use crate::{environment, layout, limits, sandbox, supervisor};

pub use network::PROXY_PORTS;

/// Whether this process runs inside a sandbox that lets a nested one register.
pub fn detect() -> bool {
    // The socket first: one lstat, where the kernel's text of /proc/self/status costs tens of
    // microseconds of every launch on a host.
    if !std::fs::symlink_metadata(SOCKET).is_ok_and(|m| m.file_type().is_socket()) {
        return false;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::trim)
            .unwrap_or("")
            .to_string()
    };
    field("Seccomp:") == "2" && field("NoNewPrivs:") == "1"
}

fn policy_error(e: impl std::fmt::Display) -> StepError {
    StepError::new(Step::Policy, e.to_string(), None)
}

/// What the nested launch needs, planned before the fork.
struct Nested {
    program: child::Program,
    register: shim::create_guard::nested::Register,
    proxy: Option<(crate::proxy::Proxy, Vec<std::os::fd::OwnedFd>)>,
    timeout: Option<std::time::Duration>,
    /// Private trees replaced by directories of this launcher's (removed at the end).
    private: Vec<tmp::Replaced>,
    warnings: Vec<String>,
    policy: Policy,
}

/// `whole-process` or `per-command` inside a sandbox.
pub fn run(args: &SandboxArgs, argv: Vec<String>) -> i32 {
    let (mut status, events) = match sandbox::sinks(args) {
        Ok(s) => s,
        Err(e) => {
            crate::say!("sandbox-launch: {e:#}");
            return 2;
        }
    };
    events.emit(json!({
        "event": "launch",
        "argv": argv,
        "launcher_pid": std::process::id(),
        "nested": true,
    }));
    if args.name.is_some() {
        crate::say!(
            "sandbox-launch: warning: --name: a nested sandbox has no control socket of its own"
        );
    }
    if args.prompts {
        crate::say!(
            "sandbox-launch: warning: --prompts: a nested sandbox has no control socket to ask \
             on; its denials are final"
        );
    }
    if args.worktree {
        // The overlay is a mount, which no process inside a sandbox can make: without it the
        // program would write the checkout itself.
        return supervisor::fail(
            &mut status,
            &StepError::new(
                Step::Mounts,
                "--worktree: a nested sandbox cannot mount the copy-on-write overlay (no mount \
                 can be made inside a sandbox)",
                Some("give --worktree to the outer sandbox"),
            ),
        );
    }
    let nested = match plan(args, argv, events) {
        Ok(n) => n,
        Err(e) => return supervisor::fail(&mut status, &e),
    };
    for w in &nested.warnings {
        crate::say!("sandbox-launch: warning: {w}");
        status.emit(json!({"status": "warning", "warning": w}));
    }
    if args.verbose > 1 {
        crate::say!(
            "sandbox-launch: effective policy (nested):\n{}",
            crate::policy::describe(&nested.policy)
        );
        crate::say!(
            "sandbox-launch: nested Landlock layer: {:#?}",
            nested.program.layer
        );
    }
    let private = nested.private.clone();
    let result = launch(nested, &mut status, args.verbose);
    tmp::remove(&private);
    match result {
        Ok(code) => code,
        Err(e) => supervisor::fail(&mut status, &e),
    }
}

fn launch(n: Nested, status: &mut StatusSink, verbose: u8) -> Result<i32, StepError> {
    let guarded = register::register(&n.register)?;
    if !guarded && n.program.layer.split {
        // The directories on the way to a denied path keep the right to create (the guard
        // judges creations): without a guard that right would reach the denied path.
        return Err(StepError::new(
            Step::Landlock,
            "a --deny-write or --deny-read inside a writable tree of a nested sandbox needs the \
             outer sandbox's create guard, and the outer sandbox has none",
            Some("give the denial to the outer sandbox instead"),
        ));
    }
    let signals = reaper::prepare().map_err(|e| {
        StepError::new(
            Step::Internal,
            format!("cannot become the program's reaper: {e}"),
            None,
        )
    })?;
    // Not dumpable: the program (same uid) cannot read or write this process's memory.
    shim::sys::prctl(libc::PR_SET_DUMPABLE, 0, "PR_SET_DUMPABLE")
        .map_err(|e| StepError::new(Step::Internal, e.to_string(), None))?;
    let (pid, facts) = child::spawn(&n.program).inspect_err(|_| reaper::kill_subtree())?;
    if let Some((proxy, fds)) = n.proxy {
        if let Err(e) = network::start(proxy, fds) {
            reaper::kill_subtree();
            return Err(StepError::new(Step::Network, format!("{e:#}"), None));
        }
    }
    if verbose > 0 {
        crate::say!("sandbox-launch: verified (nested): {facts}");
    }
    status.emit(json!({"status": "verified", "facts": facts}));
    status.emit(json!({"status": "running", "pid": pid, "nested": true}));
    let ended = reaper::supervise(pid, &signals, n.timeout, supervisor::TIMEOUT_GRACE);
    let code = if ended.timed_out {
        status.emit(json!({"status": "timeout", "exit_code": ended.code}));
        supervisor::TIMEOUT_EXIT
    } else {
        ended.code
    };
    status.emit(json!({"status": "exited", "exit_code": code}));
    Ok(code)
}

fn plan(
    args: &SandboxArgs,
    argv: Vec<String>,
    events: Arc<EventSink>,
) -> Result<Nested, StepError> {
    let (policy, cwd) = sandbox::load_policy(args)?;
    if !policy.filesystem.mounts.is_empty() {
        // Ignored, a bind or tmpfs would leave its target to be written as the host path it
        // is there, and an overlay's source would be written itself.
        return Err(StepError::new(
            Step::Mounts,
            format!(
                "{} mount(s) asked for (--bind, --ro-bind, --overlay, --tmpfs or a policy's \
                 `mounts`): a nested sandbox cannot mount (no mount can be made inside a sandbox)",
                policy.filesystem.mounts.len()
            ),
            Some(
                "give the mounts to the outer sandbox; --allow-write, --deny-write and \
                 --deny-read work nested",
            ),
        ));
    }
    let mut warnings = policy.warnings.clone();
    let mode = policy.network.mode.unwrap_or(NetworkMode::Restricted);
    let mut env = environment::build(
        &environment::host(),
        &policy.runtime.env,
        mode,
        &mut warnings,
    );
    if let Some(u) = &policy.process.run_as_user {
        warnings.push(format!(
            "process.run_as_user={u}: a nested sandbox runs as the outer sandbox's user"
        ));
    }
    cgroup_limits(&policy, &mut warnings)?;
    let abi = shim::landlock::kernel_abi().unwrap_or(0);
    if abi < 6 {
        return Err(StepError::new(
            Step::Landlock,
            format!("a nested sandbox needs Landlock ABI 6 (Linux 6.12), this kernel has {abi}"),
            Some("run the program in the outer sandbox directly"),
        ));
    }
    let layout =
        layout::plan(&policy, &sandbox::host_context(cwd.clone())).map_err(policy_error)?;
    warnings.extend(layout.warnings.iter().cloned());
    let net = network::plan(mode, &policy, args, events, &mut env, &mut warnings)?;

    let deny_read: Vec<PathBuf> = layout
        .mounts
        .ops
        .iter()
        .filter_map(|op| match op {
            MountOp::Mask { target, .. } => Some(target.clone()),
            _ => None,
        })
        .collect();
    let mut denied: Vec<(PathBuf, landlock::Keep)> = deny_read
        .iter()
        .map(|p| (p.clone(), landlock::Keep::Nothing))
        .collect();
    for s in &policy.filesystem.deny_write {
        if let Ok(p) = std::fs::canonicalize(&s.value) {
            if !denied.iter().any(|(d, _)| *d == p) {
                denied.push((p, landlock::Keep::Read));
            }
        }
    }
    let mut rules = layout.landlock.clone();
    let private =
        tmp::replace(&layout.mounts.ops, &mut rules, &mut env, &mut warnings).map_err(|e| {
            StepError::new(
                Step::Mounts,
                format!("cannot make the nested sandbox's own temporary directory: {e}"),
                None,
            )
        })?;
    let layer = landlock::plan(abi, &rules, &denied, net.tcp_connect.clone());
    warn_splits(&rules, &deny_read, &mut warnings);

    let mut persist = layout.persist.clone();
    // Strict in the outer guard: outside these nothing is written. The plan's writable and
    // device paths, and the program's standard descriptors (reopened by name).
    for r in &rules {
        if matches!(r.access, Access::Write | Access::Device) && !persist.roots.contains(&r.path) {
            persist.roots.push(r.path.clone());
        }
    }
    for fd in (0..=2).filter(|fd| opened_for_writing(*fd)) {
        if let Ok(p) = std::fs::read_link(format!("/proc/self/fd/{fd}")) {
            // Files and devices only (as the Landlock layer grants them): a directory passed as
            // a standard descriptor would make a whole tree writable.
            if p.is_absolute() && !p.is_dir() && !persist.roots.contains(&p) {
                persist.roots.push(p);
            }
        }
    }
    persist.denied.extend(deny_read.iter().cloned());

    let policy_filter = shim::seccomp::compile(&sandbox::seccomp(&policy)?).map_err(|e| {
        StepError::new(
            Step::Seccomp,
            format!("{e:#}"),
            Some("check the seccomp policy (--seccomp-policy)"),
        )
    })?;
    let mut filters = vec![policy_filter];
    filters.extend(net.filter);
    let unreadable = deny_read.into_iter().filter(|p| p.is_file()).collect();
    let mut unwritable_dirs = layout.verify_unwritable_dirs.clone();
    unwritable_dirs.extend(private.iter().map(|r| r.tree.clone()));
    let rlimits = limits::process_limits(&policy.runtime.limits)?.rlimits;
    Ok(Nested {
        program: child::Program {
            argv,
            env,
            cwd,
            layer,
            filters,
            rlimits,
            preserve_fds: args.preserve_fd.clone(),
            verify: child::Verify {
                unwritable_dirs,
                unreadable,
                no_ip: net.no_ip,
                refused_port: (net.tcp_connect.is_some() && !net.no_ip)
                    .then_some(crate::proxy::HTTP_PORT),
            },
        },
        register: shim::create_guard::nested::Register {
            persist,
            // Connects are performed by the outer guard, outside this layer's domain.
            tcp_connect: net.tcp_connect.clone(),
        },
        proxy: net.proxy,
        timeout: policy.runtime.limits.timeout.as_ref().map(|t| t.value),
        private,
        warnings,
        policy,
    })
}

/// A `--deny-read` inside a writable tree splits it (see `landlock`): what appears later
/// directly in a directory on the way to the denied path can be written, not read back. Said,
/// with what to do instead.
fn warn_splits(
    rules: &[shim::spec::LandlockRule],
    deny_read: &[PathBuf],
    warnings: &mut Vec<String>,
) {
    for d in deny_read {
        let Some(tree) = rules
            .iter()
            .filter(|r| r.access == Access::Write && d.starts_with(&r.path) && *d != r.path)
            .map(|r| &r.path)
            .next()
        else {
            continue;
        };
        let way: Vec<String> = d
            .ancestors()
            .skip(1)
            .take_while(|a| a.starts_with(tree))
            .map(|a| a.display().to_string())
            .collect();
        warnings.push(format!(
            "--deny-read {}: nested, Landlock cannot take it out of the writable tree {}; files \
             made later directly in {} can be written but not read back by the program (give \
             --deny-read to the outer sandbox, which masks it)",
            d.display(),
            tree.display(),
            way.join(", ")
        ));
    }
}

/// cgroup limits need a group of the sandbox's own, which a nested one cannot make: refused
/// under `hard_requirement`, reported under `best_effort`.
fn cgroup_limits(policy: &Policy, warnings: &mut Vec<String>) -> Result<(), StepError> {
    let l = &policy.runtime.limits;
    let asked: Vec<&str> = [
        ("--memory", l.memory.is_some()),
        ("--pids", l.pids.is_some()),
        ("--cpus", l.cpus.is_some()),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(n, _)| *n)
    .collect();
    if asked.is_empty() {
        return Ok(());
    }
    let what = format!(
        "{}: a nested sandbox cannot make cgroups of its own (the outer sandbox's limits apply)",
        asked.join(", ")
    );
    if l.compat == crate::policy::runtime::LimitsCompat::BestEffort {
        warnings.push(what);
        Ok(())
    } else {
        Err(StepError::new(
            Step::Limits,
            what,
            Some("give the limits to the outer sandbox, or use --limits-compatibility best_effort"),
        ))
    }
}

/// Whether this process's descriptor `fd` is open for writing (a standard descriptor the
/// nested program may write through, and so reopen by name for writing).
pub(crate) fn opened_for_writing(fd: i32) -> bool {
    // SAFETY: F_GETFL on a descriptor number only reads its flags (EBADF when it is closed).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && matches!(flags & libc::O_ACCMODE, libc::O_WRONLY | libc::O_RDWR)
}
