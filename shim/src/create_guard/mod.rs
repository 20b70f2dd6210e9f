//! The create guard: a protected path that does not exist at launch (`.envrc`, `.vscode`,
//! `.git/hooks` in a directory without them...) must not become creatable, and the sandbox
//! must create nothing on the host to achieve that, so there is no mount point to bind
//! read-only over it and Landlock (which grants by hierarchy, not by name) cannot refuse one
//! name in a writable directory.
//!
//! So the target runs under one more seccomp filter that hands every syscall that creates a
//! directory entry (open/openat/creat with O_CREAT, mkdir, mknod, symlink, link, rename; their
//! `*at` forms) to init (the shim, PID 1) through a user-notification descriptor. Init never lets
//! the kernel re-read the target's arguments (a second thread could rewrite the path after the
//! check): it copies the path out once, resolves its parent directory to a descriptor, decides
//! on that directory's real path plus the final name, and performs the operation itself on the
//! descriptor — with the target's uid, groups, Landlock domain, mount namespace and umask, which
//! are init's own. An opened file is injected into the target (SECCOMP_IOCTL_NOTIF_ADDFD).
//! `openat2` answers ENOSYS (its flags live in memory); callers fall back to `openat`.
//!
//! The modules: `filter` (the BPF program: which syscalls come here), `listener` (handing the
//! notification descriptor from the target to init), `decode` (each syscall's arguments, copied
//! out of the target once), `resolve` (a path as the target would see it, to a directory
//! descriptor and a name), `rules` (what may be created where), `perform` (the operations init
//! carries out for the target) and `answer` (what goes back to the target).

mod answer;
mod decode;
mod filter;
mod listener;
mod perform;
mod resolve;
mod rules;

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use nix::errno::Errno;

use answer::{answer, answer_fd_pinned, Answer, Pin};
use decode::{decode, read_umask, Request};

pub use filter::filter;
pub use listener::{install_in_child, receive_listener, Listener};
pub use rules::{allowed, Creates};

const AT_FDCWD: i32 = libc::AT_FDCWD;

pub struct Handler {
    listener: OwnedFd,
    /// Taken notifications cannot be interrupted (see `install_in_child`).
    killable: bool,
    pub(crate) guards: Vec<PathBuf>,
    /// Per target process: its memory (to copy paths out) and its umask. An entry goes stale
    /// when the process execs or its pid is reused: then its memory reads fail, and both are
    /// read afresh.
    procs: std::cell::RefCell<std::collections::HashMap<libc::pid_t, Proc>>,
    /// The id of the notification being served (for answers sent from another thread).
    current: std::cell::Cell<u64>,
}

struct Proc {
    mem: File,
    umask: libc::mode_t,
}

impl Handler {
    pub fn new(listener: Listener, guards: Vec<PathBuf>) -> Self {
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
            guards,
            procs: Default::default(),
            current: Default::default(),
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
        if let (Ok(Answer::Fd(fd, cloexec)), true) = (&outcome, self.killable) {
            if let Some(pin) = Pin::here(req.pid as libc::pid_t) {
                return answer_fd_pinned(self.fd(), req.id, fd, *cloexec, pin);
            }
        }
        answer(self.fd(), req.id, outcome)
    }

    fn id_valid(&self, id: u64) -> bool {
        // SAFETY: ioctl with a pointer to a u64.
        unsafe { libc::ioctl(self.fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _, &id) == 0 }
    }

    fn serve(&self, n: &libc::seccomp_notif) -> Result<Answer, Errno> {
        let pid = n.pid as libc::pid_t;
        if n.data.nr as libc::c_long == libc::SYS_umask {
            // umask has no pointer argument, so letting the kernel run it is safe.
            let mask = n.data.args[0] as libc::mode_t & 0o777;
            if let Some(p) = self.procs.borrow_mut().get_mut(&pid) {
                p.umask = mask;
            }
            return Ok(Answer::Continue);
        }
        let request = match self.decode_cached(pid, n) {
            Some(r) => r,
            None => {
                // First sight of this process, or it exec'd, or its pid was reused.
                let mem = File::open(format!("/proc/{pid}/mem")).map_err(|_| Errno::EPERM)?;
                let request = decode(n, &mem)?;
                let umask = read_umask(pid).ok_or(Errno::ESRCH)?;
                self.procs.borrow_mut().insert(pid, Proc { mem, umask });
                request
            }
        };
        // The path was read from the pid the notification names: make sure that process is
        // still the one that asked (pids are reused).
        if !self.id_valid(n.id) {
            self.procs.borrow_mut().remove(&pid);
            return Err(Errno::ENOENT);
        }
        let umask = self.procs.borrow().get(&pid).map_or(0o022, |p| p.umask);
        // SAFETY: umask has no memory-safety preconditions; init is single-threaded.
        let old = unsafe { libc::umask(umask) };
        let answer = self.perform(pid, request);
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        answer
    }

    /// Decode with the cached memory of `pid`; None when there is none or it went stale.
    fn decode_cached(&self, pid: libc::pid_t, n: &libc::seccomp_notif) -> Option<Request> {
        let mut procs = self.procs.borrow_mut();
        let p = procs.get(&pid)?;
        match decode(n, &p.mem) {
            Ok(r) => Some(r),
            Err(_) => {
                procs.remove(&pid);
                None
            }
        }
    }
}
