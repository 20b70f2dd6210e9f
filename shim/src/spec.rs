//! What the supervisor asks the shim to build. Planned on the host (paths resolved, existence
//! checked) so that the shim only executes; sent as JSON over the sync socket.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// Program and arguments. `argv[0]` is looked up in `PATH` inside the sandbox.
    pub argv: Vec<String>,
    /// The complete environment of the target.
    pub env: Vec<(String, String)>,
    /// Working directory inside the sandbox.
    pub cwd: PathBuf,
    pub hostname: String,
    pub mounts: MountPlan,
    pub landlock: LandlockSpec,
    pub seccomp: SeccompSpec,
    pub network: NetworkSpec,
    /// The uid and gid the target must end up with (as seen inside).
    pub uid: u32,
    pub gid: u32,
    /// File descriptors, besides 0-2, that cross into the sandbox.
    pub preserve_fds: Vec<i32>,
    /// Paths that must be unreadable once the sandbox is built (verified before exec).
    pub verify_unreadable: Vec<PathBuf>,
    /// Paths that must not be writable (verified before exec): a probe creates a file below each.
    pub verify_unwritable_dirs: Vec<PathBuf>,
    /// What the create guard protects (see `create_guard::rules`).
    #[serde(default)]
    pub persist: PersistSpec,
    /// Build and verify every layer, then end without starting anything (`doctor`'s launch).
    #[serde(default)]
    pub probe_only: bool,
    /// Resource limits of the program and the OOM killer's view of the sandbox.
    #[serde(default)]
    pub limits: ProcessLimits,
    /// The pathname unix sockets a program may connect to besides those it binds itself (see
    /// `create_guard::host_sockets`). `None`: connects are not guarded.
    #[serde(default)]
    pub host_sockets: Option<HostSockets>,
    /// Started as root: the sandbox's user holds no supplementary group (verified). An
    /// unprivileged caller's cannot be dropped in a user namespace (setgroups is denied there).
    #[serde(default)]
    pub no_supplementary_groups: bool,
}

/// Paths as seen inside.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct HostSockets {
    /// Handed in with `--allow-unix-socket`.
    pub handed_in: Vec<PathBuf>,
    /// The sandbox's own filesystems (its tmpfs mounts): a socket there was made inside.
    pub own_filesystems: Vec<PathBuf>,
}

/// What the shim sets for the sandbox's processes (the cgroup limits are the supervisor's).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessLimits {
    /// Set in the program's process just before its exec (core included: 0 unless asked).
    pub rlimits: Vec<Rlimit>,
    /// The `oom_score_adj` init is born with (the supervisor holds it just around the clone)
    /// and every process inside inherits: the sandbox goes before anything else when memory
    /// runs out. Verified before the program starts.
    pub oom_score_adj: i32,
}

