//! The process that asked: its memory (to copy arguments out), its umask, and its own
//! descriptors and working directory (where its relative paths start).
//!
//! Init reaches them with its own rights — same uid, same Landlock domain — through calls
//! that check ptrace access and nothing else: process_vm_readv for memory, pidfd_getfd for a
//! descriptor, the `/proc/TID/cwd` link for the working directory. A process that made itself
//! non-dumpable (sftp-server, ssh-agent, gpg-agent) refuses those to anyone without
//! CAP_SYS_PTRACE (and its /proc files belong to a root this namespace does not map, so
//! `/proc/TID/mem` and `/proc/TID/fd/` stay closed even then). So init's guard thread keeps that
//! capability in its permitted set and raises it only here, around exactly these calls on
//! exactly the thread that asked (whose notification is checked to be still pending afterwards,
//! so the tid was not reused) — never while resolving a path the target chose, which would make
//! init a deputy that opens other processes' descriptors for it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

/// What init remembers of each thread that asked: a pidfd (which tells when the thread is
/// gone, and takes its descriptors) and its thread group.
#[derive(Default)]
pub(super) struct Targets {
    threads: RefCell<HashMap<libc::pid_t, Thread>>,
    /// By thread group: threads share their umask.
    umasks: RefCell<HashMap<libc::pid_t, libc::mode_t>>,
}

struct Thread {
    pidfd: OwnedFd,
    tgid: libc::pid_t,
}

/// The memory of one thread of the target.
#[derive(Clone, Copy)]
pub(super) struct Memory {
    tid: libc::pid_t,
}

impl Memory {
    /// Read up to `buf.len()` bytes at `addr`; fewer where the mapping ends.
    pub(super) fn read_at(&self, buf: &mut [u8], addr: u64) -> Result<usize, Errno> {
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: buf.len(),
        };
        with_ptrace(|| {
            // SAFETY: one local iovec over `buf` (valid for its length) and one remote iovec,
            // which the kernel checks against the target's mappings.
            let n = unsafe { libc::process_vm_readv(self.tid, &local, 1, &remote, 1, 0) };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        })
        .map_err(|_| Errno::EFAULT)
    }

    /// Write `value` at `addr` (what a syscall gives back in memory: sendmmsg's lengths).
    pub(super) fn write_u32(&self, addr: u64, value: u32) -> Result<(), Errno> {
        let bytes = value.to_ne_bytes();
        let local = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        with_ptrace(|| {
            // SAFETY: one local iovec over `bytes` (read only by the kernel) and one remote
            // iovec, which the kernel checks against the target's mappings.
            let n = unsafe { libc::process_vm_writev(self.tid, &local, 1, &remote, 1, 0) };
            if n == bytes.len() as isize {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        })
        .map_err(|_| Errno::EFAULT)
    }

    pub(super) fn read_exact_at(&self, buf: &mut [u8], addr: u64) -> Result<(), Errno> {
        let mut done = 0;
        while done < buf.len() {
            match self.read_at(&mut buf[done..], addr + done as u64)? {
                0 => return Err(Errno::EFAULT),
                n => done += n,
            }
        }
        Ok(())
    }
}

impl Targets {
    /// Make sure `tid` is known (a pidfd, its thread group and umask), and give its memory.
    pub(super) fn memory(&self, tid: libc::pid_t) -> Result<Memory, Errno> {
        let known = self
            .threads
            .borrow()
            .get(&tid)
            .is_some_and(|t| alive(&t.pidfd));
        if !known {
            // First sight of this thread, or its tid was reused.
            let pidfd = pidfd_open(tid)?;
            let (tgid, umask) = read_status(tid).ok_or(Errno::ESRCH)?;
            self.umasks.borrow_mut().insert(tgid, umask);
            self.threads
                .borrow_mut()
                .insert(tid, Thread { pidfd, tgid });
        }
        Ok(Memory { tid })
    }

    /// Forget `tid` (it is no longer the thread that asked).
    pub(super) fn forget(&self, tid: libc::pid_t) {
        self.threads.borrow_mut().remove(&tid);
    }

    /// `tid` called umask(mask) (the kernel runs it; init only takes note).
    pub(super) fn set_umask(&self, tid: libc::pid_t, mask: libc::mode_t) {
        if let Some(t) = self.threads.borrow().get(&tid) {
            self.umasks.borrow_mut().insert(t.tgid, mask & 0o777);
        }
    }

    pub(super) fn umask(&self, tid: libc::pid_t) -> libc::mode_t {
        let tgid = self.threads.borrow().get(&tid).map(|t| t.tgid);
        tgid.and_then(|g| self.umasks.borrow().get(&g).copied())
            .unwrap_or(0o022)
    }

