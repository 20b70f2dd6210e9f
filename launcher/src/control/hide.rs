//! The control directory must not be reachable from inside any sandbox: a program inside runs
//! as the same user, so a socket it could reach would let it answer its own prompts or widen
//! its own policy. In host-readable mode it lies under a tree the sandbox empties (`/run`,
//! `$XDG_RUNTIME_DIR`, a private `/dev/shm` or `/tmp`); an allow-list policy may bind such a
//! tree in. Where
//! the mount plan would show it, an empty mode-000 directory is mounted over it; either way the
//! shim verifies before the program starts that it cannot open it.

use std::path::{Path, PathBuf};

use shim::spec::{MountOp, MountPlan, SandboxSpec};

use super::dir::ControlDir;

/// Hide this user's control directory (every sandbox's socket is in it) from the sandbox of
/// `spec`: covered where the plan would show it, and always verified unreadable from inside.
///
/// Started as root (`switched_from_root`), the sandbox's user is another than the directory's
/// owner, whom its mode keeps out, and so is the shim: no cover can be mounted there, nor is
/// one needed — except inside a tree attached idmapped (`idmap`), where the owner appears as
/// the sandbox's user.
pub fn hide_control_dir(spec: &mut SandboxSpec, switched_from_root: bool) {
    if let Ok(dir) = std::fs::canonicalize(ControlDir::locate().path) {
        hide_private(spec, switched_from_root, &dir);
    }
}

/// Hide this user's worktree store from the sandbox of `spec` as the control directory is
/// hidden: from inside, a program could otherwise rewrite a kept worktree's record (which
/// checkout `apply` writes to, what it compares against) or its upper layer, and a later
/// `apply` would carry that out on the host. Nor may one be made there, where it is missing or
/// in place of it (a directory on the way to it renamed away, another put there): the create
/// guard refuses both (a worktree planted there would be listed, and applied, as the user's).
pub fn hide_worktree_store(spec: &mut SandboxSpec, switched_from_root: bool) {
    let Ok(store) = crate::worktree::store::Store::locate() else {
        return;
    };
    if let Ok(dir) = std::fs::canonicalize(&store.root) {
        hide_private(spec, switched_from_root, &dir);
    }
    let rule = shim::spec::ProtectRule {
        anchor: Some(canonical_parents(&store.root)),
        pattern: "**".into(),
        surface: "sandbox-launch's worktree store (`apply` would carry out what it holds)".into(),
    };
    if !spec.persist.rules.contains(&rule) {
        spec.persist.rules.push(rule);
    }
}

