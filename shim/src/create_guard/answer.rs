//! Answering a notification: a value, an errno, a descriptor put into the target
//! (SECCOMP_IOCTL_NOTIF_ADDFD), or "let the kernel run it".

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

/// While alive, thread `tid` (blocked in its notification) may run only on the CPU this thread
/// runs on; its own mask comes back on drop. Nothing is changed when that CPU is not in its
/// mask (a `taskset` of the user's is never overridden) or the mask cannot be read. Should
/// another thread of the target change this thread's mask in those few microseconds, the mask
/// read here wins (a scheduling hint lost, nothing more).
pub(super) struct Pin {
    tid: libc::pid_t,
    saved: libc::cpu_set_t,
}

impl Pin {
    pub(super) fn here(tid: libc::pid_t) -> Option<Pin> {
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
/// number (a plain answer, which wakes it with the sync hint). Init's own copy is closed before
/// the answer (see [`answer`]).
pub(super) fn answer_fd_pinned(
    listener: RawFd,
    id: u64,
    fd: OwnedFd,
    cloexec: bool,
    pin: Pin,
) -> Result<(), Errno> {
    let r = addfd(listener, id, &fd, cloexec, 0);
    drop(fd);
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
pub(super) fn answer(
    listener: RawFd,
    id: u64,
    outcome: Result<Answer, Errno>,
) -> Result<(), Errno> {
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
        // The file goes in first and the answer after, with init's own copy closed in between:
        // answered at once (ADDFD_FLAG_SEND), the program went on while init still held a
        // writable descriptor of the file, and a script it had just written and then ran failed
        // with "Text file busy" (an open for writing anywhere makes exec refuse the file).
        Ok(Answer::Fd(fd, cloexec)) => {
            let r = addfd(listener, id, &fd, cloexec, 0);
            drop(fd);
            match (r < 0).then(Errno::last) {
                None => send(i64::from(r), 0, 0),
                Some(Errno::ENOENT) => Ok(()),
                Some(e) => send(0, -(e as i32), 0),
            }
        }
        Err(e) => send(0, -(e as i32), 0),
    }
}

/// Whether notification `id` still waits for its answer (its thread was not killed, so its tid
/// is still that thread's).
pub(super) fn pending(listener: RawFd, id: u64) -> bool {
    // SAFETY: ioctl with a pointer to a u64.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _, &id) == 0 }
}

pub(super) enum Answer {
    Value(i64),
    /// Answered later, from another thread.
    Deferred,
    /// Let the kernel run the syscall as it is.
    Continue,
    Fd(OwnedFd, bool),
}

pub(super) fn errno_of(r: libc::c_int) -> Result<Answer, Errno> {
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(Answer::Value(0))
    }
}
