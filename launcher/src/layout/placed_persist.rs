//! The persistence model in the writable trees placed by name: a `--bind SRC[:DST]` is planned
//! like any writable root — on the host, at SRC (its git directory, the PATH directories in it,
//! the table's names) — and every protection is then moved to where the tree is inside, DST:
//! the create guard's rules, the read-only binds of what exists, the pins on the way to them.
//!
//! A protection is a host path, and a bind shows that path at a second name: every rule of the
//! launch whose anchor the bind shows (below SRC) or passes through (above SRC: the home
//! directory's rules, seen through `--bind ~/.config:/c`) is given again where the bind shows
//! it ([`rule_at_view`]), and so is every denied or overridden path ([`path_at_view`]).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use shim::spec::{MountOp, PersistSpec, ProtectRule};

use super::persist_plan::add;
use super::placed::Placed;
use super::Planner;
use crate::persistence::plan::{self as persist, Shown};
use crate::policy::model::MountKind;

fn moved(m: &Placed, p: &Path) -> PathBuf {
    m.inside(p).unwrap_or_else(|| p.to_path_buf())
}

fn names(p: &Path) -> Vec<&OsStr> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// `rule`, anchored at a host path, where the writable mount of `src` (host, canonical) at
/// `dst` (inside) shows what it protects: an anchor at or below `src` is moved below `dst`; an
/// anchor above `src` becomes `dst`, the pattern's leading components that lead from the anchor
/// down to `src` taken off (each glob must match its name, or the rule protects nothing the
/// mount shows). `None` for a rule matched at any depth (it applies at `dst` as it is) and for
/// one whose paths the mount does not show.
pub(crate) fn rule_at_view(rule: &ProtectRule, src: &Path, dst: &Path) -> Option<ProtectRule> {
    let anchor = rule.anchor.as_ref()?;
    let at = |anchor: PathBuf, pattern: String| ProtectRule {
        anchor: Some(anchor),
        pattern,
        surface: rule.surface.clone(),
    };
    if let Ok(rel) = anchor.strip_prefix(src) {
        return Some(at(dst.join(rel), rule.pattern.clone()));
    }
    let way = names(src.strip_prefix(anchor).ok()?);
    let mut comps: Vec<&str> = rule.pattern.split('/').filter(|c| !c.is_empty()).collect();
    let subtree = comps.last() == Some(&"**");
    if subtree {
        comps.pop();
    }
    for (i, name) in way.iter().enumerate() {
        match comps.get(i) {
            Some(glob) => {
                if !shim::create_guard::rules::glob(glob.as_bytes(), name.as_bytes()) {
                    return None;
                }
            }
            // The pattern ends above `src`: only a last `**` reaches down to it.
            None => return subtree.then(|| at(dst.to_path_buf(), "**".into())),
        }
    }
    let mut rest = comps[way.len()..].join("/");
    if subtree {
        rest = if rest.is_empty() {
            "**".into()
        } else {
            format!("{rest}/**")
        };
    }
    Some(at(dst.to_path_buf(), rest))
}

/// A denied or overridden host path (it covers what lies below it) where the writable mount of
/// `src` at `dst` shows it: below `src`, moved below `dst`; above it, all of `dst`.
pub(crate) fn path_at_view(p: &Path, src: &Path, dst: &Path) -> Option<PathBuf> {
    if let Ok(rel) = p.strip_prefix(src) {
        return Some(dst.join(rel));
    }
    src.starts_with(p).then(|| dst.to_path_buf())
}

/// What `spec` (planned on host paths) adds at the views of the writable mounts `placed`
/// (host source, inside target): its rules, denied and overridden paths given again there.
pub(crate) fn at_views(spec: &PersistSpec, placed: &[(PathBuf, PathBuf)]) -> PersistSpec {
    let mut out = PersistSpec::default();
    for (src, dst) in placed {
        add(
            &mut out.rules,
            spec.rules
                .iter()
                .filter_map(|r| rule_at_view(r, src, dst))
                .collect(),
        );
        let paths = |ps: &[PathBuf]| -> Vec<PathBuf> {
            ps.iter()
                .filter_map(|p| path_at_view(p, src, dst))
                .collect()
        };
        add(&mut out.denied, paths(&spec.denied));
        add(&mut out.overrides, paths(&spec.overrides));
    }
    out
}

