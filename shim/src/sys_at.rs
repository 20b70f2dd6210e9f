//! Descriptor-relative syscalls for the mounts placed by name (`--bind`, `--overlay`,
//! `--tmpfs`): a path is opened once, without following symlinks, and every later step acts on
//! the descriptor, so nothing can swap a component for a symlink in between.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;

use crate::sys::{SysError, SysResult};

fn cname(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

fn fail(call: String) -> SysError {
    SysError {
        call,
        errno: Errno::last(),
    }
}

/// `struct open_how` of openat2(2).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

/// Open `rel` (relative) below `dir` as an O_PATH descriptor, following no symlink on the way
/// and never leaving `dir` (`..` above it and absolute paths are refused). A final symlink is
/// opened itself (O_NOFOLLOW): the caller looks at what it got.
pub fn open_beneath(dir: BorrowedFd<'_>, rel: &Path) -> SysResult<OwnedFd> {
    let p = cname(rel);
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH,
    };
    // SAFETY: a valid descriptor, a NUL-terminated path and an initialised open_how of the
    // size given.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            p.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if ret < 0 {
        return Err(fail(format!(
            "openat2({rel:?}, RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH)"
        )));
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as libc::c_int) })
}

/// An O_PATH descriptor of the directory `path` (followed: only for the shim's own fixed
/// paths, `/newroot` and `/oldroot`).
pub fn open_dir(path: &Path) -> SysResult<OwnedFd> {
    let p = cname(path);
    // SAFETY: a valid path string.
    let fd = unsafe {
        libc::open(
            p.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(fail(format!("open({path:?}, O_PATH|O_DIRECTORY)")));
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn fstat(fd: BorrowedFd<'_>) -> SysResult<libc::stat> {
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor, an empty path with AT_EMPTY_PATH, a valid out pointer.
    let ret = unsafe {
        libc::fstatat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            &mut st,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if ret < 0 {
        return Err(fail("fstatat(fd, \"\", AT_EMPTY_PATH)".into()));
    }
    Ok(st)
}

/// The filesystem magic number of what `fd` is on (`TMPFS_MAGIC`, ...).
pub fn fs_type(fd: BorrowedFd<'_>) -> SysResult<i64> {
    // SAFETY: an all-zero statfs is a valid value to be overwritten.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor (O_PATH ones serve fstatfs since Linux 3.12) and out pointer.
    let ret = unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) };
    if ret < 0 {
        return Err(fail("fstatfs(fd)".into()));
    }
    Ok(st.f_type as i64)
}

/// The mount flags (`ST_RDONLY`, ...) of what `fd` is on.
pub fn fs_flags(fd: BorrowedFd<'_>) -> SysResult<u64> {
    // SAFETY: an all-zero statvfs is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor (O_PATH ones serve fstatfs, which this wraps) and out pointer.
    let ret = unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut st) };
    if ret < 0 {
        return Err(fail("fstatvfs(fd)".into()));
    }
    Ok(st.f_flag as u64)
}

/// Create the directory (or empty file) `name` in `dir`.
pub fn make_at(dir: BorrowedFd<'_>, name: &Path, is_dir: bool) -> SysResult<()> {
    let n = cname(name);
    let ret = if is_dir {
        // SAFETY: a valid descriptor and name.
        unsafe { libc::mkdirat(dir.as_raw_fd(), n.as_ptr(), 0o755) }
    } else {
        // SAFETY: a valid descriptor and name; S_IFREG makes an empty regular file.
        unsafe { libc::mknodat(dir.as_raw_fd(), n.as_ptr(), libc::S_IFREG | 0o644, 0) }
    };
    if ret < 0 {
        return Err(fail(format!(
            "{}({name:?})",
            if is_dir { "mkdirat" } else { "mknodat" }
        )));
    }
    Ok(())
}

/// A detached recursive copy of the mount tree at the object `fd` refers to.
pub fn clone_tree(fd: BorrowedFd<'_>) -> SysResult<OwnedFd> {
    // SAFETY: an empty path with AT_EMPTY_PATH names the descriptor.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd.as_raw_fd(),
            c"".as_ptr(),
            (libc::OPEN_TREE_CLONE
                | libc::OPEN_TREE_CLOEXEC
                | libc::AT_RECURSIVE as u32
                | libc::AT_EMPTY_PATH as u32) as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(fail("open_tree(fd, OPEN_TREE_CLONE|AT_RECURSIVE)".into()));
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as libc::c_int) })
}

/// Put the mount `from` (a detached tree, or the root of a mount) on the object `to`.
pub fn move_onto(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> SysResult<()> {
    // SAFETY: empty paths with the EMPTY_PATH flags name the two descriptors.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            to.as_raw_fd(),
            c"".as_ptr(),
            (libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH) as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(fail("move_mount(fd, fd)".into()));
    }
    Ok(())
}

/// Change the owner of the object `fd` refers to (best effort for the caller).
pub fn chown_fd(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> SysResult<()> {
    // SAFETY: an empty path with AT_EMPTY_PATH names the descriptor.
    let ret = unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if ret < 0 {
        return Err(fail(format!("fchownat(fd, {uid}, {gid})")));
    }
    Ok(())
}
