//! The kernel's layer under the guard: protected paths that exist at launch are bound
//! read-only, and every directory between a writable root and such a path is pinned (bound to
//! itself), because a mount point cannot be renamed or removed (EBUSY): `mv .git .git2 &&
//! mkdir -p .git/hooks` cannot swap a fresh tree in under the protected name.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use shim::spec::MountOp;

fn depth(p: &Path) -> usize {
    p.components().count()
}

/// The mounts that make `read_only` (paths inside the writable roots `rw`) read-only: the pins
/// first (outermost first), then the read-only binds (outermost first).
pub fn mounts(read_only: &[PathBuf], rw: &[PathBuf]) -> Vec<MountOp> {
    let mut ro: Vec<PathBuf> = read_only
        .iter()
        .filter(|p| rw.iter().any(|w| p.starts_with(w)))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    ro.sort_by_key(|p| depth(p));
    let mut pins: BTreeSet<PathBuf> = BTreeSet::new();
    for p in &ro {
        let Some(root) = rw
            .iter()
            .filter(|w| p.starts_with(w))
            .max_by_key(|w| depth(w))
        else {
            continue;
        };
        let mut a = p.parent();
        while let Some(dir) = a {
            if dir == root.as_path() || !dir.starts_with(root) {
                break;
            }
            if dir.is_dir() && !rw.iter().any(|w| w == dir) {
                pins.insert(dir.to_path_buf());
            }
            a = dir.parent();
        }
    }
    let mut pins: Vec<PathBuf> = pins.into_iter().collect();
    pins.sort_by_key(|p| depth(p));
    let mut ops: Vec<MountOp> = pins
        .into_iter()
        .map(|p| MountOp::ReadWrite {
            source: p.clone(),
            target: p,
        })
        .collect();
    ops.extend(ro.into_iter().map(|p| MountOp::ReadOnly {
        source: p.clone(),
        target: p,
    }));
    ops
}
