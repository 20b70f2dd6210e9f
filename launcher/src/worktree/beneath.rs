//! Paths below a root, never leaving it: every lookup is `openat2` with `RESOLVE_BENEATH` and
//! `RESOLVE_NO_SYMLINKS` from a descriptor of the root, so a symlink (or `..`) anywhere on the
//! way — one the program wrote into the worktree, or one that appeared in the checkout since —
//! is an error, never followed. Entries are then acted on as (directory descriptor, name) with
//! the `*at` calls and `AT_SYMLINK_NOFOLLOW`.

use std::ffi::{CString, OsStr, OsString};
use std::io::{Error, ErrorKind, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path};

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// An overlayfs whiteout: a character device 0:0.
    Whiteout,
    /// A fifo, socket or device: nothing a checkout holds.
    Special(&'static str),
}

/// An entry's `lstat`, as far as a worktree cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub kind: Kind,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    pub size: u64,
    pub ino: u64,
    /// The change time: any change of content or metadata moves it, and no one but the kernel
    /// sets it.
    pub ctime: (i64, i64),
}

impl Stat {
    pub fn from_raw(st: &libc::stat) -> Stat {
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFCHR if st.st_rdev == 0 => Kind::Whiteout,
            libc::S_IFCHR => Kind::Special("character device"),
            libc::S_IFBLK => Kind::Special("block device"),
            libc::S_IFIFO => Kind::Special("fifo"),
            libc::S_IFSOCK => Kind::Special("socket"),
            _ => Kind::Special("unknown file type"),
        };
        Stat {
            kind,
            mode: st.st_mode & 0o7777,
            size: st.st_size as u64,
            ino: st.st_ino,
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
}

fn cstr(name: &OsStr) -> Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| Error::new(ErrorKind::InvalidInput, "NUL in name"))
}

fn check(r: libc::c_int) -> Result<libc::c_int> {
    if r < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A relative path made only of plain names (no `..`, `.`, root or empty component).
pub fn plain(rel: &Path) -> Result<()> {
    for c in rel.components() {
        if !matches!(c, Component::Normal(_)) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("{}: not a plain relative path", rel.display()),
            ));
        }
    }
    Ok(())
}

