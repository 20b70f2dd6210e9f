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
use super::super::target::{thread_group, Asker};
use super::super::Handler;
use super::socket::{pathname, socket_domain, socket_type};

impl Handler {
    pub(super) fn connect(&self, who: Asker<'_>, fd: i32, addr: &[u8]) -> Result<Answer, Errno> {
        let sock = who.fd(fd)?;
        self.check_nested_tcp(who, &sock, addr)?;
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
        // A connection to init's own socket says whom it was made for (see `nested::STAMP`),
        // with a pidfd opened now, while that process waits for this answer.
        let stamp = match judged.as_ref() {
            Some(j) if host_sockets::is_inits_own(&j.stat) => {
                let tgid = thread_group(who.tid).unwrap_or(who.tid);
                Some((tgid, pidfd_of(tgid)?))
            }
            _ => None,
        };
        // A blocking connect can wait long (TCP to a slow host, a unix listener whose backlog
        // is full — perhaps one of the program's own, waiting for this very guard): on a thread.
        if blocking(&sock) {
            let (listener, id) = (self.fd(), self.current.get());
            std::thread::Builder::new()
                .name("guard-connect".into())
                .spawn(move || {
                    let _ = answer(listener, id, connect_stamped(&sock, &addr, stamp));
                    drop(judged);
                })
                .map_err(|_| Errno::EAGAIN)?;
            return Ok(Answer::Deferred);
        }
        connect_stamped(&sock, &addr, stamp)
    }
}

/// Connect, and send `stamp` first on the new connection (before the program, still waiting
/// for this answer, can send anything of its own on it).
fn connect_stamped(
    sock: &OwnedFd,
    addr: &[u8],
    stamp: Option<(libc::pid_t, OwnedFd)>,
) -> Result<Answer, Errno> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let r = errno_of(connect_raw(sock, addr))?;
    if let Some((tgid, pidfd)) = stamp {
        let mut m = [0u8; 8];
        m[..4].copy_from_slice(&super::super::nested::STAMP);
        m[4..].copy_from_slice(&tgid.to_ne_bytes());
        let fds = [pidfd.as_raw_fd()];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        let iov = [std::io::IoSlice::new(&m)];
        sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None)
            .map_err(|_| Errno::ECONNREFUSED)?;
    }
    Ok(r)
}

fn pidfd_of(pid: libc::pid_t) -> Result<OwnedFd, Errno> {
    // SAFETY: pidfd_open takes integer arguments only.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a descriptor just opened.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
}

impl Handler {
    /// The TCP rules of the nested sandboxes the asking task is in (see `nested`): init makes
    /// the connect in its own Landlock domain, where their layers do not apply, so each must
    /// allow the port here (EACCES, as their layer would answer).
    fn check_nested_tcp(&self, who: Asker<'_>, sock: &OwnedFd, addr: &[u8]) -> Result<(), Errno> {
        let nested = self.nested.borrow();
        if nested.is_empty() {
            return Ok(());
        }
        let family = addr
            .get(..2)
            .map(|f| u16::from_ne_bytes([f[0], f[1]]) as i32);
        let inet = matches!(family, Some(libc::AF_INET | libc::AF_INET6));
        let tcp = socket_type(sock)? == libc::SOCK_STREAM
            && matches!(socket_domain(sock)?, libc::AF_INET | libc::AF_INET6);
        if !(inet && tcp) {
            return Ok(());
        }
        let Some(port) = addr.get(2..4).map(|p| u16::from_be_bytes([p[0], p[1]])) else {
            return Ok(());
        };
        let tgid = thread_group(who.tid).unwrap_or(who.tid);
        if nested.iter().all(|e| e.allows_tcp_port(tgid, port)) {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
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
