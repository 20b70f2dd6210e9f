//! Opening for writing, creating, truncating. An existing file is judged on its real path and
//! then reopened through its O_PATH descriptor (`/proc/self/fd/N`), so what is judged is what
//! is opened — a magic link in /proc (`/proc/self/fd/3` of a file opened read-only) included.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;

use super::super::answer::{answer, errno_of, Answer};
use super::super::resolve::{lookup, object, place, Found, Object};
use super::super::rules::Op;
use super::super::target::{controlling_tty, Asker};
use super::super::Handler;
use super::owned;

/// `/dev/tty`: the opener's controlling terminal, whichever it is.
const DEV_TTY: libc::dev_t = 5 << 8;

impl Handler {
    pub(super) fn open(
        &self,
        who: Asker<'_>,
        dirfd: i32,
        path: &CString,
        flags: i32,
        mode: u32,
    ) -> Result<Answer, Errno> {
        let cloexec = flags & libc::O_CLOEXEC != 0;
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return self.open_tmpfile(who, dirfd, path, flags, mode);
        }
        let creating = flags & libc::O_CREAT != 0;
        let nofollow = flags & libc::O_NOFOLLOW != 0;
        let place = if creating && flags & libc::O_EXCL != 0 {
            // O_EXCL: whatever is there (a symlink too) makes it fail; nothing is followed.
            place(who, dirfd, path)?
        } else {
            match lookup(who, dirfd, path, !nofollow)? {
                Found::Object(obj) => return self.reopen(who, obj, flags),
                // Nothing there (or a dangling symlink, followed to where it leads).
                Found::Missing(place) if creating => place,
                Found::Missing(_) => return Err(Errno::ENOENT),
            }
        };
        self.check_create(&place)?;
        // O_NOFOLLOW: the place was resolved above; a symlink swapped in since then must not
        // redirect it.
        let open_flags = flags | libc::O_CLOEXEC | libc::O_NOFOLLOW;
        // SAFETY: valid descriptor and NUL-terminated name.
        let fd = owned(unsafe {
            libc::openat(place.dir.as_raw_fd(), place.name.as_ptr(), open_flags, mode)
        })?;
        Ok(Answer::Fd(fd, cloexec))
    }

    /// Open an existing object as asked, once the rules allow writing it.
    fn reopen(&self, who: Asker<'_>, obj: Object, flags: i32) -> Result<Answer, Errno> {
        let cloexec = flags & libc::O_CLOEXEC != 0;
        if obj.kind() == libc::S_IFLNK {
            // Only reached with O_NOFOLLOW: the kernel refuses to open a symlink.
            return Err(Errno::ELOOP);
        }
        if let Some(real) = &obj.real {
            if real.as_os_str().as_encoded_bytes().ends_with(b" (deleted)") {
                // Unlinked: harmless when nothing else names it (an O_TMPFILE file, a file
                // removed since); another hard link could be anywhere.
                if obj.stat.st_nlink > 0 {
                    return Err(Errno::EPERM);
                }
            } else {
                self.check_via(Op::Write { path: real }, &obj.via)?;
            }
        }
        self.check_privileged(&obj)?;
        if obj.kind() == libc::S_IFCHR && obj.stat.st_rdev == DEV_TTY {
            return self.open_tty(who, flags);
        }
        // The place was judged: reopening goes through the object itself.
        let flags = (flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW)) | libc::O_CLOEXEC;
        let path = obj.proc_path();
        if obj.kind() == libc::S_IFIFO {
            // Opening a FIFO waits for its other end: do it off the guard's thread, so other
            // requests (perhaps that other end) are not held up.
            return self.defer_open(obj.fd, path, flags, cloexec);
        }
        // SAFETY: a NUL-terminated path.
        let fd = owned(unsafe { libc::open(path.as_ptr(), flags) })?;
        Ok(Answer::Fd(fd, cloexec))
    }

    /// A program that runs with privileges of its own is not written: a set-user-ID file, a
    /// set-group-ID one that can run, or one with file capabilities. No mode with those bits
    /// can be given inside (`seccomp::setid`), but such a file may be in a writable tree
    /// already — of root's, idmapped to the sandbox's user — and content written through a
    /// shared mapping keeps the bits (a `write` clears them; a store into the mapping does not).
    fn check_privileged(&self, obj: &Object) -> Result<(), Errno> {
        if obj.kind() != libc::S_IFREG {
            return Ok(());
        }
        let mode = obj.stat.st_mode;
        let set_id = mode & libc::S_ISUID != 0
            || mode & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP;
        let runnable = mode & (libc::S_IXUSR | libc::S_IXGRP | libc::S_IXOTH) != 0;
        let why = if set_id {
            "a set-user-ID or set-group-ID program"
        } else if runnable && has_capabilities(obj) {
            "a program with file capabilities"
        } else {
            return Ok(());
        };
        let path = obj.real.clone().unwrap_or_default();
        self.report_refusal(
            &path,
            "write",
            format!("{why}: it would run with them on the host"),
        );
        Err(Errno::EPERM)
    }

    /// `/dev/tty` is the *opener's* controlling terminal. Init shares the launcher's, which is
    /// the target's unless the target started a session of its own (tmux, script, expect inside):
    /// then its terminal is a pty of the sandbox's devpts, opened by name.
    fn open_tty(&self, who: Asker<'_>, flags: i32) -> Result<Answer, Errno> {
        let cloexec = flags & libc::O_CLOEXEC != 0;
        let flags = (flags & !(libc::O_CREAT | libc::O_EXCL)) | libc::O_CLOEXEC | libc::O_NOCTTY;
        let theirs = controlling_tty(who.tid).ok_or(Errno::ESRCH)?;
        if theirs == 0 {
            return Err(Errno::ENXIO);
        }
        let mine = controlling_tty(std::process::id() as libc::pid_t).unwrap_or(0);
        let path = if theirs == mine {
            CString::new("/dev/tty")
        } else {
            let (major, minor) = (libc::major(theirs), libc::minor(theirs));
            if !(136..=143).contains(&major) {
                return Err(Errno::ENXIO);
            }
            CString::new(format!("/dev/pts/{}", (major - 136) * 256 + minor))
        }
        .map_err(|_| Errno::EINVAL)?;
        // SAFETY: a NUL-terminated path.
        let fd = owned(unsafe { libc::open(path.as_ptr(), flags) })?;
        if theirs != mine {
            // SAFETY: stat is plain data; fstat fills it.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: a valid descriptor and a pointer to a stat.
            let same = unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFCHR
                && st.st_rdev == theirs;
            if !same {
                return Err(Errno::ENXIO);
            }
        }
        Ok(Answer::Fd(fd, cloexec))
    }

    /// An unnamed file in a directory (O_TMPFILE): no name appears until it is linked, and the
    /// link is judged then. The directory is judged like a file created in it.
    fn open_tmpfile(
        &self,
        who: Asker<'_>,
        dirfd: i32,
        path: &CString,
        flags: i32,
        mode: u32,
    ) -> Result<Answer, Errno> {
        let dir = object(who, dirfd, path, flags & libc::O_NOFOLLOW == 0)?;
        if let Some(real) = &dir.real {
            let via: Vec<_> = dir.via.iter().map(|v| v.join("#tmpfile")).collect();
            self.check_via(
                Op::Create {
                    path: &real.join("#tmpfile"),
                    dir: false,
                },
                &via,
            )?;
        }
        // SAFETY: a valid (O_PATH) directory descriptor and a NUL-terminated name.
        let fd = owned(unsafe {
            libc::openat(
                dir.fd.as_raw_fd(),
                c".".as_ptr(),
                flags | libc::O_CLOEXEC,
                mode,
            )
        })?;
        Ok(Answer::Fd(fd, flags & libc::O_CLOEXEC != 0))
    }

    /// truncate(2): judged like an open for writing, performed on the object itself.
    pub(super) fn truncate(
        &self,
        who: Asker<'_>,
        path: &CString,
        length: i64,
    ) -> Result<Answer, Errno> {
        let obj = object(who, libc::AT_FDCWD, path, true)?;
        match obj.kind() {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Err(Errno::EISDIR),
            _ => return Err(Errno::EINVAL),
        }
        if let Some(real) = &obj.real {
            self.check_via(Op::Write { path: real }, &obj.via)?;
        }
        self.check_privileged(&obj)?;
        let p = obj.proc_path();
        // SAFETY: a NUL-terminated path.
        let fd = owned(unsafe { libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) })?;
        // SAFETY: a valid descriptor.
        errno_of(unsafe { libc::ftruncate(fd.as_raw_fd(), length) })
    }

    /// Open on a thread of its own and answer the notification from there.
    fn defer_open(
        &self,
        obj: OwnedFd,
        path: CString,
        flags: i32,
        cloexec: bool,
    ) -> Result<Answer, Errno> {
        let id = self.current.get();
        let listener = self.listener.try_clone().map_err(|_| Errno::EMFILE)?;
        // No thread (the sandbox's process limit reached, say by FIFO opens that all wait):
        // this open fails, as a fork would. `std::thread::spawn` would panic, ending the guard
        // (every creation inside would wait forever) or, built with panic=abort, init.
        std::thread::Builder::new()
            .spawn(move || {
                // SAFETY: a NUL-terminated path (the /proc link of `obj`, kept open until here).
                let outcome = owned(unsafe { libc::open(path.as_ptr(), flags) })
                    .map(|fd| Answer::Fd(fd, cloexec));
                drop(obj);
                let _ = answer(listener.as_raw_fd(), id, outcome);
            })
            .map_err(|_| Errno::EAGAIN)?;
        Ok(Answer::Deferred)
    }
}

/// Whether the file holds a `security.capability` attribute (read through its /proc link:
/// extended attributes cannot be read from an O_PATH descriptor).
fn has_capabilities(obj: &Object) -> bool {
    let path = obj.proc_path();
    let name = c"security.capability";
    // SAFETY: NUL-terminated path and name; a zero-sized query writes nothing.
    let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    n >= 0
}
