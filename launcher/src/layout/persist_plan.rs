//! The persistence part of the layout: the create guard's rules and the read-only binds of the
//! protected paths that exist. Planned at once for `check` and a nested launch; a launch plans
//! it after the clone (`sandbox::prepare` with `defer_persistence`): its few hundred host
//! lookups then overlap the shim's network setup and first mounts, and the shim, which holds
//! the binds' place in the mount list (`MountOp::PersistenceBinds`), makes the mounts before
//! that place meanwhile and none after it until they arrive.

use std::path::PathBuf;

use shim::spec::{MountOp, PersistSpec};

use super::placed_persist::at_views;
use super::{skip_special, Planner};
use crate::persistence::plan::{self as persist, Protections};
use crate::policy::model::MountKind;

/// What the persistence plan of a layout needs, owned: it is made after the clone.
#[derive(Debug, Clone)]
pub struct PersistInputs {
    /// Every writable root, nested ones included.
    roots: Vec<PathBuf>,
    /// The writable roots the policy names explicitly.
    explicit: Vec<PathBuf>,
    /// The deny-write paths as the policy gives them.
    deny_write: Vec<PathBuf>,
    home: Option<PathBuf>,
    cwd: PathBuf,
    path_var: Option<String>,
    user_policy_dir: Option<PathBuf>,
    /// The writable roots as mounted (outermost only): the binds are pinned under them.
    mounted_rw: Vec<PathBuf>,
    /// Targets of the mounts placed by name: what lies under them is protected with them.
    placed_targets: Vec<PathBuf>,
    /// The writable mounts placed by name (host source, inside target): the plan's protections
    /// are given again where they show what they protect (see `placed_persist`).
    placed_writable: Vec<(PathBuf, PathBuf)>,
}

/// The persistence plan of the writable roots (not of the mounts placed by name, which the
/// layout plans itself).
pub struct Planned {
    /// The read-only binds, pins first (see `persistence::binds`).
    pub binds: Vec<MountOp>,
    /// The create guard's model.
    pub spec: PersistSpec,
    /// `--allow-write` of a protected path: said to the user.
    pub overrides: Vec<String>,
    /// Protected paths missing at launch (looked at again when the sandbox ends).
    pub missing: Vec<PathBuf>,
    pub protections: Protections,
}

impl PersistInputs {
    /// The plan, with the protections as found kept for `check` to show.
    pub fn plan(&self) -> Planned {
        self.plan_keeping(true)
    }

    /// The plan a launch sends to the sandbox: nothing of it is shown, so the guard's model is
    /// moved out of the protections found instead of copied (a copy of a few hundred rules,
    /// each two or three allocations, on the way to the sandbox's mounts).
    pub fn plan_to_send(&self) -> Planned {
        self.plan_keeping(false)
    }

    fn plan_keeping(&self, keep: bool) -> Planned {
        let mut prot = persist::plan(&persist::Request {
            roots: &self.roots,
            explicit: &self.explicit,
            deny_write: &self.deny_write,
            home: self.home.as_deref(),
            cwd: &self.cwd,
            path_var: self.path_var.as_deref(),
            user_policy_dir: self.user_policy_dir.as_deref(),
        });
        let shown: Vec<PathBuf> = prot
            .read_only
            .iter()
            .filter(|p| !self.placed_targets.iter().any(|t| p.starts_with(t)))
            .cloned()
            .collect();
        let mut spec = if keep {
            prot.spec.clone()
        } else {
            std::mem::take(&mut prot.spec)
        };
        spec.roots.retain(|p| !skip_special(p));
        let views = at_views(&spec, &self.placed_writable);
        add(&mut spec.rules, views.rules);
        add(&mut spec.denied, views.denied);
        add(&mut spec.overrides, views.overrides);
        Planned {
            binds: crate::persistence::binds::mounts(&shown, &self.mounted_rw),
            spec,
            overrides: if keep {
                prot.overrides.clone()
            } else {
                std::mem::take(&mut prot.overrides)
            },
            missing: if keep {
                prot.missing.clone()
            } else {
                std::mem::take(&mut prot.missing)
            },
            protections: prot,
        }
    }
}

/// Add what `from` has that `to` lacks, in order.
pub(super) fn add<T: PartialEq>(to: &mut Vec<T>, from: Vec<T>) {
    for v in from {
        if !to.contains(&v) {
            to.push(v);
        }
    }
}

