//! The create guard: nothing the program inside writes may run on the host later. Read-only
//! binds protect what exists at launch; what does not exist yet (`.envrc`, `.vscode`,
//! `.git/hooks`...) has no mount point to bind, must not be created on the host to get one, and
//! Landlock (which grants by hierarchy, not by name) cannot refuse one name in a writable
//! directory; a nested repository's files are not known at launch at all.
//!
//! So the target runs under one more seccomp filter that hands every syscall that can put
//! content at a name to init (the shim, PID 1) through a user-notification descriptor: creating
//! an entry, opening a file for writing, truncate, bind (see `filter`). Init never lets the
//! kernel re-read the target's arguments (a second thread could rewrite the path after the
//! check): it copies them out once, resolves the path to a directory descriptor and a name (or,
//! for what exists, an O_PATH descriptor of it), decides on the real path read back from that
//! descriptor, and performs the operation itself on the descriptor — with the target's uid,
//! groups, Landlock domain, mount namespace and umask, which are init's own. An opened file is
//! injected into the target (SECCOMP_IOCTL_NOTIF_ADDFD).
//!
//! The guard answers on a thread of init's own (see [`GuardThread`]), with its own working
//! directory and umask, and a seccomp filter that differs from the policy's only in letting it
//! take a socket from the target (pidfd_getfd) and copy its arguments out and lengths back
//! (process_vm_readv, process_vm_writev).
//!
//! The modules: `filter` (the BPF program: which syscalls come here), `listener` (handing the
//! notification descriptor from the target to init), `decode` (each syscall's arguments, copied
//! out of the target once), `target` (the asking process's memory, umask, descriptors), `resolve`
//! (a path as the target would see it, to a place or an object), `rules` (what may be written
//! where), `perform` (the operations init carries out for the target) and `answer` (what goes
//! back to the target).

mod answer;
mod decode;
mod filter;
pub mod host_sockets;
mod listener;
pub mod nested;
mod perform;
mod report;
mod resolve;
pub mod rules;
mod target;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{mpsc, Arc};

use nix::errno::Errno;
use seccompiler::BpfProgram;

use crate::channel::{Step, StepError};
use crate::spec::PersistSpec;
use answer::{answer, answer_fd_pinned, Answer, Pin};
use decode::decode;
use rules::Rules;
use target::Targets;

pub use filter::filter;
pub use listener::{install_in_child, receive_listener, Listener};

const AT_FDCWD: i32 = libc::AT_FDCWD;

pub struct Handler {
    listener: OwnedFd,
    /// Taken notifications cannot be interrupted (see `install_in_child`).
    killable: bool,
    rules: Rules,
    /// Where refusals are reported (the sync socket to the supervisor).
    events: Option<OwnedFd>,
    targets: Targets,
    /// The id of the notification being served (for answers sent from another thread).
    current: std::cell::Cell<u64>,
    /// Nested sandboxes' registrations (see `nested`), and those that hold the asking task.
    nests: Option<Arc<nested::Registry>>,
    nested: std::cell::RefCell<Vec<Arc<nested::Entry>>>,
    /// The thread whose notification is being served (for reports).
    asking: std::cell::Cell<libc::pid_t>,
    /// How many refusals were reported (a refusal's EPERM is not reported again as a failure).
    refusals: std::cell::Cell<u64>,
}

