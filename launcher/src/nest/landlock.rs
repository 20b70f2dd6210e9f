//! The Landlock layer of a nested sandbox. It stacks on the outer sandbox's (Landlock layers
//! only ever take away), so the program can reach at most what both allow.
//!
//! Without a mount namespace a denied path cannot be masked, and Landlock can only allow: a
//! rule on a directory grants its rights to everything below it. So each rule above a denied
//! path is *split* along the way to it: every directory on the way keeps only what cannot reach
//! the denied path's contents (listing, creating — creations are judged by the outer guard,
//! which refuses them there), and each of its other entries gets the rule's rights as its own
//! rule. This reads the directories on the way (not a tree walk). What appears later directly
//! in such a directory gets only the directory's rights: it can be listed, not read or
//! removed. Symlinks get no rule of their own (what they lead to is judged where it is).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use shim::spec::{Access as Want, LandlockRule};

/// What a denied path still allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Nothing (`--deny-read`).
    Nothing,
    /// Reading (`--deny-write`).
    Read,
}

/// One rule of the layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub path: PathBuf,
    pub access: BitFlags<AccessFs>,
}

/// The whole layer, planned before the fork and applied by the program's process.
#[derive(Debug, Clone)]
pub struct Layer {
    pub abi: i32,
    pub handled: BitFlags<AccessFs>,
    pub rules: Vec<Rule>,
    /// TCP ports the program may connect to (`None`: not limited by this layer).
    pub tcp_connect: Option<Vec<u16>>,
    /// Whether a rule was split around a denied path (its way keeps the right to create).
    pub split: bool,
}

/// Rights of the plan's kinds of rule.
fn rights(want: Want, abi: ABI) -> BitFlags<AccessFs> {
    match want {
        Want::Read => AccessFs::from_read(abi),
        Want::Write => AccessFs::from_all(abi),
        Want::Device => {
            AccessFs::from_read(abi) | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
        }
        Want::ListDir => AccessFs::ReadDir.into(),
    }
}

/// What a directory on the way to denied paths keeps: listing and creating (which the outer
/// guard judges), reading too when every denied path below it may still be read — never
/// removing (that would remove the denied path) nor writing.
fn on_the_way(rights: BitFlags<AccessFs>, keep_read: bool) -> BitFlags<AccessFs> {
    let mut keep = AccessFs::ReadDir
        | AccessFs::MakeChar
        | AccessFs::MakeDir
        | AccessFs::MakeReg
        | AccessFs::MakeSock
        | AccessFs::MakeFifo
        | AccessFs::MakeBlock
        | AccessFs::MakeSym
        | AccessFs::Refer;
    if keep_read {
        keep |= AccessFs::ReadFile | AccessFs::Execute;
    }
    rights & keep
}

fn keep_rights(keep: Keep, rights: BitFlags<AccessFs>, abi: ABI) -> BitFlags<AccessFs> {
    match keep {
        Keep::Nothing => BitFlags::EMPTY,
        Keep::Read => rights & AccessFs::from_read(abi),
    }
}

/// The layer for the plan's `rules`, with `denied` paths split out. `handle_reads`: whether
/// reading is governed at all (it must be when anything is denied reading, or only the plan's
/// trees are readable).
pub fn plan(
    abi_num: i32,
    rules: &[LandlockRule],
    denied: &[(PathBuf, Keep)],
    tcp_connect: Option<Vec<u16>>,
) -> Layer {
    let abi = shim::landlock::abi_enum(abi_num);
    let mut out = Vec::new();
    let mut was_split = false;
    for r in rules {
        let access = rights(r.access, abi);
        let below: Vec<&(PathBuf, Keep)> = denied
            .iter()
            .filter(|(d, _)| d.starts_with(&r.path))
            .collect();
        if below.is_empty() || matches!(r.access, Want::Device) {
            out.push(Rule {
                path: r.path.clone(),
                access,
            });
        } else {
            was_split = true;
            split(&r.path, access, &below, abi, &mut out);
        }
    }
    Layer {
        abi: abi_num,
        handled: AccessFs::from_all(abi),
        rules: out,
        tcp_connect,
        split: was_split,
    }
}

/// Rules for `dir` (granted `access`) with the `denied` paths below it split out.
fn split(
    dir: &Path,
    access: BitFlags<AccessFs>,
    denied: &[&(PathBuf, Keep)],
    abi: ABI,
    out: &mut Vec<Rule>,
) {
    if let Some((_, keep)) = denied.iter().find(|(d, _)| d == dir) {
        // The denied path itself, with whatever is denied deeper inside it split too.
        let access = keep_rights(*keep, access, abi);
        let deeper: Vec<&(PathBuf, Keep)> =
            denied.iter().filter(|(d, _)| d != dir).copied().collect();
        if deeper.is_empty() || access.is_empty() {
            if !access.is_empty() {
                out.push(Rule {
                    path: dir.to_path_buf(),
                    access,
                });
            }
            return;
        }
        return split(dir, access, &deeper, abi, out);
    }
    let keep_read = denied.iter().all(|(_, k)| *k == Keep::Read);
    out.push(Rule {
        path: dir.to_path_buf(),
        access: on_the_way(access, keep_read),
    });
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_symlink() {
            continue;
        }
        let here: Vec<&(PathBuf, Keep)> = denied
            .iter()
            .filter(|(d, _)| d.starts_with(&path))
            .copied()
            .collect();
        if here.is_empty() {
            let access = if kind.is_dir() {
                access
            } else {
                access & AccessFs::from_file(abi)
            };
            out.push(Rule { path, access });
        } else {
            split(&path, access, &here, abi, out);
        }
    }
}

/// What the layer came to.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Facts {
    pub abi: i32,
    pub enforced: bool,
    pub scoped: bool,
    pub tcp_restricted: bool,
    pub rules: usize,
}

