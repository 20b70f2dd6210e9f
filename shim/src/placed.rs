//! The mounts placed by name (`--bind`, `--ro-bind`, `--overlay`, `--tmpfs`): a target is
//! resolved inside the new root without following any symlink (one on the way is refused, not
//! followed: the tree under a writable bind is the host's, and whoever wrote there chose its
//! links), and a missing target is created only where the sandbox's own tmpfs holds it, never
//! on the host. Each mount is made detached or in the staging root first and then moved onto
//! the target's descriptor.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::channel::{AtStep, Step, StepError};
use crate::spec::Attach;
use crate::sys::{self, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
use crate::sys_at;

type R<T> = Result<T, StepError>;

const TMPFS_MAGIC: i64 = 0x0102_1994;

/// The relative components of an absolute sandbox path.
fn relative(path: &Path) -> PathBuf {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

const NO_LINKS: &str = "choose a target whose every component is a real directory in the sandbox";
const NO_HOST_WRITE: &str = "mount over a path that exists, or under a --tmpfs; a host tree \
     mounted over /etc must hold the files the sandbox puts there itself (resolv.conf, the CA \
     bundle)";

fn refused(target: &Path, what: String, hint: &str) -> StepError {
    StepError::new(
        Step::Mounts,
        format!("mount target {}: {what}", target.display()),
        Some(hint),
    )
}

/// The mount point `target` (absolute, inside) below `root` (the new root), created when
/// missing if it can be made in one of the sandbox's own tmpfs mounts.
fn open_target(root: BorrowedFd<'_>, target: &Path, dir: bool) -> R<OwnedFd> {
    let rel = relative(target);
    let mut at = root.try_clone_to_owned().at(Step::Mounts)?;
    let mut walked = PathBuf::from("/");
    let parts: Vec<_> = rel.components().collect();
    for (i, c) in parts.iter().enumerate() {
        let name = Path::new(c.as_os_str());
        walked.push(name);
        let last = i + 1 == parts.len();
        let next = match sys_at::open_beneath(at.as_fd(), name) {
            Ok(fd) => fd,
            Err(e) if e.errno == nix::errno::Errno::ENOENT => {
                let fs = sys_at::fs_type(at.as_fd()).at(Step::Mounts)?;
                if fs != TMPFS_MAGIC {
                    return Err(refused(
                        target,
                        format!(
                            "{} does not exist, and creating it would write on the host",
                            walked.display()
                        ),
                        NO_HOST_WRITE,
                    ));
                }
                sys_at::make_at(at.as_fd(), name, dir || !last).at(Step::Mounts)?;
                sys_at::open_beneath(at.as_fd(), name).at(Step::Mounts)?
            }
            Err(e) => return Err(refused(target, e.to_string(), NO_LINKS)),
        };
        let st = sys_at::fstat(next.as_fd()).at(Step::Mounts)?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(refused(
                target,
                format!("{} is a symlink inside the sandbox", walked.display()),
                NO_LINKS,
            ));
        }
        if !last && !is_dir(&st) {
            return Err(refused(
                target,
                format!("{} is not a directory", walked.display()),
                NO_LINKS,
            ));
        }
        if last && is_dir(&st) != dir {
            let (want, got) = if dir {
                ("a directory", "a file")
            } else {
                ("a file", "a directory")
            };
            return Err(refused(
                target,
                format!("the source is {want} but the target is {got}"),
                "mount a directory on a directory and a file on a file",
            ));
        }
        at = next;
    }
    Ok(at)
}

/// After a mount was moved onto `target`: what is there now must be what was mounted (the same
/// inode of the same filesystem) and, for a read-only mount, read-only. A kernel (or a filter)
/// that reports success without doing it does not leave the sandbox without its mount.
fn confirm(target: &Path, mounted: &libc::stat, read_only: bool) -> R<()> {
    let root = sys_at::open_dir(Path::new("/newroot")).at(Step::Mounts)?;
    let fd = sys_at::open_beneath(root.as_fd(), &relative(target)).at(Step::Mounts)?;
    let st = sys_at::fstat(fd.as_fd()).at(Step::Mounts)?;
    let flags = sys_at::fs_flags(fd.as_fd()).at(Step::Mounts)?;
    let there = (st.st_dev, st.st_ino) == (mounted.st_dev, mounted.st_ino);
    if !there || (read_only && flags & libc::ST_RDONLY == 0) {
        return Err(StepError::new(
            Step::Mounts,
            format!(
                "the mount at {} is not in place after the kernel reported it done{}",
                target.display(),
                if there { " (it is writable)" } else { "" }
            ),
            Some("the kernel or a seccomp filter around the launcher fakes mount calls; run `sandbox-launch doctor`"),
        ));
    }
    Ok(())
}

/// The host object `source`, opened without following symlinks (the launcher resolved them):
/// from an attached tree when it lies in one (see `mounts::bind_source`), else from the old root.
fn open_source(source: &Path, attach: &[Attach]) -> R<OwnedFd> {
    let (base, rel) = match attach
        .iter()
        .filter(|a| !a.read_only)
        .find_map(|a| source.strip_prefix(a.source()).ok().map(|r| (a, r)))
    {
        Some((a, r)) => (PathBuf::from("/newroot"), relative(&a.target).join(r)),
        None => (PathBuf::from("/oldroot"), relative(source)),
    };
    open_source_at(&base, &rel).map_err(|e| {
        StepError::new(
            Step::Mounts,
            format!("mount source {}: {e}", source.display()),
            Some("the source changed since the launch was planned (a symlink appeared on its path?); launch again"),
        )
    })
}

/// `rel` below the directory `base`, without following symlinks.
fn open_source_at(base: &Path, rel: &Path) -> R<OwnedFd> {
    let rel = relative(rel);
    let dir = sys_at::open_dir(base).at(Step::Mounts)?;
    let fd = if rel.as_os_str().is_empty() {
        dir
    } else {
        sys_at::open_beneath(dir.as_fd(), &rel).at(Step::Mounts)?
    };
    Ok(fd)
}

/// Bind `source` (host) at `target`, recursively; read-only (for every user, root inside
/// included) unless `writable`.
pub fn bind(source: &Path, target: &Path, read_only: bool, attach: &[Attach]) -> R<()> {
    let root = sys_at::open_dir(Path::new("/newroot")).at(Step::Mounts)?;
    if !read_only {
        if let Some(tree) = attach.iter().find(|a| !a.read_only && a.source() == source) {
            let to = open_target(root.as_fd(), target, tree.dir)?;
            // SAFETY: the descriptor was inherited across the clone for this purpose and stays
            // open until the sandbox is built; it is only borrowed here.
            let from = unsafe { BorrowedFd::borrow_raw(tree.fd) };
            let st = sys_at::fstat(from).at(Step::Mounts)?;
            sys_at::move_onto(from, to.as_fd()).at(Step::Mounts)?;
            return confirm(target, &st, false);
        }
    }
    let src = open_source(source, attach)?;
    let st = sys_at::fstat(src.as_fd()).at(Step::Mounts)?;
    let tree = sys_at::clone_tree(src.as_fd()).at(Step::Mounts)?;
    let mut attr = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if read_only {
        attr |= MOUNT_ATTR_RDONLY;
    }
    sys::mount_setattr_tree(tree.as_fd(), attr).at(Step::Mounts)?;
    let to = open_target(root.as_fd(), target, is_dir(&st))?;
    sys_at::move_onto(tree.as_fd(), to.as_fd()).at(Step::Mounts)?;
    confirm(target, &st, read_only)
}

/// Bind the staging file `staged` read-only at `target` (the sandbox's own files: resolver
/// configuration, trust bundle).
pub fn file_read_only(staged: &Path, target: &Path) -> R<()> {
    let root = sys_at::open_dir(Path::new("/newroot")).at(Step::Mounts)?;
    let src = open_source_at(Path::new("/"), staged)?;
    let tree = sys_at::clone_tree(src.as_fd()).at(Step::Mounts)?;
    sys::mount_setattr_tree(
        tree.as_fd(),
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
    )
    .at(Step::Mounts)?;
    let st = sys_at::fstat(tree.as_fd()).at(Step::Mounts)?;
    let to = open_target(root.as_fd(), target, false)?;
    sys_at::move_onto(tree.as_fd(), to.as_fd()).at(Step::Mounts)?;
    confirm(target, &st, true)
}

static N: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory in the staging root (which is detached when the sandbox is entered).
fn staging_dir() -> R<PathBuf> {
    let n = N.fetch_add(1, Ordering::Relaxed);
    let p = PathBuf::from(format!("/placed-{n}"));
    sys::mkdir(&p, 0o755).at(Step::Mounts)?;
    Ok(p)
}

fn mount_tmpfs(at: &Path, options: &str) -> R<()> {
    sys::mount(
        Some(Path::new("tmpfs")),
        at,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(options),
    )
    .at(Step::Mounts)
}

/// Move the mount at the staging path `from` onto `target`.
fn place(from: &Path, target: &Path) -> R<()> {
    let root = sys_at::open_dir(Path::new("/newroot")).at(Step::Mounts)?;
    let to = open_target(root.as_fd(), target, true)?;
    let mnt = sys_at::open_dir(from).at(Step::Mounts)?;
    let st = sys_at::fstat(mnt.as_fd()).at(Step::Mounts)?;
    sys_at::move_onto(mnt.as_fd(), to.as_fd()).at(Step::Mounts)?;
    confirm(target, &st, false)
}

/// A fresh, private, writable tmpfs at `target`.
pub fn tmpfs(target: &Path, options: &str) -> R<()> {
    let at = staging_dir()?;
    mount_tmpfs(&at, options)?;
    place(&at, target)
}

/// `source` (host, a directory) at `target` under a writable layer: reads come from the
/// source, which is never written (its bind is read-only); what the sandbox writes goes to an
/// upper directory in a tmpfs of its own (`options` bound its size like /tmp's), which nothing
/// outside the sandbox can reach and which goes with the sandbox's mount namespace.
pub fn overlay(source: &Path, target: &Path, options: &str, attach: &[Attach]) -> R<()> {
    let at = staging_dir()?;
    mount_tmpfs(&at, options)?;
    let (lower, upper, work, merged) = (
        at.join("lower"),
        at.join("upper"),
        at.join("work"),
        at.join("merged"),
    );
    for d in [&lower, &upper, &work, &merged] {
        sys::mkdir(d, 0o755).at(Step::Mounts)?;
    }
    let src = open_source(source, attach)?;
    let st = sys_at::fstat(src.as_fd()).at(Step::Mounts)?;
    if !is_dir(&st) {
        return Err(StepError::new(
            Step::Mounts,
            format!("overlay source {} is not a directory", source.display()),
            Some("--overlay takes a directory; use --ro-bind for a file"),
        ));
    }
    let tree = sys_at::clone_tree(src.as_fd()).at(Step::Mounts)?;
    sys::mount_setattr_tree(
        tree.as_fd(),
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
    )
    .at(Step::Mounts)?;
    let lower_fd = sys_at::open_dir(&lower).at(Step::Mounts)?;
    sys_at::move_onto(tree.as_fd(), lower_fd.as_fd()).at(Step::Mounts)?;
    // The top of the overlay looks like the source's: its owner and mode come from the upper
    // directory. An owner not mapped in the sandbox keeps the shim's.
    let upper_fd = sys_at::open_dir(&upper).at(Step::Mounts)?;
    let _ = sys_at::chown_fd(upper_fd.as_fd(), st.st_uid, st.st_gid);
    sys::chmod(&upper, st.st_mode & 0o7777).at(Step::Mounts)?;
    let data = format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        lower.display(),
        upper.display(),
        work.display()
    );
    sys::mount(
        Some(Path::new("overlay")),
        &merged,
        Some("overlay"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&data),
    )
    .at_hint(
        Step::Mounts,
        "overlayfs in a user namespace needs Linux 5.11 or later; run `sandbox-launch doctor`",
    )?;
    place(&merged, target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_path_becomes_its_components_below_the_root() {
        assert_eq!(relative(Path::new("/a/b/c")), PathBuf::from("a/b/c"));
        assert_eq!(relative(Path::new("/")), PathBuf::new());
    }
}
