//! `--worktree` at launch: a new worktree in the store, the checkout's state recorded, and the
//! plan changed so that the working directory is an overlay (the checkout read-only below, the
//! worktree's `upper/` above) instead of a writable bind of the checkout.
//!
//! In the plan: the working directory's writable bind becomes the overlay; the persistence
//! model's binds inside it (read-only protected paths and the pins above them, binds of the
//! host's tree over the overlay) go, and so does the create guard's root there: nothing the
//! program writes reaches the checkout, and what it writes to persistence surfaces is shown by
//! `diff` and applied only when named. `--deny-write` paths stay read-only, `--deny-read`
//! masks stay. The store is hidden from the sandbox like the control directory: the program
//! must not reach the upper layer other than through the overlay (where overlayfs keeps
//! `user.overlay.*` attributes out of its hands).

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use shim::channel::{Step, StepError};
use shim::spec::{MountOp, SandboxSpec};

use super::manifest;
use super::store::{now, Meta, Store, Worktree};

fn err(what: impl std::fmt::Display, fix: &str) -> StepError {
    StepError::new(Step::Mounts, format!("--worktree: {what}"), Some(fix))
}

/// The user extended attributes overlayfs needs (`userxattr`) work where `dir` is.
fn check_user_xattrs(dir: &Path) -> Result<(), StepError> {
    let c = CString::new(dir.as_os_str().as_bytes()).map_err(|_| err("NUL in path", ""))?;
    let name = c"user.sandbox-launch.probe";
    // SAFETY: valid C strings and a one-byte value.
    let r = unsafe { libc::setxattr(c.as_ptr(), name.as_ptr(), b"1".as_ptr().cast(), 1, 0) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(err(
            format!(
                "the filesystem of {} cannot hold user extended attributes ({e}), which a rootless overlay's upper layer needs (whiteouts, opaque directories)",
                dir.display()
            ),
            "set XDG_STATE_HOME to a directory on ext4, xfs or btrfs (tmpfs needs Linux 6.6)",
        ));
    }
    // SAFETY: valid C strings.
    unsafe { libc::removexattr(c.as_ptr(), name.as_ptr()) };
    Ok(())
}

/// What the launch keeps: the worktree (its meta is updated when the sandbox ends) and,
/// started as root, the detached copy of its layers (open until the shim has mounted it).
pub struct Launched {
    pub worktree: Worktree,
    pub fds: Vec<OwnedFd>,
}

/// Make the worktree of sandbox `id` and turn `spec`'s working directory into its overlay.
/// `owner`: started as root, the sandbox's user, who must own the upper layer.
pub fn prepare(
    spec: &mut SandboxSpec,
    id: &str,
    name: Option<&str>,
    deny_write: &[PathBuf],
    owner: Option<(u32, u32)>,
) -> Result<Launched, StepError> {
    let project = spec.cwd.clone();
    let store = Store::locate().map_err(|e| err(format!("{e:#}"), "set XDG_STATE_HOME"))?;
    store.ensure().map_err(|e| {
        err(
            format!("{e:#}"),
            "set XDG_STATE_HOME to a private directory",
        )
    })?;
    let root = std::fs::canonicalize(&store.root).unwrap_or(store.root.clone());
    if root.starts_with(&project) || project.starts_with(&root) {
        return Err(err(
            format!(
                "the worktrees' directory {} and the working directory {} overlap (overlayfs refuses a layer inside another)",
                root.display(),
                project.display()
            ),
            "run from the project's directory, or set XDG_STATE_HOME outside it",
        ));
    }
    let meta = Meta {
        id: id.to_string(),
        name: name.map(str::to_string),
        project: project.clone(),
        program: spec.argv.clone(),
        started: now(),
        launcher_pid: std::process::id(),
        ended: None,
        exit_code: None,
    };
    let worktree = store
        .create(meta)
        .map_err(|e| err(format!("{e:#}"), "see `sandbox-launch worktrees`"))?;
    let made = (|| {
        check_user_xattrs(&worktree.work())?;
        manifest::record(&project, &worktree.base()).map_err(|e| {
            err(
                format!("recording the checkout: {e:#}"),
                "the checkout must be readable",
            )
        })?;
        // The overlay's top directory has the upper directory's permissions: the checkout's
        // (`layers/`, 0700, keeps others out).
        let mode = std::fs::metadata(&project)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0o755);
        std::fs::set_permissions(worktree.upper(), std::fs::Permissions::from_mode(mode))
            .map_err(|e| err(format!("chmod {}: {e}", worktree.upper().display()), ""))?;
        let mut fds = Vec::new();
        if let Some((uid, gid)) = owner {
            for d in [worktree.layers(), worktree.upper(), worktree.work()] {
                std::os::unix::fs::chown(&d, Some(uid), Some(gid))
                    .map_err(|e| err(format!("chown {}: {e}", d.display()), ""))?;
            }
            fds.push(shim::sys::open_tree_clone(&worktree.layers()).map_err(|e| {
                err(e, "started as root, the worktree's layers are handed to the sandbox as a detached mount; run `sandbox-launch doctor`")
            })?);
        }
        let layers_fd = fds.first().map(AsRawFd::as_raw_fd);
        into_plan(
            spec,
            &project,
            &root,
            deny_write,
            &worktree.layers(),
            layers_fd,
            owner.is_none(),
        )?;
        Ok(fds)
    })();
    match made {
        Ok(fds) => Ok(Launched { worktree, fds }),
        Err(e) => {
            let _ = worktree.remove();
            Err(e)
        }
    }
}