/// Open the root itself (a directory).
pub fn open_root(path: &Path) -> Result<OwnedFd> {
    let c = cstr(path.as_os_str())?;
    // SAFETY: open with a valid C string; the result is checked and owned.
    let fd = check(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(root, rel, flags)` beneath `root`, following no symlink on the way or at the end.
pub fn open(root: RawFd, rel: &Path, flags: libc::c_int, mode: u32) -> Result<OwnedFd> {
    plain(rel)?;
    let rel: &Path = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let c = cstr(rel.as_os_str())?;
    // SAFETY: open_how is plain old data; zeroed is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;
    how.mode = if flags & libc::O_CREAT != 0 {
        mode as u64
    } else {
        0
    };
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2 with a valid path and a how of the size we pass; the result is checked.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        let e = Error::last_os_error();
        if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::EXDEV) {
            return Err(Error::new(
                e.kind(),
                format!(
                    "{}: a symlink or `..` is on the way (it is not followed)",
                    rel.display()
                ),
            ));
        }
        return Err(e);
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The directory holding `rel` (opened `O_PATH`), and `rel`'s last name.
pub fn parent(root: RawFd, rel: &Path) -> Result<(OwnedFd, OsString)> {
    let name = rel
        .file_name()
        .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "an empty path has no parent"))?;
    let dir = rel.parent().unwrap_or(Path::new(""));
    let fd = open(root, dir, libc::O_PATH | libc::O_DIRECTORY, 0)?;
    Ok((fd, name.to_os_string()))
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub fn stat_at(dir: RawFd, name: &OsStr) -> Result<Stat> {
    let c = cstr(name)?;
    // SAFETY: stat is plain old data; fstatat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor and C string; the result is checked.
    check(unsafe { libc::fstatat(dir, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(Stat::from_raw(&st))
}

/// `fstat` of a descriptor.
pub fn stat_fd(fd: RawFd) -> Result<Stat> {
    // SAFETY: stat is plain old data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor; the result is checked.
    check(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(Stat::from_raw(&st))
}

/// The entry at `rel` below `root`, `None` when it does not exist. A symlink on the way is an
/// error (the entry itself may be one: it is not followed).
pub fn lstat(root: RawFd, rel: &Path) -> Result<Option<Stat>> {
    if rel.as_os_str().is_empty() {
        return stat_fd(root).map(Some);
    }
    let (dir, name) = match parent(root, rel) {
        Ok(p) => p,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => {
            return absent_or_redirected(root, rel)
        }
        Err(e) => return Err(e),
    };
    match stat_at(dir.as_raw_fd(), &name) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `rel`'s directory could not be opened: absent (`None`) when something on the way is
/// missing or a file; an error when it is a symlink.
fn absent_or_redirected(root: RawFd, rel: &Path) -> Result<Option<Stat>> {
    let mut prefix = std::path::PathBuf::new();
    for c in rel.parent().unwrap_or(Path::new("")).components() {
        prefix.push(c);
        match open(root, &prefix, libc::O_PATH, 0) {
            Ok(fd) => match stat_fd(fd.as_raw_fd())?.kind {
                Kind::Dir => {}
                Kind::Symlink => {
                    return Err(Error::other(format!(
                        "{}: a symlink is on the way (it is not followed)",
                        prefix.display()
                    )))
                }
                _ => return Ok(None),
            },
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// A symlink's target.
pub fn readlink(root: RawFd, rel: &Path) -> Result<Vec<u8>> {
    let (dir, name) = parent(root, rel)?;
    let c = cstr(&name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: valid descriptor, C string and buffer of the length passed.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// A regular file's contents (refused for anything else).
pub fn read(root: RawFd, rel: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let fd = open(root, rel, libc::O_RDONLY, 0)?;
    let st = stat_fd(fd.as_raw_fd())?;
    if st.kind != Kind::File {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("{}: not a regular file", rel.display()),
        ));
    }
    let mut out = Vec::with_capacity(st.size as usize);
    std::fs::File::from(fd).read_to_end(&mut out)?;
    Ok(out)
}

/// The names in a directory (not `.` and `..`), sorted.
pub fn names(dir: &OwnedFd) -> Result<Vec<OsString>> {
    // Reopen: readdir needs a real (not O_PATH) descriptor of its own.
    let fd = open(
        dir.as_raw_fd(),
        Path::new(""),
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
    )?;
    // SAFETY: fdopendir takes the descriptor; closedir below closes it.
    let d = unsafe { libc::fdopendir(fd.as_raw_fd()) };
    if d.is_null() {
        return Err(Error::last_os_error());
    }
    std::mem::forget(fd);
    let mut out = Vec::new();
    loop {
        // SAFETY: a valid DIR*; readdir's entry is read before the next call.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated.
        let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) };
        let b = name.to_bytes();
        if b != b"." && b != b".." {
            out.push(OsString::from_vec(b.to_vec()));
        }
    }
    // SAFETY: the DIR* from fdopendir, closed once.
    unsafe { libc::closedir(d) };
    out.sort();
    Ok(out)
}

/// An extended attribute of the entry `name` in `dir` (not following it), `None` when absent.
pub fn xattr(dir: RawFd, name: &OsStr, attr: &str) -> Result<Option<Vec<u8>>> {
    // An O_PATH descriptor of the entry itself (a symlink included), read through its magic
    // link: the link leads to that inode and no further.
    let fd = open(dir, Path::new(name), libc::O_PATH, 0)?;
    let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| Error::other("NUL"))?;
    let a = CString::new(attr).map_err(|_| Error::other("NUL"))?;
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C strings and a buffer of the length passed.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            a.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        let e = Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::ENOTSUP) => Ok(None),
            _ => Err(e),
        };
    }
    buf.truncate(n as usize);
    Ok(Some(buf))
}

/// The names of the extended attributes of `name` in `dir`.
pub fn xattr_names(dir: RawFd, name: &OsStr) -> Result<Vec<Vec<u8>>> {
    let fd = open(dir, Path::new(name), libc::O_PATH, 0)?;
    let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| Error::other("NUL"))?;
    let mut buf = vec![0u8; 65536];
    // SAFETY: a valid C string and a buffer of the length passed.
    let n = unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOTSUP) => Ok(Vec::new()),
            _ => Err(e),
        };
    }
    buf.truncate(n as usize);
    Ok(buf
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_on_the_way_is_an_error_not_followed() {
        let base = std::env::temp_dir().join(format!("sl-beneath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("root/d")).unwrap();
        std::fs::write(base.join("outside"), b"secret").unwrap();
        std::os::unix::fs::symlink(&base, base.join("root/up")).unwrap();
        std::os::unix::fs::symlink("../outside", base.join("root/d/l")).unwrap();
        std::fs::write(base.join("root/d/f"), b"ok").unwrap();
        let root = open_root(&base.join("root")).unwrap();
        let r = root.as_raw_fd();
        assert_eq!(read(r, Path::new("d/f")).unwrap(), b"ok");
        assert!(read(r, Path::new("up/outside")).is_err());
        assert!(read(r, Path::new("d/l")).is_err());
        assert!(read(r, Path::new("../outside")).is_err());
        assert_eq!(
            lstat(r, Path::new("d/l")).unwrap().unwrap().kind,
            Kind::Symlink
        );
        assert_eq!(readlink(r, Path::new("d/l")).unwrap(), b"../outside");
        assert!(lstat(r, Path::new("up/outside")).is_err());
        assert_eq!(lstat(r, Path::new("d/missing")).unwrap(), None);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
