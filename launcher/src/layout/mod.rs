//! From the policy to the filesystem the sandbox sees: which mounts, in which order, which
//! Landlock rules, and what the shim must verify. Planned on the host, where paths are resolved
//! (symlinks followed, existence checked) before anything is mounted.
//!
//! Launch cost does not depend on the size of the working tree: nothing here walks a tree; each
//! policy path costs a few `stat`s.
//!
//! `mounts` emits the mounts, `landlock` the Landlock rules and the write probes; what protects
//! the persistence surfaces is planned in `crate::persistence`.

mod landlock;
mod mounts;
mod persist_plan;
pub mod placed;
mod placed_persist;

pub use persist_plan::{complete, Completed, PersistInputs};

use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Result};
use shim::spec::{LandlockRule, MountPlan};

use crate::policy::model::{FsMode, LandlockCompat, Policy, Source, Sourced};

/// Host facts the plan depends on.
#[derive(Debug, Clone)]
pub struct HostContext {
    /// The working directory, canonical.
    pub cwd: PathBuf,
    pub home: Option<PathBuf>,
    pub xdg_runtime_dir: Option<PathBuf>,
    /// The host's `PATH` (its directories inside a writable tree are protected).
    pub path_var: Option<String>,
    /// sandbox-launch's user policy directory (`$XDG_CONFIG_HOME/sandbox-launch`): protected
    /// wherever it lies in a writable tree.
    pub user_policy_dir: Option<PathBuf>,
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
    /// The protections of the persistence model (for `check`).
    pub protections: crate::persistence::plan::Protections,
    /// Writable trees placed by name (`--bind SRC[:DST]`): (host, inside).
    pub placed_writable: Vec<(PathBuf, PathBuf)>,
    /// Every mount placed by name, resolved, in the order they are made (for `check`).
    pub placed: Vec<placed::Placed>,
    /// Planned with [`plan_deferring`]: the persistence plan of the writable roots, still to
    /// be made (`persist`, `unprotected_missing` and `protections` hold only the mounts placed
    /// by name until then; see `persist_plan`).
    pub deferred_persistence: Option<PersistInputs>,
}

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
    /// Leave the persistence plan of the writable roots for after the clone.
    defer_persistence: bool,
    hard: bool,
    out: Layout,
    rw: Vec<PathBuf>,
    ro: Vec<PathBuf>,
    symlinks: Vec<(PathBuf, PathBuf)>,
    deny_read: Vec<PathBuf>,
    deny_write: Vec<PathBuf>,
    /// The deny-write paths as the policy gives them, existing or not.
    deny_write_asked: Vec<PathBuf>,
    /// Every writable root, nested ones included (`rw` keeps only the outermost, for mounts).
    all_rw: Vec<PathBuf>,
    /// The writable roots the policy names explicitly (not the working directory, nor the
    /// agents' state directories the launcher adds).
    explicit_rw: Vec<PathBuf>,
    /// The mounts placed by name, resolved, outermost target first.
    placed: Vec<placed::Placed>,
}

pub fn plan(policy: &Policy, ctx: &HostContext) -> Result<Layout> {
    plan_with(policy, ctx, false)
}

/// As [`plan`], with the persistence plan of the writable roots left for later: its place in
/// the mounts is held and `deferred_persistence` says what to plan (see `persist_plan`).
pub fn plan_deferring(policy: &Policy, ctx: &HostContext) -> Result<Layout> {
    plan_with(policy, ctx, true)
}

fn plan_with(policy: &Policy, ctx: &HostContext, defer_persistence: bool) -> Result<Layout> {
    let mut p = Planner {
        policy,
        ctx,
        defer_persistence,
        hard: policy.landlock == LandlockCompat::HardRequirement,
        out: Layout::default(),
        rw: Vec::new(),
        ro: Vec::new(),
        symlinks: Vec::new(),
        deny_read: Vec::new(),
        deny_write: Vec::new(),
        deny_write_asked: policy
            .filesystem
            .deny_write
            .iter()
            .map(|s| s.value.clone())
            .collect(),
        all_rw: Vec::new(),
        explicit_rw: Vec::new(),
        placed: Vec::new(),
    };
    p.collect_denies();
    p.collect_roots()?;
    p.collect_placed()?;
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
                // The agents' state directories are the launcher's own choice: one that is (or
                // lies in) a protected path (`CODEX_HOME=~/.config/git`) keeps the protection.
                if s.source != Source::Default {
                    self.explicit_rw.push(p.clone());
                }
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
        self.all_rw = self.rw.clone();
        self.all_rw.sort();
        self.all_rw.dedup();
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

    /// Whether the host path `path` is seen inside at the same path (a symlink of the
    /// allow-list root may lead to it).
    fn shown_as_itself(&self, path: &Path) -> bool {
        self.granted(path)
            || self
                .placed
                .iter()
                .any(|m| m.inside(path).as_deref() == Some(path))
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

    /// A writable path the launcher adds itself (an agent's state directory) that is a
    /// protected path keeps the protection; the same path asked for on the command line
    /// overrides it, and says so.
    #[test]
    fn only_a_writable_path_asked_for_overrides_a_protection() {
        use crate::policy::model::Source;
        let dir = placed_persist::tests::dir("explicit");
        let (home, work) = (dir.0.join("home"), dir.0.join("work"));
        std::fs::create_dir_all(home.join(".config/git")).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        let (home, work) = (home.canonicalize().unwrap(), work.canonicalize().unwrap());
        let git_dir = home.join(".config/git");
        let ctx = HostContext {
            cwd: work,
            home: Some(home),
            xdg_runtime_dir: None,
            path_var: None,
            user_policy_dir: None,
        };
        let planned = |source: Source| {
            let mut policy = Policy::default();
            policy
                .filesystem
                .read_write
                .push(Sourced::new(git_dir.clone(), source));
            plan(&policy, &ctx).unwrap()
        };
        let by_launcher = planned(Source::Default);
        assert!(by_launcher.persist.overrides.is_empty());
        assert!(by_launcher.mounts.ops.iter().any(|op| matches!(op,
            shim::spec::MountOp::ReadOnly { target, .. } if *target == git_dir)));
        let asked = planned(Source::CommandLine);
        assert_eq!(asked.persist.overrides, vec![git_dir.clone()]);
        assert!(asked
            .warnings
            .iter()
            .any(|w| w.contains("a protected path")));
    }

    #[test]
    fn a_sibling_with_a_common_prefix_is_not_nested() {
        let got = minimal_roots(vec!["/a".into(), "/ab".into()]);
        assert_eq!(got, vec![PathBuf::from("/a"), PathBuf::from("/ab")]);
    }
}
