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

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

/// What a syscall would create at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Creates {
    Directory,
    /// A file, symlink, node or hard link.
    NonDirectory,
    /// Whatever is renamed there.
    Renamed,
}

/// May `full` be created as `what`? `guards` are the protected paths that did not exist.
/// Refused: a guarded path itself; and at an ancestor of a guarded path anything but a real
/// directory (a symlink or a `.git` file there would redirect the guarded path elsewhere).
pub fn allowed(guards: &[PathBuf], full: &Path, what: Creates) -> bool {
    for g in guards {
        if g == full {
            return false;
        }
        if g.starts_with(full) && what != Creates::Directory {
            return false;
        }
    }
    true
}

// ---- the filter -----------------------------------------------------------------------------

const O_CREAT: u32 = libc::O_CREAT as u32;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Syscalls that always create an entry (x86-64 numbers; other ABIs are killed by the main
/// policy's guard).
#[cfg(target_arch = "x86_64")]
const ALWAYS: &[libc::c_long] = &[
    libc::SYS_creat,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_mknod,
    libc::SYS_mknodat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    // Not a creation: seen (and let through) so init knows each process's umask without
    // reading /proc/PID/status on every creation.
    libc::SYS_umask,
];

/// The guard's BPF program.
#[cfg(target_arch = "x86_64")]
pub fn filter() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    let n = ALWAYS.len() as u8;
    // Layout: [0] ld arch, [1] jeq arch, [2] ld nr, [3..3+n) jeq always -> NOTIFY,
    // then jeq open -> OPEN, jeq openat -> OPENAT, jeq openat2 -> ENOSYS, ret ALLOW,
    // OPEN: ld args[1], jset O_CREAT -> NOTIFY, ret ALLOW,
    // OPENAT: ld args[2], jset O_CREAT -> NOTIFY, ret ALLOW,
    // NOTIFY: ret USER_NOTIF, ENOSYS: ret ERRNO|ENOSYS.
    let base = 3 + n; // index of `jeq open`
    let open_at = base + 4; // OPEN label
    let openat_at = open_at + 3;
    let notify_at = openat_at + 3;
    let enosys_at = notify_at + 1;
    let allow_early = base + 3; // `ret ALLOW` after the jeqs
    let mut p = vec![
        stmt(LD_W_ABS, 4),
        // Another ABI: not ours to judge (the main policy kills it).
        jump(JEQ, AUDIT_ARCH_X86_64, 0, allow_early - 2),
        stmt(LD_W_ABS, 0),
    ];
    for (i, nr) in ALWAYS.iter().enumerate() {
        let here = 3 + i as u8;
        p.push(jump(JEQ, *nr as u32, notify_at - here - 1, 0));
    }
    p.push(jump(JEQ, libc::SYS_open as u32, open_at - base - 1, 0));
    p.push(jump(
        JEQ,
        libc::SYS_openat as u32,
        openat_at - (base + 1) - 1,
        0,
    ));
    p.push(jump(
        JEQ,
        libc::SYS_openat2 as u32,
        enosys_at - (base + 2) - 1,
        0,
    ));
    p.push(stmt(RET, libc::SECCOMP_RET_ALLOW));
    // OPEN: flags are args[1] (low 32 bits at offset 16 + 8).
    p.push(stmt(LD_W_ABS, 24));
    p.push(jump(JSET, O_CREAT, notify_at - (open_at + 1) - 1, 0));
    p.push(stmt(RET, libc::SECCOMP_RET_ALLOW));
    // OPENAT: flags are args[2].
    p.push(stmt(LD_W_ABS, 32));
    p.push(jump(JSET, O_CREAT, notify_at - (openat_at + 1) - 1, 0));
    p.push(stmt(RET, libc::SECCOMP_RET_ALLOW));
    p.push(stmt(RET, libc::SECCOMP_RET_USER_NOTIF));
    p.push(stmt(RET, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    debug_assert_eq!(p.len(), enosys_at as usize + 1);
    p
}

/// In the forked target, before exec: install the guard and send its listener to init over
/// `sock`. Returns the errno on failure. Only syscalls (and nix's small cmsg buffer; the shim
/// is single-threaded, so allocating after fork is safe).
///
/// # Safety
/// Call only in the child of a fork of a single-threaded process.
pub unsafe fn install_in_child(prog: &[libc::sock_filter], sock: RawFd) -> Result<(), i32> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    let install = |flags: libc::c_ulong| {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    };
    // Linux >= 5.19: once init has taken a notification, only a fatal signal interrupts the
    // target's wait. Without it a signal arriving while init performs the operation made the
    // syscall fail with EINTR, or restart and find its own result (EEXIST), although the
    // operation was done. Older kernels refuse the flag; the guard works without it.
    let mut killable = true;
    let mut fd = install(
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
    );
    if fd < 0 && *libc::__errno_location() == libc::EINVAL {
        killable = false;
        fd = install(libc::SECCOMP_FILTER_FLAG_NEW_LISTENER);
    }
    if fd < 0 {
        return Err(*libc::__errno_location());
    }
    let fd = fd as RawFd;
    let fds = [fd];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [std::io::IoSlice::new(if killable { b"k" } else { b"g" })];
    let r = sendmsg::<()>(sock, &iov, &cmsg, MsgFlags::empty(), None);
    libc::close(fd);
    r.map(|_| ()).map_err(|e| e as i32)
}

/// The guard's notification descriptor, as init receives it from the target.
pub struct Listener {
    pub fd: OwnedFd,
    /// The filter was installed with SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV.
    pub killable: bool,
}

/// In init: receive the listener the target sent.
pub fn receive_listener(sock: RawFd) -> Result<Listener, Errno> {
    let mut buf = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            if let Some(&fd) = fds.first() {
                // SAFETY: a descriptor just received, owned by nobody else.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                return Ok(Listener {
                    fd,
                    killable: buf[0] == b'k',
                });
            }
        }
    }
    Err(Errno::EBADMSG)
}

