//! The shim's pipeline, in order: receive the spec, close stray descriptors, hostname, network
//! and mounts (side by side), privileges, Landlock, seccomp, verification, then start the target
//! and be its init.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use seccompiler::BpfProgram;

use crate::channel::{self, AtStep, Failure, FromShim, Step, StepError};
use crate::spec::{NetworkSpec, SandboxSpec, Transparent};
use crate::{
    confinement, create_guard, egress, identity, inherited_env, init, landlock, mounts, network,
    seccomp, sys, verify,
};

/// Entry point of the shim, in the child of the supervisor's clone: `spec` and the compiled
/// seccomp `filter` are this process's copies of the supervisor's. Never returns.
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
    let attached: Vec<RawFd> = spec.mounts.inherited_fds();
    let keep: Vec<RawFd> = spec.preserve_fds.iter().chain(&attached).copied().collect();
    close_stray_fds(sync, &keep).at(Step::Internal)?;
    let mut warnings = Vec::new();

    let transparent = network_and_mounts(sync, &mut spec)?;
    // Nested sandboxes register here (see `create_guard::nested`). Without the socket they
    // cannot start, which narrows nothing away: reported, not fatal.
    let mut landlock_spec = spec.landlock.clone();
    let nest_socket = match create_guard::nested::bind(std::path::Path::new("/")) {
        Ok(sock) => {
            // Connecting to it is a Landlock right of its own from ABI 9 (unix sockets).
            landlock_spec.rules.push(crate::spec::LandlockRule {
                path: create_guard::nested::SOCKET.into(),
                access: crate::spec::Access::Write,
            });
            Some(sock)
        }
        Err(e) => {
            warnings.push(format!(
                "a sandbox-launch inside this sandbox cannot start: its registration socket \
                 {} could not be made ({e})",
                create_guard::nested::SOCKET
            ));
            None
        }
    };
    for fd in attached {
        // SAFETY: the trees' descriptors, used by the mounts and no longer needed.
        unsafe { libc::close(fd) };
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
    let guarded = !spec.persist.is_empty() || spec.host_sockets.is_some();
    identity::drop_privileges(core_hard_limit(&spec), guarded)?;
    let landlock = landlock::restrict(&landlock_spec, &mut warnings)?;

    // The target is started now (a clone into init's memory, see `crate::spawn`), held until
    // everything is verified: it is PID 2, shares the privileges and the Landlock domain, and
    // installs the seccomp filters itself right away, while init goes on (see
    // `init::fork_target`). A probe (`doctor`) builds and verifies, and starts nothing.
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
    let path = if spec.probe_only {
        None
    } else {
        let path_var = spec
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        let program = spec.argv.first().map(String::as_str).unwrap_or("");
        Some(init::find_program(program, path_var)?)
    };
    let forked = match &path {
        None => None,
        Some(path) => {
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
            Some(init::fork_target(
                path,
                &spec.argv,
                &spec.env,
                &spec.limits.rlimits,
                &policy,
                guard_setup,
            )?)
        }
    };

    // The guard's thread starts here: after the privileges and Landlock, which it shares with
    // the rest of init, and before init's own seccomp filter (it installs its own, meanwhile).
    let guard_thread = if guarded {
        let t = create_guard::GuardThread::start(&filter)?;
        identity::drop_kept()?;
        Some(t)
    } else {
        None
    };
    seccomp::install(&filter).map_err(|e| StepError::new(Step::Seccomp, format!("{e:#}"), None))?;
    for text in warnings {
        send(sync, &FromShim::Warning { text })?;
    }
    // Init's own checks run while the guard's thread installs its filter; the thread is checked
    // once it says it is ready.
    let mut facts = verify::verify(&spec, landlock, transparent)?;
    let guard_thread = guard_thread.map(|t| t.ready()).transpose()?;
    facts.guard_thread = guard_thread
        .as_ref()
        .map(|t| verify::verify_guard_thread(t.tid()))
        .transpose()?;
    // Everything is verified: the target may go. The facts go to the supervisor after its
    // exec, with the news that it runs (the supervisor only reports them); encoding and sending
    // them first kept the program waiting ~0.1 ms.
    let report = |facts: &verify::Facts| {
        let facts = serde_json::to_value(facts).at(Step::Internal)?;
        send(sync, &FromShim::Verified { facts })
    };
    let Some(forked) = forked else {
        report(&facts)?;
        send(sync, &FromShim::Exited { code: 0 })?;
        return Ok(0);
    };

    let (pid, listener) = match forked.start() {
        Ok(started) => started,
        Err(e) => {
            // The exec's failure is what the launch reports, even if the facts cannot go.
            let _ = report(&facts);
            return Err(e);
        }
    };
    let nests = Arc::new(create_guard::nested::Registry::new(guard_thread.is_some()));
    if let Some(sock) = nest_socket {
        create_guard::nested::serve(sock, nests.clone());
    }
    if let (Some(t), Some(l)) = (guard_thread, listener) {
        // Refusals go to the supervisor on a copy of the sync socket.
        // SAFETY: `sync` stays open for init's whole life.
        let sync_fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(sync) };
        let events = sync_fd.try_clone_to_owned().ok();
        t.serve(l, spec.persist.clone(), events, Some(nests));
    }
    report(&facts)?;
    send(sync, &FromShim::Started { pid })?;
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

