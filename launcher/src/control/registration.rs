//! A sandbox's identity and its control socket: a random id, an optional `--name` (unique per
//! user: the socket is `<name>.sock`, else `<id>.sock`), bound and listening in the control
//! directory before the sandbox is cloned, and removed when the launcher ends. A socket left by
//! a launcher that was killed is stale: nothing listens on it (connecting is refused), and it
//! is replaced here or cleaned by `ps`.

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::dir::ControlDir;

/// `sun_path` holds 108 bytes, the terminating NUL included.
const MAX_SOCKET_PATH: usize = 107;

/// A listening control socket, removed (with the `/tmp` fallback directory, when empty) when
/// dropped.
#[derive(Debug)]
pub struct Registration {
    pub id: String,
    pub name: Option<String>,
    pub path: PathBuf,
    pub dir: ControlDir,
    pub listener: Option<UnixListener>,
    /// The socket file's inode: only our own socket is removed at the end.
    inode: u64,
}

/// Check a `--name`: what a file name and a shell word can carry without quoting.
pub fn check_name(name: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty()
        || name.len() > 64
        || !name.chars().all(ok_char)
        || !name.starts_with(|c: char| c.is_ascii_alphanumeric())
    {
        bail!(
            "--name {name:?}: use 1-64 letters, digits, `.`, `_` or `-`, starting with a letter or digit"
        );
    }
    if looks_like_id(name) {
        bail!("--name {name}: 8 hex digits is what sandbox ids look like; choose another name");
    }
    Ok(())
}

/// Sandbox ids are 8 lower-case hex digits.
pub fn looks_like_id(s: &str) -> bool {
    s.len() == 8
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A fresh random id.
pub fn new_id() -> String {
    let mut bytes = [0u8; 4];
    // SAFETY: getrandom writes at most `len` bytes into the buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        // Unique enough when the kernel's generator is unavailable: pid and time.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        bytes = (std::process::id() ^ t).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a control socket has nobody behind it (its launcher is gone).
pub fn is_stale(path: &Path) -> bool {
    match UnixStream::connect(path) {
        Ok(_) => false,
        Err(e) => e.raw_os_error() == Some(libc::ECONNREFUSED),
    }
}

impl Registration {
    /// Bind the control socket of a new sandbox.
    pub fn create(dir: ControlDir, name: Option<String>) -> Result<Registration> {
        if let Some(n) = &name {
            check_name(n)?;
        }
        for _ in 0..8 {
            let id = new_id();
            let file = format!("{}.sock", name.as_deref().unwrap_or(&id));
            let path = dir.path.join(file);
            if path.as_os_str().len() > MAX_SOCKET_PATH {
                bail!(
                    "the control socket path {} is longer than a unix socket address allows (107 bytes); set XDG_RUNTIME_DIR to a shorter directory",
                    path.display()
                );
            }
            dir.ensure()?;
            let lock = dir.lock()?;
            // Bound and listening while the lock is held, so a concurrent stale check never
            // sees it before it accepts.
            match UnixListener::bind(&path) {
                Ok(listener) => {
                    drop(lock);
                    let inode = std::fs::symlink_metadata(&path)
                        .with_context(|| format!("stat {}", path.display()))?
                        .ino();
                    return Ok(Registration {
                        id,
                        name,
                        path,
                        dir,
                        listener: Some(listener),
                        inode,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    if is_stale(&path) {
                        let _ = std::fs::remove_file(&path);
                        continue;
                    }
                    if let Some(n) = &name {
                        bail!(
                            "a sandbox named {n} is already running (its control socket is {}); choose another --name, or stop it with `sandbox-launch stop {n}`",
                            path.display()
                        );
                    }
                    // An id collision: draw again.
                }
                // The `/tmp` fallback was removed by a launcher that just ended: recreate it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("bind {}", path.display()));
                }
            }
        }
        bail!("cannot create a control socket in {}", dir.path.display())
    }

    /// Move the listener's descriptor above every descriptor that is preserved into the sandbox
    /// (`--preserve-fd`), so that no number the caller names can be it.
    pub fn keep_clear_of(&mut self, preserved: &[i32]) -> Result<()> {
        let Some(listener) = &self.listener else {
            return Ok(());
        };
        let fd = listener.as_raw_fd();
        let Some(&max) = preserved.iter().max() else {
            return Ok(());
        };
        if fd > max {
            return Ok(());
        }
        // SAFETY: F_DUPFD_CLOEXEC duplicates a descriptor we own to the lowest free number
        // above `max`.
        let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, max + 1) };
        if moved < 0 {
            return Err(std::io::Error::last_os_error()).context("move the control socket");
        }
        // SAFETY: a fresh descriptor we own; the old one is closed when replaced.
        self.listener = Some(unsafe { std::os::fd::FromRawFd::from_raw_fd(moved) });
        Ok(())
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.listener = None;
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.inode);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
        self.dir.remove_if_empty();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> (PathBuf, ControlDir) {
        let base = std::env::temp_dir().join(format!("sl-reg-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let dir = ControlDir {
            path: base.join("sandbox-launch"),
            temporary: false,
        };
        (base, dir)
    }

    #[test]
    fn names_are_unique_while_their_sandbox_runs_and_free_once_it_ends() {
        let (base, dir) = temp_dir("unique");
        let first = Registration::create(dir.clone(), Some("web".into())).unwrap();
        assert!(first.path.ends_with("web.sock"));
        assert!(looks_like_id(&first.id));
        let e = Registration::create(dir.clone(), Some("web".into())).unwrap_err();
        assert!(e.to_string().contains("already running"), "{e}");
        drop(first);
        assert!(!dir.path.join("web.sock").exists(), "removed at the end");
        let again = Registration::create(dir.clone(), Some("web".into())).unwrap();
        drop(again);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_stale_socket_is_replaced() {
        let (base, dir) = temp_dir("stale");
        dir.ensure().unwrap();
        // A socket whose listener is gone, as a SIGKILLed launcher leaves it.
        drop(UnixListener::bind(dir.path.join("web.sock")).unwrap());
        assert!(is_stale(&dir.path.join("web.sock")));
        let r = Registration::create(dir.clone(), Some("web".into())).unwrap();
        assert!(!is_stale(&r.path));
        drop(r);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in ["", "-x", "a/b", "a b", "deadbeef", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["web", "agent-2", "a.b_c"] {
            check_name(good).unwrap();
        }
    }

    #[test]
    fn the_listener_moves_above_preserved_descriptors() {
        let (base, dir) = temp_dir("fds");
        let mut r = Registration::create(dir, None).unwrap();
        let fd = r.listener.as_ref().unwrap().as_raw_fd();
        r.keep_clear_of(&[fd, fd + 3]).unwrap();
        assert!(r.listener.as_ref().unwrap().as_raw_fd() > fd + 3);
        drop(r);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
