//! Resolving a path as the target would, to a place init can act on: the directory that holds
//! the entry (a descriptor) and the entry's name, judged on the directory's real path.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use super::AT_FDCWD;

/// A resolved place: the directory that will hold the entry, the entry's name, and the
/// directory's real path joined with the name (what the guard judges).
pub(super) struct Place {
    pub(super) dir: OwnedFd,
    pub(super) name: CString,
    pub(super) full: PathBuf,
}

fn open_dir_path(path: &Path) -> Result<OwnedFd, Errno> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a descriptor we just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The root directory (init's root is the target's): opened once, duplicated after.
fn root_dir() -> Result<OwnedFd, Errno> {
    static ROOT: std::sync::OnceLock<Result<OwnedFd, Errno>> = std::sync::OnceLock::new();
    match ROOT.get_or_init(|| open_dir_path(Path::new("/"))) {
        Ok(fd) => fd.try_clone().map_err(|_| Errno::EMFILE),
        Err(e) => Err(*e),
    }
}

/// The directory a path is relative to, as the target sees it.
fn base_dir(pid: libc::pid_t, dirfd: i32, path: &[u8]) -> Result<OwnedFd, Errno> {
    if path.first() == Some(&b'/') {
        root_dir()
    } else if dirfd == AT_FDCWD {
        open_dir_path(Path::new(&format!("/proc/{pid}/cwd")))
    } else {
        open_dir_path(Path::new(&format!("/proc/{pid}/fd/{dirfd}")))
    }
}

/// Resolve everything but the last component (symlinks followed, as the kernel would).
pub(super) fn resolve(pid: libc::pid_t, dirfd: i32, path: &CString) -> Result<Place, Errno> {
    if path.as_bytes().is_empty() {
        return Err(Errno::ENOENT);
    }
    // Names that mean "the calling process" must mean the target, not init.
    let bytes = as_target(pid, path.as_bytes());
    let base = base_dir(pid, dirfd, &bytes)?;
    let place = resolve_in(&base, &bytes)?;
    refuse_init_itself(&place)?;
    Ok(place)
}

/// `/dev/stdin|stdout|stderr`, `/dev/fd/N`, `/proc/self/…` and `/proc/thread-self/…` name the
/// caller's own descriptors: rewritten to the target's pid before init resolves them.
fn as_target(pid: libc::pid_t, path: &[u8]) -> Vec<u8> {
    let fd_dir = format!("/proc/{pid}/fd");
    for (name, fd) in [
        (b"/dev/stdin" as &[u8], 0),
        (b"/dev/stdout", 1),
        (b"/dev/stderr", 2),
    ] {
        if path == name {
            return format!("{fd_dir}/{fd}").into_bytes();
        }
    }
    for (prefix, with) in [
        (b"/dev/fd/" as &[u8], format!("{fd_dir}/")),
        (b"/proc/self/", format!("/proc/{pid}/")),
        (b"/proc/thread-self/", format!("/proc/{pid}/task/{pid}/")),
    ] {
        if let Some(rest) = path.strip_prefix(prefix) {
            let mut out = with.into_bytes();
            out.extend_from_slice(rest);
            return out;
        }
    }
    path.to_vec()
}

/// A path that went through init's own `/proc` entry (e.g. `/proc/self` reached some other
/// way, or `/proc/1` itself) would hand the target init's descriptors — the guard's listener
/// among them. The target could not open those itself (init is not dumpable): refused.
fn refuse_init_itself(place: &Place) -> Result<(), Errno> {
    let me = format!("/proc/{}", std::process::id());
    let full = place.full.as_os_str().as_bytes();
    if full == me.as_bytes() || full.starts_with(format!("{me}/").as_bytes()) {
        return Err(Errno::EACCES);
    }
    Ok(())
}

/// Whether a directory is on procfs, where nothing can be created and entries are magic links.
pub(super) fn on_procfs(dir: &OwnedFd) -> bool {
    // SAFETY: statfs is plain data; fstatfs fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a pointer to a statfs.
    unsafe { libc::fstatfs(dir.as_raw_fd(), &mut st) == 0 && st.f_type == libc::PROC_SUPER_MAGIC }
}

