//! Handing the guard's notification descriptor from the target (which installs the filter
//! before its exec) to init.

use std::io::IoSliceMut;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

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
