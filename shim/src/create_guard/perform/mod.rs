//! The operations init performs for the target, on the places and objects `resolve` found:
//! `open` (opening, creating and truncating files), `entries` (mkdir, mknod, symlink, link,
//! rename), `socket` (bind), `connect`, `send` (sendto naming an address, sendmsg, sendmmsg).

mod connect;
mod entries;
mod gitconfig;
mod open;
mod send;
mod socket;

use std::os::fd::{FromRawFd, OwnedFd};

use nix::errno::Errno;

use super::answer::Answer;
use super::decode::Request;
use super::report::{is_violation, Attempt};
use super::rules::{Op, Verdict};
use super::Handler;

impl Handler {
    /// Whether the rules allow `op`: EPERM (and a report) if not. A git `config` renamed into
    /// place is the rename's to handle; anywhere else that answer is a refusal.
    fn check(&self, op: Op<'_>) -> Result<(), Errno> {
        self.check_nested(op)?;
        match self.rules.judge(op) {
            Verdict::Allow => Ok(()),
            Verdict::Refuse(surface) => Err(self.refuse(op, surface)),
            Verdict::ValidateGitConfig => Err(self.refuse(op, "a git config".into())),
        }
    }

    /// [`check`](Self::check) `op`, and the same at every other name the path was reached by.
    /// [`Self::check_via`] for the creation of a file (no directory) at `place`.
    fn check_create(&self, place: &super::resolve::Place) -> Result<(), Errno> {
        self.check_via(
            Op::Create {
                path: &place.full,
                dir: false,
            },
            &place.via,
        )
    }

    fn check_via(&self, op: Op<'_>, via: &[std::path::PathBuf]) -> Result<(), Errno> {
        self.check(op)?;
        for p in via {
            self.check(op.at(p))?;
        }
        Ok(())
    }

    /// The rules of the nested sandboxes the asking task is in (see `nested`): each must allow
    /// `op`, whatever this sandbox's own rules say. Only their persistence refusals (EPERM) are
    /// reported; outside their writable trees (EACCES) is what their Landlock layer would say.
    fn check_nested(&self, op: Op<'_>) -> Result<(), Errno> {
        for entry in self.nested.borrow().iter() {
            if let Err((errno, why)) = entry.judge(op) {
                if errno == Errno::EPERM {
                    self.report_op(op, why);
                }
                return Err(errno);
            }
        }
        Ok(())
    }

    /// The source of a rename leaves its directory: a write there, which every nested sandbox
    /// of the asking task must allow.
    fn check_nested_source(&self, path: &std::path::Path) -> Result<(), Errno> {
        for entry in self.nested.borrow().iter() {
            entry.source(path).map_err(|(errno, _)| errno)?;
        }
        Ok(())
    }

    /// Tell the supervisor (it counts refusals and prints them with -v) and answer EPERM.
    fn refuse(&self, op: Op<'_>, surface: String) -> Errno {
        self.report_op(op, surface);
        Errno::EPERM
    }

    fn report_op(&self, op: Op<'_>, surface: String) {
        let (path, what) = match op {
            Op::Create { path, dir: true } => (path, "create a directory"),
            Op::Create { path, dir: false } => (path, "create"),
            Op::RenameTo { path, .. } => (path, "rename onto"),
            Op::Write { path } => (path, "write"),
        };
        self.report_refusal(path, what, surface);
    }

    /// Perform `r`; a failure outside the writable trees that the sandbox's limits caused
    /// (not a refusal, which is reported already) is reported too.
    pub(super) fn perform(&self, tid: libc::pid_t, r: Request) -> Result<Answer, Errno> {
        let attempt = Attempt::of(&r);
        let refusals = self.refusals.get();
        let outcome = self.perform_request(tid, r);
        if let (Err(e), Some(attempt)) = (&outcome, &attempt) {
            if is_violation(*e) && self.refusals.get() == refusals {
                self.report_failure(tid, attempt, *e);
            }
        }
        outcome
    }

    fn perform_request(&self, tid: libc::pid_t, r: Request) -> Result<Answer, Errno> {
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
            Request::Connect { fd, addr } => self.connect(who, fd, &addr),
            Request::Send {
                fd,
                flags,
                many,
                msgs,
            } => self.send_message(who, fd, flags, many, msgs),
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