// ---- the handler ----------------------------------------------------------------------------

pub struct Handler {
    listener: OwnedFd,
    /// Taken notifications cannot be interrupted (see `install_in_child`).
    killable: bool,
    guards: Vec<PathBuf>,
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

/// One decoded request.
#[derive(Debug)]
enum Request {
    Open {
        dirfd: i32,
        path: CString,
        flags: i32,
        mode: u32,
    },
    Mkdir {
        dirfd: i32,
        path: CString,
        mode: u32,
    },
    Mknod {
        dirfd: i32,
        path: CString,
        mode: u32,
        dev: u64,
    },
    Symlink {
        target: CString,
        dirfd: i32,
        path: CString,
    },
    Link {
        olddirfd: i32,
        old: CString,
        newdirfd: i32,
        new: CString,
        flags: i32,
    },
    Rename {
        olddirfd: i32,
        old: CString,
        newdirfd: i32,
        new: CString,
        flags: u32,
    },
}

/// A resolved place: the directory that will hold the entry, the entry's name, and the
/// directory's real path joined with the name (what the guard judges).
struct Place {
    dir: OwnedFd,
    name: CString,
    full: PathBuf,
}

const AT_FDCWD: i32 = libc::AT_FDCWD;

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

    fn is_fifo(&self, place: &Place) -> bool {
        // SAFETY: stat is plain data; fstatat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor, a NUL-terminated name and a pointer to a stat.
        let r = unsafe { libc::fstatat(place.dir.as_raw_fd(), place.name.as_ptr(), &mut st, 0) };
        r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO
    }

    /// Open on a thread of its own and answer the notification from there.
    fn defer_open(
        &self,
        place: Place,
        flags: i32,
        mode: u32,
        cloexec: bool,
    ) -> Result<Answer, Errno> {
        let id = self.current.get();
        let listener = self.listener.try_clone().map_err(|_| Errno::EMFILE)?;
        std::thread::spawn(move || {
            // SAFETY: valid descriptor and NUL-terminated name.
            let fd =
                unsafe { libc::openat(place.dir.as_raw_fd(), place.name.as_ptr(), flags, mode) };
            let outcome = if fd < 0 {
                Err(Errno::last())
            } else {
                // SAFETY: a descriptor we just opened.
                Ok(Answer::Fd(unsafe { OwnedFd::from_raw_fd(fd) }, cloexec))
            };
            let _ = answer(listener.as_raw_fd(), id, outcome);
        });
        Ok(Answer::Deferred)
    }

    fn check(&self, place: &Place, what: Creates) -> Result<(), Errno> {
        if allowed(&self.guards, &place.full, what) {
            Ok(())
        } else {
            Err(Errno::EPERM)
        }
    }