/// The network namespace and the mount tree, side by side: the network (a namespace of its own,
/// made here rather than in the clone, and what it holds) on a thread of its own,
/// the persistence plan (which the launcher makes meanwhile) and the mounts on this one. Neither
/// reads what the other makes (the network side uses sockets and netlink, no path), and the
/// thread has ended before anything is set per thread (credentials, Landlock, seccomp), so no
/// part of init ever runs with less confinement than the rest. The thread starts first (with
/// restricted egress it is the longer side): this one wipes the inherited environment, empties
/// its bounding set and names the host meanwhile. The thread keeps the bounding set it was
/// started with: it limits only what an exec could gain, and the thread never execs and is gone
/// before the program starts. Failures are reported in the pipeline's order: the network's
/// first. Returns whether transparent egress is in place.
fn network_and_mounts(sync: RawFd, spec: &mut SandboxSpec) -> Result<bool, StepError> {
    let build = |spec: &mut SandboxSpec| {
        inherited_env::wipe().at(Step::Internal)?;
        identity::drop_bounding()?;
        set_hostname(&spec.hostname)?;
        // What does not depend on the persistence binds goes first: they may still be on
        // their way from the supervisor.
        mounts::build_base(&spec.mounts)?;
        let done = mounts::build_ops_before_persistence(&spec.mounts)?;
        receive_persistence(sync, spec)?;
        mounts::build_ops(&spec.mounts, done)
    };
    if spec.network == NetworkSpec::Full {
        build(spec)?;
        return Ok(false);
    }
    let network = spec.network.clone();
    let thread = std::thread::Builder::new()
        .stack_size(NETWORK_STACK)
        .spawn(move || {
            yield_to_the_plan();
            let set_up =
                network::enter_new().and_then(|ns| setup_network(sync, &network).map(|t| (t, ns)));
            // SAFETY: gettid has no preconditions.
            (unsafe { libc::gettid() }, set_up)
        });
    let Ok(thread) = thread else {
        // No thread to be had: one after the other, in this thread's own namespace.
        network::enter_new()?;
        let transparent = setup_network(sync, &spec.network)?;
        build(spec)?;
        return Ok(transparent);
    };
    beside_this_one(std::os::unix::thread::JoinHandleExt::as_pthread_t(&thread));
    let built = build(spec);
    let (tid, set_up) = thread
        .join()
        .map_err(|_| StepError::new(Step::Network, "the network setup's thread panicked", None))?;
    give_back_pid(tid);
    let (transparent, ns) = set_up?;
    // This thread, which forks the program, joins the namespace the network's thread made
    // (verification checks that it sees only `lo` there).
    network::join(&ns)?;
    built.map(|()| transparent)
}

/// The network's thread runs at a lower priority: what it makes is needed last (when init
/// joins it, after the mounts), while the supervisor's persistence plan, with which it shares a
/// CPU (see [`beside_this_one`]), is needed first (init waits for it halfway through the
/// mounts). Only a matter of speed: the thread ends before the program starts, and a refusal
/// changes nothing.
fn yield_to_the_plan() {
    // SAFETY: setpriority on the calling thread (who = 0), with a constant value.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
}

/// The network's thread needs little stack (sockets and netlink messages).
const NETWORK_STACK: usize = 256 * 1024;