fn resolve_in(base: &OwnedFd, bytes: &[u8]) -> Result<Place, Errno> {
    let mut trimmed = bytes;
    while trimmed.len() > 1 && trimmed.ends_with(b"/") {
        trimmed = &trimmed[..trimmed.len() - 1];
    }
    let (parent, name): (&[u8], &[u8]) = match trimmed.iter().rposition(|&b| b == b'/') {
        Some(0) => (b"/", &trimmed[1..]),
        Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
        None => (b".", trimmed),
    };
    let name = if name.is_empty() { b"." as &[u8] } else { name };
    let parent_c = CString::new(parent).map_err(|_| Errno::EINVAL)?;
    // SAFETY: valid descriptor and NUL-terminated path.
    let dir = unsafe {
        libc::openat(
            base.as_raw_fd(),
            parent_c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a descriptor we just opened.
    let dir = unsafe { OwnedFd::from_raw_fd(dir) };
    let real = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .map_err(|_| Errno::ENOENT)?;
    if real.as_os_str().as_bytes().ends_with(b" (deleted)") {
        return Err(Errno::ENOENT);
    }
    let full = real.join(OsStr::from_bytes(name));
    Ok(Place {
        dir,
        name: CString::new(name).map_err(|_| Errno::EINVAL)?,
        full,
    })
}

/// `open(O_CREAT)` without O_EXCL/O_NOFOLLOW follows a final symlink and creates its target:
/// follow it here, so the guard judges the place that would really be created.
pub(super) fn follow_final_symlinks(pid: libc::pid_t, mut place: Place) -> Result<Place, Errno> {
    for _ in 0..40 {
        if on_procfs(&place.dir) {
            // A magic link (`/proc/PID/fd/N`): only the kernel can follow it.
            return Ok(place);
        }
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: valid descriptor, NUL-terminated name, buffer of the given length.
        let n = unsafe {
            libc::readlinkat(
                place.dir.as_raw_fd(),
                place.name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            // Not a symlink (EINVAL) or not there (ENOENT): this is the place.
            return Ok(place);
        }
        buf.truncate(n as usize);
        let buf = as_target(pid, &buf);
        let base = if buf.first() == Some(&b'/') {
            root_dir()?
        } else {
            place.dir
        };
        place = resolve_in(&base, &buf)?;
        refuse_init_itself(&place)?;
    }
    Err(Errno::ELOOP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_the_caller_itself_mean_the_target() {
        let t = |p: &str| String::from_utf8(as_target(42, p.as_bytes())).unwrap();
        assert_eq!(t("/dev/stdout"), "/proc/42/fd/1");
        assert_eq!(t("/dev/stderr"), "/proc/42/fd/2");
        assert_eq!(t("/dev/fd/7"), "/proc/42/fd/7");
        assert_eq!(t("/proc/self/fd/3"), "/proc/42/fd/3");
        assert_eq!(t("/proc/thread-self/fd/3"), "/proc/42/task/42/fd/3");
        assert_eq!(t("/dev/stdoutx"), "/dev/stdoutx");
        assert_eq!(t("relative/dev/fd/1"), "relative/dev/fd/1");
    }

    #[test]
    fn init_s_own_proc_entry_is_refused() {
        let me = std::process::id();
        let place = |full: String| Place {
            dir: root_dir().unwrap(),
            name: CString::new("x").unwrap(),
            full: PathBuf::from(full),
        };
        assert!(refuse_init_itself(&place(format!("/proc/{me}/fd/5"))).is_err());
        assert!(refuse_init_itself(&place(format!("/proc/{me}"))).is_err());
        assert!(refuse_init_itself(&place(format!("/proc/{me}0/fd/5"))).is_ok());
        assert!(refuse_init_itself(&place("/work/file".into())).is_ok());
    }
}