/// `p` with its longest existing ancestor made canonical (the rest does not exist).
fn canonical_parents(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = p;
    loop {
        if let Ok(c) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(c, |acc: PathBuf, n| acc.join(n));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// Hide `dir`, a directory of the caller's own with mode 0700 (see [`hide_control_dir`]).
fn hide_private(spec: &mut SandboxSpec, switched_from_root: bool, dir: &Path) {
    let idmapped = spec
        .mounts
        .attach
        .iter()
        .any(|a| dir.starts_with(&a.target));
    if !switched_from_root || idmapped {
        hide(&mut spec.mounts, &mut spec.verify_unreadable, dir);
    } else if !spec.verify_unreadable.iter().any(|p| p == dir) {
        spec.verify_unreadable.push(dir.to_path_buf());
    }
}

/// Cover every place where `dir` (canonical, existing) would appear inside, and have it
/// verified unreadable.
pub fn hide(plan: &mut MountPlan, verify_unreadable: &mut Vec<PathBuf>, dir: &Path) {
    for inside in visible_at(plan, dir) {
        plan.ops.push(MountOp::Mask {
            target: inside.clone(),
            dir: true,
        });
        if !verify_unreadable.contains(&inside) {
            verify_unreadable.push(inside);
        }
    }
    if !verify_unreadable.iter().any(|p| p == dir) {
        verify_unreadable.push(dir.to_path_buf());
    }
}

/// The paths inside the sandbox at which the host directory `dir` would be visible.
fn visible_at(plan: &MountPlan, dir: &Path) -> Vec<PathBuf> {
    let mut seen: Vec<PathBuf> = Vec::new();
    // `/dev` (with a private `/dev/shm`) and `/proc` are the sandbox's own before any op.
    let own = dir.starts_with("/dev") || dir.starts_with("/proc");
    if plan.host_root && !own {
        seen.push(dir.to_path_buf());
    }
    for op in &plan.ops {
        match op {
            MountOp::ReadOnly { source, target }
            | MountOp::ReadWrite { source, target }
            | MountOp::Bind { source, target, .. }
            | MountOp::Overlay { source, target, .. } => {
                seen.retain(|p| !p.starts_with(target));
                if let Ok(rel) = dir.strip_prefix(source) {
                    seen.push(target.join(rel));
                }
            }
            MountOp::Tmpfs { target, .. }
            | MountOp::Worktree { target, .. }
            | MountOp::Mask { target, .. }
            | MountOp::File { target, .. } => seen.retain(|p| !p.starts_with(target)),
            // Binds of paths to themselves inside the writable roots: nothing moves.
            MountOp::Symlink { .. } | MountOp::PersistenceBinds => {}
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(host_root: bool, ops: Vec<MountOp>) -> MountPlan {
        MountPlan {
            host_root,
            ops,
            ..Default::default()
        }
    }

    fn bind(p: &str) -> MountOp {
        MountOp::ReadOnly {
            source: p.into(),
            target: p.into(),
        }
    }

    #[test]
    fn an_emptied_run_hides_it_without_a_mask() {
        let dir = Path::new("/run/user/1000/sandbox-launch");
        let mut p = plan(
            true,
            vec![MountOp::Tmpfs {
                target: "/run".into(),
                mode: 0o755,
                size: None,
            }],
        );
        let mut verify = Vec::new();
        hide(&mut p, &mut verify, dir);
        assert_eq!(p.ops.len(), 1);
        assert_eq!(verify, [dir]);
    }

    #[test]
    fn an_allow_list_binding_its_tree_gets_a_mask_over_it() {
        let dir = Path::new("/run/user/1000/sandbox-launch");
        let mut p = plan(false, vec![bind("/usr"), bind("/run")]);
        let mut verify = Vec::new();
        hide(&mut p, &mut verify, dir);
        assert!(matches!(
            p.ops.last(),
            Some(MountOp::Mask { target, dir: true }) if target == dir
        ));
        assert_eq!(verify, [dir]);
    }

    #[test]
    fn a_bind_elsewhere_is_masked_where_it_shows() {
        let dir = Path::new("/home/u/run/sandbox-launch");
        let p = plan(
            false,
            vec![MountOp::ReadWrite {
                source: "/home/u".into(),
                target: "/work".into(),
            }],
        );
        assert_eq!(
            visible_at(&p, dir),
            [PathBuf::from("/work/run/sandbox-launch")]
        );
    }

    #[test]
    fn the_hosts_dev_shm_never_shows_inside_but_a_bind_of_it_is_masked() {
        // The fallback directory of a user with no runtime directory.
        let dir = Path::new("/dev/shm/sandbox-launch-1000");
        let mut p = plan(true, vec![]);
        let mut verify = Vec::new();
        hide(&mut p, &mut verify, dir);
        assert!(p.ops.is_empty(), "nothing to mask over: {:?}", p.ops);
        assert_eq!(verify, [dir]);
        let p = plan(
            true,
            vec![MountOp::ReadWrite {
                source: "/dev/shm".into(),
                target: "/shared".into(),
            }],
        );
        assert_eq!(
            visible_at(&p, dir),
            [PathBuf::from("/shared/sandbox-launch-1000")]
        );
    }
}
