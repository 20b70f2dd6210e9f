//! Folding the fragments of every source into the one effective [`Policy`].
//!
//! Layers are given highest precedence first: org, command-line flags, `--policy`,
//! `--settings`, project, user. The rules:
//!
//! * **Denies are a union.** `deny_read`, `deny_write` and `denied_domains` from every layer are
//!   kept, an untrusted project's included; nothing can remove a deny. (Deny beats allow where
//!   they meet: the layout planner and the proxy enforce that, so the merge only keeps both.)
//! * **Allows are a union** (`read_only`, `read_write`, unix sockets, `allowed_domains`,
//!   `network_policies`) except that an untrusted project's allows are dropped, with a warning.
//!   Two `network_policies` entries with the same key: the higher layer's wins, with a warning.
//! * **Single values** (filesystem mode, `include_workdir`, Landlock compatibility, network mode,
//!   `run_as_user`/`run_as_group`): the highest granting layer that says one decides. The org and
//!   an untrusted project are *ceilings* instead: a value wider than theirs (network
//!   none < restricted < full; Landlock hard_requirement < best_effort; allow-list < host-readable;
//!   include_workdir false < true; an identity must be equal) is
//!   - an **error** when it was asked for on the command line (a flag, `--policy`, `--settings`):
//!     the user asked for something they cannot have, so say so rather than run differently;
//!   - **clamped to the ceiling with a warning** when it comes from a user or project config file
//!     (standing configuration should not stop every launch).
//!
//!   A narrower value is always accepted. With nothing said, a ceiling's value is used.
//! * Network mode unsaid but domains or network rules given: `restricted`. Domains with mode
//!   `none` or `full` are reported as having no effect; denied domains with mode `full` are an
//!   error (they could not be enforced).

use std::path::PathBuf;

use anyhow::{bail, Result};

use super::fragment::Fragment;
use super::model::{FsMode, LandlockCompat, LoadedFile, NetworkMode, Policy, Source, Sourced};

/// How much a layer may say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The organisation: a ceiling for single values; allows and denies count.
    Org,
    /// An untrusted project: a ceiling; only its denies count. `hint` says how to trust it.
    Narrowing { hint: String },
    /// Grants normally; `explicit` for what was asked for on the command line.
    Grants { explicit: bool },
}

#[derive(Debug, Clone)]
pub struct Layer {
    pub frag: Fragment,
    pub role: Role,
}

impl Layer {
    fn is_ceiling(&self) -> bool {
        !matches!(self.role, Role::Grants { .. })
    }

    fn explicit(&self) -> bool {
        self.role == Role::Grants { explicit: true }
    }
}

/// Merge `layers` (highest precedence first) into the effective policy.
pub fn merge(layers: &[Layer]) -> Result<Policy> {
    let mut p = Policy::default();
    for l in layers {
        p.warnings.extend(l.frag.warnings.iter().cloned());
        if !matches!(l.frag.source, Source::CommandLine | Source::Default) {
            p.loaded.push(LoadedFile {
                source: l.frag.source.clone(),
                narrowing_only: matches!(l.role, Role::Narrowing { .. }),
            });
        }
    }
    collect_lists(layers, &mut p);
    let org_says_no = layers
        .iter()
        .any(|l| l.role == Role::Org && l.frag.prompts == Some(false));
    p.prompts = if org_says_no {
        Some(false)
    } else {
        layers
            .iter()
            .any(|l| l.frag.prompts == Some(true))
            .then_some(true)
    };
    decide_scalars(layers, &mut p)?;
    settle_network(&mut p)?;
    super::runtime::merge(layers, &mut p)?;
    Ok(p)
}

