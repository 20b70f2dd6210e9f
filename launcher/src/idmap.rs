//! Started as real root, the sandbox runs as `run_as_user`, and a writable tree owned by someone
//! else (the caller's `/root`, a container's root-owned `/work`) would be silently unwritable for
//! it. Each such tree is attached as an idmapped mount instead: inside, the tree's owner is the
//! sandbox's user (so `git commit` works, and git sees a repository of its own); on the host,
//! every file keeps its owner, new ones included.
//!
//! The kernel lets only the filesystem's owner (real root, for a host filesystem) idmap a
//! mount, and only a detached one: so the launcher prepares each tree here, in the host's
//! namespaces (open_tree with OPEN_TREE_CLONE, then mount_setattr with MOUNT_ATTR_IDMAP through
//! a user namespace whose one mapping is owner → sandbox user), and the shim, which inherits
//! the descriptors across the clone, moves them into place. Where that cannot be done, the
//! launch is refused with the cause and the fix.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::errno::Errno;
use shim::channel::{Step, StepError};
use shim::spec::Attach;
use shim::sys::{self, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

use crate::namespaces::Identity;

/// The prepared trees: what the shim attaches, and the descriptors, which stay open in the
/// launcher until the shim has them.
#[derive(Default)]
pub struct Attached {
    pub attach: Vec<Attach>,
    pub fds: Vec<OwnedFd>,
}

/// The user namespaces that define the mappings made so far, by (owner, sandbox's ids): one per
/// mapping for the whole launch — making one costs a clone, and the home's probe and the trees'
/// preparation ask for the same one. Each is a descriptor, kept while the launcher runs.
static MAPPINGS: Mutex<Vec<(Ids, OwnedFd)>> = Mutex::new(Vec::new());

/// (uid, gid) on disk → (uid, gid) of the sandbox's user.
type Ids = ((u32, u32), (u32, u32));

/// Run `f` with the mapping namespace for `from` → `to`, made on first use.
fn with_mapping<R>(
    from: (u32, u32),
    to: (u32, u32),
    f: impl FnOnce(BorrowedFd<'_>) -> R,
) -> Result<R, sys::SysError> {
    let mut made = MAPPINGS.lock().unwrap_or_else(|e| e.into_inner());
    let index = match made.iter().position(|(ids, _)| *ids == (from, to)) {
        Some(i) => i,
        None => {
            // On this CPU, the launcher and the namespace's child hand over without waking the
            // other vCPU: waited for across CPUs, the child's end cost 0.1-0.14 ms (traced).
            let ns = shim::cpus::on_this_cpu(|| mapping_namespace(from, to))?;
            made.push(((from, to), ns));
            made.len() - 1
        }
    };
    Ok(f(made[index].1.as_fd()))
}

/// Prepare every writable tree that the sandbox's user does not own.
pub fn prepare(trees: &[PathBuf], id: Identity, user: &str) -> Result<Attached, StepError> {
    let mut out = Attached::default();
    for tree in trees {
        let meta = std::fs::metadata(tree)
            .map_err(|e| StepError::new(Step::Mounts, format!("{}: {e}", tree.display()), None))?;
        if meta.uid() == id.uid {
            continue;
        }
        let refused = |what: String, why: &str| {
            StepError::new(
                Step::Mounts,
                format!(
                    "cannot make {} (owned by uid {}) writable for the sandbox's user {user} \
                     (uid {}) while its files keep their owner: {what}",
                    tree.display(),
                    meta.uid(),
                    id.uid
                ),
                Some(&fix(tree, why, (meta.uid(), meta.gid()), id)),
            )
        };
        idmapped(tree, &meta, id, 0, &mut out, refused)?;
    }
    Ok(out)
}

/// Prepare the writable trees placed by name (`--bind SRC:DST`: `(host, inside)`) that the
/// sandbox's user does not own, like [`prepare`]'s, attached at their inside path.
pub fn prepare_placed(
    trees: &[(PathBuf, PathBuf)],
    id: Identity,
    user: &str,
    out: &mut Attached,
) -> Result<(), StepError> {
    for (tree, inside) in trees {
        let meta = std::fs::metadata(tree)
            .map_err(|e| StepError::new(Step::Mounts, format!("{}: {e}", tree.display()), None))?;
        if meta.uid() == id.uid || out.attach.iter().any(|a| a.target == *inside) {
            continue;
        }
        let refused = |what: String, why: &str| {
            StepError::new(
                Step::Mounts,
                format!(
                    "cannot make {} (owned by uid {}, mounted with --bind at {}) writable for \
                     the sandbox's user {user} (uid {}) while its files keep their owner: {what}",
                    tree.display(),
                    meta.uid(),
                    inside.display(),
                    id.uid
                ),
                Some(&fix(tree, why, (meta.uid(), meta.gid()), id)),
            )
        };
        idmapped(tree, &meta, id, 0, out, refused)?;
        if let Some(a) = out.attach.last_mut() {
            a.target = inside.clone();
            a.source = (inside != tree).then(|| tree.clone());
        }
    }
    Ok(())
}

/// Prepare a read-only view of the caller's home `home`, idmapped so that its owner reads as
/// the sandbox's user: the way through it to the writable trees it holds, when its mode lets
/// nobody else through (root's `/root`). Appended to `out`, before the trees inside it.
///
/// A writable tree inside it that the sandbox's user owns already needs no idmapping, but the
/// shim could not reach it on the host through the home: it is cloned here too, as it is.
pub fn prepare_view(
    home: &Path,
    trees: &[PathBuf],
    id: Identity,
    user: &str,
    out: &mut Attached,
) -> Result<(), StepError> {
    let inside: Vec<&PathBuf> = trees.iter().filter(|t| t.starts_with(home)).collect();
    let holds = inside
        .iter()
        .map(|t| t.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let meta = std::fs::metadata(home)
        .map_err(|e| StepError::new(Step::Mounts, format!("{}: {e}", home.display()), None))?;
    let refused = |what: String, why: &str| {
        StepError::new(
            Step::Mounts,
            format!(
                "HOME {} (owned by uid {}, mode {:04o}) holds the writable trees {holds}, but the \
                 sandbox's user {user} (uid {}) cannot go through it, and a read-only view of it \
                 mapped to that user cannot be made: {what}",
                home.display(),
                meta.uid(),
                meta.mode() & 0o7777,
                id.uid
            ),
            Some(&format!(
                "{why}; instead let it through (chmod o+x {0}), start sandbox-launch with HOME \
                 set to another directory (the agents' state in {0} is then not used), or start it \
                 as {0}'s owner rather than as root",
                home.display()
            )),
        )
    };
    let mut view = Attached::default();
    idmapped(home, &meta, id, MOUNT_ATTR_RDONLY, &mut view, refused)?;
    // The view goes first: the trees inside it are attached on top of it.
    for a in &mut view.attach {
        a.read_only = true;
    }
    for tree in inside {
        if out.attach.iter().any(|a| a.target == *tree) {
            continue;
        }
        let meta = std::fs::metadata(tree)
            .map_err(|e| StepError::new(Step::Mounts, format!("{}: {e}", tree.display()), None))?;
        let fd = sys::open_tree_clone(tree)
            .and_then(|fd| {
                sys::mount_setattr_tree(fd.as_fd(), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)?;
                Ok(fd)
            })
            .map_err(|e| refused(e.to_string(), why(e.errno)))?;
        view.attach.push(Attach {
            target: tree.clone(),
            fd: fd.as_raw_fd(),
            dir: meta.is_dir(),
            read_only: false,
            source: None,
        });
        view.fds.push(fd);
    }
    view.attach.append(&mut out.attach);
    view.fds.append(&mut out.fds);
    *out = view;
    Ok(())
}

/// Whether `tree` can be idmapped (its owner → the sandbox's user) here: a detached clone is
/// made and dropped. `Err`: what failed and why, in words.
pub fn probe(tree: &Path, id: Identity) -> Result<(), String> {
    let meta = std::fs::metadata(tree).map_err(|e| format!("{}: {e}", tree.display()))?;
    if meta.uid() == id.uid {
        return Ok(());
    }
    let fd = sys::open_tree_clone(tree).map_err(|e| format!("{e}: {}", why(e.errno)))?;
    with_mapping((meta.uid(), meta.gid()), (id.uid, id.gid), |ns| {
        sys::mount_setattr_idmap(fd.as_fd(), ns, MOUNT_ATTR_RDONLY)
    })
    .map_err(|e| {
        format!("{e}: no user namespace can be made here, and an idmapping is defined by one")
    })?
    .map_err(|e| format!("{e}: {}", why(e.errno)))
}

/// Clone `tree` detached and idmap it (its owner → the sandbox's user) with `attr` set too.
fn idmapped(
    tree: &Path,
    meta: &std::fs::Metadata,
    id: Identity,
    attr: u64,
    out: &mut Attached,
    refused: impl Fn(String, &str) -> StepError,
) -> Result<(), StepError> {
    let owner = (meta.uid(), meta.gid());
    let fd = sys::open_tree_clone(tree).map_err(|e| refused(e.to_string(), why(e.errno)))?;
    with_mapping(owner, (id.uid, id.gid), |userns| {
        sys::mount_setattr_idmap(
            fd.as_fd(),
            userns,
            attr | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        )
    })
    .map_err(|e| {
        refused(
            e.to_string(),
            "no user namespace can be made here, and an idmapping is defined by one",
        )
    })?
    .map_err(|e| refused(e.to_string(), why(e.errno)))?;
    out.attach.push(Attach {
        target: tree.to_path_buf(),
        fd: fd.as_raw_fd(),
        dir: meta.is_dir(),
        read_only: false,
        source: None,
    });
    out.fds.push(fd);
    Ok(())
}

/// Why the kernel refuses to idmap a tree, by the errno of open_tree or mount_setattr.
fn why(errno: Errno) -> &'static str {
    match errno {
        Errno::ENOSYS => "this kernel has no idmapped mounts (Linux 5.12 or later has)",
        Errno::EINVAL => {
            "its filesystem cannot be idmapped (ext4, xfs, btrfs and tmpfs since Linux 6.3 can; \
             overlayfs, a container's own root filesystem, cannot)"
        }
        Errno::EPERM => {
            "idmapping a tree needs CAP_SYS_ADMIN over its filesystem: root on the host has it, a \
             container's root only with --cap-add SYS_ADMIN, and under rootless podman never for \
             a volume from the host"
        }
        _ => "the kernel refused",
    }
}

fn fix(tree: &Path, why: &str, owner: (u32, u32), id: Identity) -> String {
    let run_as_owner = if owner.0 == 0 {
        String::new()
    } else {
        format!(
            ", or set process.run_as_user/run_as_group to its owner ({}:{})",
            owner.0, owner.1
        )
    };
    format!(
        "{why}; instead start sandbox-launch as the tree's owner rather than as root (a \
         container: --user \"$(id -u):$(id -g)\" with the project mounted from the host; rootless \
         podman: --userns=keep-id), or give the tree to the sandbox's user (chown -R {}:{} {}, \
         in an image: COPY --chown or RUN chown){run_as_owner}",
        id.uid,
        id.gid,
        tree.display(),
    )
}

/// A user namespace whose only mapping is `from` (the ids on disk) → `to` (the sandbox's):
/// made by a child cloned into it, kept by a descriptor once the child is gone. The child shares
/// this process's memory (CLONE_VM: no page tables to copy, and no copy-on-write faults for the
/// launcher afterwards) and only waits, on a stack of its own, for the pipe to close.
fn mapping_namespace(from: (u32, u32), to: (u32, u32)) -> Result<OwnedFd, sys::SysError> {
    let failed = |call: &str| sys::SysError {
        call: call.to_string(),
        errno: Errno::last(),
    };
    let mut pipe = [0; 2];
    // SAFETY: pipe2 fills the two descriptors.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(failed("pipe2"));
    }
    // SAFETY: the descriptors are fresh and ours.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };

    /// The child: close its own copy of the write end (it has a copy of the descriptor table),
    /// then wait for EOF, i.e. for the parent to close its own.
    extern "C" fn wait_for_eof(fds: *mut libc::c_void) -> libc::c_int {
        let fds = fds as usize;
        let (rd, wr) = (
            (fds & 0xffff_ffff) as libc::c_int,
            (fds >> 32) as libc::c_int,
        );
        let mut b = [0u8; 1];
        // SAFETY: close of a descriptor of this child; read into a buffer on its own stack.
        unsafe {
            libc::close(wr);
            libc::read(rd, b.as_mut_ptr().cast(), 1);
        }
        0
    }
    let fds = rd.as_raw_fd() as usize | (wr.as_raw_fd() as usize) << 32;
    let mut stack = vec![0u8; 16 * 1024];
    // SAFETY: the stack grows down from its 16-byte aligned end; the child runs only
    // `wait_for_eof` (a close and a read, then it returns and exits), and this function waits
    // for it before the stack is freed.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(stack.len()) as usize & !0xf;
        libc::clone(
            wait_for_eof,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD,
            fds as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(failed("clone(CLONE_NEWUSER) for the id mapping"));
    }
    let result = (|| {
        let write = |file: &str, content: String| {
            std::fs::write(format!("/proc/{pid}/{file}"), content).map_err(|e| sys::SysError {
                call: format!("write /proc/{pid}/{file}"),
                errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            })
        };
        write("uid_map", format!("{} {} 1\n", from.0, to.0))?;
        write("gid_map", format!("{} {} 1\n", from.1, to.1))?;
        std::fs::File::open(format!("/proc/{pid}/ns/user"))
            .map(OwnedFd::from)
            .map_err(|e| sys::SysError {
                call: format!("open /proc/{pid}/ns/user"),
                errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            })
    })();
    drop(wr);
    // SAFETY: reaping our own child, which exits once the write end is closed everywhere.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    drop(stack);
    drop(rd);
    result
}

/// Every directory on the way to each writable tree and to the working directory must let the
/// sandbox's user through (it has no supplementary groups), except inside a tree attached for it.
pub fn check_reachable(
    paths: &[PathBuf],
    attached: &[Attach],
    id: Identity,
    user: &str,
) -> Result<(), StepError> {
    // The trees share most of their ancestors: each is looked at once.
    let mut seen = std::collections::HashSet::new();
    for path in paths {
        for dir in path.ancestors().skip(1) {
            if !seen.insert(dir) || attached.iter().any(|a| dir.starts_with(&a.target)) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(dir) else {
                continue;
            };
            let bit = if meta.uid() == id.uid {
                0o100
            } else if meta.gid() == id.gid {
                0o010
            } else {
                0o001
            };
            if meta.mode() & bit == 0 {
                return Err(StepError::new(
                    Step::Mounts,
                    format!(
                        "the sandbox runs as {user} (uid {}), which cannot reach {}: {} is mode \
                         {:04o}, owned by uid {}",
                        id.uid,
                        path.display(),
                        dir.display(),
                        meta.mode() & 0o7777,
                        meta.uid()
                    ),
                    Some(&format!(
                        "work in a directory it can reach, let it through (chmod o+x {0}), or \
                         make {0} writable too (--allow-write {0}: it is then mapped to the \
                         sandbox's user, and its protected files stay read-only)",
                        dir.display()
                    )),
                ));
            }
        }
    }
    Ok(())
}
