//! The mount namespace: a new root built by hand and entered with pivot_root, the old root
//! detached so it is unreachable afterwards.
//!
//! Sequence: make every mount private; mount a staging tmpfs on /tmp and pivot into it (the host
//! root is now /oldroot); build /newroot (a read-only recursive bind of the host root, or an empty
//! tmpfs), a fresh /proc, a minimal /dev, then the plan's binds, tmpfs mounts and masks; finally
//! pivot into /newroot and detach the staging root together with the old root below it.

use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;

use crate::channel::{AtStep, Step, StepError};
use crate::confinement;
use crate::placed;
use crate::spec::{Attach, MountOp, MountPlan};
use crate::sys::{self, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

const STAGING: &str = "/tmp";
const NEWROOT: &str = "/newroot";
const OLDROOT: &str = "/oldroot";
const MASK_DIR: &str = "/mask-dir";
const MASK_FILE: &str = "/mask-file";

/// Device nodes bound from the host into the minimal /dev.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

type R<T> = Result<T, StepError>;

/// Build the whole filesystem view and enter it. On return, `/` is the sandbox root.
pub fn build(plan: &MountPlan) -> R<()> {
    build_base(plan)?;
    let done = build_ops_before_persistence(plan)?;
    build_ops(plan, done)
}

/// The part of [`build`] that depends on no path of the plan: the staging root, the root
/// filesystem (the host's, read-only, or an empty tmpfs), `/proc` and `/dev`. A launch builds
/// it while the supervisor is still planning the persistence binds.
pub fn build_base(plan: &MountPlan) -> R<()> {
    sys::mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
    .map_err(|e| {
        let hint = if e.errno == Errno::EPERM {
            confinement::refused("mount")
        } else {
            "the host root cannot be made private in this mount namespace (some overlay roots \
             refuse); run `sandbox-launch doctor`"
                .into()
        };
        StepError::new(Step::Mounts, e.to_string(), Some(&hint))
    })?;
    enter_staging()?;
    if plan.host_root {
        bind(Path::new(OLDROOT), Path::new(NEWROOT), true)?;
        sys::mount_setattr_recursive(
            Path::new(NEWROOT),
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        )
        .at_hint(Step::Mounts, "mount_setattr needs Linux 5.12 or later")?;
    } else {
        sys::mount(
            Some(Path::new("tmpfs")),
            Path::new(NEWROOT),
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some("mode=0755"),
        )
        .at(Step::Mounts)?;
    }
    mount_proc()?;
    mount_dev(plan.shm_size)
}

/// After [`build_base`], the plan's mounts that come before the persistence binds' place
/// ([`MountOp::PersistenceBinds`]; all of them when it has none): they need nothing from the
/// supervisor, so a launch makes them while the binds are on their way. Returns how many were
/// made.
pub fn build_ops_before_persistence(plan: &MountPlan) -> R<usize> {
    let before = plan
        .ops
        .iter()
        .position(|op| *op == MountOp::PersistenceBinds)
        .unwrap_or(plan.ops.len());
    for op in &plan.ops[..before] {
        apply(op, &plan.attach)?;
    }
    Ok(before)
}

/// The rest of [`build`]: the plan's mounts from `from` on, in order, then the pivot into the
/// new root.
pub fn build_ops(plan: &MountPlan, from: usize) -> R<()> {
    for op in plan.ops.iter().skip(from) {
        apply(op, &plan.attach)?;
    }
    if !plan.host_root {
        sys::mount(
            None,
            Path::new(NEWROOT),
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            None,
        )
        .at(Step::Mounts)?;
    }
    enter_newroot()
}

/// Mount the staging tmpfs, prepare the mask sources, and pivot into it.
fn enter_staging() -> R<()> {
    let staging = Path::new(STAGING);
    sys::mount(
        Some(Path::new("tmpfs")),
        staging,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=0755"),
    )
    .at_hint(
        Step::Mounts,
        "cannot mount a tmpfs inside the user namespace; run `sandbox-launch doctor`",
    )?;
    for dir in [NEWROOT, OLDROOT] {
        sys::mkdir(&staged(dir), 0o755).at(Step::Mounts)?;
    }
    sys::mkdir(&staged(MASK_DIR), 0o000).at(Step::Mounts)?;
    sys::create_file(&staged(MASK_FILE), 0o000).at(Step::Mounts)?;
    // mkdir honours the umask; the masks must end up mode 000 exactly.
    sys::chmod(&staged(MASK_DIR), 0o000).at(Step::Mounts)?;
    sys::pivot_root(staging, &staged(OLDROOT)).at_hint(
        Step::Mounts,
        "pivot_root is refused when the host root is an initramfs (rootfs); run the launcher from a real root filesystem",
    )?;
    sys::chdir(Path::new("/")).at(Step::Mounts)?;
    Ok(())
}

fn staged(path: &str) -> PathBuf {
    Path::new(STAGING).join(path.trim_start_matches('/'))
}

/// `/newroot` + an absolute sandbox path.
pub(crate) fn in_newroot(path: &Path) -> PathBuf {
    let mut p = PathBuf::from(NEWROOT);
    for c in path.components() {
        if let Component::Normal(n) = c {
            p.push(n);
        }
    }
    p
}

/// `/oldroot` + an absolute host path.
pub(crate) fn in_oldroot(path: &Path) -> PathBuf {
    let mut p = PathBuf::from(OLDROOT);
    for c in path.components() {
        if let Component::Normal(n) = c {
            p.push(n);
        }
    }
    p
}

pub(crate) fn bind(source: &Path, target: &Path, recursive: bool) -> R<()> {
    let mut flags = libc::MS_BIND;
    if recursive {
        flags |= libc::MS_REC;
    }
    sys::mount(Some(source), target, None, flags, None).at(Step::Mounts)
}

/// A single (non-recursive) read-only bind of `source` at `target`.
fn bind_read_only(source: &Path, target: &Path) -> R<()> {
    bind(source, target, false)?;
    let flags =
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
    sys::mount(None, target, None, flags, None).at(Step::Mounts)
}

fn mount_proc() -> R<()> {
    let target = in_newroot(Path::new("/proc"));
    ensure_mountpoint(&target, true)?;
    sys::mount(
        Some(Path::new("proc")),
        &target,
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )
    .map_err(|e| {
        let hint = if e.errno == Errno::EPERM {
            confinement::proc_refused()
        } else {
            "a fresh /proc cannot be mounted here; run `sandbox-launch doctor`".into()
        };
        StepError::new(Step::Mounts, e.to_string(), Some(&hint))
    })
}

/// A minimal /dev: a tmpfs with the harmless device nodes bound from the host, a private devpts
/// instance (so the agent can open PTYs) and a private /dev/shm.
fn mount_dev(shm_size: Option<u64>) -> R<()> {
    let dev = in_newroot(Path::new("/dev"));
    ensure_mountpoint(&dev, true)?;
    sys::mount(
        Some(Path::new("tmpfs")),
        &dev,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=0755"),
    )
    .at(Step::Mounts)?;
    for name in DEVICES {
        let host = Path::new(OLDROOT).join("dev").join(name);
        if !sys::exists(&host) {
            continue;
        }
        let node = dev.join(name);
        sys::create_file(&node, 0o666).at(Step::Mounts)?;
        bind(&host, &node, false)?;
    }
    let pts = dev.join("pts");
    sys::mkdir(&pts, 0o755).at(Step::Mounts)?;
    sys::mount(
        Some(Path::new("devpts")),
        &pts,
        Some("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    )
    .at(Step::Mounts)?;
    sys::symlink(Path::new("pts/ptmx"), &dev.join("ptmx")).at(Step::Mounts)?;
    let shm = dev.join("shm");
    sys::mkdir(&shm, 0o755).at(Step::Mounts)?;
    sys::mount(
        Some(Path::new("tmpfs")),
        &shm,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&tmpfs_options(0o1777, shm_size)),
    )
    .at(Step::Mounts)?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        sys::symlink(Path::new(target), &dev.join(name)).at(Step::Mounts)?;
    }
    Ok(())
}

/// Where a bind's source is found: in an attached writable tree, the tree as attached (with
/// its idmapping: the host's path may not even be reachable for the sandbox's user); else the
/// host's (a read-only view would make a writable bind taken from it read-only).
fn bind_source(source: &Path, attach: &[Attach]) -> PathBuf {
    match attach
        .iter()
        .filter(|a| !a.read_only)
        .find_map(|a| source.strip_prefix(a.source()).ok().map(|r| (a, r)))
    {
        Some((a, rel)) => in_newroot(&a.target.join(rel)),
        None => in_oldroot(source),
    }
}

/// Put a tree the supervisor prepared at its target.
fn attach_tree(tree: &Attach) -> R<()> {
    let tgt = in_newroot(&tree.target);
    ensure_mountpoint(&tgt, tree.dir)?;
    sys::move_mount_to(tree.fd, &tgt).at_hint(
        Step::Mounts,
        "the kernel refused to attach a writable tree prepared for the sandbox's user; run `sandbox-launch doctor`",
    )
}

fn apply(op: &MountOp, attach: &[Attach]) -> R<()> {
    match op {
        MountOp::ReadWrite { source, target } if source == target => {
            if let Some(tree) = attach.iter().find(|a| a.target == *target) {
                return attach_tree(tree);
            }
            let src = bind_source(source, attach);
            let tgt = in_newroot(target);
            ensure_mountpoint(&tgt, src.is_dir())?;
            bind(&src, &tgt, true)?;
            sys::mount_setattr_recursive(&tgt, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
                .at(Step::Mounts)
        }
        MountOp::ReadOnly { source, target } => {
            if let Some(tree) = attach
                .iter()
                .find(|a| a.read_only && a.target == *target && source == target)
            {
                return attach_tree(tree);
            }
            let src = bind_source(source, attach);
            let tgt = in_newroot(target);
            ensure_mountpoint(&tgt, src.is_dir())?;
            bind(&src, &tgt, true)?;
            sys::mount_setattr_recursive(
                &tgt,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            )
            .at(Step::Mounts)
        }
        MountOp::ReadWrite { source, target } => {
            let src = bind_source(source, attach);
            let tgt = in_newroot(target);
            ensure_mountpoint(&tgt, src.is_dir())?;
            bind(&src, &tgt, true)?;
            sys::mount_setattr_recursive(&tgt, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
                .at(Step::Mounts)
        }
        MountOp::Tmpfs { target, mode, size } => {
            placed::tmpfs(target, &tmpfs_options(*mode, *size))
        }
        MountOp::Bind {
            source,
            target,
            read_only,
        } => placed::bind(source, target, *read_only, attach),
        MountOp::Overlay {
            source,
            target,
            size,
        } => placed::overlay(source, target, &tmpfs_options(0o755, *size), attach),
        MountOp::File { target, contents } => {
            // In the staging root (now `/`), which is detached at the end; the bind keeps it.
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let src = PathBuf::from(format!("/file-{n}"));
            std::fs::write(&src, contents)
                .map_err(|e| format!("write {}: {e}", src.display()))
                .at(Step::Mounts)?;
            sys::chmod(&src, 0o644).at(Step::Mounts)?;
            // Placed like the named mounts: never through a symlink, never creating its mount
            // point in a tree of the host's (a `--bind` over /etc).
            placed::file_read_only(&src, target)
        }
        // `run` replaces it with the binds the supervisor sent; one left here means they never
        // came, and the sandbox is not built without them.
        MountOp::PersistenceBinds => Err(StepError::new(
            Step::Mounts,
            "the persistence protections (read-only binds) never reached the sandbox",
            Some("run again with -v and report this"),
        )),
        MountOp::Mask { target, dir } => {
            let tgt = in_newroot(target);
            let src = if *dir { MASK_DIR } else { MASK_FILE };
            bind_read_only(Path::new(src), &tgt)
        }
        MountOp::Worktree {
            source,
            target,
            layers,
            layers_fd,
        } => {
            let tgt = in_newroot(target);
            ensure_mountpoint(&tgt, true)?;
            crate::worktree_mount::mount(
                source,
                &tgt,
                layers,
                *layers_fd,
                attach.iter().find(|a| a.target == *source),
            )
        }
        MountOp::Symlink { target, link } => {
            let at = in_newroot(target);
            if let Some(parent) = at.parent() {
                mkdir_p(parent)?;
            }
            sys::symlink(link, &at).at(Step::Mounts)
        }
    }
}

/// A tmpfs's mount options. With a size, the number of inodes is bounded too (one per 4 KiB,
/// at least 4096), or a flood of empty files would pin kernel memory past the size.
fn tmpfs_options(mode: u32, size: Option<u64>) -> String {
    match size {
        Some(bytes) => format!(
            "mode={mode:o},size={bytes},nr_inodes={}",
            (bytes / 4096).max(4096)
        ),
        None => format!("mode={mode:o}"),
    }
}

/// Make sure `path` exists to mount on. In the read-only host bind it already does (the plan only
/// names existing host paths); inside a tmpfs of ours it is created.
fn ensure_mountpoint(path: &Path, dir: bool) -> R<()> {
    if sys::exists(path) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        mkdir_p(parent)?;
    }
    if dir {
        sys::mkdir(path, 0o755).at(Step::Mounts)
    } else {
        sys::create_file(path, 0o644).at(Step::Mounts)
    }
}

fn mkdir_p(path: &Path) -> R<()> {
    if sys::exists(path) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        mkdir_p(parent)?;
    }
    match sys::mkdir(path, 0o755) {
        Ok(()) => Ok(()),
        Err(e) if e.errno == nix::errno::Errno::EEXIST => Ok(()),
        Err(e) => Err(e).at(Step::Mounts),
    }
}

/// Pivot into /newroot and detach the staging root (and the old root beneath it).
fn enter_newroot() -> R<()> {
    sys::chdir(Path::new(NEWROOT)).at(Step::Mounts)?;
    sys::pivot_root(Path::new("."), Path::new(".")).at(Step::Mounts)?;
    sys::umount_detach(Path::new(".")).at(Step::Mounts)?;
    sys::chdir(Path::new("/")).at(Step::Mounts)
}
