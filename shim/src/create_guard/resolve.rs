//! Resolving a path as the target would, to something init can act on: a *place* (the
//! directory that holds an entry, as a descriptor, and the entry's name) for what is created,
//! an *object* (an O_PATH descriptor of what exists) for what is written. Each is judged on its
//! real path, read back from the descriptor init will act on.
//!
//! Absolute paths start at init's root, which is the target's: the shim never chroots, and the
//! target cannot (no CAP_SYS_CHROOT), so both share the root of the mount namespace.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use super::target::{thread_group, Asker};
use super::AT_FDCWD;

/// A resolved place: the directory that will hold the entry, the entry's name, and the
/// directory's real path joined with the name (what the guard judges).
pub(super) struct Place {
    pub(super) dir: OwnedFd,
    pub(super) name: CString,
    pub(super) full: PathBuf,
    /// The other names it was reached by: the path as written (when a symlink on the way made
    /// the real one differ) and each symlink followed to get here. A protected name that is a
    /// symlink protects what it points at when reached through it.
    pub(super) via: Vec<PathBuf>,
}

/// Something that exists, as an O_PATH descriptor, and where it is: its real path, or `None`
/// for what has no place in the tree (a pipe, a socket, an anonymous inode).
pub(super) struct Object {
    pub(super) fd: OwnedFd,
    pub(super) real: Option<PathBuf>,
    pub(super) stat: libc::stat,
    /// The other names it was reached by (see [`Place::via`]).
    pub(super) via: Vec<PathBuf>,
}

impl Object {
    pub(super) fn kind(&self) -> libc::mode_t {
        self.stat.st_mode & libc::S_IFMT
    }

    /// `/proc/self/fd/N` for this descriptor: reopening it opens the object itself.
    pub(super) fn proc_path(&self) -> CString {
        proc_fd_path(&self.fd)
    }
}

pub(super) fn proc_fd_path(fd: &OwnedFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default()
}

