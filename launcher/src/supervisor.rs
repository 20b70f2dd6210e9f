//! The supervisor: start the shim, hand it the spec, relay what it reports, forward signals, and
//! exit with the target's status. Nothing outlives it: the shim dies with it (parent-death
//! signal) and takes the whole PID namespace along.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use seccompiler::BpfProgram;
use serde_json::json;
use shim::channel::{self, FromShim, Step, StepError};
use shim::init::wait_set;
use shim::spec::SandboxSpec;

use crate::fs_violations::FsViolations;
use crate::namespaces::{self, Identity};
use crate::prompt::Prompts;
use crate::status::StatusSink;

/// Called with the sockets the shim created inside, and whether transparent egress is up;
/// returns what to start once one of them has something to accept or read.
pub type OnListeners<'a> = Box<dyn FnOnce(Vec<OwnedFd>, bool) -> anyhow::Result<OnDemand> + 'a>;

/// Called with the sandbox's init (host pid) right after the clone; returns work to start on
/// first use (the control socket).
pub type OnSpawn<'a> = Box<dyn FnOnce(libc::pid_t) -> Option<OnDemand> + 'a>;

/// Work the launcher does right after the clone, while the shim sets up its network: the
/// persistence plan (see `sandbox::Prepared::deferred_plan`), sent to the shim, which waits for
/// it before it mounts anything.
pub type Deferred<'a> = Box<dyn FnOnce() -> DeferredPlan + 'a>;

/// Work the launcher does once the shim has said something (its first message, see
/// [`Launch::meanwhile`]).
pub type Meanwhile<'a> = Box<dyn FnOnce() + 'a>;

/// What a [`Deferred`] step gives: the message for the shim and what the user must be told.
pub struct DeferredPlan {
    pub message: channel::PersistencePlan,
    pub warnings: Vec<String>,
}

/// Work started on first use: the proxy's runtime and thread cost about half a millisecond of a
/// launch, which a sandbox that never talks to the network does not need to pay. The kernel
/// queues connections (and DNS datagrams) on the sockets until then.
pub struct OnDemand {
    /// Descriptors to watch for readability; `start` owns them.
    pub fds: Vec<RawFd>,
    pub start: Box<dyn FnOnce() -> anyhow::Result<()>>,
}

/// Work done around the clone: what the launcher takes on just before it so that the shim is
/// born with it (the sandbox's OOM score, its cgroups), and gives back right after.
pub trait AroundClone {
    fn before(&self) -> Result<(), StepError>;
    fn after(&self) -> Result<(), StepError>;
    /// Whether the launcher must see the shim's own exit before it returns (a cgroup can be
    /// removed only once it is empty).
    fn wait_for_init(&self) -> bool;
}

/// `--timeout`: the program gets SIGTERM when the time is up, everything inside SIGKILL this
/// much later, and the launcher exits 124 (as `timeout(1)` does).
pub const TIMEOUT_GRACE: Duration = Duration::from_secs(2);
pub const TIMEOUT_EXIT: i32 = 124;

pub struct Launch<'a> {
    pub spec: SandboxSpec,
    /// The compiled seccomp filter (compiled before the clone, so a bad policy fails early).
    pub filter: BpfProgram,
    pub identity: Identity,
    pub status: &'a mut StatusSink,
    pub verbose: u8,
    /// Called with the proxy listeners the shim created inside (restricted network).
    pub on_listeners: Option<OnListeners<'a>>,
    pub around_clone: Option<&'a dyn AroundClone>,
    /// How long the program may run (`--timeout`).
    pub timeout: Option<Duration>,
    /// Called once the sandbox's init exists.
    pub on_spawn: Option<OnSpawn<'a>>,
    /// Where filesystem violations are prompted (`--prompts`).
    pub prompts: Option<Arc<Prompts>>,
    /// Planned after the clone and sent to the shim.
    pub deferred: Option<Deferred<'a>>,
    /// Work that must not wait for the program but need not come before it either, done when
    /// the shim's first message arrives. Done earlier, it held the shim's network thread back
    /// (it shares this process's CPU, see `shim::network_thread`), and the program with it.
    /// With restricted egress that first message is the network thread's last act (the proxy's
    /// listeners), so this work (~0.06 ms here, and ~0.07 ms more for the listeners) held back
    /// the thread's end, which init waits for, until this process first yields its CPU to the
    /// thread (see `yield_to_the_network_thread`). Done instead once the program runs,
    /// init's wait for the thread was shorter (median 63 → 29 µs, sched tracepoints over 40
    /// launches), but the launch was not faster (interleaved A/B runs of 600–1,200 launches
    /// each: equal, or slower by 2–8%): the work then meets the program's start and end.
    pub meanwhile: Option<Meanwhile<'a>>,
}

