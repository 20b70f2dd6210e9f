//! Mounts placed by name (`--bind`, `--ro-bind`, `--overlay`, `--tmpfs`): resolved once, at
//! launch — the source's symlinks followed on the host, the target checked against the view the
//! sandbox will have (a symlink on its way, a target that would have to be created on the host,
//! one that would hide a writable tree or another mount: refused, naming the flag and the fix).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use shim::spec::MountOp;

use super::{depth, resolve, within_any, Planner};
use crate::policy::model::{MountKind, Source};

/// One mount, resolved.
#[derive(Debug, Clone)]
pub struct Placed {
    pub kind: MountKind,
    /// The host path, canonical (`None` for a tmpfs).
    pub source: Option<PathBuf>,
    /// Where it is inside.
    pub target: PathBuf,
    /// As written (`--bind /a:/b`), for messages and `check`.
    pub asked: String,
    pub origin: Source,
}

impl Placed {
    pub fn writable(&self) -> bool {
        self.kind != MountKind::RoBind
    }

    /// The op the shim executes.
    pub fn op(&self, size: u64) -> MountOp {
        let target = self.target.clone();
        let source = self.source.clone().unwrap_or_default();
        match self.kind {
            MountKind::Bind | MountKind::RoBind => MountOp::Bind {
                source,
                target,
                read_only: self.kind == MountKind::RoBind,
            },
            MountKind::Overlay => MountOp::Overlay {
                source,
                target,
                size: Some(size),
            },
            MountKind::Tmpfs => MountOp::Tmpfs {
                target,
                mode: 0o755,
                size: Some(size),
            },
        }
    }

    /// Where the host path `p` (canonical) is seen through this mount, if it is.
    pub fn inside(&self, p: &Path) -> Option<PathBuf> {
        let rel = p.strip_prefix(self.source.as_ref()?).ok()?;
        Some(if rel.as_os_str().is_empty() {
            self.target.clone()
        } else {
            self.target.join(rel)
        })
    }
}

/// The placed mounts in words, for `check`: what each one is, from where, and what applies.
pub fn describe(placed: &[Placed]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if placed.is_empty() {
        return out;
    }
    let _ = writeln!(out, "mounts placed by name (in the order they are made):");
    for m in placed {
        let what = match m.kind {
            MountKind::Bind => "writable; writes reach the host; persistence protections apply",
            MountKind::RoBind => "read-only for every user inside, root included",
            MountKind::Overlay => {
                "writable layer in the sandbox's memory (sized like /tmp), gone at exit; the \
                 source is never written"
            }
            MountKind::Tmpfs => "empty, writable, in the sandbox's memory (sized like /tmp)",
        };
        let from = match &m.source {
            Some(s) => format!("host {} -> ", s.display()),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "  {}  [{}]
    {from}{}: {what}",
            m.asked,
            crate::policy::merge::describe_source(&m.origin),
            m.target.display()
        );
    }
    let _ = writeln!(out);
    out
}

fn kind_of(st: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = st.file_type();
    if t.is_socket() {
        Some("a unix socket: hand it in with --allow-unix-socket")
    } else if t.is_block_device() || t.is_char_device() {
        Some("a device: only directories and regular files can be mounted (the sandbox has a /dev of its own)")
    } else if t.is_fifo() {
        Some("a FIFO: only directories and regular files can be mounted")
    } else {
        None
    }
}

