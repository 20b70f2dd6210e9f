//! The shim's pipeline, in order: receive the spec, close stray descriptors, hostname, network
//! and mounts (side by side, see `network_thread`), privileges, Landlock, seccomp,
//! verification, then start the target and be its init.

use std::os::fd::RawFd;
use std::sync::Arc;

use seccompiler::BpfProgram;

use crate::channel::{self, AtStep, Failure, FromShim, Step, StepError};
use crate::spec::SandboxSpec;
use crate::{
    confinement, create_guard, identity, inherited_env, init, landlock, mounts, network_thread,
    seccomp, sys, verify,
};

/// Entry point of the shim, in the child of the supervisor's clone: `spec` and the compiled
/// seccomp `filter` are this process's copies of the supervisor's. Never returns.
///
/// Init faults the launcher's code in as it runs it (a fork copies no page table of a file's
/// mapping). Mapping the whole executable segment at once first (`MADV_POPULATE_READ`) cost
/// 0.29-0.38 ms on the development VM, whatever the page cache held the binary in, where the
/// 64 KiB groups init faults in (about 30; 12 with the launch's code placed together, see
/// launcher/build.rs) cost a fraction of that: launches were 3-6.5% faster without it.
pub fn main(sync: RawFd, spec: SandboxSpec, filter: BpfProgram) -> ! {
    let code = match run(sync, spec, filter) {
        Ok(code) => code,
        Err(StepError(failure)) => {
            let code = failure.step.exit_code();
            // The supervisor prints the failure; if it is gone, there is no one to tell.
            let _ = channel::send(sync, &FromShim::Failed(failure), &[]);
            code
        }
    };
    std::process::exit(code)
}