/// The proxy's listeners are the shim's network thread's last message, and the thread has a
/// little left to do after it (close its copies, end) while init waits for its end. It runs on
/// this process's CPU at a lower priority (see `shim::network_thread`), so the wake-up that
/// brought the message here preempted it: without this, init waited for the thread behind the
/// listeners' setup and the persistence watch's stamp (~0.13 ms, traced). Giving the CPU up
/// once lets the thread end first. Only a matter of speed: with nothing else runnable here it
/// returns at once. Interleaved with bwrap launch by launch in shuffled order (2,000-2,500
/// rounds): 0.938 -> 0.926, 0.947 -> 0.931, 0.952 -> 0.941 and 0.968 -> 0.953 of bwrap's time
/// in the benchmark's empty setting; in a developer's (agents' HOME, a git checkout), where the
/// thread has usually ended before init wants it, 1.034 -> 1.048, 1.032 -> 1.032 and
/// 1.029 -> 1.031 (within what the method resolves).
fn yield_to_the_network_thread() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// Report a failure: one line on stderr and a JSON status; returns the exit code.
pub fn fail(status: &mut StatusSink, e: &StepError) -> i32 {
    crate::say!("sandbox-launch: {e}");
    let code = e.0.step.exit_code();
    status.emit(json!({
        "status": "failed",
        "step": e.0.step,
        "error": e.0.message,
        "hint": e.0.hint,
        "exit_code": code,
    }));
    code
}

/// Run the sandbox to the end; returns the launcher's exit code.
pub fn run(launch: Launch<'_>) -> i32 {
    let Launch {
        spec,
        filter,
        identity,
        status,
        verbose,
        on_listeners,
        around_clone,
        timeout,
        on_spawn,
        prompts,
        deferred,
        meanwhile,
    } = launch;
    let launch = Launch {
        spec,
        filter,
        identity,
        status: &mut *status,
        verbose,
        on_listeners,
        around_clone,
        timeout,
        on_spawn,
        prompts,
        deferred,
        meanwhile,
    };
    match drive(launch) {
        Ok(code) => code,
        Err(e) => fail(status, &e),
    }
}