    fn perform(&self, pid: libc::pid_t, r: Request) -> Result<Answer, Errno> {
        match r {
            Request::Open {
                dirfd,
                path,
                flags,
                mode,
            } => {
                let mut place = resolve(pid, dirfd, &path)?;
                // In /proc nothing can be created, and `fd/N` entries are magic links that only
                // the kernel can follow: open them as they are.
                if flags & libc::O_EXCL == 0 && flags & libc::O_NOFOLLOW == 0 {
                    place = follow_final_symlinks(pid, place)?;
                }
                let mut open_flags = flags | libc::O_CLOEXEC;
                if !on_procfs(&place.dir) {
                    self.check(&place, Creates::NonDirectory)?;
                    // O_NOFOLLOW: the place was resolved above; do not let a symlink swapped in
                    // since then redirect it.
                    open_flags |= libc::O_NOFOLLOW;
                }
                if self.is_fifo(&place) {
                    // Opening a FIFO waits for its other end: do it off the guard's thread, so
                    // other creations (perhaps that other end) are not held up.
                    return self.defer_open(place, open_flags, mode, flags & libc::O_CLOEXEC != 0);
                }
                // SAFETY: valid descriptor and NUL-terminated name.
                let fd = unsafe {
                    libc::openat(place.dir.as_raw_fd(), place.name.as_ptr(), open_flags, mode)
                };
                if fd < 0 {
                    return Err(Errno::last());
                }
                // SAFETY: a descriptor we just opened.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                Ok(Answer::Fd(fd, flags & libc::O_CLOEXEC != 0))
            }
            Request::Mkdir { dirfd, path, mode } => {
                let place = resolve(pid, dirfd, &path)?;
                self.check(&place, Creates::Directory)?;
                // SAFETY: valid descriptor and NUL-terminated name.
                errno_of(unsafe { libc::mkdirat(place.dir.as_raw_fd(), place.name.as_ptr(), mode) })
            }
            Request::Mknod {
                dirfd,
                path,
                mode,
                dev,
            } => {
                let place = resolve(pid, dirfd, &path)?;
                self.check(&place, Creates::NonDirectory)?;
                // SAFETY: valid descriptor and NUL-terminated name.
                errno_of(unsafe {
                    libc::mknodat(place.dir.as_raw_fd(), place.name.as_ptr(), mode, dev)
                })
            }
            Request::Symlink {
                target,
                dirfd,
                path,
            } => {
                let place = resolve(pid, dirfd, &path)?;
                self.check(&place, Creates::NonDirectory)?;
                // SAFETY: NUL-terminated strings and a valid descriptor.
                errno_of(unsafe {
                    libc::symlinkat(target.as_ptr(), place.dir.as_raw_fd(), place.name.as_ptr())
                })
            }
            Request::Link {
                olddirfd,
                old,
                newdirfd,
                new,
                flags,
            } => {
                let to = resolve(pid, newdirfd, &new)?;
                self.check(&to, Creates::NonDirectory)?;
                if flags & libc::AT_EMPTY_PATH != 0 && old.as_bytes().is_empty() {
                    // Linking an open descriptor (an O_TMPFILE file): through its /proc link,
                    // the unprivileged way.
                    let src =
                        CString::new(format!("/proc/{pid}/fd/{olddirfd}")).unwrap_or_default();
                    // SAFETY: NUL-terminated strings and a valid descriptor.
                    return errno_of(unsafe {
                        libc::linkat(
                            AT_FDCWD,
                            src.as_ptr(),
                            to.dir.as_raw_fd(),
                            to.name.as_ptr(),
                            libc::AT_SYMLINK_FOLLOW,
                        )
                    });
                }
                let from = resolve(pid, olddirfd, &old)?;
                // SAFETY: NUL-terminated names and valid descriptors.
                errno_of(unsafe {
                    libc::linkat(
                        from.dir.as_raw_fd(),
                        from.name.as_ptr(),
                        to.dir.as_raw_fd(),
                        to.name.as_ptr(),
                        flags & libc::AT_SYMLINK_FOLLOW,
                    )
                })
            }
            Request::Rename {
                olddirfd,
                old,
                newdirfd,
                new,
                flags,
            } => {
                let from = resolve(pid, olddirfd, &old)?;
                let to = resolve(pid, newdirfd, &new)?;
                self.check(&to, Creates::Renamed)?;
                if flags & libc::RENAME_EXCHANGE != 0 {
                    self.check(&from, Creates::Renamed)?;
                }
                // SAFETY: NUL-terminated names and valid descriptors.
                errno_of(unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        from.dir.as_raw_fd(),
                        from.name.as_ptr(),
                        to.dir.as_raw_fd(),
                        to.name.as_ptr(),
                        flags,
                    ) as libc::c_int
                })
            }
        }
    }
}

