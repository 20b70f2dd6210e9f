//! Creating directory entries: mkdir, mknod, symlink, link, rename.

use std::ffi::CString;
use std::os::fd::AsRawFd;

use nix::errno::Errno;

use super::super::answer::{errno_of, Answer};
use super::super::resolve::Place;
use super::super::resolve::{object, object_of_fd, place};
use super::super::rules::{Op, Verdict};
use super::super::target::Asker;
use super::super::{Handler, AT_FDCWD};

impl Handler {
    pub(super) fn mkdir(
        &self,
        who: Asker<'_>,
        dirfd: i32,
        path: &CString,
        mode: u32,
    ) -> Result<Answer, Errno> {
        let place = place(who, dirfd, path)?;
        self.check_via(
            Op::Create {
                path: &place.full,
                dir: true,
            },
            &place.via,
        )?;
        // SAFETY: valid descriptor and NUL-terminated name.
        errno_of(unsafe { libc::mkdirat(place.dir.as_raw_fd(), place.name.as_ptr(), mode) })
    }

    pub(super) fn mknod(
        &self,
        who: Asker<'_>,
        dirfd: i32,
        path: &CString,
        mode: u32,
        dev: u64,
    ) -> Result<Answer, Errno> {
        let place = place(who, dirfd, path)?;
        self.check_create(&place)?;
        // SAFETY: valid descriptor and NUL-terminated name.
        errno_of(unsafe { libc::mknodat(place.dir.as_raw_fd(), place.name.as_ptr(), mode, dev) })
    }

    pub(super) fn symlink(
        &self,
        who: Asker<'_>,
        target: &CString,
        dirfd: i32,
        path: &CString,
    ) -> Result<Answer, Errno> {
        let place = place(who, dirfd, path)?;
        self.check_create(&place)?;
        // SAFETY: NUL-terminated strings and a valid descriptor.
        errno_of(unsafe {
            libc::symlinkat(target.as_ptr(), place.dir.as_raw_fd(), place.name.as_ptr())
        })
    }

    /// A hard link: judged at its new name and at its source (a protected file must not gain a
    /// second name where it is not protected), whatever names the source — a path, a
    /// descriptor (`AT_EMPTY_PATH`, an O_TMPFILE file), or `/proc/*/fd/N`.
    pub(super) fn link(
        &self,
        who: Asker<'_>,
        (olddirfd, old): (i32, &CString),
        (newdirfd, new): (i32, &CString),
        flags: i32,
    ) -> Result<Answer, Errno> {
        if flags & !(libc::AT_EMPTY_PATH | libc::AT_SYMLINK_FOLLOW) != 0 {
            return Err(Errno::EINVAL);
        }
        let to = place(who, newdirfd, new)?;
        self.check_create(&to)?;
        let from = if flags & libc::AT_EMPTY_PATH != 0 && old.as_bytes().is_empty() {
            object_of_fd(who, olddirfd)?
        } else {
            object(who, olddirfd, old, flags & libc::AT_SYMLINK_FOLLOW != 0)?
        };
        if let Some(real) = &from.real {
            self.check_via(Op::Write { path: real }, &from.via)?;
        }
        if from.kind() == libc::S_IFDIR {
            return Err(Errno::EPERM);
        }
        // Through the object's /proc link, the unprivileged way to link what a descriptor
        // refers to (a symlink opened without following is linked as the symlink).
        let src = from.proc_path();
        // SAFETY: NUL-terminated strings and valid descriptors.
        errno_of(unsafe {
            libc::linkat(
                AT_FDCWD,
                src.as_ptr(),
                to.dir.as_raw_fd(),
                to.name.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        })
    }

    pub(super) fn rename(
        &self,
        who: Asker<'_>,
        (olddirfd, old): (i32, &CString),
        (newdirfd, new): (i32, &CString),
        flags: u32,
    ) -> Result<Answer, Errno> {
        let from = place(who, olddirfd, old)?;
        let to = place(who, newdirfd, new)?;
        let from_dir = is_dir(&from);
        self.check_nested_source(&from.full)?;
        self.check_nested(Op::RenameTo {
            path: &to.full,
            dir: from_dir,
        })?;
        match self.rules.judge(Op::RenameTo {
            path: &to.full,
            dir: from_dir,
        }) {
            Verdict::Allow => {}
            Verdict::ValidateGitConfig if flags == 0 => {
                return self.replace_git_config(&from, &to);
            }
            Verdict::ValidateGitConfig => {
                return Err(self.refuse_rename(&to, "a git config (only renamed into place)"));
            }
            Verdict::Refuse(why) => return Err(self.refuse_rename(&to, &why)),
        }
        for v in &to.via {
            self.check(Op::RenameTo {
                path: v,
                dir: from_dir,
            })?;
        }
        if flags & libc::RENAME_EXCHANGE != 0 {
            self.check(Op::RenameTo {
                path: &from.full,
                dir: is_dir(&to),
            })?;
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

impl Handler {
    fn refuse_rename(&self, to: &Place, why: &str) -> Errno {
        self.report_refusal(&to.full, "rename onto", why.to_string());
        Errno::EPERM
    }
}

/// Whether the entry at `place` is a directory (not following a final symlink).
fn is_dir(place: &Place) -> bool {
    // SAFETY: stat is plain data; fstatat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor, a NUL-terminated name and a pointer to a stat.
    let r = unsafe {
        libc::fstatat(
            place.dir.as_raw_fd(),
            place.name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR
}