/// The plan's changes (see the module's comment).
fn into_plan(
    spec: &mut SandboxSpec,
    project: &Path,
    store: &Path,
    deny_write: &[PathBuf],
    layers: &Path,
    layers_fd: Option<i32>,
    mask_store: bool,
) -> Result<(), StepError> {
    let overlay = MountOp::Worktree {
        source: project.to_path_buf(),
        target: project.to_path_buf(),
        layers: layers.to_path_buf(),
        layers_fd,
    };
    let ops = &mut spec.mounts.ops;
    // A writable mount placed by name (`--bind`) inside the checkout is not part of the
    // worktree: it shows the host's tree there, over the overlay, and writes through it reach
    // the host. What protects it stays.
    let bound: Vec<PathBuf> = ops
        .iter()
        .filter_map(|op| match op {
            MountOp::Bind {
                target,
                read_only: false,
                ..
            } => Some(target.clone()),
            _ => None,
        })
        .collect();
    let in_bind = |t: &Path| bound.iter().any(|b| t.starts_with(b));
    let inside = |t: &Path| t != project && t.starts_with(project) && !in_bind(t);
    ops.retain(|op| match op {
        MountOp::ReadOnly { target, .. } if inside(target) => {
            deny_write.iter().any(|d| target.starts_with(d))
        }
        // A handed-in socket stays; the pins (directories) go.
        MountOp::ReadWrite { target, .. } if inside(target) => {
            std::fs::symlink_metadata(target).is_ok_and(|m| m.file_type().is_socket())
        }
        _ => true,
    });
    let own = ops.iter().position(|op| {
        matches!(op, MountOp::ReadWrite { source, target } if source == project && target == project)
    });
    match own {
        Some(i) => ops[i] = overlay,
        None => {
            let Some(i) = ops.iter().rposition(|op| {
                matches!(op, MountOp::ReadWrite { source, target } if source == target && project.starts_with(target))
            }) else {
                return Err(err(
                    format!("the working directory {} is not writable in this policy", project.display()),
                    "--worktree makes the working directory writable through an overlay; use a policy that makes it writable (include_workdir)",
                ));
            };
            ops.insert(i + 1, overlay);
        }
    }
    spec.persist
        .roots
        .retain(|r| !r.starts_with(project) || in_bind(r));
    // Started as root, the store is root's (0700) and the sandbox's user cannot reach it (nor
    // could the shim mount over it): verified only — unless a tree attached idmapped shows it.
    let idmapped = spec
        .mounts
        .attach
        .iter()
        .any(|a| store.starts_with(&a.target));
    // Hidden by every launch that found it (`control::hide::hide_worktree_store`); this one
    // may have made it.
    if !spec.verify_unreadable.iter().any(|p| p == store) {
        if mask_store || idmapped {
            crate::control::hide::hide(&mut spec.mounts, &mut spec.verify_unreadable, store);
        } else {
            spec.verify_unreadable.push(store.to_path_buf());
        }
    }
    Ok(())
}