/// `spec` (planned at the host path of `m`) as seen inside.
fn move_spec(m: &Placed, spec: &PersistSpec) -> PersistSpec {
    let (src, dst) = (m.source.clone().unwrap_or_default(), m.target.clone());
    let views = at_views(spec, &[(src, dst)]);
    let mut rules: Vec<ProtectRule> = spec
        .rules
        .iter()
        .map(|r| ProtectRule {
            anchor: r.anchor.as_ref().map(|a| moved(m, a)),
            pattern: r.pattern.clone(),
            surface: r.surface.clone(),
        })
        .collect();
    add(&mut rules, views.rules);
    PersistSpec {
        roots: spec.roots.iter().map(|p| moved(m, p)).collect(),
        rules,
        overrides: spec.overrides.iter().map(|p| moved(m, p)).collect(),
        denied: spec.denied.iter().map(|p| moved(m, p)).collect(),
    }
}

fn move_op(m: &Placed, op: MountOp) -> MountOp {
    match op {
        MountOp::ReadOnly { source, target } => MountOp::ReadOnly {
            target: moved(m, &target),
            source,
        },
        MountOp::ReadWrite { source, target } => MountOp::ReadWrite {
            target: moved(m, &target),
            source,
        },
        other => other,
    }
}

impl Planner<'_> {
    /// Plan the protections of every writable bind, merge them into the launch's, and return
    /// the mounts that make them (to go after the placed mounts, before the masks).
    pub(super) fn protect_placed(&mut self) -> Vec<MountOp> {
        let mut ops = Vec::new();
        let placed = self.placed.clone();
        self.out.placed = placed.clone();
        for m in placed.iter().filter(|m| m.kind == MountKind::Bind) {
            let Some(src) = m.source.clone() else {
                continue;
            };
            if self.rw.iter().any(|r| *r == src && *r == m.target) {
                continue; // the same tree as a writable root: planned with it
            }
            self.out
                .placed_writable
                .push((src.clone(), m.target.clone()));
            let roots = [src.clone()];
            let prot = persist::plan(&persist::Request {
                roots: &roots,
                explicit: &roots,
                deny_write: &self.deny_write_asked,
                home: self.ctx.home.as_deref(),
                cwd: &self.ctx.cwd,
                path_var: self.ctx.path_var.as_deref(),
                user_policy_dir: self.ctx.user_policy_dir.as_deref(),
            });
            let binds = crate::persistence::binds::mounts(&prot.read_only, &roots);
            ops.extend(binds.into_iter().map(|op| move_op(m, op)));
            let spec = move_spec(m, &prot.spec);
            let out = &mut self.out;
            add(&mut out.protections.spec.roots, spec.roots.clone());
            add(&mut out.protections.spec.rules, spec.rules.clone());
            add(&mut out.persist.roots, spec.roots);
            add(&mut out.persist.rules, spec.rules);
            add(&mut out.persist.overrides, spec.overrides);
            add(&mut out.persist.denied, spec.denied);
            add(&mut out.unprotected_missing, prot.missing);
            add(
                &mut out.warnings,
                prot.overrides
                    .iter()
                    .map(|w| w.replace("--allow-write", &m.asked))
                    .collect(),
            );
            let shown: Vec<Shown> = prot
                .shown
                .into_iter()
                .map(|s| Shown {
                    path: moved(m, &s.path),
                    ..s
                })
                .collect();
            add(&mut out.protections.shown, shown);
        }
        ops
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::path::{Path, PathBuf};

    use shim::spec::{Access, MountOp};

    use crate::layout::{plan, HostContext};
    use crate::policy::model::{MountKind, MountRequest, Policy, Source, Sourced};

    /// A directory of a test's, canonical, removed with its contents when dropped.
    pub(in crate::layout) struct Dir(pub(in crate::layout) PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(in crate::layout) fn dir(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("sl-layout-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(std::fs::canonicalize(&p).unwrap())
    }

    fn policy(mounts: &[(MountKind, &Path, &str)]) -> Policy {
        let mut p = Policy::default();
        for (kind, src, dst) in mounts {
            p.filesystem.mounts.push(Sourced::new(
                MountRequest {
                    kind: *kind,
                    source: Some(src.to_path_buf()),
                    target: Some(PathBuf::from(dst)),
                },
                Source::CommandLine,
            ));
        }
        p
    }

    fn ctx(cwd: &Path) -> HostContext {
        HostContext {
            cwd: cwd.to_path_buf(),
            home: None,
            xdg_runtime_dir: None,
            path_var: None,
            user_policy_dir: None,
        }
    }

    #[test]
    fn a_bound_repository_is_protected_where_it_is_mounted() {
        let (work, repo) = (dir("work"), dir("repo"));
        std::fs::create_dir_all(repo.0.join(".git/hooks")).unwrap();
        std::fs::write(repo.0.join(".git/config"), "[core]\n").unwrap();
        let layout = plan(
            &policy(&[(MountKind::Bind, &repo.0, "/tmp/r")]),
            &ctx(&work.0),
        )
        .unwrap();
        let ops = &layout.mounts.ops;
        assert!(ops.contains(&MountOp::Bind {
            source: repo.0.clone(),
            target: "/tmp/r".into(),
            read_only: false
        }));
        assert!(
            ops.contains(&MountOp::ReadOnly {
                source: repo.0.join(".git/hooks"),
                target: "/tmp/r/.git/hooks".into()
            }),
            "{ops:#?}"
        );
        assert!(layout.persist.roots.contains(&PathBuf::from("/tmp/r")));
        assert!(layout
            .protections
            .spec
            .roots
            .contains(&PathBuf::from("/tmp/r")));
        assert!(
            !layout.persist.roots.contains(&repo.0),
            "the host path is not in the sandbox"
        );
        assert!(layout
            .landlock
            .iter()
            .any(|r| r.path == Path::new("/tmp/r") && r.access == Access::Write));
        assert_eq!(layout.placed_writable, [(repo.0.clone(), "/tmp/r".into())]);
    }

    #[test]
    fn a_rule_is_given_again_where_a_bind_shows_what_it_protects() {
        use super::{path_at_view, rule_at_view};
        use shim::spec::ProtectRule;
        let rule = |anchor: &str, pattern: &str| ProtectRule {
            anchor: Some(PathBuf::from(anchor)),
            pattern: pattern.into(),
            surface: "s".into(),
        };
        let at = |r: &ProtectRule, src: &str| rule_at_view(r, Path::new(src), Path::new("/c"));
        let pat = |r: Option<ProtectRule>| r.map(|r| (r.anchor.unwrap(), r.pattern));
        // Anchored above the bind's source: the way down is taken off the pattern.
        assert_eq!(
            pat(at(&rule("/h", ".config/git/config"), "/h/.config")),
            Some(("/c".into(), "git/config".into()))
        );
        assert_eq!(
            pat(at(&rule("/h", ".local/bin/**"), "/h/.local")),
            Some(("/c".into(), "bin/**".into()))
        );
        assert_eq!(
            pat(at(&rule("/h", ".config/*/init.lua"), "/h/.config/nvim")),
            Some(("/c".into(), "init.lua".into()))
        );
        // A last `**` reaches below its components; a pattern that ends above does not.
        assert_eq!(
            pat(at(&rule("/h", ".ssh/**"), "/h/.ssh/keys")),
            Some(("/c".into(), "**".into()))
        );
        assert_eq!(pat(at(&rule("/h", ".ssh"), "/h/.ssh/keys")), None);
        assert_eq!(
            pat(at(&rule("/h", ".config/git"), "/h/.config/git")),
            Some(("/c".into(), "".into()))
        );
        // Another branch, or a glob that does not match the way: nothing shown.
        assert_eq!(pat(at(&rule("/h", ".bashrc"), "/h/.config")), None);
        assert_eq!(pat(at(&rule("/h", ".c?nfig/x"), "/h/.local")), None);
        // Anchored below the source: moved below the target, pattern kept.
        assert_eq!(
            pat(at(&rule("/d/envrc", "**"), "/d")),
            Some(("/c/envrc".into(), "**".into()))
        );
        // Apart from the source, or matched at any depth: not the view's to add.
        assert_eq!(pat(at(&rule("/x", "**"), "/d")), None);
        let anywhere = ProtectRule {
            anchor: None,
            pattern: ".envrc".into(),
            surface: "s".into(),
        };
        assert_eq!(pat(at(&anywhere, "/d")), None);
        // Denied and overridden paths: below the source moved, above it the whole view.
        let (src, dst) = (Path::new("/h/.config"), Path::new("/c"));
        assert_eq!(
            path_at_view(Path::new("/h/.config/a"), src, dst),
            Some("/c/a".into())
        );
        assert_eq!(path_at_view(Path::new("/h"), src, dst), Some("/c".into()));
        assert_eq!(path_at_view(Path::new("/h/.local"), src, dst), None);
    }

    #[test]
    fn read_only_and_overlay_mounts_are_not_persistence_roots() {
        let (work, src) = (dir("work2"), dir("src2"));
        let layout = plan(
            &policy(&[
                (MountKind::RoBind, &src.0, "/tmp/ro"),
                (MountKind::Overlay, &src.0, "/tmp/ov"),
            ]),
            &ctx(&work.0),
        )
        .unwrap();
        for t in ["/tmp/ro", "/tmp/ov"] {
            assert!(!layout.persist.roots.contains(&PathBuf::from(t)));
        }
        let access = |p: &str| {
            layout
                .landlock
                .iter()
                .find(|r| r.path == Path::new(p))
                .map(|r| r.access)
        };
        assert_eq!(access("/tmp/ro"), Some(Access::Read));
        assert_eq!(access("/tmp/ov"), Some(Access::Write));
        assert!(layout.placed_writable.is_empty());
    }
}
