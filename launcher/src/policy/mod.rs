//! Policy: one internal model, several input formats, one merge.
//! (Interim: command-line flags only; the file formats land with the policy module.)
pub mod model;

use std::path::PathBuf;

use anyhow::{bail, Result};
use model::{NetworkMode, Policy, Source, Sourced};

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
    pub allow_domain: Vec<String>,
    pub network: Option<NetworkMode>,
    pub seccomp_policy: Option<String>,
}

impl LoadRequest {
    pub fn from_env(cwd: PathBuf) -> Result<Self> {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/".into());
        let user_dir = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".config"))
            .join("sandbox-launch");
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
            allow_domain: vec![],
            network: None,
            seccomp_policy: None,
        })
    }
}

pub fn load(req: &LoadRequest) -> Result<Policy> {
    if req.policy_file.is_some() || req.settings_file.is_some() {
        bail!("policy files are not supported yet");
    }
    let mut p = Policy::default();
    p.filesystem.include_workdir = true;
    let abs = |x: &PathBuf| Sourced::new(req.cwd.join(x), Source::CommandLine);
    p.filesystem.read_write = req.allow_write.iter().map(abs).collect();
    p.filesystem.deny_write = req.deny_write.iter().map(abs).collect();
    p.filesystem.deny_read = req.deny_read.iter().map(abs).collect();
    p.filesystem.unix_sockets = req.allow_unix_socket.iter().map(abs).collect();
    p.network.mode = req.network;
    p.seccomp = req.seccomp_policy.clone();
    Ok(p)
}

pub fn describe(policy: &Policy) -> String {
    format!("{policy:#?}")
}
