//! PID 1 of the sandbox: start the target (PID 2), reap every zombie, forward signals sent to
//! the launcher, and when the target exits kill whatever is left and exit with its status
//! (128+N when it died of signal N).

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use crate::channel::{Step, StepError};
use crate::spec::Rlimit;

/// Signals the supervisor forwards and init passes on to the target.
pub const FORWARDED: &[libc::c_int] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// The signal set init waits on: the forwarded ones plus SIGCHLD.
pub fn wait_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in FORWARDED.iter().chain([libc::SIGCHLD].iter()) {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Block the wait set in this thread (and so in everything forked from it).
pub fn block_signals() {
    let set = wait_set();
    // SAFETY: valid sigset pointer; the old mask is not needed.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Where `program` is, searched in `path_var` like execvp does.
pub fn find_program(program: &str, path_var: Option<&str>) -> Result<PathBuf, StepError> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let path = path_var.unwrap_or("/usr/local/bin:/usr/bin:/bin");
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let candidate = Path::new(dir).join(program);
        if let Ok(meta) = std::fs::metadata(&candidate) {
            if meta.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(StepError::new(
        Step::Exec,
        format!("{program}: not found in PATH inside the sandbox ({path})"),
        Some("check that the program is installed and that its directory is readable under the policy"),
    ))
}

fn cstrings<I: IntoIterator<Item = String>>(items: I) -> Vec<CString> {
    items
        .into_iter()
        .map(|s| CString::new(s).unwrap_or_default())
        .collect()
}

fn ptrs(v: &[CString]) -> Vec<*const libc::c_char> {
    v.iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The create guard to install in the target before exec: its BPF program and a socket pair.
/// The child sends the listener on `child_sock` and execs only once init has it.
pub struct GuardSetup<'a> {
    pub prog: &'a [libc::sock_filter],
    pub child_sock: OwnedFd,
    pub init_sock: OwnedFd,
}

use crate::spawn::{self, FAILED_CAPS, FAILED_EXEC, FAILED_GUARD, FAILED_RLIMIT, FAILED_SECCOMP};

/// The target, forked but held before its exec: it waits for [`Forked::start`]. It is forked
/// early — before init starts the create guard's thread (so the program is PID 2) and before
/// init's own seccomp filter (which the child installs itself, along with the guard's). The child
/// drops its capabilities and installs both filters at once, while init builds and verifies the
/// rest; only then does it wait for init's go.
pub struct Forked<'a> {
    spawned: spawn::Spawned<'a>,
    path: &'a Path,
    rlimits: &'a [Rlimit],
    go: OwnedFd,
    status: OwnedFd,
    guard: Option<GuardSetup<'a>>,
}

/// Start the target; it runs nothing of its own until [`Forked::start`]. `policy` is the
/// seccomp program it installs for itself; `guard`, the create guard's.
pub fn fork_target<'a>(
    path: &'a Path,
    argv: &[String],
    env: &[(String, String)],
    rlimits: &'a [Rlimit],
    policy: &'a [libc::sock_filter],
    guard: Option<GuardSetup<'a>>,
) -> Result<Forked<'a>, StepError> {
    let failed = |what: &str, e: std::io::Error| {
        StepError::new(
            Step::Exec,
            format!("cannot start the program's process: {what} => {e}"),
            Some(
                "the kernel refused a new process or its stack: check the process and memory \
                 limits (--pids, --memory, ulimit -u, a container's pids limit)",
            ),
        )
    };
    let c_argv = cstrings(argv.iter().cloned());
    let c_env = cstrings(env.iter().map(|(k, v)| format!("{k}={v}")));
    let pipe = || {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| StepError::new(Step::Exec, format!("pipe2 => {e}"), None))
    };
    let (status_rd, status_wr) = pipe()?;
    let (go_rd, go_wr) = pipe()?;
    let child = spawn::Child {
        path: CString::new(path.as_os_str().as_bytes()).unwrap_or_default(),
        argv_p: ptrs(&c_argv),
        env_p: ptrs(&c_env),
        argv: c_argv,
        env: c_env,
        go: go_rd.as_raw_fd(),
        status: status_wr.as_raw_fd(),
        rlimits,
        policy,
        guard: guard.as_ref().map(|g| (g.prog, g.child_sock.as_raw_fd())),
        helper_stack: spawn::Stack::new().map_err(|e| failed("mmap", e))?,
    };
    let spawned = spawn::spawn(child).map_err(|e| failed("clone", e))?;
    // Init goes on (its guard thread, its own filter, the checks) while the child installs its
    // filters: a new task stays queued behind the busy one that made it, and the other CPU
    // would idle (~0.2 ms here; see `crate::cpus`).
    crate::cpus::move_process(spawned.pid);
    // The child has its own copies of the descriptors (no CLONE_FILES).
    drop((status_wr, go_rd));
    Ok(Forked {
        spawned,
        path,
        rlimits,
        go: go_wr,
        status: status_rd,
        guard,
    })
}