fn collect_lists(layers: &[Layer], p: &mut Policy) {
    for l in layers {
        let f = &l.frag;
        let src = &f.source;
        add_paths(&mut p.filesystem.deny_read, &f.deny_read, src);
        add_paths(&mut p.filesystem.deny_write, &f.deny_write, src);
        add_strings(&mut p.network.denied_domains, &f.denied_domains, src);
        if let Role::Narrowing { hint } = &l.role {
            let dropped = f.read_only.len()
                + f.read_write.len()
                + f.unix_sockets.len()
                + f.mounts.len()
                + f.allowed_domains.len()
                + f.rules.len();
            if dropped > 0 {
                p.warnings.push(format!(
                    "{}: {dropped} allow rule(s) ignored: the project is not trusted, so its policy may only narrow; {hint}",
                    describe_source(src)
                ));
            }
            continue;
        }
        add_paths(&mut p.filesystem.read_only, &f.read_only, src);
        add_paths(&mut p.filesystem.read_write, &f.read_write, src);
        add_paths(&mut p.filesystem.unix_sockets, &f.unix_sockets, src);
        for m in &f.mounts {
            if !p.filesystem.mounts.iter().any(|s| &s.value == m) {
                p.filesystem
                    .mounts
                    .push(Sourced::new(m.clone(), src.clone()));
            }
        }
        add_strings(&mut p.network.allowed_domains, &f.allowed_domains, src);
        for (key, rule) in &f.rules {
            match p.network.rules.get(key) {
                Some(kept) => p.warnings.push(format!(
                    "network_policies.{key} from {} is shadowed by the entry of the same key from {}",
                    describe_source(src),
                    describe_source(&kept.source)
                )),
                None => {
                    p.network
                        .rules
                        .insert(key.clone(), Sourced::new(rule.clone(), src.clone()));
                }
            }
        }
    }
}

fn add_paths(out: &mut Vec<Sourced<PathBuf>>, new: &[PathBuf], src: &Source) {
    for v in new {
        if !out.iter().any(|s| &s.value == v) {
            out.push(Sourced::new(v.clone(), src.clone()));
        }
    }
}

fn add_strings(out: &mut Vec<Sourced<String>>, new: &[String], src: &Source) {
    for v in new {
        if !out.iter().any(|s| &s.value == v) {
            out.push(Sourced::new(v.clone(), src.clone()));
        }
    }
}

fn decide_scalars(layers: &[Layer], p: &mut Policy) -> Result<()> {
    let w = &mut p.warnings;
    if let Some((v, src)) = decide(
        layers,
        "filesystem mode",
        |f| f.fs_mode,
        fs_rank,
        show_fs,
        w,
    )? {
        p.filesystem.mode = v;
        p.origins.fs_mode = Some(src);
    }
    let host_readable = p.filesystem.mode == FsMode::HostReadable;
    let workdir = decide(
        layers,
        "filesystem_policy.include_workdir",
        |f| f.include_workdir,
        |b: &bool| u8::from(*b),
        |b| b.to_string(),
        w,
    )?;
    match (host_readable, workdir) {
        (true, _) => {
            p.filesystem.include_workdir = true;
            p.origins.include_workdir = Some(Source::Default);
        }
        (false, Some((v, src))) => {
            p.filesystem.include_workdir = v;
            p.origins.include_workdir = Some(src);
        }
        (false, None) => p.filesystem.include_workdir = false,
    }
    if let Some((v, src)) = decide(
        layers,
        "landlock.compatibility",
        |f| f.landlock,
        landlock_rank,
        show_landlock,
        w,
    )? {
        p.landlock = v;
        p.origins.landlock = Some(src);
    }
    let user = decide(
        layers,
        "process.run_as_user",
        |f| f.run_as_user.clone(),
        |_| 0,
        |s| s.clone(),
        w,
    )?;
    if let Some((v, src)) = user {
        p.process.run_as_user = Some(v);
        p.origins.run_as_user = Some(src);
    }
    let group = decide(
        layers,
        "process.run_as_group",
        |f| f.run_as_group.clone(),
        |_| 0,
        |s| s.clone(),
        w,
    )?;
    if let Some((v, src)) = group {
        p.process.run_as_group = Some(v);
        p.origins.run_as_group = Some(src);
    }
    if let Some((v, src)) = decide(
        layers,
        "network mode",
        |f| f.network_mode,
        network_rank,
        |m| show_network(*m).to_string(),
        w,
    )? {
        p.network.mode = Some(v);
        p.origins.network_mode = Some(src);
    }
    if let Some(l) = layers.iter().find(|l| l.frag.seccomp.is_some()) {
        p.seccomp = l.frag.seccomp.clone();
        p.origins.seccomp = Some(l.frag.source.clone());
    }
    Ok(())
}