/// The persistence plan a launch made after the clone, completed with what the layout planned
/// at once (the mounts placed by name, in `layout_spec` and `layout_missing`).
pub struct Completed {
    pub binds: Vec<MountOp>,
    pub spec: PersistSpec,
    pub warnings: Vec<String>,
    pub missing: Vec<PathBuf>,
}

/// Complete `planned` with the layout's own part, as the layout does when it plans at once.
pub fn complete(
    planned: Planned,
    layout_spec: &PersistSpec,
    layout_missing: &[PathBuf],
) -> Completed {
    let mut spec = planned.spec;
    add(&mut spec.roots, layout_spec.roots.clone());
    add(&mut spec.rules, layout_spec.rules.clone());
    add(&mut spec.overrides, layout_spec.overrides.clone());
    add(&mut spec.denied, layout_spec.denied.clone());
    let mut missing = planned.missing;
    add(&mut missing, layout_missing.to_vec());
    Completed {
        binds: planned.binds,
        spec,
        warnings: planned.overrides,
        missing,
    }
}

impl Planner<'_> {
    pub(super) fn persist_inputs(&self, mounted_rw: &[PathBuf]) -> PersistInputs {
        PersistInputs {
            roots: self.all_rw.clone(),
            explicit: self.explicit_rw.clone(),
            deny_write: self.deny_write_asked.clone(),
            home: self.ctx.home.clone(),
            cwd: self.ctx.cwd.clone(),
            path_var: self.ctx.path_var.clone(),
            user_policy_dir: self.ctx.user_policy_dir.clone(),
            mounted_rw: mounted_rw.to_vec(),
            placed_targets: self.placed.iter().map(|m| m.target.clone()).collect(),
            placed_writable: self
                .placed
                .iter()
                .filter(|m| m.kind == MountKind::Bind)
                .filter_map(|m| Some((m.source.clone()?, m.target.clone())))
                .collect(),
        }
    }

    /// The persistence plan now, or its place in the mounts when it is deferred.
    pub(super) fn emit_persistence(&mut self, ops: &mut Vec<MountOp>, mounted_rw: &[PathBuf]) {
        let inputs = self.persist_inputs(mounted_rw);
        if self.defer_persistence {
            ops.push(MountOp::PersistenceBinds);
            self.out.deferred_persistence = Some(inputs);
            return;
        }
        let planned = inputs.plan();
        ops.extend(planned.binds);
        self.out.warnings.extend(planned.overrides);
        self.out.unprotected_missing = planned.missing;
        self.out.persist = planned.spec;
        self.out.protections = planned.protections;
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use std::os::fd::AsRawFd;

    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use shim::channel::{self, PersistencePlan};
    use shim::spec::MountOp;

    use super::complete;
    use crate::layout::placed_persist::tests::{dir, Dir};
    use crate::layout::{plan, plan_deferring, HostContext};
    use crate::policy::model::{MountKind, MountRequest, Policy, Source, Sourced};

    /// A working directory that is a repository with hooks, an `.envrc`, a `.vscode`, a
    /// missing `.mcp.json`, and a writable bind of another repository placed by name.
    /// `tag`: the test's own, so that tests running side by side never share (and remove)
    /// each other's directories.
    fn setup(tag: &str) -> (Dir, Dir, Policy, HostContext) {
        let (work, repo) = (dir(&format!("{tag}-work")), dir(&format!("{tag}-repo")));
        for d in [&work.0, &repo.0] {
            std::fs::create_dir_all(d.join(".git/hooks")).unwrap();
            std::fs::write(d.join(".git/config"), "[core]\n").unwrap();
        }
        std::fs::write(work.0.join(".envrc"), "").unwrap();
        std::fs::create_dir_all(work.0.join(".vscode")).unwrap();
        let mut policy = Policy::default();
        policy.filesystem.mounts.push(Sourced::new(
            MountRequest {
                kind: MountKind::Bind,
                source: Some(repo.0.clone()),
                target: Some(PathBuf::from("/tmp/r")),
            },
            Source::CommandLine,
        ));
        let ctx = HostContext {
            cwd: work.0.clone(),
            home: None,
            xdg_runtime_dir: None,
            path_var: None,
            user_policy_dir: None,
        };
        (work, repo, policy, ctx)
    }

    #[test]
    fn a_plan_made_after_the_clone_is_the_plan_made_at_once() {
        let (work, _repo, policy, ctx) = setup("deferred");
        let at_once = plan(&policy, &ctx).unwrap();
        let mut later = plan_deferring(&policy, &ctx).unwrap();
        let inputs = later.deferred_persistence.take().expect("deferred");
        assert!(at_once.deferred_persistence.is_none());
        let holes = later
            .mounts
            .ops
            .iter()
            .filter(|op| **op == MountOp::PersistenceBinds)
            .count();
        assert_eq!(holes, 1, "{:#?}", later.mounts.ops);
        let done = complete(
            inputs.plan_to_send(),
            &later.persist,
            &later.unprotected_missing,
        );
        let at = later
            .mounts
            .ops
            .iter()
            .position(|op| *op == MountOp::PersistenceBinds)
            .unwrap();
        later.mounts.ops.splice(at..=at, done.binds.clone());
        assert_eq!(later.mounts.ops, at_once.mounts.ops);
        assert_eq!(done.spec, at_once.persist);
        assert_eq!(done.missing, at_once.unprotected_missing);
        // Not vacuous: the repository's hooks are bound read-only, `.mcp.json` is watched.
        assert!(done.binds.contains(&MountOp::ReadOnly {
            source: work.0.join(".git/hooks"),
            target: work.0.join(".git/hooks"),
        }));
        assert!(done.missing.contains(&work.0.join(".mcp.json")));
        let placed = Path::new("/tmp/r");
        assert!(done.spec.roots.iter().any(|r| r == placed));
        assert!(done.spec.roots.contains(&work.0));
    }

    /// The message the supervisor sends after the clone: the deferred plan, completed.
    fn deferred_message(policy: &Policy, ctx: &HostContext) -> PersistencePlan {
        let mut later = plan_deferring(policy, ctx).unwrap();
        let inputs = later.deferred_persistence.take().expect("deferred");
        let done = complete(
            inputs.plan_to_send(),
            &later.persist,
            &later.unprotected_missing,
        );
        PersistencePlan {
            binds: done.binds,
            persist: done.spec,
        }
    }

    /// Two ends like the supervisor's and the shim's sync socket.
    fn sync_pair() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
        socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap()
    }

    /// The plan the supervisor sends after the clone, as the shim receives it on the sync
    /// socket: the same plan, every rule kept (the home directory's rules anchored at it).
    #[test]
    fn the_plan_sent_after_the_clone_arrives_whole() {
        let (work, _repo, policy, mut ctx) = setup("sent");
        let home = dir("deferred-home");
        ctx.home = Some(home.0.clone());
        let at_once = plan(&policy, &ctx).unwrap();
        let sent = deferred_message(&policy, &ctx);
        let (ours, theirs) = sync_pair();
        channel::send(ours.as_raw_fd(), &sent, &[]).unwrap();
        let (got, fds) = channel::recv::<PersistencePlan>(theirs.as_raw_fd())
            .unwrap()
            .expect("a message");
        assert!(fds.is_empty());
        assert_eq!(got.binds, sent.binds);
        assert_eq!(got.persist, sent.persist);
        assert_eq!(got.persist, at_once.persist);
        // Not vacuous: rules anchored at the home directory and at any depth, sharing surfaces.
        let rules = &got.persist.rules;
        assert!(rules.iter().any(|r| r.anchor.as_deref() == Some(&home.0)));
        assert!(rules
            .iter()
            .any(|r| r.anchor.is_none() && r.pattern == ".envrc"));
        assert!(rules.len() > 50, "{}", rules.len());
        assert!(got.binds.contains(&MountOp::ReadOnly {
            source: work.0.join(".git/hooks"),
            target: work.0.join(".git/hooks"),
        }));
    }

    /// A plan whose rule names a surface it does not list fails to arrive (the shim then
    /// builds nothing), with the reason; no rule is dropped on the way.
    #[test]
    fn a_plan_with_a_rule_pointing_nowhere_is_refused() {
        let (_work, _repo, policy, ctx) = setup("pointing-nowhere");
        let mut wire = serde_json::to_value(deferred_message(&policy, &ctx)).unwrap();
        let surfaces = wire["persist"]["surfaces"].as_array().unwrap().len();
        assert!(surfaces > 1, "{wire}");
        wire["persist"]["rules"][0][2] = serde_json::json!(surfaces);
        let (ours, theirs) = sync_pair();
        channel::send(ours.as_raw_fd(), &wire, &[]).unwrap();
        let err = channel::recv::<PersistencePlan>(theirs.as_raw_fd()).unwrap_err();
        let err = format!("{err:#}");
        assert!(err.contains(&format!("names surface {surfaces}")), "{err}");
        assert!(err.contains("the plan is malformed"), "{err}");
    }
}
