//! A git directory's `config` renamed into place (git writes it only as `config.lock` renamed
//! over it): its content is validated (see `rules::gitconfig`) and then written by init into a
//! file of its own, which is what is renamed over `config` — so a writer that still holds the
//! lock file open cannot change what lands after the check.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;

use nix::errno::Errno;

use super::super::answer::Answer;
use super::super::resolve::Place;
use super::super::rules::{validate_git_config, MAX_CONFIG};
use super::super::Handler;
use super::owned;

/// Read a regular file `name` in `dir` (not following a symlink), at most `MAX_CONFIG` bytes.
/// `Ok(None)` when there is none.
fn read_small(dir: &OwnedFd, name: &CString) -> Result<Option<(Vec<u8>, u32)>, Errno> {
    // SAFETY: a valid descriptor and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return match Errno::last() {
            Errno::ENOENT => Ok(None),
            e => Err(e),
        };
    }
    // SAFETY: a descriptor just opened.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let meta = file.metadata().map_err(|_| Errno::EIO)?;
    if !meta.is_file() || meta.len() as usize > MAX_CONFIG {
        return Err(Errno::EPERM);
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_CONFIG as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| Errno::EIO)?;
    if bytes.len() > MAX_CONFIG {
        return Err(Errno::EPERM);
    }
    Ok(Some((bytes, meta.permissions().mode() & 0o7777)))
}

impl Handler {
    pub(super) fn replace_git_config(&self, from: &Place, to: &Place) -> Result<Answer, Errno> {
        let refuse = |why: String| {
            self.report_refusal(&to.full, "rename onto", why);
            Errno::EPERM
        };
        let Some((new, mode)) = read_small(&from.dir, &from.name)? else {
            return Err(Errno::ENOENT);
        };
        let old = read_small(&to.dir, &to.name).ok().flatten().map(|(b, _)| b);
        if let Err(key) = validate_git_config(&new, old.as_deref()) {
            return Err(refuse(format!(
                "a git config setting {key}, which can run a command on the host: run `git \
                 config` outside the sandbox"
            )));
        }
        // Written afresh by init, next to `config`, then renamed over it.
        let mut tmp = None;
        for n in 0..16 {
            let name = CString::new(format!("config.sandbox-launch-{}-{n}", std::process::id()))
                .map_err(|_| Errno::EINVAL)?;
            // SAFETY: a valid descriptor and a NUL-terminated name.
            let fd = unsafe {
                libc::openat(
                    to.dir.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_WRONLY
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    mode,
                )
            };
            match owned(fd) {
                Ok(fd) => {
                    tmp = Some((name, fd));
                    break;
                }
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(e),
            }
        }
        let (name, fd) = tmp.ok_or(Errno::EEXIST)?;
        let mut file = std::fs::File::from(fd);
        let written = file
            .write_all(&new)
            .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(mode)));
        // SAFETY: valid descriptors and NUL-terminated names.
        let renamed = written.is_ok()
            && unsafe {
                libc::renameat(
                    to.dir.as_raw_fd(),
                    name.as_ptr(),
                    to.dir.as_raw_fd(),
                    to.name.as_ptr(),
                )
            } == 0;
        if !renamed {
            let e = Errno::last();
            // SAFETY: as above.
            unsafe { libc::unlinkat(to.dir.as_raw_fd(), name.as_ptr(), 0) };
            return Err(if e == Errno::UnknownErrno {
                Errno::EIO
            } else {
                e
            });
        }
        // The rename the program asked for takes its source away.
        // SAFETY: as above.
        unsafe { libc::unlinkat(from.dir.as_raw_fd(), from.name.as_ptr(), 0) };
        Ok(Answer::Value(0))
    }
}
