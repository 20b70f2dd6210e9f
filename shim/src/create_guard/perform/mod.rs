//! The operations init performs for the target, on the places and objects `resolve` found:
//! `open` (opening, creating and truncating files), `entries` (mkdir, mknod, symlink, link,
//! rename), `socket` (bind).

mod entries;
mod open;
mod socket;

use std::os::fd::{FromRawFd, OwnedFd};

use nix::errno::Errno;

use super::answer::Answer;
use super::decode::Request;
use super::rules::{allowed, Creates, Op};
use super::Handler;

impl Handler {
    /// Whether the rules allow `op`; EPERM if not.
    fn check(&self, op: Op<'_>) -> Result<(), Errno> {
        let ok = match op {
            Op::Create { path, dir } => allowed(
                &self.guards,
                path,
                if dir {
                    Creates::Directory
                } else {
                    Creates::NonDirectory
                },
            ),
            Op::RenameTo { path } => allowed(&self.guards, path, Creates::Renamed),
            Op::Write { path } => allowed(&self.guards, path, Creates::NonDirectory),
        };
        if ok {
            Ok(())
        } else {
            Err(Errno::EPERM)
        }
    }

    pub(super) fn perform(&self, tid: libc::pid_t, r: Request) -> Result<Answer, Errno> {
        let who = self.targets.asker(tid);
        match r {
            Request::Open {
                dirfd,
                path,
                flags,
                mode,
            } => self.open(who, dirfd, &path, flags, mode),
            Request::Truncate { path, length } => self.truncate(who, &path, length),
            Request::Mkdir { dirfd, path, mode } => self.mkdir(who, dirfd, &path, mode),
            Request::Mknod {
                dirfd,
                path,
                mode,
                dev,
            } => self.mknod(who, dirfd, &path, mode, dev),
            Request::Symlink {
                target,
                dirfd,
                path,
            } => self.symlink(who, &target, dirfd, &path),
            Request::Link {
                olddirfd,
                old,
                newdirfd,
                new,
                flags,
            } => self.link(who, (olddirfd, &old), (newdirfd, &new), flags),
            Request::Rename {
                olddirfd,
                old,
                newdirfd,
                new,
                flags,
            } => self.rename(who, (olddirfd, &old), (newdirfd, &new), flags),
            Request::Bind { fd, addr } => self.bind(who, fd, &addr),
        }
    }
}

/// A descriptor from a raw syscall result.
fn owned(fd: libc::c_int) -> Result<OwnedFd, Errno> {
    if fd < 0 {
        Err(Errno::last())
    } else {
        // SAFETY: a descriptor just returned to us.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}
