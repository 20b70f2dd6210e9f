//! connect(2): performed by init on the target's own socket (taken with pidfd_getfd) with the
//! address init copied — for every socket, since the kernel, let through, would read the
//! descriptor and the address again, and another thread of the target could have pointed both
//! elsewhere meanwhile. A pathname unix address is judged first (see `host_sockets`) and then
//! reached through the inode that was judged. A blocking connect is made on a thread of its
//! own, so the guard keeps answering everyone else.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;

use super::super::answer::{answer, errno_of, Answer};
use super::super::host_sockets;
use super::super::resolve::{object, Object};
use super::super::target::Asker;
use super::super::Handler;
use super::socket::{pathname, socket_domain};

impl Handler {
    pub(super) fn connect(&self, who: Asker<'_>, fd: i32, addr: &[u8]) -> Result<Answer, Errno> {
        let sock = who.fd(fd)?;
        // A pathname is reached through the inode judged (kept open until the connect is made);
        // abstract names (scoped to the network namespace, and by Landlock where the kernel
        // can), unnamed ones and other families go as given.
        let judged = if socket_domain(&sock)? == libc::AF_UNIX {
            reach(who, addr)?
        } else {
            None
        };
        let addr = match &judged {
            Some(j) => proc_address(j)?,
            None => addr.to_vec(),
        };
        // A blocking connect can wait long (TCP to a slow host, a unix listener whose backlog
        // is full — perhaps one of the program's own, waiting for this very guard): on a thread.
        if blocking(&sock) {
            let (listener, id) = (self.fd(), self.current.get());
            std::thread::Builder::new()
                .name("guard-connect".into())
                .spawn(move || {
                    let _ = answer(listener, id, errno_of(connect_raw(&sock, &addr)));
                    drop(judged);
                })
                .map_err(|_| Errno::EAGAIN)?;
            return Ok(Answer::Deferred);
        }
        errno_of(connect_raw(&sock, &addr))
    }
}

/// For a unix socket's address `addr`: the socket a pathname names, resolved as the target
/// would, if the program may reach it (EACCES if not; ECONNREFUSED for a file that is no
/// socket, as the kernel says); `None` for an address that names no path.
pub(super) fn reach(who: Asker<'_>, addr: &[u8]) -> Result<Option<Object>, Errno> {
    let family = addr.get(..2).map(|f| u16::from_ne_bytes([f[0], f[1]]));
    if family != Some(libc::AF_UNIX as u16) {
        // The kernel refuses it (EINVAL), as the program sees.
        return Ok(None);
    }
    let Some(path) = pathname(addr) else {
        return Ok(None);
    };
    let path = std::ffi::CString::new(path).map_err(|_| Errno::EINVAL)?;
    let target = object(who, libc::AT_FDCWD, &path, true)?;
    if target.kind() != libc::S_IFSOCK {
        return Err(Errno::ECONNREFUSED);
    }
    if !host_sockets::may_connect(&target.stat) {
        return Err(Errno::EACCES);
    }
    Ok(Some(target))
}

/// The address of the socket `judged` through init's descriptor of it (`/proc/self/fd/N`): the
/// inode that was judged, whatever happens to its path meanwhile. Valid while `judged` is open.
pub(super) fn proc_address(judged: &Object) -> Result<Vec<u8>, Errno> {
    let path = judged.proc_path();
    let path = path.as_bytes();
    // SAFETY: sockaddr_un is plain data.
    let sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if path.len() >= sun.sun_path.len() {
        return Err(Errno::ENAMETOOLONG);
    }
    let mut out = (libc::AF_UNIX as libc::sa_family_t).to_ne_bytes().to_vec();
    out.extend_from_slice(path);
    out.push(0);
    Ok(out)
}

pub(super) fn blocking(sock: &OwnedFd) -> bool {
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