/// Run the sandbox to the end: the target's exit code, or the step that failed (reported by
/// the caller: `run` prints it, `doctor` shows it as a check).
pub fn drive(mut launch: Launch<'_>) -> Result<i32, StepError> {
    // Blocked before the clone, so no signal is lost between clone and the wait loop; the shim
    // inherits the mask and the target gets a clean one.
    shim::init::block_signals();
    let signals = signal_fd().map_err(|e| {
        StepError::new(
            Step::Internal,
            format!("cannot create a signalfd to forward signals: {e}"),
            Some("raise the open-file limit (ulimit -n) or free descriptors"),
        )
    })?;
    if let Some(h) = launch.around_clone {
        h.before()?;
    }
    let spawned = namespaces::spawn_shim(launch.identity, launch.spec, launch.filter);
    let after = launch.around_clone.map(AroundClone::after);
    let shim_proc = match (spawned, after) {
        (Ok(s), None | Some(Ok(()))) => s,
        (Ok(s), Some(Err(e))) => {
            namespaces::kill_and_reap(s.pid);
            return Err(e);
        }
        (Err(e), _) => return Err(e),
    };
    if let Some(errno) = shim_proc.without_user_namespace {
        let text = format!(
            "no user namespace can be created here (clone with CLONE_NEWUSER => {errno}): the \
             sandbox's namespaces were made as root, which then dropped to uid {} with no \
             capability; every other layer is in place (README: Started as root)",
            launch.identity.uid
        );
        launch.status.warn(&text);
    }
    let _reap = ReapAtEnd(
        launch
            .around_clone
            .filter(|h| h.wait_for_init())
            .map(|_| shim_proc.pid),
    );
    let sync = shim_proc.sync.as_raw_fd();
    let mut plan_unsent = None;
    if let Some(plan) = launch.deferred.take() {
        let plan = plan();
        if let Err(e) = channel::send(sync, &plan.message, &[]) {
            // EPIPE: the shim ended on its own, and its exit code says why.
            let gone = e.root_cause().downcast_ref::<nix::errno::Errno>()
                == Some(&nix::errno::Errno::EPIPE);
            plan_unsent = (!gone).then(|| format!("{e:#}"));
            // The shim failed before it wanted the plan (its reason is on the way), or it is
            // gone. Either way it must not wait for it: it reads end-of-file, fails, and says
            // so; the loop below reports whichever came first.
            let _ = nix::sys::socket::shutdown(sync, nix::sys::socket::Shutdown::Write);
        }
        for text in plan.warnings {
            launch.status.warn(&text);
        }
    }
    let mut on_demand: Vec<OnDemand> = launch
        .on_spawn
        .take()
        .and_then(|f| f(shim_proc.pid))
        .into_iter()
        .collect();
    let mut early_reports = Vec::new();
    loop {
        let msg = match channel::recv::<FromShim>(sync) {
            Ok(Some(m)) => {
                if matches!(m.0, FromShim::Listeners { .. }) {
                    yield_to_the_network_thread();
                }
                if let Some(work) = launch.meanwhile.take() {
                    work();
                }
                m
            }
            Ok(None) | Err(_) => {
                // The shim went away without a word: it died before it could report.
                let code = wait_exit(shim_proc.pid);
                if let Some(e) = plan_unsent {
                    return Err(StepError::new(
                        Step::Mounts,
                        format!(
                            "the persistence protections could not be handed to the sandbox \
                             ({e}), so it was not built ({})",
                            describe_exit(code)
                        ),
                        Some("run again with -v and report this"),
                    ));
                }
                // Before the channel is up, the cloned child reports a failed step only by its
                // exit code.
                let step = (code >= 0)
                    .then(|| Step::from_exit_code(code))
                    .flatten()
                    .unwrap_or(Step::Internal);
                return Err(StepError::new(
                    step,
                    format!(
                        "the sandbox process could not {} and ended during setup ({})",
                        step.describe(),
                        describe_exit(code)
                    ),
                    Some("run `sandbox-launch doctor`; if it passes, run again with -v and report this"),
                ));
            }
        };
        match msg {
            // Only the guard sends these, once the program runs — which can be before init's
            // report that it runs arrives (init sends it after it hands the guard its
            // listener): kept for when that report has come.
            (msg @ (FromShim::Refused { .. } | FromShim::WriteFailed { .. }), _) => {
                early_reports.push(msg);
            }
            (FromShim::Warning { text }, _) => {
                launch.status.warn(&text);
            }
            (FromShim::Listeners { transparent }, fds) => {
                if let Some(cb) = launch.on_listeners.take() {
                    match cb(fds, transparent) {
                        Ok(d) => on_demand.push(d),
                        Err(e) => {
                            namespaces::kill_and_reap(shim_proc.pid);
                            return Err(StepError::new(Step::Network, format!("{e:#}"), None));
                        }
                    }
                }
            }
            (FromShim::Verified { facts }, _) => {
                if launch.verbose > 0 {
                    crate::say!("sandbox-launch: verified: {facts}");
                }
                launch
                    .status
                    .emit(json!({"status": "verified", "facts": facts}));
            }
            (FromShim::Started { pid }, _) => {
                launch.status.emit(json!({
                    "status": "running",
                    "pid": shim_proc.pid,
                    "child_pid_inside": pid,
                }));
                break;
            }
            // After Started; or, for a probe (`doctor`), right after Verified.
            (FromShim::Exited { code }, _) => {
                wait_exit(shim_proc.pid);
                return Ok(code);
            }
            (FromShim::Failed(failure), _) => {
                wait_exit(shim_proc.pid);
                return Err(StepError(failure));
            }
        }
    }
    let mut violations =
        FsViolations::new(&mut *launch.status, launch.verbose, launch.prompts.take());
    for msg in early_reports {
        violations.report(msg);
    }
    let (mut code, timed_out) = forward_until_exit(
        &shim_proc,
        &signals,
        on_demand,
        launch.timeout,
        &mut |msg| violations.report(msg),
    );
    violations.finish();
    if timed_out {
        // "Nothing left" includes init itself, which may still be ending.
        wait_exit(shim_proc.pid);
        let after = crate::limits::quantity::show_duration(launch.timeout.unwrap_or_default());
        crate::say!("sandbox-launch: the program ran out of time (--timeout {after}) and was stopped, with everything it started");
        launch
            .status
            .emit(json!({"status": "timeout", "after": after, "program_exit_code": code}));
        code = TIMEOUT_EXIT;
    }
    launch
        .status
        .emit(json!({"status": "exited", "exit_code": code}));
    Ok(code)
}

/// Reap the shim when dropped (see [`AroundClone`]); a shim already reaped is fine.
struct ReapAtEnd(Option<libc::pid_t>);

impl Drop for ReapAtEnd {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            wait_exit(pid);
        }
    }
}

fn describe_exit(code: i32) -> String {
    if code > 128 {
        format!("killed by signal {}", code - 128)
    } else {
        format!("exit status {code}")
    }
}