fn run(sync: RawFd, mut spec: SandboxSpec, filter: BpfProgram) -> Result<i32, StepError> {
    channel::set_cloexec(sync, true).at(Step::Internal)?;
    // Die with the supervisor. Set again here: a change of credentials clears it.
    sys::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        "PR_SET_PDEATHSIG",
    )
    .at(Step::Internal)?;
    init::block_signals();
    one_heap_for_every_thread();
    let attached: Vec<RawFd> = spec.mounts.inherited_fds();
    let keep: Vec<RawFd> = spec.preserve_fds.iter().chain(&attached).copied().collect();
    close_stray_fds(sync, &keep).at(Step::Internal)?;
    let mut warnings = Vec::new();
    // Before the network's thread exists: init's writes to memory it shares with the
    // supervisor (copy on write) then need no TLB shootdown on the thread's CPU, and the thread
    // starts with the bounding set emptied. The thread waits for the supervisor's plan anyway.
    inherited_env::wipe().at(Step::Internal)?;
    identity::drop_bounding()?;
    set_hostname(&spec.hostname)?;

    let mut network = network_thread::start(sync, &spec.network)?;
    if let Err(e) = build(sync, &mut spec) {
        return Err(network.first_failure(e));
    }
    // Until the network's thread is joined, what needs neither the network nor lesser
    // privileges: the namespace is entered as soon as it exists (the nested sandboxes' socket
    // is made in it), the Landlock ruleset is made ready, and what nothing of init changes
    // any more is verified (the mount tree, the hostname: see `verify::settled`).
    let mut landlock_spec = spec.landlock.clone();
    let mut nest_socket = None;
    let meanwhile = (|| {
        network.enter()?;
        // Nested sandboxes register here (see `create_guard::nested`). Without the socket they
        // cannot start, which narrows nothing away: reported, not fatal.
        match create_guard::nested::bind(std::path::Path::new("/")) {
            Ok(sock) => {
                // Connecting to it is a Landlock right of its own from ABI 9 (unix sockets).
                landlock_spec.rules.push(crate::spec::LandlockRule {
                    path: create_guard::nested::SOCKET.into(),
                    access: crate::spec::Access::Write,
                });
                nest_socket = Some(sock);
            }
            Err(e) => warnings.push(format!(
                "a sandbox-launch inside this sandbox cannot start: its registration socket \
                 {} could not be made ({e})",
                create_guard::nested::SOCKET
            )),
        }
        for fd in &attached {
            // SAFETY: the trees' descriptors, used by the mounts and no longer needed.
            unsafe { libc::close(*fd) };
        }
        sys::chdir(&spec.cwd).at_hint(
            Step::Mounts,
            "the working directory is not inside the sandbox; add it to the policy (include_workdir) or pass --cwd",
        )?;
        if let Some(s) = &spec.host_sockets {
            let nest = std::path::Path::new(create_guard::nested::SOCKET);
            let inits_own: &[&std::path::Path] = if nest_socket.is_some() { &[nest] } else { &[] };
            create_guard::host_sockets::init(s, inits_own).at(Step::Mounts)?;
        }
        let ready = landlock::prepare(&landlock_spec, &mut warnings)?;
        Ok((ready, verify::settled(&spec)?))
    })();
    let (landlock_ready, settled) = match meanwhile {
        Ok(ready) => ready,
        Err(e) => return Err(network.first_failure(e)),
    };
    let transparent = network.finish()?;
    let guarded = !spec.persist.is_empty() || spec.host_sockets.is_some();
    identity::drop_privileges(core_hard_limit(&spec), guarded)?;
    let landlock = landlock_ready.restrict_self(&mut warnings)?;

    // The target is started now (a clone into init's memory, see `crate::spawn`), held until
    // everything is verified: it is PID 2, shares the privileges and the Landlock domain, and
    // installs the seccomp filters itself right away, while init goes on (see
    // `init::fork_target`).
    let policy: Vec<libc::sock_filter> = filter
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let guard_prog = create_guard::filter();
    // A probe (`doctor`) forks the target too, never to exec (see `init::Forked::probe`): it
    // meets what the launch meets there, the pids limit among them.
    let path = if spec.probe_only {
        std::path::PathBuf::from("/")
    } else {
        let path_var = spec
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        let program = spec.argv.first().map(String::as_str).unwrap_or("");
        init::find_program(program, path_var)?
    };
    let guard_setup = if guarded {
        let (mine, theirs) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .at(Step::Seccomp)?;
        Some(init::GuardSetup {
            prog: &guard_prog,
            child_sock: theirs,
            init_sock: mine,
        })
    } else {
        None
    };
    let forked = init::fork_target(
        &path,
        &spec.argv,
        &spec.env,
        &spec.limits.rlimits,
        &policy,
        guard_setup,
    )?;

    // The guard's thread starts here: after the privileges and Landlock, which it shares with
    // the rest of init, and before init's seccomp filter, which is installed for both threads
    // once the thread has a working directory of its own (the policy denies unshare). Init
    // waits for it at once, so it starts on init's CPU and runs there while init waits: the
    // target has the other one (see `init::fork_target`), and a thread left to the kernel's
    // choice was often queued behind the target's filters (0.2-0.3 ms more, in over a third of
    // launches).
    let seccomp_failed = |e: anyhow::Error| StepError::new(Step::Seccomp, format!("{e:#}"), None);
    let guard_thread = if guarded {
        let t = create_guard::GuardThread::start()?.ready()?;
        identity::drop_kept()?;
        // One program for both of init's threads, the guard's prefix in front of the policy
        // (see `GuardThread`), then the main thread narrowed back to the policy alone.
        let shared = create_guard::GuardThread::program(&filter);
        seccomp::install_for_all_threads(&shared).map_err(seccomp_failed)?;
        seccomp::install(&create_guard::main_thread_denies()).map_err(seccomp_failed)?;
        Some(t)
    } else {
        seccomp::install(&filter).map_err(seccomp_failed)?;
        None
    };
    for text in warnings {
        send(sync, &FromShim::Warning { text })?;
    }
    // Init's own checks run while the target installs its filters; the guard's thread is
    // checked with them.
    let mut facts = verify::verify(&spec, settled, landlock, transparent)?;
    facts.guard_thread = guard_thread
        .as_ref()
        .map(|t| verify::verify_guard_thread(t.tid()))
        .transpose()?;
    if let Some(g) = &facts.guard_thread {
        verify::verify_main_thread_narrowed(facts.seccomp_filters, g.seccomp_filters)?;
    }
    // Everything is verified: the target may go. The facts go to the supervisor after its
    // exec, with the news that it runs (the supervisor only reports them); encoding and sending
    // them first kept the program waiting ~0.1 ms.
    let report = |facts: &verify::Facts| {
        let facts = serde_json::to_value(facts).at(Step::Internal)?;
        send(sync, &FromShim::Verified { facts })
    };
    if spec.probe_only {
        forked.probe()?;
        report(&facts)?;
        send(sync, &FromShim::Exited { code: 0 })?;
        return Ok(0);
    }

    let (pid, listener) = match forked.start() {
        Ok(started) => started,
        Err(e) => {
            // The exec's failure is what the launch reports, even if the facts cannot go.
            let _ = report(&facts);
            return Err(e);
        }
    };
    let nests = Arc::new(create_guard::nested::Registry::new(guard_thread.is_some()));
    if let (Some(t), Some(l)) = (guard_thread, listener) {
        // Refusals go to the supervisor on a copy of the sync socket.
        // SAFETY: `sync` stays open for init's whole life.
        let sync_fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(sync) };
        let events = sync_fd.try_clone_to_owned().ok();
        t.serve(l, spec.persist.clone(), events, Some(nests.clone()));
    }
    report(&facts)?;
    send(sync, &FromShim::Started { pid })?;
    // The registry's thread after the news: the supervisor has it sooner (a thread's making is
    // tens of µs), and a registration sent meanwhile waits in the socket's backlog.
    if let Some(sock) = nest_socket {
        create_guard::nested::serve(sock, nests);
    }
    // The target has its working directory; init's own is `/` from now on (a path through
    // /proc/1/cwd then leads nowhere the target could not go itself).
    let _ = sys::chdir(std::path::Path::new("/"));
    let code = init::supervise(pid);
    // Every process inside is reaped: the exit code can go out before this process's own
    // exit, whose namespace teardown (unmounting the whole tree) costs a few hundred µs. The
    // caller's descriptors are let go first, so whoever reads the program's output sees its end
    // with the launcher's exit.
    for fd in [0, 1, 2].iter().chain(&spec.preserve_fds) {
        // SAFETY: closing descriptors this process no longer uses (the guard thread holds none
        // of them).
        unsafe { libc::close(*fd) };
    }
    let _ = channel::send(sync, &FromShim::Exited { code }, &[]);
    Ok(code)
}