/// One single value, by the rules in the module documentation. `rank` orders values from
/// narrow to wide; values of equal rank that differ (identities) count as wider.
pub(super) fn decide<T: Clone + PartialEq>(
    layers: &[Layer],
    what: &str,
    get: impl Fn(&Fragment) -> Option<T>,
    rank: impl Fn(&T) -> u8,
    show: impl Fn(&T) -> String,
    warnings: &mut Vec<String>,
) -> Result<Option<(T, Source)>> {
    let mut chosen: Option<(T, &Layer)> = layers
        .iter()
        .filter(|l| !l.is_ceiling())
        .find_map(|l| get(&l.frag).map(|v| (v, l)));
    for ceiling in layers.iter().filter(|l| l.is_ceiling()) {
        let Some(limit) = get(&ceiling.frag) else {
            continue;
        };
        let fits = |v: &T| rank(v) < rank(&limit) || (rank(v) == rank(&limit) && *v == limit);
        match &chosen {
            Some((v, _)) if fits(v) => {}
            Some((v, from)) if !from.is_ceiling() => {
                let why = match &ceiling.role {
                    Role::Narrowing { hint } => {
                        format!("the project is not trusted, so its policy may only narrow; {hint}")
                    }
                    _ => "organisation policy cannot be widened".to_string(),
                };
                let msg = format!(
                    "{what}: {} asks for {}, but {} allows at most {} ({why})",
                    describe_source(&from.frag.source),
                    show(v),
                    describe_source(&ceiling.frag.source),
                    show(&limit),
                );
                if from.explicit() {
                    bail!(msg);
                }
                warnings.push(format!("{msg}; using {}", show(&limit)));
                chosen = Some((limit, ceiling));
            }
            _ => chosen = Some((limit, ceiling)),
        }
    }
    Ok(chosen.map(|(v, l)| (v, l.frag.source.clone())))
}

/// Imply `restricted` from allow rules and report combinations that cannot work.
fn settle_network(p: &mut Policy) -> Result<()> {
    let n = &mut p.network;
    let first_allow = n
        .allowed_domains
        .first()
        .map(|d| d.source.clone())
        .or_else(|| n.rules.values().next().map(|r| r.source.clone()));
    match (n.mode, first_allow) {
        (None, Some(src)) => {
            n.mode = Some(NetworkMode::Restricted);
            p.origins.network_mode = Some(src);
        }
        (Some(mode @ (NetworkMode::None | NetworkMode::Full)), Some(_)) => {
            let effect = if mode == NetworkMode::None {
                "nothing is reachable"
            } else {
                "every host is reachable"
            };
            p.warnings.push(format!(
                "{} allowed domain(s) and {} network rule(s) have no effect: network mode is {} ({effect})",
                n.allowed_domains.len(),
                n.rules.len(),
                show_network(mode)
            ));
        }
        _ => {}
    }
    if n.mode == Some(NetworkMode::Full) {
        if let Some(d) = n.denied_domains.first() {
            let from = p
                .origins
                .network_mode
                .as_ref()
                .map(describe_source)
                .unwrap_or_default();
            bail!(
                "network mode full (from {from}) cannot enforce denied domain {} (from {}): use network mode restricted",
                d.value,
                describe_source(&d.source)
            );
        }
    }
    Ok(())
}

fn fs_rank(m: &FsMode) -> u8 {
    match m {
        FsMode::AllowListOnly => 0,
        FsMode::HostReadable => 1,
    }
}

fn landlock_rank(l: &LandlockCompat) -> u8 {
    match l {
        LandlockCompat::HardRequirement => 0,
        LandlockCompat::BestEffort => 1,
    }
}

fn network_rank(m: &NetworkMode) -> u8 {
    match m {
        NetworkMode::None => 0,
        NetworkMode::Restricted => 1,
        NetworkMode::Full => 2,
    }
}

pub fn show_fs(m: &FsMode) -> String {
    match m {
        FsMode::AllowListOnly => "allow-list only".into(),
        FsMode::HostReadable => "host readable".into(),
    }
}

pub fn show_landlock(l: &LandlockCompat) -> String {
    match l {
        LandlockCompat::HardRequirement => "hard_requirement".into(),
        LandlockCompat::BestEffort => "best_effort".into(),
    }
}

pub fn show_network(m: NetworkMode) -> &'static str {
    match m {
        NetworkMode::None => "none",
        NetworkMode::Restricted => "restricted",
        NetworkMode::Full => "full",
    }
}

/// A source in words: "org policy /etc/sandbox-launch/policy.yaml", "--allow-write", ...
pub fn describe_source(s: &Source) -> String {
    match s {
        Source::Org(p) => format!("org {}", p.display()),
        Source::Project(p) => format!("project {}", p.display()),
        Source::User(p) => format!("user {}", p.display()),
        Source::PolicyFile(p) => format!("--policy {}", p.display()),
        Source::SettingsFile(p) => format!("--settings {}", p.display()),
        Source::CommandLine => "command line".into(),
        Source::Control => "control socket".into(),
        Source::Default => "built-in default".into(),
    }
}