/// The sandbox has ended: say so in the worktree's meta, and tell the user what is next. A
/// worktree the program wrote nothing in is not kept.
pub fn finish(mut w: Worktree, code: i32) {
    let empty = std::fs::read_dir(w.upper()).is_ok_and(|mut d| d.next().is_none());
    if empty {
        let label = w.label();
        match w.remove() {
            Ok(()) => crate::say!(
                "sandbox-launch: worktree {label}: nothing was written in the working directory; not kept"
            ),
            Err(e) => crate::say!("sandbox-launch: warning: worktree {label}: {e:#}"),
        }
        return;
    }
    w.meta.ended = Some(now());
    w.meta.exit_code = Some(code);
    if let Err(e) = w.save() {
        crate::say!("sandbox-launch: warning: worktree {}: {e:#}", w.label());
    }
    let t = w.meta.name.clone().unwrap_or(w.meta.id.clone());
    crate::say!(
        "sandbox-launch: worktree {} kept in {}: `sandbox-launch diff {t}` shows the changes, `apply {t}` applies them to {}, `discard {t}` removes them",
        w.label(),
        w.dir.display(),
        w.meta.project.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use shim::spec::MountPlan;

    fn rw(p: &str) -> MountOp {
        MountOp::ReadWrite {
            source: p.into(),
            target: p.into(),
        }
    }

    fn ro(p: &str) -> MountOp {
        MountOp::ReadOnly {
            source: p.into(),
            target: p.into(),
        }
    }

    #[test]
    fn the_workdir_bind_becomes_the_overlay_and_host_binds_inside_it_go() {
        let mut plan = MountPlan {
            host_root: true,
            ops: vec![
                rw("/p"),
                rw("/p/.git"),
                ro("/p/.git/hooks"),
                ro("/p/locked"),
                rw("/elsewhere"),
            ],
            ..Default::default()
        };
        let mut spec: SandboxSpec = serde_json::from_value(serde_json::json!({
            "argv": ["sh"], "env": [], "cwd": "/p", "hostname": "s",
            "mounts": {"host_root": true, "ops": []},
            "landlock": {"compat": "best_effort", "rules": [], "scope": true, "tcp_connect": null},
            "seccomp": {"name": "d", "json": "{}"}, "network": {"mode": "none"},
            "uid": 1, "gid": 1, "preserve_fds": [], "verify_unreadable": [],
            "verify_unwritable_dirs": [],
            "persist": {"roots": ["/p", "/elsewhere"], "rules": [], "overrides": []}
        }))
        .unwrap();
        std::mem::swap(&mut spec.mounts, &mut plan);
        into_plan(
            &mut spec,
            Path::new("/p"),
            Path::new("/s/worktrees"),
            &[PathBuf::from("/p/locked")],
            Path::new("/s/worktrees/x/layers"),
            Some(7),
            true,
        )
        .unwrap();
        let ops = &spec.mounts.ops;
        assert!(
            matches!(&ops[0], MountOp::Worktree { target, layers_fd: Some(7), .. } if target == Path::new("/p"))
        );
        assert_eq!(ops[1], ro("/p/locked"), "--deny-write stays");
        assert_eq!(ops[2], rw("/elsewhere"));
        assert!(
            matches!(&ops[3], MountOp::Mask { target, .. } if target == Path::new("/s/worktrees"))
        );
        assert_eq!(ops.len(), 4);
        assert_eq!(spec.persist.roots, [PathBuf::from("/elsewhere")]);
    }
}