impl Forked<'_> {
    /// For a probe (`doctor`): everything the target does before its exec (its filters, the
    /// create guard and its helper, each a task the pids limit counts), then no go: it ends
    /// without running anything. Its failure is the launch's.
    pub fn probe(self) -> Result<(), StepError> {
        let Forked {
            mut spawned,
            path,
            go,
            status,
            guard,
            ..
        } = self;
        let mut got_listener = guard.is_none();
        if let Some(g) = guard {
            drop(g.child_sock);
            got_listener = crate::create_guard::receive_listener(g.init_sock.as_raw_fd()).is_ok();
        }
        // Not the go: the child exits before its exec (it holds a copy of this end too, so
        // closing ours would not do).
        let _ = nix::unistd::write(&go, b"p");
        drop(go);
        let mut buf = [0u8; 8];
        let n = loop {
            match nix::unistd::read(&status, &mut buf) {
                Err(Errno::EINTR) => continue,
                other => break other.unwrap_or(0),
            }
        };
        // SAFETY: reaping our own child, which has not exec'd.
        unsafe { libc::waitpid(spawned.pid, std::ptr::null_mut(), 0) };
        spawned.released();
        if n == 8 {
            let kind = i32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
            let errno = Errno::from_raw(i32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]));
            return Err(failure(kind, errno, path, got_listener));
        }
        if !got_listener {
            return Err(StepError::new(
                Step::Seccomp,
                "cannot install the create guard: the target ended before handing over its listener",
                None,
            ));
        }
        Ok(())
    }

    /// Let the target go on to its exec. Returns its pid once the exec has succeeded, and the
    /// create guard's listener when one was asked for; any failure before the exec is reported
    /// as an error (the target never ran).
    pub fn start(self) -> Result<(libc::pid_t, Option<crate::create_guard::Listener>), StepError> {
        let Forked {
            mut spawned,
            path,
            rlimits,
            go,
            status,
            guard,
        } = self;
        let pid = spawned.pid;
        let guard_wanted = guard.is_some();
        // The guard's listener is in init's hands before the child may exec: without it, the
        // target never runs. The child sent it while init verified; the go says init holds it.
        let mut listener = None;
        let mut go = Some(go);
        if let Some(g) = guard {
            drop(g.child_sock);
            match crate::create_guard::receive_listener(g.init_sock.as_raw_fd()) {
                Ok(fd) => listener = Some(fd),
                // The child failed before handing it over (its reason is on the status pipe)
                // or died: no go.
                Err(_) => {
                    drop(go.take());
                    // SAFETY: signalling our own child, which has not exec'd.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        if let Some(go) = go {
            let _ = nix::unistd::write(&go, b"g");
        }
        let mut buf = [0u8; 8];
        let n = loop {
            match nix::unistd::read(&status, &mut buf) {
                Err(Errno::EINTR) => continue,
                other => break other.unwrap_or(0),
            }
        };
        if n == 8 {
            let kind = i32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
            let errno = Errno::from_raw(i32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]));
            // Reap the child that failed to exec.
            // SAFETY: waitpid on our own child.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            spawned.released();
            if kind & 0xff == FAILED_RLIMIT {
                let r = rlimits.get((kind >> 8) as usize).copied();
                return Err(StepError::new(
                    Step::Limits,
                    format!("setrlimit({r:?}) => {errno} ({})", errno.desc()),
                    Some("a hard limit can only be lowered inside the sandbox; check --rlimit"),
                ));
            }
            return Err(failure(kind, errno, path, listener.is_some()));
        }
        if n != 8 && guard_wanted && listener.is_none() {
            // SAFETY: reaping our own child, killed above before its exec.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            spawned.released();
            return Err(StepError::new(
                Step::Seccomp,
                "cannot install the create guard: the target ended before handing over its listener",
                None,
            ));
        }
        // EOF on the status pipe: the exec closed it; the child's memory is its own.
        spawned.released();
        Ok((pid, listener))
    }
}