impl Planner<'_> {
    /// Resolve every requested mount, and refuse what cannot be placed safely.
    pub(super) fn collect_placed(&mut self) -> Result<()> {
        let mut out: Vec<Placed> = Vec::new();
        for m in &self.policy.filesystem.mounts {
            let req = &m.value;
            let asked = req.describe();
            let source = match &req.source {
                None => None,
                Some(s) => Some(self.placed_source(req.kind, s, &asked)?),
            };
            let target = match (&req.target, &source) {
                (Some(t), _) => t.clone(),
                (None, Some(s)) => s.clone(),
                (None, None) => bail!("{asked}: no target"),
            };
            crate::policy::mounts::reserved(&target)
                .map_err(|e| anyhow::anyhow!("{asked}: {e}"))?;
            if let Some(other) = out.iter().find(|o| o.target == target) {
                bail!(
                    "{asked}: the target {} is also the target of {} ({}); give each mount its \
                     own target",
                    target.display(),
                    other.asked,
                    crate::policy::merge::describe_source(&other.origin)
                );
            }
            out.push(Placed {
                kind: req.kind,
                source,
                target,
                asked,
                origin: m.source.clone(),
            });
        }
        // Outermost first: a mount inside another's target goes on top of it.
        out.sort_by_key(|p| depth(&p.target));
        self.placed = out;
        Ok(())
    }

    fn placed_source(&self, kind: MountKind, s: &Path, asked: &str) -> Result<PathBuf> {
        let flag = kind.flag();
        let p = resolve(s).map_err(|e| {
            anyhow::anyhow!(
                "{asked}: the source {} cannot be used: {e}; create it first or correct the path",
                s.display()
            )
        })?;
        if p == Path::new("/") {
            bail!(
                "{asked}: the source is the host's root /: the sandbox sees it already (read-only, \
                 under its protections and masks), and a mount of the whole host with its \
                 submounts cannot be placed safely; mount the directories you need"
            );
        }
        let meta = std::fs::metadata(&p)
            .map_err(|e| anyhow::anyhow!("{asked}: the source {}: {e}", p.display()))?;
        if let Some(why) = kind_of(&meta) {
            bail!("{asked}: the source {} is {why}", p.display());
        }
        if kind == MountKind::Overlay && !meta.is_dir() {
            bail!(
                "{asked}: the source {} is not a directory; --overlay takes a directory (use \
                 --ro-bind for a file)",
                p.display()
            );
        }
        if within_any(&p, &self.deny_read) {
            bail!(
                "{asked}: the source {} is denied (deny-read covers it, and deny beats allow); \
                 drop the mount or the deny rule",
                p.display()
            );
        }
        if kind == MountKind::Bind && within_any(&p, &self.deny_write) {
            bail!(
                "{asked}: the source {} must stay read-only (deny-write covers it, and deny \
                 beats allow); use --ro-bind or --overlay instead of {flag}",
                p.display()
            );
        }
        Ok(p)
    }

    /// After the base layout is known: what each target would hide, and whether it can be
    /// reached and made without following a symlink or writing on the host.
    pub(super) fn check_placed(&mut self, base_rw: &[(PathBuf, String)]) -> Result<()> {
        let control = std::fs::canonicalize(crate::control::dir::ControlDir::locate().path).ok();
        for (i, m) in self.placed.iter().enumerate() {
            for (root, why) in base_rw {
                let same = m.kind == MountKind::Bind && m.source.as_deref() == Some(root.as_path());
                if root.starts_with(&m.target) && !same {
                    bail!(
                        "{}: the target {} would hide {} ({why}); choose another target",
                        m.asked,
                        m.target.display(),
                        root.display()
                    );
                }
            }
            if let Some(c) = control.as_ref().filter(|c| m.target.starts_with(c)) {
                bail!(
                    "{}: the target {} is in {}, where sandbox-launch keeps its control \
                     sockets; choose another target",
                    m.asked,
                    m.target.display(),
                    c.display()
                );
            }
            self.check_target(i)?;
        }
        Ok(())
    }

    /// The target of mount `i`, as the sandbox will see it when the mount is made: below an
    /// earlier placed mount, in a private tmpfs, in the allow-list root, or on the host.
    fn check_target(&self, i: usize) -> Result<()> {
        let m = &self.placed[i];
        let src_dir = m.source.as_ref().is_none_or(|s| s.is_dir());
        let under = self.placed[..i]
            .iter()
            .filter(|o| m.target.starts_with(&o.target))
            .max_by_key(|o| depth(&o.target));
        // (the host path the target's parent directory comes from, the inside path it is at)
        let backing: Option<(PathBuf, PathBuf)> = match under {
            Some(o) if o.kind == MountKind::Tmpfs => None,
            Some(o) => o.source.clone().map(|s| (s, o.target.clone())),
            None => self.base_backing(&m.target),
        };
        let Some((host_top, inside_top)) = backing else {
            return self.check_root_symlinks(m);
        };
        let rel = m.target.strip_prefix(&inside_top).unwrap_or(Path::new(""));
        let mut host = host_top.clone();
        let mut inside = inside_top.clone();
        for c in rel.components() {
            host.push(c);
            inside.push(c);
            match std::fs::symlink_metadata(&host) {
                Ok(st) if st.file_type().is_symlink() => {
                    let to = std::fs::read_link(&host).unwrap_or_default();
                    bail!(
                        "{}: the target {} goes through the symlink {} (-> {}) inside the \
                         sandbox; mounts never follow a symlink in their target: give the path \
                         it leads to",
                        m.asked,
                        m.target.display(),
                        inside.display(),
                        to.display()
                    );
                }
                Ok(st) => {
                    if inside == m.target && st.is_dir() != src_dir {
                        bail!(
                            "{}: the target {} is {} and the source is not; mount a directory on \
                             a directory and a file on a file",
                            m.asked,
                            m.target.display(),
                            if st.is_dir() { "a directory" } else { "a file" }
                        );
                    }
                }
                Err(_) => {
                    let fix = match under {
                        Some(o) => format!(
                            "it is inside {} ({}), whose source is the host's",
                            o.target.display(),
                            o.asked
                        ),
                        None => "in this view the sandbox's root is the host's".into(),
                    };
                    bail!(
                        "{}: the target {} does not exist, and {} cannot be created without \
                         writing on the host ({fix}); create it on the host first (mkdir -p {}), \
                         or put the target under a --tmpfs, or use --empty-root",
                        m.asked,
                        m.target.display(),
                        inside.display(),
                        host.display()
                    );
                }
            }
        }
        Ok(())
    }

    /// The host directory a target outside every placed mount lies in, and where it is inside;
    /// `None` when the sandbox makes it itself (a private tmpfs, the allow-list root).
    fn base_backing(&self, target: &Path) -> Option<(PathBuf, PathBuf)> {
        let private = ["/tmp", "/run", "/var/run"];
        if self.host_readable() {
            if private.iter().any(|d| target.starts_with(d)) {
                return None;
            }
            if let Some(x) = self
                .ctx
                .xdg_runtime_dir
                .as_ref()
                .and_then(|x| resolve(x).ok())
            {
                if target.starts_with(&x) {
                    return None;
                }
            }
            return Some(("/".into(), "/".into()));
        }
        let granted = self
            .ro
            .iter()
            .chain(self.rw.iter())
            .filter(|g| target.starts_with(g))
            .max_by_key(|g| depth(g))?;
        Some((granted.clone(), granted.clone()))
    }

    /// In the allow-list root, the symlinks the sandbox makes there (`/bin -> usr/bin`).
    fn check_root_symlinks(&self, m: &Placed) -> Result<()> {
        if self.host_readable() {
            return Ok(());
        }
        for (link, to) in &self.symlinks {
            if m.target.starts_with(link) {
                bail!(
                    "{}: the target {} goes through the symlink {} (-> {}) of the sandbox's \
                     root; give the path it leads to",
                    m.asked,
                    m.target.display(),
                    link.display(),
                    to.display()
                );
            }
        }
        Ok(())
    }

    /// The places inside where the host path `p` shows through a placed mount.
    pub(super) fn placed_views(&self, p: &Path) -> Vec<PathBuf> {
        self.placed.iter().filter_map(|m| m.inside(p)).collect()
    }

    /// Whether the inside path `p` is covered by a placed mount (what the host has there is not
    /// what the sandbox sees).
    pub(super) fn under_placed(&self, p: &Path) -> bool {
        self.placed.iter().any(|m| p.starts_with(&m.target))
    }
}