impl Default for ProcessLimits {
    fn default() -> Self {
        ProcessLimits {
            rlimits: vec![Rlimit {
                resource: libc::RLIMIT_CORE,
                soft: 0,
                hard: 0,
            }],
            oom_score_adj: 1000,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Rlimit {
    /// `RLIMIT_*`.
    pub resource: u32,
    pub soft: u64,
    pub hard: u64,
}

/// The persistence model the create guard enforces: inside the writable trees backed by the
/// host, nothing may be written where it would run on the host later. Travels in the form of
/// [`crate::persist_wire`] (each surface text once).
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
#[serde(try_from = "crate::persist_wire::Wire")]
pub struct PersistSpec {
    /// Writable trees backed by the host (canonical): the rules apply inside them.
    pub roots: Vec<PathBuf>,
    /// Protected paths.
    pub rules: Vec<ProtectRule>,
    /// Explicit `--allow-write` of a protected path (or of a path inside one): no rule applies
    /// at or below these...
    pub overrides: Vec<PathBuf>,
    /// ...except these (`--deny-write`, existing or not): nothing may be written at or below
    /// them, nor anything but a directory appear on the way to them.
    pub denied: Vec<PathBuf>,
}

impl PersistSpec {
    /// Whether there is anything to guard.
    pub fn is_empty(&self) -> bool {
        self.roots.is_empty() && self.rules.is_empty()
    }
}

/// One protected path or family of paths.
#[derive(Debug, Clone, Eq)]
pub struct ProtectRule {
    /// `None`: matched at any depth (in every writable tree, below it and at it); `Some(dir)`:
    /// relative to `dir`.
    pub anchor: Option<PathBuf>,
    /// `/`-separated components, each a glob (`*`, `?`); a last component `**` also matches
    /// everything below. Empty: the anchor itself.
    pub pattern: String,
    /// The surface it protects (said in refusals and by `check`). Shared by the rules of one
    /// surface (a dozen texts for ~110 rules).
    pub surface: Arc<str>,
}

/// Field by field, the pattern first: rules are compared by the hundred when a plan merges its
/// lists, and most differ in their short patterns, while an anchor (a `PathBuf`) compares
/// component by component.
/// Every field is named, so that one added later cannot be left out of the comparison (rules
/// that compared equal would be merged into one).
impl PartialEq for ProtectRule {
    fn eq(&self, other: &Self) -> bool {
        let ProtectRule {
            anchor,
            pattern,
            surface,
        } = self;
        *pattern == other.pattern && *surface == other.surface && *anchor == other.anchor
    }
}

/// The filesystem layout. Paths are absolute and as seen inside; `source` paths are host paths.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct MountPlan {
    /// `true`: the new root starts as a read-only recursive bind of the host root.
    /// `false`: it starts as an empty tmpfs and only `ops` put things in it.
    pub host_root: bool,
    /// Applied in order, after `/proc`, `/dev` and the base are in place.
    pub ops: Vec<MountOp>,
    /// The size of `/dev/shm` in bytes (`None`: the kernel's default, half the RAM).
    #[serde(default)]
    pub shm_size: Option<u64>,
    /// Writable trees the supervisor prepared as detached mounts (idmapped to the sandbox's
    /// user when started as root), inherited as descriptors across the clone: each is attached
    /// in place of the `ReadWrite` bind of the same target (`ReadOnly` for a read-only view),
    /// and binds of paths inside it are taken from it.
    #[serde(default)]
    pub attach: Vec<Attach>,
}

impl MountPlan {
    /// The descriptors the plan's mounts use, inherited across the clone and kept open by the
    /// shim until the mounts are made.
    pub fn inherited_fds(&self) -> Vec<i32> {
        let mut fds: Vec<i32> = self.attach.iter().map(|a| a.fd).collect();
        for op in &self.ops {
            if let MountOp::Worktree {
                layers_fd: Some(fd),
                ..
            } = op
            {
                fds.push(*fd);
            }
        }
        fds
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Attach {
    pub target: PathBuf,
    /// The host tree, when it is not `target` (a `--bind SRC:DST`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<PathBuf>,
    /// The detached tree (open_tree), open in the shim.
    pub fd: i32,
    /// The tree is a directory (else a file).
    pub dir: bool,
    /// A read-only view (the caller's home, started as root): attached in place of the
    /// `ReadOnly` bind of the same target.
    #[serde(default)]
    pub read_only: bool,
}

impl Attach {
    /// The host tree it is a copy of.
    pub fn source(&self) -> &Path {
        self.source.as_deref().unwrap_or(&self.target)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MountOp {
    /// Bind `source` (host) at `target`, read-only, recursively.
    ReadOnly { source: PathBuf, target: PathBuf },
    /// Bind `source` (host) at `target`, writable, recursively.
    ReadWrite { source: PathBuf, target: PathBuf },
    /// A fresh, private, writable tmpfs of `size` bytes (`None`: the kernel's default, half
    /// the RAM).
    Tmpfs {
        target: PathBuf,
        mode: u32,
        #[serde(default)]
        size: Option<u64>,
    },
    /// An empty, mode-000, read-only file or directory over `target`.
    Mask { target: PathBuf, dir: bool },
    /// A read-only file with these contents over `target`, written by the shim into its own
    /// staging tmpfs (nothing is written on the host).
    File { target: PathBuf, contents: String },
    /// A symlink in the (tmpfs) root: `target` -> `link`.
    Symlink { target: PathBuf, link: PathBuf },
    /// `--worktree`: `source` (host directory, never written) at `target` as an overlay whose
    /// upper and work directories are `layers/upper` and `layers/work`: what the sandbox
    /// writes there is kept on the host (see `worktree_mount`). `layers_fd`: a detached copy
    /// of `layers` the supervisor made (started as root, `layers` is out of the sandbox
    /// user's reach by path).
    Worktree {
        source: PathBuf,
        target: PathBuf,
        layers: PathBuf,
        #[serde(default)]
        layers_fd: Option<i32>,
    },
    /// A mount placed by name (`--bind`, `--ro-bind`): `source` (host, canonical) at `target`
    /// (inside), recursively; read-only for everyone inside (root included) when `read_only`.
    /// `target` is resolved without following symlinks (one on the way is an error) and
    /// created only where a tmpfs of the sandbox holds it (see `placed`).
    Bind {
        source: PathBuf,
        target: PathBuf,
        read_only: bool,
    },
    /// `source` (host directory, never written) at `target` under a writable layer: what the
    /// sandbox writes there lives in a tmpfs of its own of `size` bytes (`None`: the kernel's
    /// default), invisible outside, and goes when the sandbox ends. Target as for `Bind`.
    Overlay {
        source: PathBuf,
        target: PathBuf,
        #[serde(default)]
        size: Option<u64>,
    },
    /// Where the persistence model's read-only binds go (after the writable trees and the
    /// mounts placed by name, before the masks). A launch plans them after the clone, while
    /// the shim builds the network, and sends them with the create guard's rules
    /// ([`crate::channel::PersistencePlan`]); the shim puts them here before it mounts
    /// anything, and mounts nothing without them.
    PersistenceBinds,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Compat {
    HardRequirement,
    BestEffort,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Read and execute.
    Read,
    /// Every filesystem right.
    Write,
    /// Read, write and ioctl on device files (terminals, /dev/null...).
    Device,
    /// List directories (and nothing else) beneath.
    ListDir,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LandlockRule {
    pub path: PathBuf,
    pub access: Access,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LandlockSpec {
    pub compat: Compat,
    pub rules: Vec<LandlockRule>,
    /// Scope abstract unix sockets and signals to the sandbox (ABI >= 6).
    pub scope: bool,
    /// TCP ports the sandbox may connect to, if Landlock network rules are wanted (ABI >= 4).
    /// `None`: TCP is not restricted by Landlock. `Some(vec![])`: no TCP connect at all.
    pub tcp_connect: Option<Vec<u16>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeccompSpec {
    /// For messages.
    pub name: String,
    /// seccompiler JSON.
    pub json: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum NetworkSpec {
    /// Host network namespace.
    Full,
    /// Own namespace, only `lo`.
    None,
    /// Own namespace; the shim creates listeners on 127.0.0.1 at these ports and passes them to the
    /// supervisor (in this order) before the target starts.
    Restricted {
        listen_ports: Vec<u16>,
        /// Transparent egress: also a TCP listener and a DNS socket (passed after the others),
        /// and the redirect to them (see `egress`).
        #[serde(default)]
        transparent: Option<Transparent>,
    },
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Transparent {
    pub tcp_port: u16,
    pub dns_port: u16,
}
