//! Decoding a notification: which syscall, and its arguments copied out of the target's
//! memory once (a second thread of the target could rewrite them after the copy). One module
//! per family: `paths` (the syscalls that name a file), `socket` (bind, connect), `send`
//! (sendto naming an address, sendmsg, sendmmsg).

mod paths;
pub(super) mod send;
mod socket;

use std::ffi::CString;

use nix::errno::Errno;

use super::target::Memory;

/// One decoded request.
#[derive(Debug)]
pub(super) enum Request {
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
    Truncate {
        path: CString,
        length: i64,
    },
    Bind {
        fd: i32,
        /// The socket address, as the target passed it (at most `sockaddr_storage`).
        addr: Vec<u8>,
    },
    Connect {
        fd: i32,
        addr: Vec<u8>,
    },
    /// sendto, sendmsg (one message) or sendmmsg (`many`: where its vector lies, for the
    /// lengths sent).
    Send {
        fd: i32,
        flags: i32,
        many: Option<u64>,
        msgs: Vec<Message>,
    },
}

/// One message to send, copied: its address (empty: none), its data (the iovecs gathered) and
/// its control messages.
#[derive(Debug)]
pub(super) struct Message {
    pub(super) name: Vec<u8>,
    pub(super) data: Vec<u8>,
    pub(super) control: Vec<u8>,
}

/// Decode notification `n`, reading its arguments from `mem`.
pub(super) fn decode(n: &libc::seccomp_notif, mem: &Memory) -> Result<Request, Errno> {
    let nr = n.data.nr as libc::c_long;
    match nr {
        libc::SYS_bind | libc::SYS_connect => socket::decode(nr, &n.data.args, mem),
        libc::SYS_sendto | libc::SYS_sendmsg | libc::SYS_sendmmsg => {
            send::decode(nr, &n.data.args, mem)
        }
        _ => paths::decode(nr, &n.data.args, mem),
    }
}

/// Copy a NUL-terminated string out of the target's memory (at most PATH_MAX bytes).
fn read_string(mem: &Memory, addr: u64) -> Result<CString, Errno> {
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let mut out = Vec::new();
    let mut chunk = [0u8; 512];
    while out.len() < libc::PATH_MAX as usize {
        let n = mem.read_at(&mut chunk, addr + out.len() as u64)?;
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

/// Copy `len` bytes out of the target's memory.
fn read_bytes(mem: &Memory, addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
    let mut out = vec![0u8; len];
    if len == 0 {
        return Ok(out);
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    mem.read_exact_at(&mut out, addr)?;
    Ok(out)
}
