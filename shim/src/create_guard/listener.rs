//! Handing the guard's notification descriptor from the target (which installs the filter
//! before its exec) to init. sendmsg is one of the guard's own syscalls: the target's would wait
//! for an answer from a listener nobody holds yet. So a helper forked just before the filter,
//! sharing the target's descriptor table (and not the filter), sends it.

use std::io::IoSliceMut;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

/// In the forked target, before exec: install the guard and have the helper send its listener
/// to init over `sock`. Returns the errno on failure. Only syscalls (and nix's small cmsg
/// buffer in the helper; the shim is single-threaded, so allocating after fork is safe).
///
/// # Safety
/// Call only in the child of a fork of a single-threaded process.
pub unsafe fn install_in_child(prog: &[libc::sock_filter], sock: RawFd) -> Result<(), i32> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    let helper = Helper::start(sock)?;
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
        let errno = *libc::__errno_location();
        helper.wait();
        return Err(errno);
    }
    let fd = fd as RawFd;
    let mut msg = [if killable { b'k' } else { b'g' }, 0, 0, 0, 0];
    msg[1..].copy_from_slice(&fd.to_ne_bytes());
    let wrote = libc::write(helper.tell, msg.as_ptr().cast(), msg.len()) == msg.len() as isize;
    let errno = *libc::__errno_location();
    let sent = helper.wait();
    if !wrote || !sent {
        libc::close(fd);
        return Err(if wrote { libc::EIO } else { errno });
    }
    libc::close(fd);
    Ok(())
}

/// The helper: a fork of the target that shares its descriptor table (CLONE_FILES), waiting to
/// be told which descriptor to send.
struct Helper {
    pid: libc::pid_t,
    listen: RawFd,
    tell: RawFd,
}

impl Helper {
    /// # Safety
    /// As [`install_in_child`]: in a single-threaded child, before the guard's filter.
    unsafe fn start(sock: RawFd) -> Result<Helper, i32> {
        let mut p = [0 as RawFd; 2];
        if libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) < 0 {
            return Err(*libc::__errno_location());
        }
        // Like fork (no new stack: the child runs on a copy of this one), with the descriptor
        // table shared.
        let pid = libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_FILES | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        );
        if pid < 0 {
            let errno = *libc::__errno_location();
            libc::close(p[0]);
            libc::close(p[1]);
            return Err(errno);
        }
        if pid == 0 {
            let mut msg = [0u8; 5];
            // The table is shared: nothing is closed here; EOF comes when the target closes.
            if libc::read(p[0], msg.as_mut_ptr().cast(), msg.len()) != msg.len() as isize {
                libc::_exit(1);
            }
            let fds = [RawFd::from_ne_bytes([msg[1], msg[2], msg[3], msg[4]])];
            let cmsg = [ControlMessage::ScmRights(&fds)];
            let iov = [std::io::IoSlice::new(&msg[..1])];
            let ok = sendmsg::<()>(sock, &iov, &cmsg, MsgFlags::empty(), None).is_ok();
            libc::_exit(if ok { 0 } else { 1 });
        }
        // The table is shared: the read end stays open until the helper is done.
        Ok(Helper {
            pid: pid as libc::pid_t,
            listen: p[0],
            tell: p[1],
        })
    }

    /// Whether the helper sent the listener (it is reaped either way).
    unsafe fn wait(&self) -> bool {
        libc::close(self.tell);
        let mut status = 0;
        let mut reaped = true;
        while libc::waitpid(self.pid, &mut status, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                reaped = false;
                break;
            }
        }
        libc::close(self.listen);
        reaped && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
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