impl Handler {
    pub fn new(
        listener: Listener,
        persist: &PersistSpec,
        events: Option<OwnedFd>,
        nests: Option<Arc<nested::Registry>>,
    ) -> Self {
        let Listener {
            fd: listener,
            killable,
        } = listener;
        // Linux >= 6.6: wake init synchronously on the target's CPU, which more than halves a
        // notification's round trip. Older kernels refuse the flag; the guard works without it.
        const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;
        // SAFETY: ioctl with a u64 argument by value.
        unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
                SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
            )
        };
        Handler {
            listener,
            killable,
            rules: Rules::new(persist),
            events,
            targets: Targets::default(),
            current: Default::default(),
            nests,
            nested: Default::default(),
            asking: Default::default(),
            refusals: Default::default(),
        }
    }

    pub fn fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }

    /// Answer one notification. Errors mean the listener is gone (no target left); a
    /// notification withdrawn before it could be taken (its thread was interrupted or killed:
    /// ENOENT) is no error.
    pub fn handle_one(&self) -> Result<(), Errno> {
        // SAFETY: seccomp_notif is plain data, zeroed as the kernel requires.
        let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: ioctl with a pointer to a correctly sized struct.
        let r = unsafe {
            libc::ioctl(
                self.fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV as _,
                &mut req as *mut libc::seccomp_notif,
            )
        };
        if r < 0 {
            return match Errno::last() {
                // Once every task that uses the filter is gone, RECV fails with ENOENT at once
                // and the listener reports POLLHUP: stop, rather than spin until init exits.
                Errno::ENOENT if self.no_target_left() => Err(Errno::ENOENT),
                Errno::ENOENT | Errno::EINTR => Ok(()),
                e => Err(e),
            };
        }
        self.current.set(req.id);
        let outcome = self.serve(&req);
        // An opened file goes in with ADDFD, whose wake-ups carry no sync hint: the target and
        // then this thread would each be woken across CPUs. With the target kept on this CPU
        // while the file goes in, a create costs about half (on the development VM 82-89 ->
        // 45-48 µs); its own mask is back before it returns from the syscall. Only where a
        // signal cannot cut in between the file going in and the answer.
        let outcome = match (outcome, self.killable) {
            (Ok(Answer::Fd(fd, cloexec)), true) => match Pin::here(req.pid as libc::pid_t) {
                Some(pin) => return answer_fd_pinned(self.fd(), req.id, fd, cloexec, pin),
                None => Ok(Answer::Fd(fd, cloexec)),
            },
            (outcome, _) => outcome,
        };
        answer(self.fd(), req.id, outcome)
    }

    fn no_target_left(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: 0,
            revents: 0,
        };
        // SAFETY: poll of one valid pollfd, without waiting.
        unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLHUP != 0 }
    }

    fn id_valid(&self, id: u64) -> bool {
        answer::pending(self.fd(), id)
    }

    fn serve(&self, n: &libc::seccomp_notif) -> Result<Answer, Errno> {
        let tid = n.pid as libc::pid_t;
        self.asking.set(tid);
        if n.data.nr as libc::c_long == libc::SYS_umask {
            // umask has no pointer argument, so letting the kernel run it is safe.
            self.targets.set_umask(tid, n.data.args[0] as libc::mode_t);
            return Ok(Answer::Continue);
        }
        let request = decode(n, &self.targets.memory(tid)?)?;
        // The arguments were read from the tid the notification names: make sure that thread
        // is still the one that asked (tids are reused).
        if !self.id_valid(n.id) {
            self.targets.forget(tid);
            return Err(Errno::ENOENT);
        }
        // The guard's thread has a umask of its own (see `GuardThread`): set to the target's.
        // SAFETY: umask has no memory-safety preconditions.
        unsafe { libc::umask(self.targets.umask(tid)) };
        if let Some(nests) = &self.nests {
            *self.nested.borrow_mut() = nests.for_task(tid)?;
        }
        self.perform(tid, request)
    }
}

/// The thread of init that answers the guard's notifications. It has a working directory and
/// umask of its own (unshare(CLONE_FS)), so that binding a relative socket path from the
/// target's directory, or creating with the target's umask, changes nothing for init's main
/// thread. Its seccomp filter is the policy's program behind a prefix that lets it take sockets
/// from the target (pidfd_getfd, which the policy denies to every process of the sandbox):
/// [`GuardThread::program`], which init installs once for both of its threads (TSYNC) when the
/// thread is ready, and then narrows back to the policy for the main thread alone with
/// [`main_thread_denies`] (one program compiled by the kernel instead of two of the policy's
/// size). The target installs the policy itself before init's filter exists. Of the
/// capabilities the thread keeps CAP_SYS_PTRACE in its permitted set (see `target`); the main
/// thread drops it as soon as this thread runs.
pub struct GuardThread {
    handler: mpsc::Sender<Serve>,
    tid: libc::pid_t,
}

/// The stack of the guard's thread (a std thread's default).
const GUARD_STACK: usize = 2 << 20;

/// The guard's thread while it sets itself up; [`Starting::ready`] waits for it.
pub struct Starting {
    handler: mpsc::Sender<Serve>,
    ready: mpsc::Receiver<Result<libc::pid_t, String>>,
}