/// While alive, thread `tid` (blocked in its notification) may run only on the CPU this thread
/// runs on; its own mask comes back on drop. Nothing is changed when that CPU is not in its
/// mask (a `taskset` of the user's is never overridden) or the mask cannot be read. Should
/// another thread of the target change this thread's mask in those few microseconds, the mask
/// read here wins (a scheduling hint lost, nothing more).
struct Pin {
    tid: libc::pid_t,
    saved: libc::cpu_set_t,
}

impl Pin {
    fn here(tid: libc::pid_t) -> Option<Pin> {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: cpu_set_t is plain data; the calls get pointers to sets of `size` bytes.
        unsafe {
            let cpu = libc::sched_getcpu();
            let mut saved: libc::cpu_set_t = std::mem::zeroed();
            if cpu < 0 || libc::sched_getaffinity(tid, size, &mut saved) != 0 {
                return None;
            }
            if !libc::CPU_ISSET(cpu as usize, &saved) {
                return None;
            }
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut one);
            (libc::sched_setaffinity(tid, size, &one) == 0).then_some(Pin { tid, saved })
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        // SAFETY: restoring the mask read in `here`; the thread may have exited meanwhile.
        unsafe {
            libc::sched_setaffinity(
                self.tid,
                std::mem::size_of::<libc::cpu_set_t>(),
                &self.saved,
            )
        };
    }
}

/// Install `fd` in the pinned target (ADDFD alone: the target wakes on this CPU to take it while
/// the syscall stays pending), give it back its CPU mask, then answer with the new descriptor's
/// number (a plain answer, which wakes it with the sync hint).
fn answer_fd_pinned(
    listener: RawFd,
    id: u64,
    fd: &OwnedFd,
    cloexec: bool,
    pin: Pin,
) -> Result<(), Errno> {
    let r = addfd(listener, id, fd, cloexec, 0);
    let outcome = if r < 0 {
        Err(Errno::last())
    } else {
        Ok(Answer::Value(i64::from(r)))
    };
    drop(pin);
    match outcome {
        Err(Errno::ENOENT) => Ok(()),
        other => answer(listener, id, other),
    }
}

/// Install `fd` in the target of notification `id` (SECCOMP_IOCTL_NOTIF_ADDFD); the new
/// descriptor's number in the target, or -1 with errno.
fn addfd(listener: RawFd, id: u64, fd: &OwnedFd, cloexec: bool, flags: u32) -> libc::c_int {
    let add = libc::seccomp_notif_addfd {
        id,
        flags,
        srcfd: fd.as_raw_fd() as u32,
        newfd: 0,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    // SAFETY: ioctl with a pointer to a correctly sized struct; `fd` stays open across it.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ADDFD as _, &add) }
}

/// Send the answer to notification `id` on `listener`. ENOENT from the kernel means the
/// target was killed meanwhile: nothing to answer.
fn answer(listener: RawFd, id: u64, outcome: Result<Answer, Errno>) -> Result<(), Errno> {
    let send = |val: i64, error: i32, flags: u32| {
        let resp = libc::seccomp_notif_resp {
            id,
            val,
            error,
            flags,
        };
        // SAFETY: ioctl with a pointer to a correctly sized struct.
        let r = unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND as _, &resp) };
        if r < 0 && Errno::last() != Errno::ENOENT {
            return Err(Errno::last());
        }
        Ok(())
    };
    match outcome {
        Ok(Answer::Value(v)) => send(v, 0, 0),
        Ok(Answer::Continue) => send(0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
        Ok(Answer::Deferred) => Ok(()),
        Ok(Answer::Fd(fd, cloexec)) => {
            let r = addfd(
                listener,
                id,
                &fd,
                cloexec,
                libc::SECCOMP_ADDFD_FLAG_SEND as u32,
            );
            match (r < 0).then(Errno::last) {
                None | Some(Errno::ENOENT) => Ok(()),
                Some(e) => send(0, -(e as i32), 0),
            }
        }
        Err(e) => send(0, -(e as i32), 0),
    }
}

