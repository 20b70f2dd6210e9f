//! Thin wrappers over the raw syscalls the shim makes, each returning an error that names the call
//! and its arguments (`mount("/oldroot/home", "/newroot/home") => EPERM`), so a failure says
//! exactly what the kernel refused.

use std::ffi::{CStr, CString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;

/// A refused syscall: what was called, and the errno.
#[derive(Debug, Clone)]
pub struct SysError {
    pub call: String,
    pub errno: Errno,
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} => {} ({})", self.call, self.errno, self.errno.desc())
    }
}

impl std::error::Error for SysError {}

pub type SysResult<T> = Result<T, SysError>;

fn cstr(path: &Path) -> CString {
    // Paths from the spec never contain NUL (they come from the filesystem or from JSON strings
    // validated by the supervisor); map a NUL to an empty path, which every call rejects.
    CString::new(path.as_os_str().as_bytes()).unwrap_or_default()
}

fn check(ret: libc::c_int, call: impl FnOnce() -> String) -> SysResult<libc::c_int> {
    if ret < 0 {
        Err(SysError {
            call: call(),
            errno: Errno::last(),
        })
    } else {
        Ok(ret)
    }
}

pub fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> SysResult<()> {
    let src = source.map(cstr);
    let tgt = cstr(target);
    let fs = fstype.map(|s| CString::new(s).unwrap_or_default());
    let dat = data.map(|s| CString::new(s).unwrap_or_default());
    // SAFETY: every pointer is either null or a valid NUL-terminated string that outlives the call.
    let ret = unsafe {
        libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            tgt.as_ptr(),
            fs.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            dat.as_ref().map_or(std::ptr::null(), |s| s.as_ptr().cast()),
        )
    };
    check(ret, || {
        format!(
            "mount({:?}, {:?}, {}, {:#x}, {:?})",
            source.unwrap_or(Path::new("none")),
            target,
            fstype.unwrap_or("none"),
            flags,
            data.unwrap_or("")
        )
    })?;
    Ok(())
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;

/// Set mount attributes on `target` and every mount below it.
pub fn mount_setattr_recursive(target: &Path, attr_set: u64) -> SysResult<()> {
    let tgt = cstr(target);
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: valid path string and a properly sized, initialised mount_attr.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            tgt.as_ptr(),
            (libc::AT_RECURSIVE | libc::AT_SYMLINK_NOFOLLOW) as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(ret as libc::c_int, || {
        format!("mount_setattr({target:?}, AT_RECURSIVE, set={attr_set:#x})")
    })?;
    Ok(())
}

pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// A detached copy of the mount tree at `path` (open_tree with OPEN_TREE_CLONE, recursive),
/// attached nowhere until `move_mount` puts it somewhere.
pub fn open_tree_clone(path: &Path) -> SysResult<std::os::fd::OwnedFd> {
    let p = cstr(path);
    // SAFETY: a valid path string; the flags are plain integers.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            p.as_ptr(),
            (libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as u32)
                as libc::c_uint,
        )
    };
    let fd = check(ret as libc::c_int, || {
        format!("open_tree({path:?}, OPEN_TREE_CLONE|AT_RECURSIVE)")
    })?;
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// Idmap the detached tree `tree` (and every mount in it) through the user namespace
/// `userns`, and set `attr_set` besides.
pub fn mount_setattr_idmap(
    tree: std::os::fd::BorrowedFd<'_>,
    userns: std::os::fd::BorrowedFd<'_>,
    attr_set: u64,
) -> SysResult<()> {
    use std::os::fd::AsRawFd;
    let attr = MountAttr {
        attr_set: attr_set | MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    setattr_tree(tree, &attr, || {
        format!("mount_setattr(tree, AT_RECURSIVE, set=MOUNT_ATTR_IDMAP|{attr_set:#x})")
    })
}

/// Set `attr_set` on the tree `tree` (detached, or the root of an attached mount) and every
/// mount in it (no idmapping).
pub fn mount_setattr_tree(tree: std::os::fd::BorrowedFd<'_>, attr_set: u64) -> SysResult<()> {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    setattr_tree(tree, &attr, || {
        format!("mount_setattr(tree, AT_RECURSIVE, set={attr_set:#x})")
    })
}

fn setattr_tree(
    tree: std::os::fd::BorrowedFd<'_>,
    attr: &MountAttr,
    call: impl FnOnce() -> String,
) -> SysResult<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: an empty path with AT_EMPTY_PATH names the descriptor; the struct is initialised.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(ret as libc::c_int, call)?;
    Ok(())
}

