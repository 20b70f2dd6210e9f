//! Policy: one internal model ([`model`]), several input formats, one merge.
//!
//! Sources, highest precedence first (see [`merge`] for how they combine):
//!
//! 1. org: `/etc/sandbox-launch/{policy.yaml,settings.json}`: a ceiling; its denies cannot be
//!    removed and its single values cannot be widened;
//! 2. command-line flags (`--allow-write`, `--deny-read`, `--network`, ...), which add to what
//!    the files say;
//! 3. `--policy FILE` (OpenShell YAML, [`openshell`]) and `--settings FILE` (agent settings JSON,
//!    [`agent_settings`]);
//! 4. project: `<project>/.sandbox-launch/…`: may only narrow unless the user trusts the project
//!    ([`hierarchy`] documents the `trusted-projects` file);
//! 5. user: `$XDG_CONFIG_HOME/sandbox-launch/…`.
//!
//! Deny always beats allow: denies from every source are kept, and the layout planner and the
//! proxy give them precedence over allows.
pub mod agent_settings;
pub mod credentials;
mod describe;
mod document;
mod fragment;
pub mod hierarchy;
mod hosts;
pub mod jsonc;
pub mod merge;
pub mod model;
pub mod mounts;
pub mod openshell;
mod paths;
pub mod runtime;
mod shape;

use std::path::PathBuf;

use anyhow::{anyhow, Result};

pub use describe::describe;
use fragment::Fragment;
use merge::{Layer, Role};
use model::{NetworkMode, Policy, Source};

pub struct LoadRequest {
    pub cwd: PathBuf,
    pub home: PathBuf,
    pub org_dir: PathBuf,
    pub user_dir: PathBuf,
    pub policy_file: Option<PathBuf>,
    pub settings_file: Option<PathBuf>,
    pub allow_write: Vec<PathBuf>,
    pub deny_write: Vec<PathBuf>,
    pub deny_read: Vec<PathBuf>,
    pub allow_unix_socket: Vec<PathBuf>,
    /// `--bind`, `--ro-bind`, `--overlay`, `--tmpfs` as written.
    pub mounts: Vec<(model::MountKind, String)>,
    /// `--empty-root`: only what is mounted exists.
    pub empty_root: bool,
    pub allow_domain: Vec<String>,
    pub network: Option<NetworkMode>,
    pub seccomp_policy: Option<String>,
    /// `--env`, `--timeout`, `--memory`, ... (already parsed).
    pub runtime: runtime::RuntimeFragment,
}

impl LoadRequest {
    pub fn from_env(cwd: PathBuf) -> Result<Self> {
        let home = home_from_env();
        let user_dir = user_dir_from_env();
        Ok(LoadRequest {
            cwd,
            home,
            org_dir: "/etc/sandbox-launch".into(),
            user_dir,
            policy_file: None,
            settings_file: None,
            allow_write: vec![],
            deny_write: vec![],
            deny_read: vec![],
            allow_unix_socket: vec![],
            mounts: vec![],
            empty_root: false,
            allow_domain: vec![],
            network: None,
            seccomp_policy: None,
            runtime: runtime::RuntimeFragment::default(),
        })
    }
}

/// `HOME`, or `/`.
fn home_from_env() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/".into())
}

/// The user's policy directory, `$XDG_CONFIG_HOME/sandbox-launch` (`~/.config/sandbox-launch`
/// when the variable is unset, empty or relative, as the XDG specification says: a relative
/// one would name a directory of wherever the launcher starts; or when it holds a `..`). The persistence plan protects
/// it wherever it lies (`layout::HostContext::user_policy_dir`).
pub fn user_dir_from_env() -> PathBuf {
    user_dir(std::env::var_os("XDG_CONFIG_HOME"), home_from_env)
}

/// [`user_dir_from_env`] of the variable's value.
fn user_dir(xdg_config_home: Option<std::ffi::OsString>, home: fn() -> PathBuf) -> PathBuf {
    xdg_config_home
        .map(PathBuf::from)
        // No `..` either: the kernel resolves it through whatever the component before it is
        // when the policy is read (a symlink a sandbox may have put there), while the plan
        // names, and protects, the directory lexically.
        .filter(|p| {
            p.is_absolute() && !p.components().any(|c| c == std::path::Component::ParentDir)
        })
        .unwrap_or_else(|| home().join(".config"))
        .join("sandbox-launch")
}

