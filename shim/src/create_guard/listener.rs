//! Handing the guard's notification descriptor from the target (which installs the filter
//! before its exec) to init. sendmsg is one of the guard's own syscalls: the target's would wait
//! for an answer from a listener nobody holds yet. So a helper cloned just before the filter,
//! sharing the target's descriptor table (and not the filter), sends it.

use std::io::IoSliceMut;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

use crate::spawn::{raw, Stack};

/// In the target before its exec: install the guard and have the helper send its listener to
/// init over `sock`. Returns the errno on failure. The target shares init's memory (see
/// `crate::spawn`), and so does the helper, on `helper_stack`: raw syscalls only.
///
/// # Safety
/// Call only in the child of `crate::spawn::spawn`, with a stack no one else uses.
pub unsafe fn install_in_child(
    prog: &[libc::sock_filter],
    sock: RawFd,
    helper_stack: &Stack,
) -> Result<(), i32> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    let mut ends = [0 as RawFd; 2];
    if libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) < 0 {
        return Err(raw::errno());
    }
    let helper = Helper::start(ends, sock, helper_stack)?;
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
    if fd < 0 && raw::errno() == libc::EINVAL {
        killable = false;
        fd = install(libc::SECCOMP_FILTER_FLAG_NEW_LISTENER);
    }
    if fd < 0 {
        let errno = raw::errno();
        helper.wait();
        return Err(errno);
    }
    let fd = fd as RawFd;
    let mut msg = [if killable { b'k' } else { b'g' }, 0, 0, 0, 0];
    msg[1..].copy_from_slice(&fd.to_ne_bytes());
    let wrote = raw::write(helper.tell, msg.as_ptr(), msg.len()) == msg.len() as isize;
    let errno = raw::errno();
    let sent = helper.wait();
    if !wrote || !sent {
        raw::close(fd);
        return Err(if wrote { libc::EIO } else { errno });
    }
    raw::close(fd);
    Ok(())
}

/// The helper: a clone of the target sharing its memory and descriptor table, waiting on
/// `listen` to be told which descriptor to send.
struct Helper {
    listen: RawFd,
    tell: RawFd,
    pid: libc::pid_t,
}

impl Helper {
    /// Clone the helper; it will send on `sock`. `ends`: the pipe it is told on.
    ///
    /// # Safety
    /// As [`install_in_child`]: before the guard's filter.
    unsafe fn start(ends: [RawFd; 2], sock: RawFd, stack: &Stack) -> Result<Helper, i32> {
        extern "C" fn main(arg: *mut libc::c_void) -> libc::c_int {
            let arg = arg as usize;
            let (listen, sock) = ((arg & 0xffff_ffff) as RawFd, (arg >> 32) as RawFd);
            // SAFETY: raw syscalls on this stack's buffers.
            unsafe { send(listen, sock) }
        }
        // The two descriptors travel in the argument itself: nothing of this frame is read
        // once it is gone.
        let arg = (ends[0] as u32 as usize) | ((sock as u32 as usize) << 32);
        let pid = libc::clone(
            main,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_FILES | libc::SIGCHLD,
            arg as *mut libc::c_void,
        );
        if pid < 0 {
            let errno = raw::errno();
            raw::close(ends[0]);
            raw::close(ends[1]);
            return Err(errno);
        }
        Ok(Helper {
            listen: ends[0],
            tell: ends[1],
            pid,
        })
    }

    /// Whether the helper sent the listener (it is reaped either way).
    unsafe fn wait(&self) -> bool {
        raw::close(self.tell);
        let mut status = 0;
        let mut reaped = true;
        while raw::wait(self.pid, &mut status) < 0 {
            if raw::errno() != libc::EINTR {
                reaped = false;
                break;
            }
        }
        raw::close(self.listen);
        reaped && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

/// In the helper: read which descriptor to send, send it on `sock`. The exit status says
/// whether it went.
///
/// # Safety
/// Raw syscalls on this stack's buffers only.
unsafe fn send(listen: RawFd, sock: RawFd) -> libc::c_int {
    let mut msg = [0u8; 5];
    // The table is shared: nothing is closed here; EOF comes when the target closes.
    if raw::read(listen, msg.as_mut_ptr(), msg.len()) != msg.len() as isize {
        return 1;
    }
    let fd = RawFd::from_ne_bytes([msg[1], msg[2], msg[3], msg[4]]);
    // One SCM_RIGHTS message of one descriptor, built on this stack.
    let mut space = [0u64; 4];
    let cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
    let mut iov = libc::iovec {
        iov_base: msg.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut hdr: libc::msghdr = std::mem::zeroed();
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = space.as_mut_ptr().cast();
    hdr.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
    let c = libc::CMSG_FIRSTHDR(&hdr);
    (*c).cmsg_level = libc::SOL_SOCKET;
    (*c).cmsg_type = libc::SCM_RIGHTS;
    (*c).cmsg_len = cmsg_len;
    std::ptr::copy_nonoverlapping(
        fd.to_ne_bytes().as_ptr(),
        libc::CMSG_DATA(c),
        std::mem::size_of::<RawFd>(),
    );
    let sent = libc::syscall(
        libc::SYS_sendmsg,
        sock,
        &hdr as *const libc::msghdr,
        libc::MSG_NOSIGNAL,
    );
    if sent == 1 {
        0
    } else {
        1
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