    /// A duplicate of the target's descriptor `fd` (pidfd_getfd): for a socket to bind, or a
    /// directory or file the target names by descriptor.
    fn take_fd(&self, tid: libc::pid_t, fd: i32) -> Result<OwnedFd, Errno> {
        if fd < 0 {
            return Err(Errno::EBADF);
        }
        let threads = self.threads.borrow();
        let owned;
        let pidfd = match threads.get(&tid) {
            Some(t) => &t.pidfd,
            None => {
                owned = pidfd_open(tid)?;
                &owned
            }
        };
        with_ptrace(|| {
            // SAFETY: pidfd_getfd takes integer arguments only.
            let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
            if r < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                // SAFETY: a descriptor just received.
                Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
            }
        })
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
    }
}

/// Whether the thread behind `pidfd` still runs (a pidfd polls readable once it has exited).
fn alive(pidfd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    unsafe { libc::poll(&mut p, 1, 0) == 0 }
}

fn pidfd_open(tid: libc::pid_t) -> Result<OwnedFd, Errno> {
    // The thread's own descriptor table (threads may have their own); PIDFD_THREAD is
    // Linux >= 6.9, before that the thread group leader's.
    const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
    let open = |flags: libc::c_uint| {
        // SAFETY: pidfd_open takes integer arguments only.
        unsafe { libc::syscall(libc::SYS_pidfd_open, tid, flags) }
    };
    let mut fd = open(PIDFD_THREAD);
    if fd < 0 && Errno::last() == Errno::EINVAL {
        fd = open(0);
    }
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a descriptor just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Run `f`; if the kernel refused it for want of ptrace access, once more with CAP_SYS_PTRACE
/// effective, which is dropped again before this returns. Without the capability in the
/// permitted set, the first answer stands.
fn with_ptrace<T>(f: impl Fn() -> std::io::Result<T>) -> std::io::Result<T> {
    match f() {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
            use caps::{CapSet, Capability};
            if caps::raise(None, CapSet::Effective, Capability::CAP_SYS_PTRACE).is_err() {
                return Err(e);
            }
            let r = f();
            // Dropping an effective capability the thread holds cannot fail; should it, no
            // further operation may run with it: stop here (the sandbox ends, closed).
            if caps::drop(None, CapSet::Effective, Capability::CAP_SYS_PTRACE).is_err() {
                std::process::abort();
            }
            r
        }
        other => other,
    }
}

/// The thread that asked, with what init knows of it.
#[derive(Clone, Copy)]
pub(super) struct Asker<'a> {
    pub(super) tid: libc::pid_t,
    targets: &'a Targets,
}

impl Targets {
    pub(super) fn asker(&self, tid: libc::pid_t) -> Asker<'_> {
        Asker { tid, targets: self }
    }
}

impl Asker<'_> {
    /// Its working directory.
    pub(super) fn cwd(&self) -> Result<OwnedFd, Errno> {
        open_cwd(self.tid)
    }

    /// Its descriptor `fd`.
    pub(super) fn fd(&self, fd: i32) -> Result<OwnedFd, Errno> {
        self.targets.take_fd(self.tid, fd)
    }

    /// Its memory (known since its arguments were copied from it).
    pub(super) fn memory(&self) -> Memory {
        Memory { tid: self.tid }
    }
}

/// An O_PATH descriptor of the target's working directory (`/proc/TID/cwd`, a magic link whose
/// following checks ptrace access only).
fn open_cwd(tid: libc::pid_t) -> Result<OwnedFd, Errno> {
    let path = CString::new(format!("/proc/{tid}/cwd")).map_err(|_| Errno::EINVAL)?;
    with_ptrace(|| {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            // SAFETY: a descriptor just opened.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
    })
    .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// The thread group and umask of `tid`, from /proc/TID/status (readable for any process).
fn read_status(tid: libc::pid_t) -> Option<(libc::pid_t, libc::mode_t)> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let tgid = field("Tgid:")?.parse().ok()?;
    let umask = libc::mode_t::from_str_radix(field("Umask:")?, 8).ok()?;
    Some((tgid, umask))
}

/// The thread group `tid` belongs to, if it is alive.
pub(super) fn thread_group(tid: libc::pid_t) -> Option<libc::pid_t> {
    read_status(tid).map(|(g, _)| g)
}

/// The controlling terminal of `tid` (`tty_nr` of /proc/TID/stat), 0 for none.
pub(super) fn controlling_tty(tid: libc::pid_t) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // state ppid pgrp session tty_nr
    rest.split_whitespace()
        .nth(4)?
        .parse::<i64>()
        .ok()
        .map(|n| n as u64)
}

/// Where the magic link `/proc/TID/LINK` (`exe`, `cwd`, `fd/N`) points, for reports.
pub(super) fn read_link(tid: libc::pid_t, link: &str) -> Option<std::path::PathBuf> {
    with_ptrace(|| std::fs::read_link(format!("/proc/{tid}/{link}"))).ok()
}