/// Apply the layer to this process (the program's, before its exec). Nothing short of full
/// enforcement is accepted: a nested sandbox exists to narrow.
pub fn apply(layer: &Layer) -> Result<Facts> {
    let abi = shim::landlock::abi_enum(layer.abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(layer.handled)
        .context("Landlock: handle the filesystem rights")?;
    let tcp_restricted = layer.tcp_connect.is_some();
    if tcp_restricted {
        ruleset = ruleset
            .handle_access(AccessNet::ConnectTcp)
            .context("Landlock: limit TCP connect (needs ABI 4)")?;
    }
    // Scoped signals keep the program from ending its launcher, whose life holds the outer
    // guard's registration; scoped abstract sockets keep it to its own.
    ruleset = ruleset
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .context("Landlock: scope signals and abstract unix sockets (needs ABI 6)")?;
    let mut created = ruleset.create().context("Landlock: create the ruleset")?;
    for rule in &layer.rules {
        let access = rule.access & layer.handled;
        if access.is_empty() {
            continue;
        }
        let Ok(fd) = PathFd::new(&rule.path) else {
            continue; // gone since the plan: nothing to grant
        };
        let is_dir = std::fs::metadata(&rule.path).is_ok_and(|m| m.is_dir());
        let access = if is_dir {
            access
        } else {
            access & AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .with_context(|| format!("Landlock rule for {}", rule.path.display()))?;
    }
    for port in layer.tcp_connect.iter().flatten() {
        created = created
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .context("Landlock TCP rule")?;
    }
    // The program's standard descriptors, reopened through /dev/stdout or /proc/self/fd/N.
    for fd in 0..=2 {
        let path = format!("/proc/self/fd/{fd}");
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        use std::os::unix::fs::FileTypeExt;
        if !(meta.file_type().is_char_device() || meta.file_type().is_file()) {
            continue;
        }
        let Ok(pfd) = PathFd::new(&path) else {
            continue;
        };
        // Written only where the descriptor was opened for writing: a read-only stdin names a
        // file this sandbox may only read.
        let want = if super::opened_for_writing(fd) {
            Want::Device
        } else {
            Want::Read
        };
        let access = rights(want, abi) & AccessFs::from_file(abi) & layer.handled;
        created = created
            .add_rule(PathBeneath::new(pfd, access))
            .context("Landlock rule for a standard descriptor")?;
    }
    let status = created.restrict_self().context("Landlock: restrict_self")?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        anyhow::bail!("Landlock is {:?}", status.ruleset);
    }
    Ok(Facts {
        abi: layer.abi,
        enforced: true,
        scoped: true,
        tcp_restricted,
        rules: layer.rules.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree(PathBuf);
    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tree() -> Tree {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let t = std::env::temp_dir().join(format!("sl-nest-ll-{}-{n}", std::process::id()));
        for d in ["a/secret", "a/b", "c"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        std::fs::write(t.join("a/file"), "x").unwrap();
        std::fs::write(t.join("a/secret/key"), "k").unwrap();
        std::os::unix::fs::symlink(t.join("a/secret/key"), t.join("a/link")).unwrap();
        Tree(t)
    }

    fn find<'a>(layer: &'a Layer, p: &Path) -> Option<&'a Rule> {
        layer.rules.iter().find(|r| r.path == p)
    }

    #[test]
    fn a_denied_path_splits_every_rule_above_it_and_gets_nothing() {
        let t = tree();
        let rules = vec![LandlockRule {
            path: t.0.clone(),
            access: Want::Write,
        }];
        let secret = t.0.join("a/secret");
        let layer = plan(7, &rules, &[(secret.clone(), Keep::Nothing)], None);
        let all = AccessFs::from_all(ABI::V7);
        let top = find(&layer, &t.0).unwrap();
        assert!(!top.access.contains(AccessFs::ReadFile));
        assert!(!top.access.contains(AccessFs::RemoveFile));
        assert!(top.access.contains(AccessFs::ReadDir));
        assert_eq!(find(&layer, &t.0.join("c")).unwrap().access, all);
        assert_eq!(find(&layer, &t.0.join("a/b")).unwrap().access, all);
        assert_eq!(
            find(&layer, &t.0.join("a/file")).unwrap().access,
            all & AccessFs::from_file(ABI::V7)
        );
        assert!(find(&layer, &secret).is_none());
        // A symlink to the denied file gets no rule that would follow it there.
        assert!(find(&layer, &t.0.join("a/link")).is_none());
    }

    #[test]
    fn a_deny_write_keeps_reading_on_the_way_and_at_the_path() {
        let t = tree();
        let rules = vec![LandlockRule {
            path: t.0.clone(),
            access: Want::Write,
        }];
        let secret = t.0.join("a/secret");
        let layer = plan(7, &rules, &[(secret.clone(), Keep::Read)], None);
        let a = find(&layer, &t.0.join("a")).unwrap();
        assert!(a.access.contains(AccessFs::ReadFile));
        assert!(!a
            .access
            .contains(AccessFs::RemoveFile | AccessFs::WriteFile));
        assert_eq!(
            find(&layer, &secret).unwrap().access,
            AccessFs::from_read(ABI::V7)
        );
    }

    #[test]
    fn rules_with_nothing_denied_below_stay_whole() {
        let t = tree();
        let rules = vec![
            LandlockRule {
                path: t.0.join("c"),
                access: Want::Read,
            },
            LandlockRule {
                path: "/dev/null".into(),
                access: Want::Device,
            },
        ];
        let layer = plan(7, &rules, &[(t.0.join("a/secret"), Keep::Nothing)], None);
        assert_eq!(layer.rules.len(), 2);
    }
}
