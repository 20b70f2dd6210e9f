//! Where the control sockets live: one private directory per user, outside every sandbox.
//!
//! * `$XDG_RUNTIME_DIR/sandbox-launch/` when `XDG_RUNTIME_DIR` is set (an absolute path);
//! * otherwise, as root, `/run/sandbox-launch/`; as anyone else `/run/user/<uid>/sandbox-launch/`
//!   when the login manager made `/run/user/<uid>` (owned by the user), else
//!   `/dev/shm/sandbox-launch-<uid>/` where `/dev/shm` is a tmpfs, else
//!   `/tmp/sandbox-launch-<uid>/` (either removed again when the last sandbox in it ends).
//!   Made and removed with every launch, the fallback belongs in memory: on a disk-backed `/tmp`
//!   (ext4) removing the directory cost about 0.2 ms of each launch, on a tmpfs microseconds.
//!
//! The directory is created 0700 and must be a real directory owned by the caller with no
//! access for group or others; anything else (a symlink, another owner: someone squatting the
//! name in `/tmp`) is refused rather than used. Every sandbox inside hides it (see
//! `control::hide`).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The control directory of this user, and whether it is the `/tmp` fallback (which is removed
/// when it is left empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlDir {
    pub path: PathBuf,
    pub temporary: bool,
}

impl ControlDir {
    /// Where this user's control sockets are (not created).
    pub fn locate() -> ControlDir {
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        let xdg = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute());
        Self::choose(uid, xdg, Path::new("/run/user"), fallback_base)
    }

    fn choose(
        uid: u32,
        xdg: Option<PathBuf>,
        run_user: &Path,
        fallback_base: impl FnOnce() -> &'static str,
    ) -> ControlDir {
        let fixed = |path: PathBuf| ControlDir {
            path,
            temporary: false,
        };
        if let Some(x) = xdg {
            return fixed(x.join("sandbox-launch"));
        }
        if uid == 0 {
            return fixed("/run/sandbox-launch".into());
        }
        let mine = run_user.join(uid.to_string());
        match std::fs::symlink_metadata(&mine) {
            Ok(m) if m.is_dir() && m.uid() == uid => fixed(mine.join("sandbox-launch")),
            _ => ControlDir {
                path: PathBuf::from(format!("{}/sandbox-launch-{uid}", fallback_base())),
                temporary: true,
            },
        }
    }

    /// Create the directory (0700) if it is missing and check that it is private.
    pub fn ensure(&self) -> Result<()> {
        if std::fs::symlink_metadata(&self.path).is_ok() {
            return self.check_private();
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "cannot create the control directory {} (set XDG_RUNTIME_DIR to a private directory of yours)",
                        self.path.display()
                    )
                })
            }
        }
        self.check_private()
    }

    /// A real directory, owned by us, with no access for others.
    pub fn check_private(&self) -> Result<()> {
        let m = std::fs::symlink_metadata(&self.path)
            .with_context(|| format!("control directory {}", self.path.display()))?;
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        if !m.is_dir() {
            bail!(
                "control directory {} is not a directory (a symlink or file is in its place); remove it",
                self.path.display()
            );
        }
        if m.uid() != uid {
            bail!(
                "control directory {} belongs to uid {}, not to you (uid {uid}); remove it or set XDG_RUNTIME_DIR",
                self.path.display(),
                m.uid()
            );
        }
        if m.mode() & 0o077 != 0 {
            bail!(
                "control directory {} has mode {:o}: others could reach the sandboxes' control sockets; run `chmod 700 {}`",
                self.path.display(),
                m.mode() & 0o7777,
                self.path.display()
            );
        }
        Ok(())
    }

    /// Hold the directory's lock (flock on the directory itself) while sockets are created,
    /// found stale and removed, so that no one takes a fresh socket for a stale one.
    pub fn lock(&self) -> Result<DirLock> {
        let c = CString::new(self.path.as_os_str().as_bytes())
            .context("control directory path contains NUL")?;
        // SAFETY: open with a valid C string; the descriptor is owned below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("open {}", self.path.display()));
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        loop {
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(DirLock { _fd: fd });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e).with_context(|| format!("lock {}", self.path.display()));
            }
        }
    }

    /// The control sockets in the directory (`*.sock`), sorted.
    pub fn sockets(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return Vec::new();
        };
        let mut out: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "sock"))
            .collect();
        out.sort();
        out
    }

    /// Remove the `/tmp` fallback once no socket is left in it (another launcher that is about
    /// to bind in it retries after recreating it).
    pub fn remove_if_empty(&self) {
        if self.temporary {
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

/// Where the fallback directory is made: `/dev/shm` when it is a tmpfs (a world-writable,
/// sticky directory like `/tmp`, private inside every sandbox as `/tmp` is), else `/tmp`.
fn fallback_base() -> &'static str {
    let shm = nix::sys::statfs::statfs("/dev/shm")
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
    if shm {
        "/dev/shm"
    } else {
        "/tmp"
    }
}

/// The directory's lock, released when dropped.
pub struct DirLock {
    _fd: OwnedFd,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdg_runtime_dir_is_preferred_then_run_then_a_temporary_directory() {
        let none = Path::new("/nonexistent-run-user");
        let unasked = || -> &'static str { panic!("no fallback wanted") };
        assert_eq!(
            ControlDir::choose(1000, Some("/x/run".into()), none, unasked).path,
            Path::new("/x/run/sandbox-launch")
        );
        assert_eq!(
            ControlDir::choose(0, None, none, unasked).path,
            Path::new("/run/sandbox-launch")
        );
        for base in ["/dev/shm", "/tmp"] {
            let tmp = ControlDir::choose(1000, None, none, || base);
            assert_eq!(tmp.path, Path::new(base).join("sandbox-launch-1000"));
            assert!(tmp.temporary);
        }
    }

    #[test]
    fn a_directory_open_to_others_is_refused() {
        let base = std::env::temp_dir().join(format!("sl-ctl-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let dir = ControlDir {
            path: base.join("sandbox-launch"),
            temporary: false,
        };
        dir.ensure().unwrap();
        assert_eq!(
            std::fs::metadata(&dir.path).unwrap().mode() & 0o777,
            0o700,
            "created private"
        );
        std::fs::set_permissions(
            &dir.path,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let e = dir.ensure().unwrap_err().to_string();
        assert!(e.contains("chmod 700"), "{e}");
        std::fs::remove_dir(&dir.path).unwrap();
        std::os::unix::fs::symlink("/", &dir.path).unwrap();
        let e = dir.ensure().unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