/// What the child's report of a failure before its exec means.
fn failure(kind: i32, errno: Errno, path: &Path, got_listener: bool) -> StepError {
    match kind {
        FAILED_SECCOMP => StepError::new(
            Step::Seccomp,
            format!(
                "cannot install the seccomp filter in the program before its exec: {errno} ({})",
                errno.desc()
            ),
            Some("run `sandbox-launch doctor`"),
        ),
        FAILED_CAPS => StepError::new(
            Step::Identity,
            format!(
                "cannot drop the last capability in the program before its exec: {errno} ({})",
                errno.desc()
            ),
            None,
        ),
        k if k == FAILED_GUARD || (k != FAILED_EXEC && !got_listener) => StepError::new(
            Step::Seccomp,
            format!(
                "cannot install the create guard (a seccomp user-notification filter): {errno} ({})",
                errno.desc()
            ),
            Some(if errno == Errno::EAGAIN {
                // The guard's helper is a new task: refused by the pids limit.
                crate::create_guard::PIDS_LIMIT_HINT
            } else {
                "the kernel must support SECCOMP_FILTER_FLAG_NEW_LISTENER (Linux >= 5.5); run \
                 `sandbox-launch doctor`"
            }),
        ),
        _ => {
            let hint = match errno {
                Errno::EACCES => "the file is not executable for this user, or the policy does not allow executing it",
                Errno::ENOENT => "the file or its interpreter (#! line, ELF loader) does not exist inside the sandbox",
                _ => "check the program and the policy",
            };
            StepError(crate::channel::Failure {
                step: Step::Exec,
                message: format!("execve({}) => {errno} ({})", path.display(), errno.desc()),
                hint: Some(hint.to_string()),
            })
        }
    }
}

/// The exit code for a wait status: the code, or 128+N for a signal.
fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// Be init until the target exits; then kill the rest and return the target's exit code.
/// (The create guard answers on a thread of its own, blocked in the notification ioctl: a
/// notification then wakes it directly, and signals never wait behind it.)
pub fn supervise(target: libc::pid_t) -> i32 {
    let set = wait_set();
    // SAFETY: a valid, initialised signal set; the signals are blocked in this thread.
    let sfd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) };
    loop {
        // SAFETY: signalfd_siginfo is plain data; read fills it.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reading into a buffer of `size` bytes.
        let r = unsafe { libc::read(sfd, (&mut info as *mut libc::signalfd_siginfo).cast(), size) };
        if r != size as isize {
            continue;
        }
        let sig = info.ssi_signo as libc::c_int;
        if sig == libc::SIGCHLD {
            if let Some(code) = reap(target) {
                kill_everything_else();
                return code;
            }
            continue;
        }
        // Signals from the terminal (SI_KERNEL) already reached the target through its process
        // group; only pass on what a process sent (the supervisor forwarding a kill).
        if info.ssi_code <= 0 {
            // SAFETY: kill with a pid we started.
            unsafe { libc::kill(target, sig) };
        }
    }
}

/// Reap every exited child; `Some(code)` once the target is among them.
fn reap(target: libc::pid_t) -> Option<i32> {
    let mut result = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return result;
        }
        if pid == target {
            result = Some(exit_code(status));
        }
    }
}

/// Everything still running inside dies with the target.
fn kill_everything_else() {
    // SAFETY: kill(-1) from PID 1 signals every other process in this PID namespace.
    unsafe { libc::kill(-1, libc::SIGKILL) };
    loop {
        // SAFETY: blocking waitpid for any child.
        let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) };
        if pid < 0 && Errno::last() != Errno::EINTR {
            break;
        }
    }
}