impl GuardThread {
    /// Start the thread. It makes its working directory its own and then only waits to be
    /// served; [`Starting::ready`] waits for that. From the moment this returns, the thread exists
    /// with the caller's credentials and Landlock domain as they were, and no seccomp filter:
    /// the caller installs [`GuardThread::program`] for both threads once it is ready.
    pub fn start() -> Result<Starting, StepError> {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<libc::pid_t, String>>();
        let (handler_tx, handler_rx) = mpsc::channel::<Serve>();
        // On init's CPU: init waits for it at once (see `crate::cpus`).
        let spawned = crate::cpus::spawn(GUARD_STACK, crate::cpus::Start::Here, move || {
            // SAFETY: PR_SET_NAME with a NUL-terminated name of at most 16 bytes.
            unsafe { libc::prctl(libc::PR_SET_NAME, c"create-guard".as_ptr()) };
            // SAFETY: gettid has no preconditions.
            let setup = own_fs().map(|()| unsafe { libc::gettid() });
            let ok = setup.is_ok();
            let _ = ready_tx.send(setup);
            if !ok {
                return;
            }
            // The sender goes away without a listener when the target never started.
            if let Ok(Serve {
                listener,
                persist,
                events,
                nests,
            }) = handler_rx.recv()
            {
                let h = Handler::new(listener, &persist, events, nests);
                while h.handle_one().is_ok() {}
                // Parked with the model still held: init's exit frees it with the rest. Freed
                // here (a few hundred rules and paths), it was work done just as the program
                // ended, at times on the program's own CPU ahead of its exit (the listener's
                // hang-up wakes this thread): its run after the program's exit went from a
                // median of 67 µs to 38 µs (sched tracepoints, 20 launches each).
                park();
            }
            // The program is gone (or never came): the thread waits for init's end instead of
            // ending now, when its own end (its stack unmapped, a TLB shootdown) ran on init's
            // CPU just as init was woken to reap the program and report its exit code.
            park();
        });
        spawned.map_err(|e| cannot_start(e.to_string(), e.raw_os_error() == Some(libc::EAGAIN)))?;
        Ok(Starting {
            handler: handler_tx,
            ready: ready_rx,
        })
    }

    /// The guard thread's seccomp program: `policy` behind the prefix of what only the guard may
    /// do (see `filter::guard_thread_prefix`).
    pub fn program(policy: &BpfProgram) -> BpfProgram {
        let mut prog = bpf(filter::guard_thread_prefix());
        prog.extend(policy.iter().cloned());
        prog
    }

    /// The thread's id (for verification).
    pub fn tid(&self) -> libc::pid_t {
        self.tid
    }

    /// Hand over the target's listener: from now on the thread answers its notifications,
    /// by `persist`'s rules and those nested sandboxes register in `nests`, reporting
    /// refusals on `events`.
    pub fn serve(
        self,
        listener: Listener,
        persist: PersistSpec,
        events: Option<OwnedFd>,
        nests: Option<Arc<nested::Registry>>,
    ) {
        let _ = self.handler.send(Serve {
            listener,
            persist,
            events,
            nests,
        });
    }
}

impl Starting {
    /// Wait until the thread has its own working directory (it has no filter yet).
    pub fn ready(self) -> Result<GuardThread, StepError> {
        match self.ready.recv() {
            Ok(Ok(tid)) => Ok(GuardThread {
                handler: self.handler,
                tid,
            }),
            Ok(Err(why)) => Err(cannot_start(why, false)),
            Err(_) => Err(cannot_start("it ended during setup".into(), false)),
        }
    }
}

/// Stacked on init's main thread over [`GuardThread::program`]: denies again what only the
/// guard's thread may do (see `filter::main_thread_denies`).
pub fn main_thread_denies() -> BpfProgram {
    bpf(filter::main_thread_denies())
}

fn bpf(insns: Vec<libc::sock_filter>) -> BpfProgram {
    insns
        .into_iter()
        .map(|i| seccompiler::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// Sleep until the process ends (init's exit takes every thread along). The thread's signals
/// are blocked like all of init's (a blocked signal does not end `pause`).
fn park() -> ! {
    loop {
        // SAFETY: pause has no preconditions.
        unsafe { libc::pause() };
    }
}

/// `no_task`: the thread's clone failed with EAGAIN, the pids limit (as for the target's own).
fn cannot_start(why: String, no_task: bool) -> StepError {
    let hint = if no_task {
        PIDS_LIMIT_HINT
    } else {
        "run `sandbox-launch doctor`"
    };
    StepError::new(
        Step::Seccomp,
        format!("cannot start the create guard's thread: {why}"),
        Some(hint),
    )
}

/// What a refused new task (EAGAIN) during the create guard's setup means.
pub const PIDS_LIMIT_HINT: &str = "the kernel refused a new process: the pids limit is reached \
     (--pids, a container's --pids-limit, ulimit -u); raise it";

/// What the guard's thread needs to start answering.
struct Serve {
    listener: Listener,
    persist: PersistSpec,
    events: Option<OwnedFd>,
    nests: Option<Arc<nested::Registry>>,
}

/// A working directory and umask apart from the rest of init; the directory is `/` (where a
/// path through init's `/proc/TID/cwd` leads nowhere the target could not go itself).
fn own_fs() -> Result<(), String> {
    // SAFETY: unshare with a flag only.
    if unsafe { libc::unshare(libc::CLONE_FS) } < 0 {
        return Err(format!("unshare(CLONE_FS) => {}", Errno::last()));
    }
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::chdir(c"/".as_ptr()) } < 0 {
        return Err(format!("chdir(/) => {}", Errno::last()));
    }
    Ok(())
}