enum Answer {
    Value(i64),
    /// Answered later, from another thread.
    Deferred,
    /// Let the kernel run the syscall as it is.
    Continue,
    Fd(OwnedFd, bool),
}

fn errno_of(r: libc::c_int) -> Result<Answer, Errno> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(Answer::Value(0))
    }
}

fn read_umask(pid: libc::pid_t) -> Option<libc::mode_t> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Umask:"))?;
    libc::mode_t::from_str_radix(line.split_whitespace().nth(1)?, 8).ok()
}

/// Copy a NUL-terminated string out of the target's memory (at most PATH_MAX bytes).
fn read_string(mem: &File, addr: u64) -> Result<CString, Errno> {
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let mut out = Vec::new();
    let mut chunk = [0u8; 512];
    while out.len() < libc::PATH_MAX as usize {
        let n = mem
            .read_at(&mut chunk, addr + out.len() as u64)
            .map_err(|_| Errno::EFAULT)?;
        if n == 0 {
            return Err(Errno::EFAULT);
        }
        if let Some(end) = chunk[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return CString::new(out).map_err(|_| Errno::EINVAL);
        }
        out.extend_from_slice(&chunk[..n]);
    }
    Err(Errno::ENAMETOOLONG)
}

fn decode(n: &libc::seccomp_notif, mem: &File) -> Result<Request, Errno> {
    let a = n.data.args;
    let s = |i: usize| read_string(mem, a[i]);
    let fd = |i: usize| a[i] as u32 as i32;
    let nr = n.data.nr as libc::c_long;
    Ok(match nr {
        libc::SYS_open => Request::Open {
            dirfd: AT_FDCWD,
            path: s(0)?,
            flags: a[1] as i32,
            mode: a[2] as u32,
        },
        libc::SYS_creat => Request::Open {
            dirfd: AT_FDCWD,
            path: s(0)?,
            flags: libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            mode: a[1] as u32,
        },
        libc::SYS_openat => Request::Open {
            dirfd: fd(0),
            path: s(1)?,
            flags: a[2] as i32,
            mode: a[3] as u32,
        },
        libc::SYS_mkdir => Request::Mkdir {
            dirfd: AT_FDCWD,
            path: s(0)?,
            mode: a[1] as u32,
        },
        libc::SYS_mkdirat => Request::Mkdir {
            dirfd: fd(0),
            path: s(1)?,
            mode: a[2] as u32,
        },
        libc::SYS_mknod => Request::Mknod {
            dirfd: AT_FDCWD,
            path: s(0)?,
            mode: a[1] as u32,
            dev: a[2],
        },
        libc::SYS_mknodat => Request::Mknod {
            dirfd: fd(0),
            path: s(1)?,
            mode: a[2] as u32,
            dev: a[3],
        },
        libc::SYS_symlink => Request::Symlink {
            target: s(0)?,
            dirfd: AT_FDCWD,
            path: s(1)?,
        },
        libc::SYS_symlinkat => Request::Symlink {
            target: s(0)?,
            dirfd: fd(1),
            path: s(2)?,
        },
        libc::SYS_link => Request::Link {
            olddirfd: AT_FDCWD,
            old: s(0)?,
            newdirfd: AT_FDCWD,
            new: s(1)?,
            flags: 0,
        },
        libc::SYS_linkat => Request::Link {
            olddirfd: fd(0),
            old: s(1)?,
            newdirfd: fd(2),
            new: s(3)?,
            flags: a[4] as i32,
        },
        libc::SYS_rename => Request::Rename {
            olddirfd: AT_FDCWD,
            old: s(0)?,
            newdirfd: AT_FDCWD,
            new: s(1)?,
            flags: 0,
        },
        libc::SYS_renameat => Request::Rename {
            olddirfd: fd(0),
            old: s(1)?,
            newdirfd: fd(2),
            new: s(3)?,
            flags: 0,
        },
        libc::SYS_renameat2 => Request::Rename {
            olddirfd: fd(0),
            old: s(1)?,
            newdirfd: fd(2),
            new: s(3)?,
            flags: a[4] as u32,
        },
        _ => return Err(Errno::ENOSYS),
    })
}

