//! cgroup limits of the whole sandbox: `--memory`, `--pids`, `--cpus`. Each controller is used
//! from the hierarchy that has it ([`hierarchy`]), in a group made for this sandbox below the
//! launcher's own ([`group`]). A limit that cannot be applied stops the launch, unless
//! `limits.compatibility: best_effort` says to start without it (reported).

pub mod group;
pub mod hierarchy;

use std::fmt::Write;

use group::Group;
use hierarchy::{Hierarchy, Version};

use super::quantity;

/// The cgroup limits asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wanted {
    /// Bytes.
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    /// Thousandths of a CPU.
    pub cpus: Option<u64>,
}

impl Wanted {
    pub fn any(&self) -> bool {
        self.memory.is_some() || self.pids.is_some() || self.cpus.is_some()
    }
}

/// One limit: the controller it needs, its name, its value in words.
struct Limit {
    controller: &'static str,
    name: &'static str,
    shown: String,
}

fn limits(w: &Wanted) -> Vec<Limit> {
    let mut out = Vec::new();
    if let Some(m) = w.memory {
        out.push(Limit {
            controller: "memory",
            name: "memory",
            shown: quantity::show_size(m),
        });
    }
    if let Some(p) = w.pids {
        out.push(Limit {
            controller: "pids",
            name: "process",
            shown: p.to_string(),
        });
    }
    if let Some(c) = w.cpus {
        out.push(Limit {
            controller: "cpu",
            name: "CPU",
            shown: quantity::show_cpus(c),
        });
    }
    out
}

/// The sandbox's groups, with the limits in force.
pub struct Cgroups {
    groups: Vec<Group>,
    wanted: Wanted,
    /// Which group holds each applied limit's controller.
    memory: Option<usize>,
    pids: Option<usize>,
}

/// Make the groups and write the limits. `Ok(None)`: nothing asked for (or, best effort,
/// nothing could be applied). Every limit left out under best effort is added to `warnings`.
pub fn apply(
    wanted: &Wanted,
    best_effort: bool,
    warnings: &mut Vec<String>,
) -> Result<Option<Cgroups>, String> {
    if !wanted.any() {
        return Ok(None);
    }
    let hierarchies = hierarchy::discover();
    let mut c = Cgroups {
        groups: Vec::new(),
        wanted: *wanted,
        memory: None,
        pids: None,
    };
    for limit in limits(wanted) {
        match c.apply_one(&hierarchies, &limit) {
            Ok(()) => {}
            Err(e) if best_effort => warnings.push(format!(
                "the {} limit ({}) is not applied (limits.compatibility: best_effort): {e}",
                limit.name, limit.shown
            )),
            Err(e) => {
                return Err(format!(
                    "the {} limit ({}) cannot be applied: {e}",
                    limit.name, limit.shown
                ))
            }
        }
    }
    Ok((!c.groups.is_empty()).then_some(c))
}

