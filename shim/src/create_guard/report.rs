//! What the guard tells the supervisor, which makes `filesystem` events of it (and, with
//! `--prompts`, a prompt): a write the rules refused, and a write outside the writable trees
//! that the kernel refused when the guard performed it (EROFS, EACCES, EPERM: a read-only
//! mount, Landlock, the file's mode), each with the process that asked and its executable.
//! Reports are dropped when the socket is full: a flood of them must not stall the guard.

use std::ffi::CStr;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;

use super::decode::Request;
use super::target::{read_link, thread_group};
use super::{Handler, AT_FDCWD};
use crate::channel::FromShim;

/// Which name a request writes at, and what it does there (for a report of its failure).
pub(super) struct Attempt {
    dirfd: i32,
    path: Vec<u8>,
    op: &'static str,
}

impl Attempt {
    /// `None` for what has no path of its own to report (a socket's bind, a connect, a send).
    pub(super) fn of(r: &Request) -> Option<Attempt> {
        let (dirfd, path, op): (i32, &CStr, &'static str) = match r {
            Request::Open {
                dirfd, path, flags, ..
            } => {
                let op = if flags & libc::O_CREAT != 0 {
                    "create"
                } else {
                    "write"
                };
                (*dirfd, path, op)
            }
            Request::Truncate { path, .. } => (AT_FDCWD, path, "truncate"),
            Request::Mkdir { dirfd, path, .. } => (*dirfd, path, "create a directory"),
            Request::Mknod { dirfd, path, .. } => (*dirfd, path, "create"),
            Request::Symlink { dirfd, path, .. } => (*dirfd, path, "create a symlink"),
            Request::Link { newdirfd, new, .. } => (*newdirfd, new, "link"),
            Request::Rename { newdirfd, new, .. } => (*newdirfd, new, "rename onto"),
            Request::Bind { .. } | Request::Connect { .. } | Request::Send { .. } => return None,
        };
        Some(Attempt {
            dirfd,
            path: path.to_bytes().to_vec(),
            op,
        })
    }
}

/// Whether a failure is one the sandbox's limits caused, and so a violation to report.
pub(super) fn is_violation(e: Errno) -> bool {
    matches!(e, Errno::EROFS | Errno::EACCES | Errno::EPERM)
}

impl Handler {
    /// A refusal by the rules (`surface`: the persistence surface it protects).
    pub(super) fn report_refusal(&self, path: &Path, op: &str, surface: String) {
        self.refusals.set(self.refusals.get() + 1);
        let (pid, exe) = asker(self.asking.get());
        self.send(&FromShim::Refused {
            path: path.display().to_string(),
            op: op.to_string(),
            surface,
            pid,
            exe,
        });
    }

    /// `attempt` failed with `errno`: reported when it was outside the writable trees.
    pub(super) fn report_failure(&self, tid: libc::pid_t, attempt: &Attempt, errno: Errno) {
        let Some(path) = absolute(tid, attempt) else {
            return;
        };
        if self.rules.guards(&path) {
            return;
        }
        let (pid, exe) = asker(tid);
        self.send(&FromShim::WriteFailed {
            path: path.display().to_string(),
            op: attempt.op.to_string(),
            errno: errno as i32,
            pid,
            exe,
        });
    }

    fn send(&self, msg: &FromShim) {
        if let Some(fd) = &self.events {
            crate::channel::try_send(fd.as_raw_fd(), msg);
        }
    }
}

/// The process of thread `tid` (as the sandbox numbers it) and its executable.
fn asker(tid: libc::pid_t) -> (i32, Option<String>) {
    let pid = thread_group(tid).unwrap_or(tid);
    let exe = read_link(tid, "exe").map(|p| p.display().to_string());
    (pid, exe)
}

/// The attempt's path as an absolute one, as the asking thread saw it (from its working
/// directory or the directory descriptor it named); `.` and `..` taken out by their names.
fn absolute(tid: libc::pid_t, attempt: &Attempt) -> Option<PathBuf> {
    let given = Path::new(std::ffi::OsStr::from_bytes(&attempt.path));
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        let base = if attempt.dirfd == AT_FDCWD {
            read_link(tid, "cwd")?
        } else {
            read_link(tid, &format!("fd/{}", attempt.dirfd))?
        };
        base.join(given)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_path_is_made_absolute_from_the_directory_it_was_named_from() {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let cwd = std::env::current_dir().unwrap();
        let a = Attempt {
            dirfd: AT_FDCWD,
            path: b"a/./b/../c".to_vec(),
            op: "create",
        };
        assert_eq!(absolute(tid, &a).unwrap(), cwd.join("a/c"));
        let a = Attempt {
            dirfd: 12345,
            path: b"/etc/../usr/x".to_vec(),
            op: "create",
        };
        assert_eq!(absolute(tid, &a).unwrap(), PathBuf::from("/usr/x"));
    }

    #[test]
    fn only_the_sandboxs_limits_are_violations() {
        assert!(is_violation(Errno::EROFS));
        assert!(is_violation(Errno::EACCES));
        assert!(is_violation(Errno::EPERM));
        assert!(!is_violation(Errno::ENOENT));
        assert!(!is_violation(Errno::EEXIST));
    }
}