fn open_dir_path(path: &Path) -> Result<OwnedFd, Errno> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a descriptor we just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The root directory (init's root is the target's): opened once, duplicated after.
fn root_dir() -> Result<OwnedFd, Errno> {
    static ROOT: std::sync::OnceLock<Result<OwnedFd, Errno>> = std::sync::OnceLock::new();
    match ROOT.get_or_init(|| open_dir_path(Path::new("/"))) {
        Ok(fd) => fd.try_clone().map_err(|_| Errno::EMFILE),
        Err(e) => Err(*e),
    }
}

/// The directory a path is relative to, as the target sees it.
fn base_dir(pid: libc::pid_t, dirfd: i32, path: &[u8]) -> Result<OwnedFd, Errno> {
    if path.first() == Some(&b'/') {
        root_dir()
    } else if dirfd == AT_FDCWD {
        open_dir_path(Path::new(&format!("/proc/{pid}/cwd")))
    } else {
        open_dir_path(Path::new(&format!("/proc/{pid}/fd/{dirfd}")))
    }
}

/// Resolve everything but the last component (symlinks followed, as the kernel would).
fn resolve(pid: libc::pid_t, dirfd: i32, path: &CString) -> Result<Place, Errno> {
    if path.as_bytes().is_empty() {
        return Err(Errno::ENOENT);
    }
    // Names that mean "the calling process" must mean the target, not init.
    let bytes = as_target(pid, path.as_bytes());
    let base = base_dir(pid, dirfd, &bytes)?;
    let place = resolve_in(&base, &bytes)?;
    refuse_init_itself(&place)?;
    Ok(place)
}

/// `/dev/stdin|stdout|stderr`, `/dev/fd/N`, `/proc/self/…` and `/proc/thread-self/…` name the
/// caller's own descriptors: rewritten to the target's pid before init resolves them.
fn as_target(pid: libc::pid_t, path: &[u8]) -> Vec<u8> {
    let fd_dir = format!("/proc/{pid}/fd");
    for (name, fd) in [
        (b"/dev/stdin" as &[u8], 0),
        (b"/dev/stdout", 1),
        (b"/dev/stderr", 2),
    ] {
        if path == name {
            return format!("{fd_dir}/{fd}").into_bytes();
        }
    }
    for (prefix, with) in [
        (b"/dev/fd/" as &[u8], format!("{fd_dir}/")),
        (b"/proc/self/", format!("/proc/{pid}/")),
        (b"/proc/thread-self/", format!("/proc/{pid}/task/{pid}/")),
    ] {
        if let Some(rest) = path.strip_prefix(prefix) {
            let mut out = with.into_bytes();
            out.extend_from_slice(rest);
            return out;
        }
    }
    path.to_vec()
}

/// A path that went through init's own `/proc` entry (e.g. `/proc/self` reached some other
/// way, or `/proc/1` itself) would hand the target init's descriptors — the guard's listener
/// among them. The target could not open those itself (init is not dumpable): refused.
fn refuse_init_itself(place: &Place) -> Result<(), Errno> {
    let me = format!("/proc/{}", std::process::id());
    let full = place.full.as_os_str().as_bytes();
    if full == me.as_bytes() || full.starts_with(format!("{me}/").as_bytes()) {
        return Err(Errno::EACCES);
    }
    Ok(())
}

/// Whether a directory is on procfs, where nothing can be created and entries are magic links.
fn on_procfs(dir: &OwnedFd) -> bool {
    // SAFETY: statfs is plain data; fstatfs fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a pointer to a statfs.
    unsafe { libc::fstatfs(dir.as_raw_fd(), &mut st) == 0 && st.f_type == libc::PROC_SUPER_MAGIC }
}

