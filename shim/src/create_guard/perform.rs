//! The operations init performs for the target, on the places `resolve` found.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

use super::answer::{answer, errno_of, Answer};
use super::decode::Request;
use super::resolve::{follow_final_symlinks, on_procfs, resolve, Place};
use super::rules::{allowed, Creates};
use super::{Handler, AT_FDCWD};

impl Handler {
    fn is_fifo(&self, place: &Place) -> bool {
        // SAFETY: stat is plain data; fstatat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor, a NUL-terminated name and a pointer to a stat.
        let r = unsafe { libc::fstatat(place.dir.as_raw_fd(), place.name.as_ptr(), &mut st, 0) };
        r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO
    }

    /// Open on a thread of its own and answer the notification from there.
    fn defer_open(
        &self,
        place: Place,
        flags: i32,
        mode: u32,
        cloexec: bool,
    ) -> Result<Answer, Errno> {
        let id = self.current.get();
        let listener = self.listener.try_clone().map_err(|_| Errno::EMFILE)?;
        std::thread::spawn(move || {
            // SAFETY: valid descriptor and NUL-terminated name.
            let fd =
                unsafe { libc::openat(place.dir.as_raw_fd(), place.name.as_ptr(), flags, mode) };
            let outcome = if fd < 0 {
                Err(Errno::last())
            } else {
                // SAFETY: a descriptor we just opened.
                Ok(Answer::Fd(unsafe { OwnedFd::from_raw_fd(fd) }, cloexec))
            };
            let _ = answer(listener.as_raw_fd(), id, outcome);
        });
        Ok(Answer::Deferred)
    }

    fn check(&self, place: &Place, what: Creates) -> Result<(), Errno> {
        if allowed(&self.guards, &place.full, what) {
            Ok(())
        } else {
            Err(Errno::EPERM)
        }
    }

    pub(super) fn perform(&self, pid: libc::pid_t, r: Request) -> Result<Answer, Errno> {
        match r {
            Request::Open {
                dirfd,
                path,
                flags,
                mode,
            } => {
                let mut place = resolve(pid, dirfd, &path)?;
                // In /proc nothing can be created, and `fd/N` entries are magic links that only
                // the kernel can follow: open them as they are.
                if flags & libc::O_EXCL == 0 && flags & libc::O_NOFOLLOW == 0 {
                    place = follow_final_symlinks(pid, place)?;
                }
                let mut open_flags = flags | libc::O_CLOEXEC;
                if !on_procfs(&place.dir) {
                    self.check(&place, Creates::NonDirectory)?;
                    // O_NOFOLLOW: the place was resolved above; do not let a symlink swapped in
                    // since then redirect it.
                    open_flags |= libc::O_NOFOLLOW;
                }
                if self.is_fifo(&place) {
                    // Opening a FIFO waits for its other end: do it off the guard's thread, so
                    // other creations (perhaps that other end) are not held up.
                    return self.defer_open(place, open_flags, mode, flags & libc::O_CLOEXEC != 0);
                }
                // SAFETY: valid descriptor and NUL-terminated name.
                let fd = unsafe {
                    libc::openat(place.dir.as_raw_fd(), place.name.as_ptr(), open_flags, mode)
                };
                if fd < 0 {
                    return Err(Errno::last());
                }
                // SAFETY: a descriptor we just opened.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                Ok(Answer::Fd(fd, flags & libc::O_CLOEXEC != 0))
            }
            Request::Mkdir { dirfd, path, mode } => {
                let place = resolve(pid, dirfd, &path)?;
                self.check(&place, Creates::Directory)?;
                // SAFETY: valid descriptor and NUL-terminated name.
                errno_of(unsafe { libc::mkdirat(place.dir.as_raw_fd(), place.name.as_ptr(), mode) })
            }
            Request::Mknod {
                dirfd,
                path,
                mode,
                dev,
            } => {
                let place = resolve(pid, dirfd, &path)?;
                self.check(&place, Creates::NonDirectory)?;
                // SAFETY: valid descriptor and NUL-terminated name.
                errno_of(unsafe {
                    libc::mknodat(place.dir.as_raw_fd(), place.name.as_ptr(), mode, dev)
                })
            }
            Request::Symlink {
                target,
                dirfd,
                path,
            } => {
                let place = resolve(pid, dirfd, &path)?;
                self.check(&place, Creates::NonDirectory)?;
                // SAFETY: NUL-terminated strings and a valid descriptor.
                errno_of(unsafe {
                    libc::symlinkat(target.as_ptr(), place.dir.as_raw_fd(), place.name.as_ptr())
                })
            }
            Request::Link {
                olddirfd,
                old,
                newdirfd,
                new,
                flags,
            } => {
                let to = resolve(pid, newdirfd, &new)?;
                self.check(&to, Creates::NonDirectory)?;
                if flags & libc::AT_EMPTY_PATH != 0 && old.as_bytes().is_empty() {
                    // Linking an open descriptor (an O_TMPFILE file): through its /proc link,
                    // the unprivileged way.
                    let src =
                        CString::new(format!("/proc/{pid}/fd/{olddirfd}")).unwrap_or_default();
                    // SAFETY: NUL-terminated strings and a valid descriptor.
                    return errno_of(unsafe {
                        libc::linkat(
                            AT_FDCWD,
                            src.as_ptr(),
                            to.dir.as_raw_fd(),
                            to.name.as_ptr(),
                            libc::AT_SYMLINK_FOLLOW,
                        )
                    });
                }
                let from = resolve(pid, olddirfd, &old)?;
                // SAFETY: NUL-terminated names and valid descriptors.
                errno_of(unsafe {
                    libc::linkat(
                        from.dir.as_raw_fd(),
                        from.name.as_ptr(),
                        to.dir.as_raw_fd(),
                        to.name.as_ptr(),
                        flags & libc::AT_SYMLINK_FOLLOW,
                    )
                })
            }
            Request::Rename {
                olddirfd,
                old,
                newdirfd,
                new,
                flags,
            } => {
                let from = resolve(pid, olddirfd, &old)?;
                let to = resolve(pid, newdirfd, &new)?;
                self.check(&to, Creates::Renamed)?;
                if flags & libc::RENAME_EXCHANGE != 0 {
                    self.check(&from, Creates::Renamed)?;
                }
                // SAFETY: NUL-terminated names and valid descriptors.
                errno_of(unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        from.dir.as_raw_fd(),
                        from.name.as_ptr(),
                        to.dir.as_raw_fd(),
                        to.name.as_ptr(),
                        flags,
                    ) as libc::c_int
                })
            }
        }
    }
}
