//! The persistence model in the writable trees placed by name: a `--bind SRC[:DST]` is planned
//! like any writable root — on the host, at SRC (its git directory, the PATH directories in it,
//! the table's names) — and every protection is then moved to where the tree is inside, DST:
//! the create guard's rules, the read-only binds of what exists, the pins on the way to them.

use std::path::{Path, PathBuf};

use shim::spec::{MountOp, PersistSpec, ProtectRule};

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

fn add<T: PartialEq>(to: &mut Vec<T>, from: Vec<T>) {
    for v in from {
        if !to.contains(&v) {
            to.push(v);
        }
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