fn open_at(base: Option<&OwnedFd>, path: &[u8], flags: i32) -> Result<OwnedFd, Errno> {
    let c = CString::new(path).map_err(|_| Errno::EINVAL)?;
    let base = base.map_or(AT_FDCWD, |b| b.as_raw_fd());
    // SAFETY: a valid descriptor (or AT_FDCWD) and a NUL-terminated path.
    let fd = unsafe { libc::openat(base, c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a descriptor we just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The root directory (init's root is the target's): opened once, duplicated after.
fn root_dir() -> Result<OwnedFd, Errno> {
    static ROOT: std::sync::OnceLock<Result<OwnedFd, Errno>> = std::sync::OnceLock::new();
    match ROOT.get_or_init(|| open_at(None, b"/", libc::O_PATH | libc::O_DIRECTORY)) {
        Ok(fd) => fd.try_clone().map_err(|_| Errno::EMFILE),
        Err(e) => Err(*e),
    }
}

/// Where the resolution of `path` starts, and what is left of the path from there. The
/// target's own descriptors and working directory are opened from its /proc entry (see
/// `target::open_own`); names that mean "the calling process" mean the target, not init.
fn start(who: Asker<'_>, dirfd: i32, path: &[u8]) -> Result<(OwnedFd, Vec<u8>), Errno> {
    let path = as_target(who.tid, path);
    if let Some((n, rest)) = own_fd(who.tid, &path) {
        if !rest.is_empty() {
            return Ok((who.fd(n)?, relative(rest)));
        }
    }
    if path.first() == Some(&b'/') {
        // Even where it leads somewhere harmless (init's working directory and root are `/`),
        // a path through init's own /proc entry is refused outright.
        refuse_init_s(Path::new(OsStr::from_bytes(&path)))?;
        Ok((root_dir()?, path))
    } else if dirfd == AT_FDCWD {
        Ok((who.cwd()?, path))
    } else {
        Ok((who.fd(dirfd)?, path))
    }
}

/// `/sub/x` below a descriptor, as a path relative to it.
fn relative(rest: &[u8]) -> Vec<u8> {
    let r: &[u8] = rest.strip_prefix(b"/").unwrap_or(rest);
    if r.is_empty() {
        b".".to_vec()
    } else {
        r.to_vec()
    }
}

/// `/proc/TID/fd/N[/rest]`: the target's own descriptor N and what follows it.
fn own_fd(tid: libc::pid_t, path: &[u8]) -> Option<(i32, &[u8])> {
    let prefix = format!("/proc/{tid}/fd/");
    let rest = path.strip_prefix(prefix.as_bytes())?;
    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    let n = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    Some((n, &rest[end..]))
}

/// The place for an entry named by `path`: everything but the last component resolved
/// (symlinks followed, as the kernel would).
pub(super) fn place(who: Asker<'_>, dirfd: i32, path: &CString) -> Result<Place, Errno> {
    if path.as_bytes().is_empty() {
        return Err(Errno::ENOENT);
    }
    let (base, bytes) = start(who, dirfd, path.as_bytes())?;
    let mut place = place_in(&base, &bytes)?;
    // The path as written, from the real path of where it starts.
    if let Some(base_real) = real_path(&base)? {
        let lexical = lexically(&base_real.join(OsStr::from_bytes(&bytes)));
        if lexical != place.full {
            place.via.push(lexical);
        }
    }
    Ok(place)
}

/// `.` and `..` taken away as written (no symlink followed).
fn lexically(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// `/dev/stdin|stdout|stderr`, `/dev/fd/N`, `/proc/self/…` and `/proc/thread-self/…` name the
/// caller's own descriptors: rewritten to the target's pid before init resolves them.
pub(super) fn as_target(pid: libc::pid_t, path: &[u8]) -> Vec<u8> {
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

/// Whether `real` lies in the /proc entry of one of init's own threads (`/proc/1`, or
/// `/proc/TID` of the guard's thread, reachable by number though not listed): through it the
/// target would reach init's descriptors — the guard's listener among them, and the memory of
/// other processes opened for the guard. The target could not open those itself (init is not
/// dumpable).
pub(super) fn is_init_s(real: &Path) -> bool {
    let Ok(rest) = real.strip_prefix("/proc") else {
        return false;
    };
    let Some(first) = rest.iter().next().and_then(|c| c.to_str()) else {
        return false;
    };
    let Ok(n) = first.parse::<libc::pid_t>() else {
        return false;
    };
    let me = std::process::id() as libc::pid_t;
    // A thread that is gone cannot be reached through this path any more.
    n == me || thread_group(n) == Some(me)
}

fn refuse_init_s(real: &Path) -> Result<(), Errno> {
    if is_init_s(real) {
        Err(Errno::EACCES)
    } else {
        Ok(())
    }
}

/// Whether a directory is on procfs, where nothing can be created and entries are magic links.
pub(super) fn on_procfs(dir: &OwnedFd) -> bool {
    // SAFETY: statfs is plain data; fstatfs fills it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a pointer to a statfs.
    unsafe { libc::fstatfs(dir.as_raw_fd(), &mut st) == 0 && st.f_type == libc::PROC_SUPER_MAGIC }
}

/// The real path of what `fd` refers to; `None` for what is not in the tree.
fn real_path(fd: &OwnedFd) -> Result<Option<PathBuf>, Errno> {
    let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| Errno::ENOENT)?;
    Ok(real.is_absolute().then_some(real))
}

fn place_in(base: &OwnedFd, bytes: &[u8]) -> Result<Place, Errno> {
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
    let dir = open_at(Some(base), parent, libc::O_PATH | libc::O_DIRECTORY)?;
    let real = real_path(&dir)?.ok_or(Errno::ENOENT)?;
    if real.as_os_str().as_bytes().ends_with(b" (deleted)") {
        return Err(Errno::ENOENT);
    }
    refuse_init_s(&real)?;
    let full = real.join(OsStr::from_bytes(name));
    Ok(Place {
        dir,
        name: CString::new(name).map_err(|_| Errno::EINVAL)?,
        full,
        via: Vec::new(),
    })
}

/// Follow the final component while it is a symlink, so the guard judges the place that would
/// really be reached (`open(O_CREAT)` of a dangling symlink creates its target). Links are
/// followed here, not by the kernel, so that each step's directory is judged; magic links in
/// /proc only the kernel can follow, and their directory was judged.
pub(super) fn follow(who: Asker<'_>, mut place: Place) -> Result<Place, Errno> {
    for _ in 0..40 {
        if on_procfs(&place.dir) {
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
        let mut via = std::mem::take(&mut place.via);
        via.push(place.full.clone());
        let (base, bytes) = if buf.first() == Some(&b'/') {
            start(who, AT_FDCWD, &buf)?
        } else {
            (place.dir, buf)
        };
        place = place_in(&base, &bytes)?;
        place.via = via;
    }
    Err(Errno::ELOOP)
}

fn fstat(fd: &OwnedFd) -> Result<libc::stat, Errno> {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a pointer to a stat.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(Errno::last());
    }
    Ok(st)
}

fn object_of(fd: OwnedFd) -> Result<Object, Errno> {
    let real = real_path(&fd)?;
    let stat = fstat(&fd)?;
    Ok(Object {
        fd,
        real,
        stat,
        via: Vec::new(),
    })
}

/// What a path names: something that exists, or the place where it would be created.
pub(super) enum Found {
    Object(Object),
    Missing(Place),
}

/// What `path` names, following its final symlinks when `follow_final` (as open without
/// O_NOFOLLOW does).
pub(super) fn object(
    who: Asker<'_>,
    dirfd: i32,
    path: &CString,
    follow_final: bool,
) -> Result<Object, Errno> {
    match lookup(who, dirfd, path, follow_final)? {
        Found::Object(obj) => Ok(obj),
        Found::Missing(_) => Err(Errno::ENOENT),
    }
}

/// Like [`object`], but when nothing is there, the place where it would be created (its final
/// symlinks followed when `follow_final`, as `open(O_CREAT)` does).
pub(super) fn lookup(
    who: Asker<'_>,
    dirfd: i32,
    path: &CString,
    follow_final: bool,
) -> Result<Found, Errno> {
    let rewritten = as_target(who.tid, path.as_bytes());
    if let Some((n, b"")) = own_fd(who.tid, &rewritten) {
        // The target's own descriptor: what it refers to.
        return Ok(Found::Object(object_of(who.fd(n)?)?));
    }
    let mut place = self::place(who, dirfd, path)?;
    if follow_final {
        place = follow(who, place)?;
    }
    // The final component: a magic link in /proc (its directory was judged) is followed by the
    // kernel; anything else is opened as it is (symlinks were followed above).
    let nofollow = if on_procfs(&place.dir) {
        0
    } else {
        libc::O_NOFOLLOW
    };
    let fd = match open_at(
        Some(&place.dir),
        place.name.as_bytes(),
        libc::O_PATH | nofollow,
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(Found::Missing(place)),
        Err(e) => return Err(e),
    };
    let mut obj = object_of(fd)?;
    obj.via = place.via;
    if obj.real.as_ref() != Some(&place.full) {
        obj.via.push(place.full);
    }
    Ok(Found::Object(obj))
}

/// What the target's descriptor `fd` refers to (`AT_EMPTY_PATH`).
pub(super) fn object_of_fd(who: Asker<'_>, fd: i32) -> Result<Object, Errno> {
    object_of(who.fd(fd)?)
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
    fn the_targets_own_descriptors_are_recognised_with_what_follows() {
        assert_eq!(own_fd(42, b"/proc/42/fd/7"), Some((7, &b""[..])));
        assert_eq!(
            own_fd(42, b"/proc/42/fd/7/sub/x"),
            Some((7, &b"/sub/x"[..]))
        );
        assert_eq!(own_fd(42, b"/proc/43/fd/7"), None);
        assert_eq!(own_fd(42, b"/proc/42/fd/x"), None);
        assert_eq!(relative(b"/sub/x"), b"sub/x");
        assert_eq!(relative(b"/"), b".");
    }

    #[test]
    fn a_path_as_written_keeps_its_names() {
        assert_eq!(
            lexically(Path::new("/w/a/../.envrc")),
            PathBuf::from("/w/.envrc")
        );
        assert_eq!(lexically(Path::new("/w/./b/")), PathBuf::from("/w/b"));
        assert_eq!(lexically(Path::new("/../x")), PathBuf::from("/x"));
    }

    #[test]
    fn every_thread_of_init_is_refused_by_its_proc_entry() {
        let me = std::process::id();
        // A second thread of this process stands for the guard's thread.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            done_rx.recv().ok();
        });
        let tid = rx.recv().unwrap();
        assert!(is_init_s(Path::new(&format!("/proc/{me}/fd/5"))));
        assert!(is_init_s(Path::new(&format!("/proc/{me}"))));
        assert!(is_init_s(Path::new(&format!("/proc/{tid}/fd/5"))));
        assert!(is_init_s(Path::new(&format!("/proc/{tid}/mem"))));
        assert!(!is_init_s(Path::new(&format!("/proc/{me}0/fd/5"))));
        assert!(!is_init_s(Path::new("/proc/self-ish")));
        assert!(!is_init_s(Path::new("/work/file")));
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }
}
