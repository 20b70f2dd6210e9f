//! `doctor`'s account of resource limits: for `--memory`, `--pids` and `--cpus`, which
//! hierarchy has the controller and whether this caller can make the sandbox's group there —
//! tried for real (a group made below the caller's own and removed at once). As root, it also
//! says what an unprivileged user would need.

use crate::doctor::{Check, Status};

use super::cgroup::group::Group;
use super::cgroup::hierarchy::{self, Hierarchy};

/// The flags each controller serves.
const CONTROLLERS: &[(&str, &str, &str)] = &[
    ("memory", "--memory", "limits: memory"),
    ("pids", "--pids", "limits: pids"),
    ("cpu", "--cpus", "limits: cpu"),
];

/// One check per controller.
pub fn checks() -> Vec<Check> {
    let hierarchies = hierarchy::discover();
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    CONTROLLERS
        .iter()
        .map(|(c, flag, name)| check(&hierarchies, c, flag, name, root))
        .collect()
}

fn check(hierarchies: &[Hierarchy], c: &str, flag: &str, name: &'static str, root: bool) -> Check {
    let Some(h) = hierarchy::locate(hierarchies, c) else {
        return Check {
            name,
            status: Status::Warn,
            detail: format!("no {c} controller on this host: {flag} cannot be applied"),
            fix: Some("mount the cgroup hierarchy that has it (cgroup v2: /sys/fs/cgroup)".into()),
        };
    };
    let place = format!("{} at {}", h.version.name(), h.own.display());
    match Group::create(h, &[c]) {
        Ok(mut g) => {
            let problems = g.remove();
            let who = if root {
                "as root; unprivileged users only in a group delegated to them"
            } else {
                "rootless, in this user's delegated group"
            };
            Check {
                name,
                status: if problems.is_empty() {
                    Status::Ok
                } else {
                    Status::Warn
                },
                detail: format!("{flag} can be applied {who} ({place}){}", cleanup(&problems)),
                fix: None,
            }
        }
        Err(e) => Check {
            name,
            status: Status::Warn,
            detail: format!("{flag} cannot be applied by this user ({place}): {e}"),
            fix: Some(
                "run in a delegated group (`systemd-run --user --scope -p Delegate=yes …`, or a group an administrator chowned to you), or accept limits.compatibility: best_effort".into(),
            ),
        },
    }
}

fn cleanup(problems: &[String]) -> String {
    if problems.is_empty() {
        String::new()
    } else {
        format!(
            "; the probe group could not be cleaned up: {}",
            problems.join("; ")
        )
    }
}
