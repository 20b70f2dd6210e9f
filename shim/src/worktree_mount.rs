//! The `--worktree` overlay: the checkout as the lower layer (overlayfs never writes a lower
//! layer), the worktree's `upper` and `work` directories above, mounted inside the user
//! namespace with `userxattr` (whiteouts and opaque directories are recorded as
//! `user.overlay.*`, which overlayfs does not let the program inside set or read through the
//! overlay).
//!
//! Overlayfs takes only layers mounted in the caller's mount namespace, and its options are
//! paths: each layer is first put in the staging root (`/worktree-lower`, `/worktree-layers`:
//! plain names, nothing to escape), a bind of the host's tree as seen under `/oldroot`, or —
//! started as root — the trees the supervisor prepared: the checkout idmapped for the
//! sandbox's user, and a detached copy of `layers` (in root's private state directory, which
//! the sandbox's user cannot reach by path). The staging root is detached at the end;
//! overlayfs keeps its own references to its layers.

use std::path::Path;

use crate::channel::{AtStep, Step, StepError};
use crate::mounts::{bind, in_oldroot};
use crate::spec::Attach;
use crate::sys;

type R<T> = Result<T, StepError>;

const LOWER: &str = "/worktree-lower";
const LAYERS: &str = "/worktree-layers";

/// Put a tree at `at` in the staging root: the detached `fd` if there is one, else a bind of
/// the host's `host`.
fn stage(at: &str, fd: Option<i32>, host: &Path) -> R<()> {
    let at = Path::new(at);
    sys::mkdir(at, 0o755).at(Step::Mounts)?;
    match fd {
        Some(fd) => sys::move_mount_to(fd, at).at_hint(
            Step::Mounts,
            "the kernel refused to attach a tree prepared for the sandbox's user; run `sandbox-launch doctor`",
        ),
        None => bind(&in_oldroot(host), at, true),
    }
}

/// Mount the overlay of `source` at `target` (a path in the new root).
pub fn mount(
    source: &Path,
    target: &Path,
    layers: &Path,
    layers_fd: Option<i32>,
    attached: Option<&Attach>,
) -> R<()> {
    stage(LOWER, attached.map(|a| a.fd), source)?;
    stage(LAYERS, layers_fd, layers)?;
    let data = format!("lowerdir={LOWER},upperdir={LAYERS}/upper,workdir={LAYERS}/work,userxattr");
    sys::mount(
        Some(Path::new("overlay")),
        target,
        Some("overlay"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&data),
    )
    .at_hint(
        Step::Mounts,
        "overlayfs refused the worktree: it needs Linux 5.11 or later for a mount inside a user namespace (5.19 with an idmapped checkout, when started as root), and the worktrees' directory on a filesystem with user extended attributes; run `sandbox-launch doctor`, or run without --worktree",
    )
}
