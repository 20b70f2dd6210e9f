//! bind(2). A pathname unix socket is a new name, judged like any creation; every bind is
//! performed by init on the target's own socket (taken with pidfd_getfd), with the address
//! init copied — never let through after a look at memory the target can rewrite, nor on a
//! descriptor number the target can point at another socket meanwhile.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;

use super::super::answer::Answer;
use super::super::resolve::place;
use super::super::target::Asker;
use super::super::Handler;

/// `offsetof(struct sockaddr_un, sun_path)`.
const SUN_PATH: usize = 2;

impl Handler {
    pub(super) fn bind(&self, who: Asker<'_>, fd: i32, addr: &[u8]) -> Result<Answer, Errno> {
        let sock = who.fd(fd)?;
        let domain = socket_domain(&sock)?;
        // Where a pathname socket goes: noted as the sandbox's own once bound (`host_sockets`).
        let mut placed = None;
        if domain == libc::AF_UNIX {
            if let Some(path) = pathname(addr) {
                let path = std::ffi::CString::new(path).map_err(|_| Errno::EINVAL)?;
                let place = place(who, libc::AT_FDCWD, &path)?;
                self.check_create(&place)?;
                placed = Some(place);
                // The kernel resolves the address again, in init: from the same root, and for a
                // relative one from the target's working directory (the guard's thread has a
                // working directory of its own). Nothing can have been created or renamed in
                // between: every creation waits for this thread. The socket keeps the address
                // exactly as the target gave it (getsockname, peers' views).
                if path.as_bytes().first() != Some(&b'/') {
                    let cwd = who.cwd()?;
                    // SAFETY: a valid descriptor.
                    if unsafe { libc::fchdir(cwd.as_raw_fd()) } < 0 {
                        return Err(Errno::last());
                    }
                }
            }
        }
        // SAFETY: a valid socket and the address bytes with their length.
        let r = unsafe {
            libc::bind(
                sock.as_raw_fd(),
                addr.as_ptr().cast(),
                addr.len() as libc::socklen_t,
            )
        };
        let errno = Errno::last();
        // Back to `/`, where init's threads keep their working directory.
        // SAFETY: a NUL-terminated path.
        unsafe { libc::chdir(c"/".as_ptr()) };
        if r < 0 {
            Err(errno)
        } else {
            if let Some(p) = &placed {
                super::super::host_sockets::bound(&p.dir, &p.name);
            }
            Ok(Answer::Value(0))
        }
    }
}

pub(super) fn socket_domain(sock: &OwnedFd) -> Result<i32, Errno> {
    socket_option(sock, libc::SO_DOMAIN)
}

/// SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET...
pub(super) fn socket_type(sock: &OwnedFd) -> Result<i32, Errno> {
    socket_option(sock, libc::SO_TYPE)
}

fn socket_option(sock: &OwnedFd, name: i32) -> Result<i32, Errno> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid descriptor and an int-sized buffer with its length.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(value)
}

/// The path of a pathname unix socket address; `None` for an abstract one (a leading NUL) or
/// an unnamed one (no path: autobind).
pub(super) fn pathname(addr: &[u8]) -> Option<&[u8]> {
    let path = addr.get(SUN_PATH..)?;
    if path.first().is_none_or(|&b| b == 0) {
        return None;
    }
    // sun_path need not be NUL-terminated; the kernel stops at the first NUL.
    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
    Some(&path[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(path: &[u8]) -> Vec<u8> {
        let mut a = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(path);
        a
    }

    #[test]
    fn a_pathname_address_is_told_from_abstract_and_unnamed_ones() {
        assert_eq!(pathname(&addr(b"/w/.envrc\0")), Some(&b"/w/.envrc"[..]));
        assert_eq!(pathname(&addr(b"rel.sock")), Some(&b"rel.sock"[..]));
        assert_eq!(pathname(&addr(b"x\0garbage")), Some(&b"x"[..]));
        assert_eq!(pathname(&addr(b"\0abstract")), None);
        assert_eq!(pathname(&addr(b"")), None);
        assert_eq!(pathname(&[1]), None);
    }
}