/// Read every source the request names or implies and merge them into the effective policy.
pub fn load(req: &LoadRequest) -> Result<Policy> {
    merge::merge(&layers(req)?)
}

/// Every layer, highest precedence first.
fn layers(req: &LoadRequest) -> Result<Vec<Layer>> {
    let (cwd, home) = (req.cwd.as_path(), req.home.as_path());
    let mut out = Vec::new();
    for frag in hierarchy::level_files(&req.org_dir, Source::Org, cwd, home)? {
        out.push(Layer {
            frag,
            role: Role::Org,
        });
    }
    let explicit = Role::Grants { explicit: true };
    out.push(Layer {
        frag: flags(req)?,
        role: explicit.clone(),
    });
    if let Some(file) = &req.policy_file {
        out.push(Layer {
            frag: openshell::load(file, Source::PolicyFile(file.clone()))?,
            role: explicit.clone(),
        });
    }
    if let Some(file) = &req.settings_file {
        out.push(Layer {
            frag: agent_settings::load(file, Source::SettingsFile(file.clone()), cwd, home)?,
            role: explicit,
        });
    }
    if let Some(project) = hierarchy::project_root(cwd) {
        let role = if hierarchy::is_trusted(&project, &req.user_dir, home)? {
            Role::Grants { explicit: false }
        } else {
            Role::Narrowing {
                hint: hierarchy::trust_hint(&project, &req.user_dir),
            }
        };
        let dir = project.join(hierarchy::PROJECT_DIR);
        for frag in hierarchy::level_files(&dir, Source::Project, cwd, home)? {
            out.push(Layer {
                frag,
                role: role.clone(),
            });
        }
    }
    for frag in hierarchy::level_files(&req.user_dir, Source::User, cwd, home)? {
        out.push(Layer {
            frag,
            role: Role::Grants { explicit: false },
        });
    }
    Ok(out)
}

/// What the command-line flags say. Paths: `~` expands, relative ones join the working
/// directory.
fn flags(req: &LoadRequest) -> Result<Fragment> {
    let mut f = Fragment::new(Source::CommandLine);
    let path = |flag: &str, p: &PathBuf| -> Result<PathBuf> {
        let raw = p
            .to_str()
            .ok_or_else(|| anyhow!("{flag} {}: not valid UTF-8", p.display()))?;
        paths::relaxed(raw, &req.cwd, &req.home).map_err(|e| anyhow!("{flag}: {e}"))
    };
    let list = |flag: &str, ps: &[PathBuf]| -> Result<Vec<PathBuf>> {
        ps.iter().map(|p| path(flag, p)).collect()
    };
    f.read_write = list("--allow-write", &req.allow_write)?;
    if f.read_write.iter().any(|p| paths::is_root(p)) {
        return Err(anyhow!(
            "--allow-write /: the whole host cannot be writable; name the directories that need writing"
        ));
    }
    f.deny_write = list("--deny-write", &req.deny_write)?;
    f.deny_read = list("--deny-read", &req.deny_read)?;
    f.unix_sockets = list("--allow-unix-socket", &req.allow_unix_socket)?;
    for (kind, raw) in &req.mounts {
        f.mounts.push(
            mounts::parse(*kind, raw, &req.cwd, &req.home, kind.flag()).map_err(|e| anyhow!(e))?,
        );
    }
    if req.empty_root {
        f.fs_mode = Some(model::FsMode::AllowListOnly);
    }
    f.allowed_domains = req
        .allow_domain
        .iter()
        .map(|d| hosts::domain_rule(d).map_err(|e| anyhow!("--allow-domain: {e}")))
        .collect::<Result<_>>()?;
    f.network_mode = req.network;
    f.seccomp = req.seccomp_policy.clone();
    f.runtime = req.runtime.clone();
    Ok(f)
}

#[cfg(test)]
mod tests;
