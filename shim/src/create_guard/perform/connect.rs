//! connect(2): performed by init on the target's own socket (taken with pidfd_getfd) with the
//! address init copied — for every socket, since the kernel, let through, would read the
//! descriptor and the address again, and another thread of the target could have pointed both
//! elsewhere meanwhile. A pathname unix address is judged first (see `host_sockets`) and then
//! reached through the inode that was judged. A blocking connect of another kind (TCP to a slow
//! host) is made on a thread of its own, so the guard keeps answering everyone else.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;

use super::super::answer::{answer, errno_of, Answer};
use super::super::host_sockets;
use super::super::resolve::object;
use super::super::target::Asker;
use super::super::Handler;
use super::socket::{pathname, socket_domain};

impl Handler {
    pub(super) fn connect(&self, who: Asker<'_>, fd: i32, addr: &[u8]) -> Result<Answer, Errno> {
        let sock = who.fd(fd)?;
        if socket_domain(&sock)? == libc::AF_UNIX {
            if let Some(path) = pathname(addr) {
                let path = std::ffi::CString::new(path).map_err(|_| Errno::EINVAL)?;
                let target = object(who, libc::AT_FDCWD, &path, true)?;
                if target.kind() != libc::S_IFSOCK {
                    return Err(Errno::ECONNREFUSED);
                }
                if !host_sockets::may_connect(&target.stat) {
                    return Err(Errno::EACCES);
                }
                return errno_of(connect_path(&sock, target.proc_path().as_bytes()));
            }
            // Abstract (scoped to the sandbox by Landlock where the kernel can) or unnamed.
            return errno_of(connect_raw(&sock, addr));
        }
        if blocking(&sock) {
            let (listener, id, addr) = (self.fd(), self.current.get(), addr.to_vec());
            std::thread::Builder::new()
                .name("guard-connect".into())
                .spawn(move || {
                    let _ = answer(listener, id, errno_of(connect_raw(&sock, &addr)));
                })
                .map_err(|_| Errno::EAGAIN)?;
            return Ok(Answer::Deferred);
        }
        errno_of(connect_raw(&sock, addr))
    }
}

fn blocking(sock: &OwnedFd) -> bool {
    // SAFETY: fcntl F_GETFL on a valid descriptor.
    let flags = unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK == 0
}

fn connect_raw(sock: &OwnedFd, addr: &[u8]) -> libc::c_int {
    // SAFETY: a valid socket and the address bytes with their length.
    unsafe {
        libc::connect(
            sock.as_raw_fd(),
            addr.as_ptr().cast(),
            addr.len() as libc::socklen_t,
        )
    }
}

/// Connect a unix socket to the pathname `path` (short: a `/proc/self/fd/N` link).
fn connect_path(sock: &OwnedFd, path: &[u8]) -> libc::c_int {
    // SAFETY: sockaddr_un is plain data.
    let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if path.len() >= sun.sun_path.len() {
        // SAFETY: setting errno for the caller.
        unsafe { *libc::__errno_location() = libc::ENAMETOOLONG };
        return -1;
    }
    for (d, s) in sun.sun_path.iter_mut().zip(path) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + path.len() + 1;
    // SAFETY: a valid socket and a sockaddr_un of `len` bytes.
    unsafe {
        libc::connect(
            sock.as_raw_fd(),
            (&sun as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    }
}
