//! The syscalls that name a file: where the path is, and what else they say.

use nix::errno::Errno;

use super::{read_string, Request};
use crate::create_guard::target::Memory;
use crate::create_guard::AT_FDCWD;

pub(super) fn decode(nr: libc::c_long, a: &[u64; 6], mem: &Memory) -> Result<Request, Errno> {
    let s = |i: usize| read_string(mem, a[i]);
    let fd = |i: usize| a[i] as u32 as i32;
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
        libc::SYS_truncate => Request::Truncate {
            path: s(0)?,
            length: a[1] as i64,
        },
        _ => return Err(Errno::ENOSYS),
    })
}