impl Cgroups {
    fn apply_one(&mut self, hierarchies: &[Hierarchy], limit: &Limit) -> Result<(), String> {
        let h = hierarchy::locate(hierarchies, limit.controller).ok_or_else(|| {
            format!(
                "this host has no {} cgroup controller where the launcher can reach it (`sandbox-launch doctor` says what it has)",
                limit.controller
            )
        })?;
        let index = match self
            .groups
            .iter()
            .position(|g| g.dir.parent() == Some(&h.own))
        {
            Some(i) => i,
            None => {
                // In v2 one group serves every controller: make it with all that live there.
                let here: Vec<&str> = limits(&self.wanted)
                    .iter()
                    .map(|l| l.controller)
                    .filter(|c| hierarchy::locate(hierarchies, c) == Some(h))
                    .collect();
                self.groups.push(Group::create(h, &here)?);
                self.groups.len() - 1
            }
        };
        let g = &self.groups[index];
        let w = &self.wanted;
        match (limit.controller, g.version) {
            ("memory", v) => {
                let bytes = w.memory.unwrap_or(u64::MAX).to_string();
                if v == Version::V1 {
                    g.set("memory.limit_in_bytes", &bytes)?;
                    // With swap accounting, memory+swap too, so swap is no way around it.
                    if g.has("memory.memsw.limit_in_bytes") {
                        g.set("memory.memsw.limit_in_bytes", &bytes)?;
                    }
                } else {
                    g.set("memory.max", &bytes)?;
                    if g.has("memory.swap.max") {
                        g.set("memory.swap.max", "0")?;
                    }
                }
                self.memory = Some(index);
            }
            ("pids", _) => {
                g.set("pids.max", &w.pids.unwrap_or(u64::MAX).to_string())?;
                self.pids = Some(index);
            }
            ("cpu", v) => {
                let millis = w.cpus.unwrap_or(1000);
                if v == Version::V1 {
                    let period: u64 = g
                        .get("cpu.cfs_period_us")
                        .and_then(|p| p.trim().parse().ok())
                        .unwrap_or(100_000);
                    let quota = (millis * period / 1000).max(1000);
                    g.set("cpu.cfs_quota_us", &quota.to_string())?;
                } else {
                    let quota = (millis * 100).max(1000);
                    g.set("cpu.max", &format!("{quota} 100000"))?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Where the limits are, for messages: `memory, pids in /sys/fs/cgroup/… (cgroup v1)`.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for g in &self.groups {
            let _ = write!(
                s,
                "{}{} ({})",
                if s.is_empty() { "" } else { "; " },
                g.dir.display(),
                g.version.name()
            );
        }
        s
    }

    /// Move the launcher into every group, so the process it clones next is born there.
    pub fn enter(&self) -> Result<(), String> {
        for (i, g) in self.groups.iter().enumerate() {
            if let Err(e) = g.enter() {
                for entered in &self.groups[..i] {
                    let _ = entered.leave();
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Move the launcher back out of every group.
    pub fn leave(&self) -> Result<(), String> {
        self.groups.iter().try_for_each(Group::leave)
    }

    /// The limits the sandbox ran into, in words (read once it has ended).
    pub fn reached(&self) -> Vec<Reached> {
        let mut out = Vec::new();
        if let Some(g) = self.memory.map(|i| &self.groups[i]) {
            let (file, key) = match g.version {
                Version::V1 => ("memory.oom_control", "oom_kill"),
                Version::V2 => ("memory.events", "oom_kill"),
            };
            let kills = counter(g.get(file), key);
            if kills > 0 {
                out.push(Reached {
                    limit: "memory",
                    count: kills,
                    text: format!(
                        "the memory limit ({}) was reached: the kernel killed {kills} process(es) inside",
                        quantity::show_size(self.wanted.memory.unwrap_or(0))
                    ),
                });
            }
        }
        if let Some(g) = self.pids.map(|i| &self.groups[i]) {
            let refused = counter(g.get("pids.events"), "max");
            if refused > 0 {
                out.push(Reached {
                    limit: "pids",
                    count: refused,
                    text: format!(
                        "the process limit ({}) was reached: {refused} fork(s) were refused",
                        self.wanted.pids.unwrap_or(0)
                    ),
                });
            }
        }
        out
    }

    /// Remove every group; what could not be cleaned up is returned.
    pub fn remove(mut self) -> Vec<String> {
        self.groups
            .iter_mut()
            .rev()
            .flat_map(Group::remove)
            .collect()
    }
}

/// A limit the sandbox ran into.
#[derive(Debug, Clone)]
pub struct Reached {
    pub limit: &'static str,
    pub count: u64,
    pub text: String,
}

/// The number after `key` in a flat-keyed file (`oom_kill 3`).
fn counter(text: Option<String>, key: &str) -> u64 {
    text.unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_by_their_key() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n".to_string();
        assert_eq!(counter(Some(v1), "oom_kill"), 3);
        assert_eq!(counter(Some("max 12\n".into()), "max"), 12);
        assert_eq!(counter(None, "max"), 0);
    }

    #[test]
    fn nothing_asked_makes_nothing() {
        let mut w = Vec::new();
        assert!(apply(&Wanted::default(), false, &mut w).unwrap().is_none());
        assert!(w.is_empty());
    }
}
