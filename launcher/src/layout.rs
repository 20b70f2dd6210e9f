//! From the policy to the filesystem the sandbox sees: which mounts, in which order, which
//! Landlock rules, and what the shim must verify. Planned on the host, where paths are resolved
//! (symlinks followed, existence checked) before anything is mounted.
//!
//! Launch cost does not depend on the size of the working tree: nothing here walks a tree; each
//! policy path costs a few `stat`s.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Result};
use shim::spec::{Access, LandlockRule, MountOp, MountPlan};

use crate::policy::model::{FsMode, LandlockCompat, Policy, Sourced};

/// Host facts the plan depends on.
#[derive(Debug, Clone)]
pub struct HostContext {
    /// The working directory, canonical.
    pub cwd: PathBuf,
    pub home: Option<PathBuf>,
    pub xdg_runtime_dir: Option<PathBuf>,
}

#[derive(Debug, Default)]
pub struct Layout {
    pub mounts: MountPlan,
    pub landlock: Vec<LandlockRule>,
    pub verify_unreadable: Vec<PathBuf>,
    pub verify_unwritable_dirs: Vec<PathBuf>,
    /// Reported to the user (stderr and the status).
    pub warnings: Vec<String>,
    /// Protected paths that do not exist and so could not be made read-only (the create guard
    /// keeps them from appearing; the launcher looks again when the sandbox ends).
    pub unprotected_missing: Vec<PathBuf>,
    /// What the create guard enforces.
    pub persist: shim::spec::PersistSpec,
    /// Writable roots, canonical (for messages and the status).
    pub writable: Vec<PathBuf>,
}

/// Device files the sandbox may read, write and ioctl.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/pts",
];

fn depth(p: &Path) -> usize {
    p.components().count()
}

fn is_within(path: &Path, root: &Path) -> bool {
    path.starts_with(root)
}

fn within_any(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| is_within(path, r))
}

/// Canonicalize, or say why not.
fn resolve(p: &Path) -> std::io::Result<PathBuf> {
    std::fs::canonicalize(p)
}

/// The top-level symlinks of the host root (`/bin -> usr/bin` on merged-/usr systems).
fn root_symlinks() -> Vec<(PathBuf, PathBuf)> {
    let Ok(entries) = std::fs::read_dir("/") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let link = std::fs::read_link(&path).ok()?;
            Some((path, link))
        })
        .collect()
}

struct Planner<'a> {
    policy: &'a Policy,
    ctx: &'a HostContext,
    hard: bool,
    out: Layout,
    rw: Vec<PathBuf>,
    ro: Vec<PathBuf>,
    symlinks: Vec<(PathBuf, PathBuf)>,
    deny_read: Vec<PathBuf>,
    deny_write: Vec<PathBuf>,
}

pub fn plan(policy: &Policy, ctx: &HostContext) -> Result<Layout> {
    let mut p = Planner {
        policy,
        ctx,
        hard: policy.landlock == LandlockCompat::HardRequirement,
        out: Layout::default(),
        rw: Vec::new(),
        ro: Vec::new(),
        symlinks: Vec::new(),
        deny_read: Vec::new(),
        deny_write: Vec::new(),
    };
    p.collect_denies();
    p.collect_roots()?;
    p.emit()?;
    Ok(p.out)
}

