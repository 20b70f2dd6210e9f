//! Probes run in forked children, so that nothing a probe does (namespaces, mounts, filters)
//! changes the doctor itself.

use std::path::Path;

use nix::errno::Errno;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

fn errno() -> Result<(), String> {
    Err(std::io::Error::last_os_error().to_string())
}

/// Run `f` in a forked child that has unshared `flags` (which include CLONE_NEWUSER) and whose
/// ids are mapped as the launcher maps them, by the launcher's own code: unprivileged, its own
/// uid/gid, by the child itself; root, the sandbox's user (nobody), by this process (mapping
/// uid 0 would take CAP_SETFCAP, which the launch does without). A refused map comes back as
/// the launch's failure (see `split_failure`), with its hint.
pub fn in_userns(flags: libc::c_int, f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    let (ready_r, ready_w) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (go_r, go_w) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    let own_maps = (!uid.is_root()).then(|| {
        crate::namespaces::OwnMaps::new(crate::namespaces::Identity {
            uid: uid.as_raw(),
            gid: gid.as_raw(),
            switch_from_root: false,
        })
    });
    let sandbox = crate::namespaces::Identity {
        uid: crate::users::default_user().0,
        gid: crate::users::default_group(),
        switch_from_root: true,
    };
    let map_failure = std::cell::RefCell::new(None);
    let map_failed = &map_failure;
    let r = in_child_with(
        move || {
            // SAFETY: unshare has no memory-safety preconditions; we are a forked child.
            let r = if unsafe { libc::unshare(flags) } != 0 {
                errno()
            } else {
                Ok(())
            };
            if let Some(maps) = own_maps {
                r?;
                // SAFETY: only syscalls, in the forked child.
                return if unsafe { maps.write_own() } {
                    f()
                } else {
                    Err("cannot map our own uid/gid in the new user namespace".into())
                };
            }
            // As the launch does: root with CAP_SYS_ADMIN does without a user namespace where
            // none can be made (then there is nothing to map).
            let mut r = r.map(|()| b"k");
            if let Err(e) = &r {
                let errno = nix::errno::Errno::last();
                let others = flags & !libc::CLONE_NEWUSER;
                if others != 0 && crate::namespaces::can_do_without_user_namespace(errno) {
                    // SAFETY: as above.
                    r = if unsafe { libc::unshare(others) } != 0 {
                        Err(format!("{e}; without a user namespace: {}", Errno::last()))
                    } else {
                        Ok(b"n")
                    };
                }
            }
            let _ = nix::unistd::write(&ready_w, r.as_ref().map_or(b"e", |m| *m));
            let mapped = r? == b"k";
            let mut b = [0u8; 1];
            match nix::unistd::read(&go_r, &mut b) {
                // Mapped: the sandbox's user, as the launch's child becomes it.
                Ok(1) if b[0] == b'k' && mapped => {
                    // SAFETY: only syscalls, in the forked child.
                    if unsafe { crate::namespaces::switch_to(sandbox) } {
                        f()
                    } else {
                        Err(format!(
                            "cannot become uid {}: {}",
                            sandbox.uid,
                            Errno::last()
                        ))
                    }
                }
                Ok(1) if b[0] == b'k' => f(),
                _ => Err("the parent could not map our ids".into()),
            }
        },
        move |child| {
            let mut b = [0u8; 1];
            if !uid.is_root() || !matches!(nix::unistd::read(&ready_r, &mut b), Ok(1)) {
                return;
            }
            if b[0] == b'n' {
                let _ = nix::unistd::write(&go_w, b"k");
                return;
            }
            if b[0] != b'k' {
                return;
            }
            let mapped = crate::namespaces::write_maps(child.as_raw(), sandbox);
            let _ = nix::unistd::write(&go_w, if mapped.is_ok() { b"k" } else { b"e" });
            if let Err(e) = mapped {
                *map_failed.borrow_mut() =
                    Some(serde_json::to_string(&e.0).unwrap_or_else(|_| e.to_string()));
            }
        },
    );
    match map_failure.into_inner() {
        Some(failure) => Err(failure),
        None => r,
    }
}

/// The launcher's own mount wrapper, with the error as text for the report.
pub fn mount(
    src: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    shim::sys::mount(src.map(Path::new), Path::new(target), fstype, flags, data)
        .map_err(|e| e.to_string())
}

/// Run `f` in a forked child and bring back its result (the error text through a pipe).
pub fn in_child(f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    in_child_with(f, |_| {})
}

/// As `in_child`, with `parent` run (given the child's pid) while the child runs.
fn in_child_with(
    f: impl FnOnce() -> Result<(), String>,
    parent: impl FnOnce(nix::unistd::Pid),
) -> Result<(), String> {
    let (r, w) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: the doctor is single-threaded; the child only makes syscalls and exits.
    match unsafe { fork() } {
        Err(e) => Err(format!("fork: {e}")),
        Ok(ForkResult::Child) => {
            drop(r);
            drop(parent);
            let code = match f() {
                Ok(()) => 0,
                Err(msg) => {
                    let _ = nix::unistd::write(&w, msg.as_bytes());
                    1
                }
            };
            // SAFETY: _exit skips atexit handlers and destructors that belong to the parent.
            unsafe { libc::_exit(code) }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(w);
            // Close the child's ends of any pipes `f` holds before waiting on them.
            drop(f);
            parent(child);
            let mut msg = Vec::new();
            let mut file = std::fs::File::from(r);
            let _ = std::io::Read::read_to_end(&mut file, &mut msg);
            match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, 0)) => Ok(()),
                Ok(WaitStatus::Exited(_, _)) => Err(String::from_utf8_lossy(&msg).into_owned()),
                Ok(other) => Err(format!("probe ended unexpectedly: {other:?}")),
                Err(e) => Err(format!("waitpid: {e}")),
            }
        }
    }
}