/// Have the thread `t` run on another CPU than the calling one, now: a new thread is queued
/// where the scheduler finds room, often behind the thread that made it, which does not sleep
/// here (it builds the mount tree) while another CPU idles or only waits for the supervisor.
/// The second call gives it back exactly the CPUs it had. Only a matter of speed: if either
/// call fails, nothing else depends on it.
fn beside_this_one(t: libc::pthread_t) {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is plain data (all zeroes is the empty set); every call gets a valid
    // set of `size` bytes; `t` is a live thread of this process (joined later).
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::pthread_getaffinity_np(t, size, &mut allowed) != 0 || libc::CPU_COUNT(&allowed) < 2
        {
            return;
        }
        let Ok(here) = usize::try_from(libc::sched_getcpu()) else {
            return;
        };
        if !libc::CPU_ISSET(here, &allowed) {
            return;
        }
        let mut elsewhere = allowed;
        libc::CPU_CLR(here, &mut elsewhere);
        if libc::pthread_setaffinity_np(t, size, &elsewhere) == 0 {
            libc::pthread_setaffinity_np(t, size, &allowed);
        }
    }
}

/// The network's thread took the namespace's next PID, 2, which is the program's (README): once
/// the thread is gone, the next PID is 2 again. The join returns when the thread has released
/// its memory, a little before the kernel frees its id: that is waited for first. Nothing
/// depends on the number but what the program sees (`$$`); it is never a reason to stop.
fn give_back_pid(tid: libc::pid_t) {
    for _ in 0..10_000 {
        // SAFETY: signal 0 to a thread of this process only asks whether it still exists.
        let ret = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) };
        if ret != 0 && nix::errno::Errno::last() == nix::errno::Errno::ESRCH {
            break;
        }
        std::thread::yield_now();
    }
    // Writable by the namespace's owner: init, still privileged here.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/kernel/ns_last_pid")
    {
        let _ = std::io::Write::write_all(&mut f, b"1");
    }
}

/// Returns whether transparent egress is in place.
fn setup_network(sync: RawFd, network: &NetworkSpec) -> Result<bool, StepError> {
    match network {
        NetworkSpec::Full => Ok(false),
        NetworkSpec::None => network::loopback_up().map(|()| false),
        NetworkSpec::Restricted {
            listen_ports,
            transparent,
        } => {
            network::loopback_up()?;
            let listeners = network::listeners(listen_ports)?;
            let mut fds: Vec<RawFd> = listeners.iter().map(|l| l.as_raw_fd()).collect();
            let mut extra = None;
            if let Some(t) = transparent {
                match transparent_egress(t) {
                    Ok(sockets) => extra = Some(sockets),
                    Err(e) => send(
                        sync,
                        &FromShim::Warning {
                            text: format!(
                                "transparent egress is not available ({e}); only programs that use the proxy variables can reach allowed hosts (`sandbox-launch doctor` says what this host lacks)"
                            ),
                        },
                    )?,
                }
            }
            if let Some((tcp, dns)) = &extra {
                fds.extend([tcp.as_raw_fd(), dns.as_raw_fd()]);
            }
            // Last, when the kernel gives one: a sock_diag socket of this namespace, with which
            // the proxy finds the socket behind a connection by its addresses.
            let diag = network::sock_diag().ok();
            fds.extend(diag.as_ref().map(|d| d.as_raw_fd()));
            let msg = FromShim::Listeners {
                transparent: extra.is_some(),
            };
            channel::send(sync, &msg, &fds).at(Step::Network)?;
            Ok(extra.is_some())
        }
    }
}

/// The transparent listener, the DNS stub's socket, and the redirect to them.
fn transparent_egress(
    t: &Transparent,
) -> Result<(std::net::TcpListener, std::net::UdpSocket), StepError> {
    let tcp = network::listeners(&[t.tcp_port])?.remove(0);
    let dns = network::dns_socket(t.dns_port)?;
    egress::install(t.tcp_port, t.dns_port).at(Step::Network)?;
    Ok((tcp, dns))
}

/// Only stdin, stdout, stderr, the sync socket and the descriptors named explicitly cross into
/// the sandbox: a write to a descriptor the caller happened to leave open must not reach the host.
fn close_stray_fds(sync: RawFd, preserve: &[RawFd]) -> std::io::Result<()> {
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