/// Wait for the shim; its exit code (128+N for a signal).
fn wait_exit(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child with a valid status pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return decode(status);
        }
        if r < 0 && nix::errno::Errno::last() != nix::errno::Errno::EINTR {
            return 1;
        }
    }
}

fn decode(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// The signals the supervisor forwards, as a descriptor to wait on beside others. Made before
/// the clone, so that failing to make it stops the launch before anything runs.
fn signal_fd() -> std::io::Result<OwnedFd> {
    let set = wait_set();
    // SAFETY: signalfd on a valid, fully initialised set; the signals are blocked (block_signals).
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Pass signals that a process sent to the launcher on to the shim (which passes them to the
/// target) until the shim reports the target's exit code (sent once everything inside is
/// reaped; the shim's own exit, which unmounts the sandbox's tree, is not waited for) or exits.
/// Signals from the terminal already reach the target directly. Meanwhile, the first time one
/// of a pending item's descriptors is readable, its work starts; a failing start is reported
/// and the sandbox goes on without it (its network then answers nothing: closed, not open).
/// With a `timeout`, the program is stopped when it is up (see [`TIMEOUT_GRACE`]); the second
/// value says whether that happened.
fn forward_until_exit(
    shim: &namespaces::ShimProcess,
    signals: &OwnedFd,
    mut pending: Vec<OnDemand>,
    timeout: Option<Duration>,
    on_report: &mut dyn FnMut(FromShim),
) -> (i32, bool) {
    let pid = shim.pid;
    let mut deadline = timeout.map(|t| Instant::now() + t);
    let mut timed_out = false;
    loop {
        let mut status = 0;
        // SAFETY: non-blocking waitpid on our own child.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            return (decode(status), timed_out);
        }
        let watched = pending.iter().flat_map(|d| d.fds.iter().copied());
        let mut fds: Vec<libc::pollfd> = [signals.as_raw_fd(), shim.sync.as_raw_fd()]
            .into_iter()
            .chain(watched)
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let wait = deadline.map_or(-1, |d| {
            // Rounded up, so the poll does not wake just before the deadline.
            let left = d
                .saturating_duration_since(Instant::now())
                .as_micros()
                .div_ceil(1000);
            left.min(i32::MAX as u128) as i32
        });
        // SAFETY: poll on descriptors we hold, with the right count.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
        if ready < 0 {
            continue; // EINTR
        }
        if ready == 0 {
            // Time is up: the program is asked to stop (init passes SIGTERM on to it), and
            // after the grace period init is killed, which takes everything inside along.
            let sig = if timed_out {
                libc::SIGKILL
            } else {
                libc::SIGTERM
            };
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, sig) };
            deadline = (!timed_out).then(|| Instant::now() + TIMEOUT_GRACE);
            timed_out = true;
            continue;
        }
        if fds[1].revents != 0 {
            let code = match channel::recv::<FromShim>(shim.sync.as_raw_fd()) {
                Ok(Some((FromShim::Exited { code }, _))) => code,
                Ok(Some((msg @ (FromShim::Refused { .. } | FromShim::WriteFailed { .. }), _))) => {
                    on_report(msg);
                    continue;
                }
                // Gone without a word (killed): its own status says how.
                _ => wait_exit(pid),
            };
            return (code, timed_out);
        }
        let readable: Vec<libc::c_int> = fds[2..]
            .iter()
            .filter(|p| p.revents != 0)
            .map(|p| p.fd)
            .collect();
        if !readable.is_empty() {
            let (start, wait): (Vec<OnDemand>, Vec<OnDemand>) = std::mem::take(&mut pending)
                .into_iter()
                .partition(|d| d.fds.iter().any(|fd| readable.contains(fd)));
            pending = wait;
            for d in start {
                if let Err(e) = (d.start)() {
                    crate::say!("sandbox-launch: {e:#}");
                }
            }
        }
        if fds[0].revents & libc::POLLIN != 0 {
            forward_one(pid, signals);
        }
    }
}

/// Read one signal from `signals` and pass it on when a process (not the kernel) sent it.
fn forward_one(pid: libc::pid_t, signals: &OwnedFd) {
    // SAFETY: signalfd_siginfo is plain data; read fills it.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: reading one record into a buffer of its size.
    let r = unsafe {
        libc::read(
            signals.as_raw_fd(),
            (&mut info as *mut libc::signalfd_siginfo).cast(),
            size,
        )
    };
    let sig = info.ssi_signo as libc::c_int;
    if r as usize == size && sig != libc::SIGCHLD && info.ssi_code <= 0 {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, sig) };
    }
}
