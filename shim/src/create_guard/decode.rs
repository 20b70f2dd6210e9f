//! Decoding a notification: which syscall, and its arguments copied out of the target's
//! memory once (a second thread of the target could rewrite them after the copy).

use std::ffi::CString;
use std::fs::File;
use std::os::unix::fs::FileExt;

use nix::errno::Errno;

use super::AT_FDCWD;

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
}

pub(super) fn read_umask(pid: libc::pid_t) -> Option<libc::mode_t> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Umask:"))?;
    libc::mode_t::from_str_radix(line.split_whitespace().nth(1)?, 8).ok()
}

/// Copy a NUL-terminated string out of the target's memory (at most PATH_MAX bytes).
fn read_string(mem: &File, addr: u64) -> Result<CString, Errno> {
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let mut out = Vec::new();
    let mut chunk = [0u8; 512];
    while out.len() < libc::PATH_MAX as usize {
        let n = mem
            .read_at(&mut chunk, addr + out.len() as u64)
            .map_err(|_| Errno::EFAULT)?;
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

pub(super) fn decode(n: &libc::seccomp_notif, mem: &File) -> Result<Request, Errno> {
    let a = n.data.args;
    let s = |i: usize| read_string(mem, a[i]);
    let fd = |i: usize| a[i] as u32 as i32;
    let nr = n.data.nr as libc::c_long;
    Ok(match nr {
        libc::SYS_open => Request::Open {
            dirfd: AT_FDCWD,
            path: s(0)?,
            flags: a[1] as i32,
            mode: a[2] as u32,
        },
        libc::SYS_creat => Request::Open {
            dirfd: AT_FDCWD,
            path: s(0)?,
            flags: libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            mode: a[1] as u32,
        },
        libc::SYS_openat => Request::Open {
            dirfd: fd(0),
            path: s(1)?,
            flags: a[2] as i32,
            mode: a[3] as u32,
        },
        libc::SYS_mkdir => Request::Mkdir {
            dirfd: AT_FDCWD,
            path: s(0)?,
            mode: a[1] as u32,
        },
        libc::SYS_mkdirat => Request::Mkdir {
            dirfd: fd(0),
            path: s(1)?,
            mode: a[2] as u32,
        },
        libc::SYS_mknod => Request::Mknod {
            dirfd: AT_FDCWD,
            path: s(0)?,
            mode: a[1] as u32,
            dev: a[2],
        },
        libc::SYS_mknodat => Request::Mknod {
            dirfd: fd(0),
            path: s(1)?,
            mode: a[2] as u32,
            dev: a[3],
        },
        libc::SYS_symlink => Request::Symlink {
            target: s(0)?,
            dirfd: AT_FDCWD,
            path: s(1)?,
        },
        libc::SYS_symlinkat => Request::Symlink {
            target: s(0)?,
            dirfd: fd(1),
            path: s(2)?,
        },
        libc::SYS_link => Request::Link {
            olddirfd: AT_FDCWD,
            old: s(0)?,
            newdirfd: AT_FDCWD,
            new: s(1)?,
            flags: 0,
        },
        libc::SYS_linkat => Request::Link {
            olddirfd: fd(0),
            old: s(1)?,
            newdirfd: fd(2),
            new: s(3)?,
            flags: a[4] as i32,
        },
        libc::SYS_rename => Request::Rename {
            olddirfd: AT_FDCWD,
            old: s(0)?,
            newdirfd: AT_FDCWD,
            new: s(1)?,
            flags: 0,
        },
        libc::SYS_renameat => Request::Rename {
            olddirfd: fd(0),
            old: s(1)?,
            newdirfd: fd(2),
            new: s(3)?,
            flags: 0,
        },
        libc::SYS_renameat2 => Request::Rename {
            olddirfd: fd(0),
            old: s(1)?,
            newdirfd: fd(2),
            new: s(3)?,
            flags: a[4] as u32,
        },
        _ => return Err(Errno::ENOSYS),
    })
}
