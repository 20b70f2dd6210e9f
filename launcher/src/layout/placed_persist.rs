//! The persistence model in the writable trees placed by name: a `--bind SRC[:DST]` is planned
//! like any writable root — on the host, at SRC (its git directory, the PATH directories in it,
//! the table's names) — and every protection is then moved to where the tree is inside, DST:
//! the create guard's rules, the read-only binds of what exists, the pins on the way to them.

use std::path::{Path, PathBuf};

use shim::spec::{MountOp, PersistSpec, ProtectRule};

use super::persist_plan::add;
use super::placed::Placed;
use super::Planner;
use crate::persistence::plan::{self as persist, Shown};
use crate::policy::model::MountKind;

fn moved(m: &Placed, p: &Path) -> PathBuf {
    m.inside(p).unwrap_or_else(|| p.to_path_buf())
}

/// `spec` (planned at the host path of `m`) as seen inside.
fn move_spec(m: &Placed, spec: &PersistSpec) -> PersistSpec {
    PersistSpec {
        roots: spec.roots.iter().map(|p| moved(m, p)).collect(),
        rules: spec
            .rules
            .iter()
            .map(|r| ProtectRule {
                anchor: r.anchor.as_ref().map(|a| moved(m, a)),
                pattern: r.pattern.clone(),
                surface: r.surface.clone(),
            })
            .collect(),
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