/// Attach the detached tree `fd` at `target`.
pub fn move_mount_to(fd: libc::c_int, target: &Path) -> SysResult<()> {
    let t = cstr(target);
    // SAFETY: an empty source path with MOVE_MOUNT_F_EMPTY_PATH names the descriptor; the
    // target is a valid path string.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH as libc::c_uint,
        )
    };
    check(ret as libc::c_int, || {
        format!("move_mount(tree, {target:?}, MOVE_MOUNT_F_EMPTY_PATH)")
    })?;
    Ok(())
}

pub fn pivot_root(new_root: &Path, put_old: &Path) -> SysResult<()> {
    let n = cstr(new_root);
    let o = cstr(put_old);
    // SAFETY: two valid NUL-terminated paths.
    let ret = unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) };
    check(ret as libc::c_int, || {
        format!("pivot_root({new_root:?}, {put_old:?})")
    })?;
    Ok(())
}

pub fn umount_detach(target: &Path) -> SysResult<()> {
    let t = cstr(target);
    // SAFETY: valid path string.
    let ret = unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    check(ret, || format!("umount2({target:?}, MNT_DETACH)"))?;
    Ok(())
}

pub fn chdir(path: &Path) -> SysResult<()> {
    let p = cstr(path);
    // SAFETY: valid path string.
    let ret = unsafe { libc::chdir(p.as_ptr()) };
    check(ret, || format!("chdir({path:?})"))?;
    Ok(())
}

pub fn mkdir(path: &Path, mode: libc::mode_t) -> SysResult<()> {
    let p = cstr(path);
    // SAFETY: valid path string.
    let ret = unsafe { libc::mkdir(p.as_ptr(), mode) };
    check(ret, || format!("mkdir({path:?}, {mode:o})"))?;
    Ok(())
}

/// Create an empty regular file (it must not exist).
pub fn create_file(path: &Path, mode: libc::mode_t) -> SysResult<()> {
    let p = cstr(path);
    // SAFETY: valid path string; the returned descriptor is closed right away.
    let fd = unsafe {
        libc::open(
            p.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    check(fd, || format!("open({path:?}, O_CREAT|O_EXCL)"))?;
    // SAFETY: we own fd.
    unsafe { libc::close(fd) };
    Ok(())
}

pub fn chmod(path: &Path, mode: libc::mode_t) -> SysResult<()> {
    let p = cstr(path);
    // SAFETY: valid path string.
    let ret = unsafe { libc::chmod(p.as_ptr(), mode) };
    check(ret, || format!("chmod({path:?}, {mode:o})"))?;
    Ok(())
}

pub fn symlink(link_content: &Path, at: &Path) -> SysResult<()> {
    let l = cstr(link_content);
    let a = cstr(at);
    // SAFETY: two valid path strings.
    let ret = unsafe { libc::symlink(l.as_ptr(), a.as_ptr()) };
    check(ret, || format!("symlink({link_content:?}, {at:?})"))?;
    Ok(())
}

pub fn sethostname(name: &str) -> SysResult<()> {
    // SAFETY: pointer and length describe `name`.
    let ret = unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) };
    check(ret, || format!("sethostname({name:?})"))?;
    Ok(())
}

pub fn prctl(option: libc::c_int, arg2: libc::c_ulong, what: &str) -> SysResult<libc::c_int> {
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe {
        libc::prctl(
            option,
            arg2,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    check(ret, || format!("prctl({what})"))
}

/// The errno of a probe that is expected to fail, or `None` when it succeeded.
pub fn errno_of(ret: libc::c_int) -> Option<Errno> {
    if ret < 0 {
        Some(Errno::last())
    } else {
        None
    }
}

/// Whether a path exists (without following a final symlink).
pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// A C string for a static name.
pub fn c(s: &'static [u8]) -> &'static CStr {
    CStr::from_bytes_with_nul(s).unwrap_or(c"")
}

/// A /proc file, read to its end with nothing else (`read_to_end` and `read_to_string` first
/// ask for a size, which /proc files do not have, then read in small growing pieces: five to
/// eight reads for a file of a few hundred bytes, where this makes two — one page, and one that
/// finds the end).
pub fn read_proc(path: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut text = Vec::with_capacity(8 << 10);
    let mut page = [0u8; 4096];
    loop {
        match file.read(&mut page) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&page[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    String::from_utf8(text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}