/// Init's threads (the network's, the guard's, the nested sandboxes' registry) allocate little
/// and seldom at once: they share the main heap, instead of glibc making each its own on its
/// first allocation (reserving 64 MiB and trimming it: three or four system calls, ~25 µs on the
/// network thread's way, which the launch waits for). Only a matter of speed.
fn one_heap_for_every_thread() {
    // SAFETY: mallopt with a constant option and value, before any thread exists.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
}

/// The UTS namespace's hostname (`doctor` tries the same call).
pub fn set_hostname(name: &str) -> Result<(), StepError> {
    sys::sethostname(name).map_err(|e| {
        let hint =
            (e.errno == nix::errno::Errno::EPERM).then(|| confinement::refused("sethostname"));
        StepError::new(Step::Namespaces, e.to_string(), hint.as_deref())
    })
}

/// Init keeps no core of its own (soft 0, and it is not dumpable) but leaves the hard limit at
/// what the program may raise its core limit to.
fn core_hard_limit(spec: &SandboxSpec) -> u64 {
    spec.limits
        .rlimits
        .iter()
        .find(|r| r.resource == libc::RLIMIT_CORE)
        .map_or(0, |r| r.hard)
}

fn send(sync: RawFd, msg: &FromShim) -> Result<(), StepError> {
    channel::send(sync, msg, &[]).at(Step::Internal)
}

/// Init's side of the setup before the network's thread is joined: the mount tree built and
/// entered (what does not depend on the persistence binds first: they may still be on their
/// way from the supervisor).
fn build(sync: RawFd, spec: &mut SandboxSpec) -> Result<(), StepError> {
    mounts::build_base(&spec.mounts)?;
    let done = mounts::build_ops_before_persistence(&spec.mounts)?;
    receive_persistence(sync, spec)?;
    mounts::build_ops(&spec.mounts, done)
}

/// Only stdin, stdout, stderr, the sync socket and the descriptors named explicitly cross into
/// the sandbox: a write to a descriptor the caller happened to leave open must not reach the host.
/// (A nested sandbox's program process closes its own the same way.)
pub fn close_stray_fds(sync: RawFd, preserve: &[RawFd]) -> std::io::Result<()> {
    let mut keep: Vec<u32> = preserve
        .iter()
        .chain(std::iter::once(&sync))
        .filter(|&&fd| fd > 2)
        .map(|&fd| fd as u32)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut first = 3u32;
    for k in keep.iter().copied().chain(std::iter::once(u32::MAX)) {
        if k > first {
            // SAFETY: close_range closes descriptors only.
            let ret = unsafe { libc::syscall(libc::SYS_close_range, first, k - 1, 0u32) };
            if ret < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        first = k.saturating_add(1);
    }
    Ok(())
}

/// For callers that need the failure as a value (tests).
pub fn describe(failure: &Failure) -> String {
    StepError(failure.clone()).to_string()
}

/// A launch plans the persistence protections after the clone (they cost a few hundred
/// microseconds of lookups on the host, which overlap the shim's network setup this way): wait
/// for them where the plan holds their place. The binds go in that place; the create guard's
/// model replaces the spec's. A supervisor gone or a message of another kind: nothing more is
/// built.
fn receive_persistence(sync: RawFd, spec: &mut SandboxSpec) -> Result<(), StepError> {
    let ops = &mut spec.mounts.ops;
    let Some(at) = ops
        .iter()
        .position(|op| *op == crate::spec::MountOp::PersistenceBinds)
    else {
        return Ok(());
    };
    let failed = |why: String| {
        StepError::new(
            Step::Mounts,
            format!("the persistence protections did not reach the sandbox: {why}"),
            Some("run again with -v and report this"),
        )
    };
    let (plan, _fds) = channel::recv::<channel::PersistencePlan>(sync)
        .map_err(|e| failed(format!("{e:#}")))?
        .ok_or_else(|| failed("the supervisor is gone".into()))?;
    let channel::PersistencePlan { binds, persist } = plan;
    if binds.contains(&crate::spec::MountOp::PersistenceBinds) {
        return Err(failed("the binds hold their own placeholder".into()));
    }
    ops.splice(at..=at, binds);
    spec.persist = persist;
    Ok(())
}