fn resolve_in(base: &OwnedFd, bytes: &[u8]) -> Result<Place, Errno> {
    let mut trimmed = bytes;
    while trimmed.len() > 1 && trimmed.ends_with(b"/") {
        trimmed = &trimmed[..trimmed.len() - 1];
    }
    let (parent, name): (&[u8], &[u8]) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(0) => (b"/", &trimmed[1..]),
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => (b".", trimmed),
    };
    let name = if name.is_empty() { b"." as &[u8] } else { name };
    let parent_c = CString::new(parent).map_err(|_| Errno::EINVAL)?;
    // SAFETY: valid descriptor and NUL-terminated path.
    let dir = unsafe {
        libc::openat(
            base.as_raw_fd(),
            parent_c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a descriptor we just opened.
    let dir = unsafe { OwnedFd::from_raw_fd(dir) };
    let real = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .map_err(|_| Errno::ENOENT)?;
    if real.as_os_str().as_bytes().ends_with(b" (deleted)") {
        return Err(Errno::ENOENT);
    }
    let full = real.join(OsStr::from_bytes(name));
    Ok(Place {
        dir,
        name: CString::new(name).map_err(|_| Errno::EINVAL)?,
        full,
    })
}

/// `open(O_CREAT)` without O_EXCL/O_NOFOLLOW follows a final symlink and creates its target:
/// follow it here, so the guard judges the place that would really be created.
fn follow_final_symlinks(pid: libc::pid_t, mut place: Place) -> Result<Place, Errno> {
    for _ in 0..40 {
        if on_procfs(&place.dir) {
            // A magic link (`/proc/PID/fd/N`): only the kernel can follow it.
            return Ok(place);
        }
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: valid descriptor, NUL-terminated name, buffer of the given length.
        let n = unsafe {
            libc::readlinkat(
                place.dir.as_raw_fd(),
                place.name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            // Not a symlink (EINVAL) or not there (ENOENT): this is the place.
            return Ok(place);
        }
        buf.truncate(n as usize);
        let buf = as_target(pid, &buf);
        let base = if buf.first() == Some(&b'/') {
            root_dir()?
        } else {
            place.dir
        };
        place = resolve_in(&base, &buf)?;
        refuse_init_itself(&place)?;
    }
    Err(Errno::ELOOP)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn a_guarded_path_cannot_be_created_in_any_way() {
        let guards = g(&["/w/.envrc", "/w/.git/hooks"]);
        for what in [Creates::Directory, Creates::NonDirectory, Creates::Renamed] {
            assert!(!allowed(&guards, Path::new("/w/.envrc"), what));
            assert!(!allowed(&guards, Path::new("/w/.git/hooks"), what));
        }
    }

    #[test]
    fn above_a_guarded_path_only_a_real_directory_may_appear() {
        let guards = g(&["/w/.git/hooks"]);
        assert!(allowed(&guards, Path::new("/w/.git"), Creates::Directory));
        assert!(!allowed(
            &guards,
            Path::new("/w/.git"),
            Creates::NonDirectory
        ));
        assert!(!allowed(&guards, Path::new("/w/.git"), Creates::Renamed));
    }

    #[test]
    fn everything_else_is_allowed() {
        let guards = g(&["/w/.envrc"]);
        for p in ["/w/.envrc2", "/w/x/.envrc", "/w/src", "/elsewhere/.envrc"] {
            assert!(allowed(&guards, Path::new(p), Creates::NonDirectory), "{p}");
        }
    }

    #[test]
    fn names_of_the_caller_itself_mean_the_target() {
        let t = |p: &str| String::from_utf8(as_target(42, p.as_bytes())).unwrap();
        assert_eq!(t("/dev/stdout"), "/proc/42/fd/1");
        assert_eq!(t("/dev/stderr"), "/proc/42/fd/2");
        assert_eq!(t("/dev/fd/7"), "/proc/42/fd/7");
        assert_eq!(t("/proc/self/fd/3"), "/proc/42/fd/3");
        assert_eq!(t("/proc/thread-self/fd/3"), "/proc/42/task/42/fd/3");
        assert_eq!(t("/dev/stdoutx"), "/dev/stdoutx");
        assert_eq!(t("relative/dev/fd/1"), "relative/dev/fd/1");
    }

    #[test]
    fn init_s_own_proc_entry_is_refused() {
        let me = std::process::id();
        let place = |full: String| Place {
            dir: root_dir().unwrap(),
            name: CString::new("x").unwrap(),
            full: PathBuf::from(full),
        };
        assert!(refuse_init_itself(&place(format!("/proc/{me}/fd/5"))).is_err());
        assert!(refuse_init_itself(&place(format!("/proc/{me}"))).is_err());
        assert!(refuse_init_itself(&place(format!("/proc/{me}0/fd/5"))).is_ok());
        assert!(refuse_init_itself(&place("/work/file".into())).is_ok());
    }

    #[test]
    fn the_filter_has_consistent_jumps() {
        let p = filter();
        for (i, ins) in p.iter().enumerate() {
            if ins.code & 0x07 == libc::BPF_JMP as u16 {
                assert!(i + 1 + (ins.jt as usize) < p.len());
                assert!(i + 1 + (ins.jf as usize) < p.len());
            }
        }
        assert_eq!(
            p.last().unwrap().k,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
    }
}