impl Planner<'_> {
    fn host_readable(&self) -> bool {
        self.policy.filesystem.mode == FsMode::HostReadable
    }

    /// Resolve every deny path that exists; a missing one has nothing to hide or protect.
    fn collect_denies(&mut self) {
        for (list, out) in [
            (&self.policy.filesystem.deny_read, &mut self.deny_read),
            (&self.policy.filesystem.deny_write, &mut self.deny_write),
        ] {
            for Sourced { value, .. } in list {
                if let Ok(p) = resolve(value) {
                    out.push(p);
                }
            }
        }
    }

    /// A path the policy grants, resolved; `None` (with a warning, or an error under
    /// hard_requirement in allow-list mode) when it does not exist.
    fn grant(&mut self, path: &Path, what: &str) -> Result<Option<PathBuf>> {
        match resolve(path) {
            Ok(p) => Ok(Some(p)),
            Err(e) => {
                if self.hard && !self.host_readable() {
                    bail!(
                        "{what} {}: {e}; every listed path must exist under landlock.compatibility: hard_requirement (or use best_effort to skip missing paths)",
                        path.display()
                    );
                }
                self.out
                    .warnings
                    .push(format!("{what} {} skipped: {e}", path.display()));
                Ok(None)
            }
        }
    }

    fn collect_roots(&mut self) -> Result<()> {
        let fs = &self.policy.filesystem;
        let mut writable = Vec::new();
        if fs.include_workdir || self.host_readable() {
            writable.push(self.ctx.cwd.clone());
        }
        for s in &fs.read_write {
            if let Some(p) = self.grant(&s.value, "writable path")? {
                writable.push(p);
            }
        }
        for p in writable {
            if p == Path::new("/") {
                bail!("`/` cannot be writable: it would make the whole host writable");
            }
            if within_any(&p, &self.deny_read) || within_any(&p, &self.deny_write) {
                self.out.warnings.push(format!(
                    "{} stays read-only: a deny rule covers it (deny beats allow)",
                    p.display()
                ));
                continue;
            }
            self.rw.push(p);
        }
        if !self.host_readable() {
            for s in fs.read_only.clone() {
                self.note_symlinks(&s.value);
                if let Some(p) = self.grant(&s.value, "read-only path")? {
                    self.ro.push(p);
                }
            }
            for p in self.rw.clone() {
                self.note_symlinks(&p);
            }
        }
        self.rw = minimal_roots(std::mem::take(&mut self.rw));
        self.ro = minimal_roots(std::mem::take(&mut self.ro));
        self.out.writable = self.rw.clone();
        Ok(())
    }

    /// In allow-list mode the root is an empty tmpfs: a symlink on the way to a granted path
    /// (and the merged-/usr links like `/lib64 -> usr/lib64`) must be recreated there.
    fn note_symlinks(&mut self, path: &Path) {
        let mut prefix = PathBuf::from("/");
        for c in path.components() {
            if let Component::Normal(n) = c {
                prefix.push(n);
                if let Ok(link) = std::fs::read_link(&prefix) {
                    if !self.symlinks.iter().any(|(p, _)| *p == prefix) {
                        self.symlinks.push((prefix.clone(), link));
                    }
                    match resolve(&prefix) {
                        Ok(r) => prefix = r,
                        Err(_) => return,
                    }
                }
            }
        }
    }

    fn granted(&self, path: &Path) -> bool {
        self.host_readable() || within_any(path, &self.ro) || within_any(path, &self.rw)
    }

    fn emit(&mut self) -> Result<()> {
        let mut ops = Vec::new();
        let host = self.host_readable();
        self.out.mounts.host_root = host;

        // Private /tmp, and the host's socket directories emptied.
        let tmp_wanted = host
            || self
                .policy
                .filesystem
                .read_write
                .iter()
                .any(|s| s.value == Path::new("/tmp"));
        if tmp_wanted {
            ops.push(MountOp::Tmpfs {
                target: "/tmp".into(),
                mode: 0o1777,
                size: None,
            });
        }
        let mut emptied: Vec<PathBuf> = Vec::new();
        if host {
            for dir in ["/run", "/var/run"] {
                let p = Path::new(dir);
                if p.is_dir() && std::fs::read_link(p).is_err() {
                    emptied.push(p.to_path_buf());
                }
            }
            if let Some(x) = &self.ctx.xdg_runtime_dir {
                if let Ok(x) = resolve(x) {
                    if !within_any(&x, &emptied) && x.is_dir() {
                        emptied.push(x);
                    }
                }
            }
            for dir in &emptied {
                ops.push(MountOp::Tmpfs {
                    target: dir.clone(),
                    mode: 0o755,
                    size: None,
                });
            }
            // Name resolution configured through /run (systemd-resolved) keeps working.
            if let Ok(target) = resolve(Path::new("/etc/resolv.conf")) {
                if within_any(&target, &emptied) {
                    ops.push(MountOp::ReadOnly {
                        source: target.clone(),
                        target,
                    });
                }
            }
        } else {
            for (link_path, link) in root_symlinks() {
                let Ok(target) = resolve(&link_path) else {
                    continue;
                };
                if self.granted(&target) && !self.symlinks.iter().any(|(p, _)| *p == link_path) {
                    self.symlinks.push((link_path, link));
                }
            }
            self.symlinks.sort();
            for (target, link) in &self.symlinks {
                ops.push(MountOp::Symlink {
                    target: target.clone(),
                    link: link.clone(),
                });
            }
            let mut ro = self.ro.clone();
            ro.sort_by_key(|p| depth(p));
            for p in ro {
                if skip_special(&p) || within_any(&p, &self.rw) {
                    continue;
                }
                ops.push(MountOp::ReadOnly {
                    source: p.clone(),
                    target: p,
                });
            }
        }

        let mut rw = self.rw.clone();
        rw.sort_by_key(|p| depth(p));
        for p in &rw {
            if skip_special(p) {
                continue;
            }
            ops.push(MountOp::ReadWrite {
                source: p.clone(),
                target: p.clone(),
            });
        }
        for s in &self.policy.filesystem.unix_sockets {
            let p = resolve(&s.value).map_err(|e| {
                anyhow::anyhow!("unix socket {} cannot be handed in: {e}", s.value.display())
            })?;
            ops.push(MountOp::ReadWrite {
                source: p.clone(),
                target: p,
            });
        }

        // Read-only inside writable trees: explicit denyWrite, then the always-protected paths.
        let mut read_only_binds: BTreeSet<PathBuf> = BTreeSet::new();
        for p in &self.deny_write {
            if within_any(p, &rw) {
                read_only_binds.insert(p.clone());
            }
        }
        for p in self.protected_candidates(&rw) {
            match std::fs::symlink_metadata(&p) {
                Ok(meta) if !meta.file_type().is_symlink() => {
                    read_only_binds.insert(p);
                }
                Ok(_) => {
                    // A symlink: its target is governed by where it points.
                }
                Err(_) => self.out.unprotected_missing.push(p),
            }
        }
        read_only_binds.extend(crate::persistence::git_hooks_at_launch(&rw));
        self.out.persist = shim::spec::PersistSpec {
            roots: rw.iter().filter(|p| !skip_special(p)).cloned().collect(),
            rules: crate::persistence::table_rules(self.ctx.home.as_deref()),
            overrides: Vec::new(),
        };
        let mut ro_binds: Vec<PathBuf> = read_only_binds.into_iter().collect();
        ro_binds.sort_by_key(|p| depth(p));
        // Pin every directory between a writable root and a read-only path with a bind of
        // itself: a mount point cannot be renamed or removed (EBUSY), so `mv .git .git2 &&
        // mkdir -p .git/hooks` cannot swap a fresh, writable tree in under the protected name.
        let mut pins: BTreeSet<PathBuf> = BTreeSet::new();
        for p in &ro_binds {
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
        for p in pins {
            ops.push(MountOp::ReadWrite {
                source: p.clone(),
                target: p,
            });
        }
        for p in ro_binds {
            ops.push(MountOp::ReadOnly {
                source: p.clone(),
                target: p,
            });
        }

        // Masks last: deny read beats everything.
        let private: Vec<PathBuf> = tmp_wanted
            .then(|| PathBuf::from("/tmp"))
            .into_iter()
            .chain(emptied)
            .collect();
        let bound: Vec<PathBuf> = ops
            .iter()
            .filter_map(|op| match op {
                MountOp::ReadOnly { target, .. } | MountOp::ReadWrite { target, .. } => {
                    Some(target.clone())
                }
                _ => None,
            })
            .collect();
        let mut masks = self.deny_read.clone();
        masks.sort_by_key(|p| depth(p));
        for p in masks {
            if !self.granted(&p) {
                continue; // not in the sandbox at all
            }
            if let Some(dir) = private.iter().find(|d| p.starts_with(d)) {
                if !within_any(&p, &bound) {
                    self.out.warnings.push(format!(
                        "deny-read {}: nothing to deny: the sandbox has a private {} of its \
                         own, so the host's is not in it",
                        p.display(),
                        dir.display()
                    ));
                    continue;
                }
            }
            let dir = p.is_dir();
            ops.push(MountOp::Mask {
                target: p.clone(),
                dir,
            });
            self.out.verify_unreadable.push(p);
        }
        self.out.mounts.ops = ops;
        self.emit_landlock(&rw, tmp_wanted);
        self.emit_write_probes(&rw);
        Ok(())
    }

    fn protected_candidates(&self, rw: &[PathBuf]) -> Vec<PathBuf> {
        crate::persistence::named_at_launch(rw, self.ctx.home.as_deref())
    }

    fn emit_landlock(&mut self, rw: &[PathBuf], tmp: bool) {
        let host = self.host_readable();
        let rules = &mut self.out.landlock;
        if host {
            rules.push(LandlockRule {
                path: "/".into(),
                access: Access::Read,
            });
        } else {
            // The new root holds only the allow-listed trees, so listing its directories
            // shows nothing else; reading files still needs a rule below.
            rules.push(LandlockRule {
                path: "/".into(),
                access: Access::ListDir,
            });
            rules.push(LandlockRule {
                path: "/proc".into(),
                access: Access::Read,
            });
            for p in &self.ro {
                rules.push(LandlockRule {
                    path: p.clone(),
                    access: Access::Read,
                });
            }
        }
        for p in rw {
            rules.push(LandlockRule {
                path: p.clone(),
                access: Access::Write,
            });
        }
        if tmp {
            rules.push(LandlockRule {
                path: "/tmp".into(),
                access: Access::Write,
            });
        }
        rules.push(LandlockRule {
            path: "/dev/shm".into(),
            access: Access::Write,
        });
        for d in DEVICES {
            if Path::new(d).exists() || *d == "/dev/pts" {
                rules.push(LandlockRule {
                    path: (*d).into(),
                    access: Access::Device,
                });
            }
        }
        for s in &self.policy.filesystem.unix_sockets {
            if let Ok(p) = resolve(&s.value) {
                rules.push(LandlockRule {
                    path: p,
                    access: Access::Write,
                });
            }
        }
    }

    /// Directories that must refuse a new file: outside every writable root.
    fn emit_write_probes(&mut self, rw: &[PathBuf]) {
        let mut candidates: Vec<PathBuf> = vec!["/usr".into(), "/etc".into()];
        if let Some(home) = &self.ctx.home {
            candidates.push(home.clone());
        }
        if let Some(parent) = self.ctx.cwd.parent() {
            candidates.push(parent.to_path_buf());
        }
        for c in candidates {
            let Ok(c) = resolve(&c) else { continue };
            if c.is_dir()
                && self.granted(&c)
                && !within_any(&c, rw)
                && !within_any(&c, &self.deny_read)
            {
                if c.starts_with("/tmp") || c.starts_with("/run") || c.starts_with("/dev") {
                    continue; // private tmpfs of the sandbox
                }
                if !self.out.verify_unwritable_dirs.contains(&c) {
                    self.out.verify_unwritable_dirs.push(c);
                }
            }
        }
    }
}

/// Paths the shim provides itself (fresh /proc, minimal /dev, private /tmp).
fn skip_special(p: &Path) -> bool {
    p == Path::new("/tmp") || p.starts_with("/proc") || p.starts_with("/dev")
}

/// Drop paths that lie inside another path of the same list.
fn minimal_roots(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        if !out.iter().any(|r| is_within(&p, r)) {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_roots_collapse_into_the_outer_one() {
        let got = minimal_roots(vec![
            "/a/b".into(),
            "/a".into(),
            "/c".into(),
            "/a/b/c".into(),
        ]);
        assert_eq!(got, vec![PathBuf::from("/a"), PathBuf::from("/c")]);
    }

    #[test]
    fn a_sibling_with_a_common_prefix_is_not_nested() {
        let got = minimal_roots(vec!["/a".into(), "/ab".into()]);
        assert_eq!(got, vec![PathBuf::from("/a"), PathBuf::from("/ab")]);
    }
}
