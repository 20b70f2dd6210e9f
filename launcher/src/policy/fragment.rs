//! What one source (a file or the command line) says, before the merge. Every field is
//! "not said" by default, so the merge can tell an explicit value from a default.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::model::{FsMode, LandlockCompat, MountRequest, NetworkMode, NetworkRule, Source};
use super::runtime::RuntimeFragment;

#[derive(Debug, Clone)]
pub struct Fragment {
    pub source: Source,
    /// `Some(AllowListOnly)` when an OpenShell `filesystem_policy` is present.
    pub fs_mode: Option<FsMode>,
    pub include_workdir: Option<bool>,
    pub read_only: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    pub deny_write: Vec<PathBuf>,
    pub deny_read: Vec<PathBuf>,
    pub unix_sockets: Vec<PathBuf>,
    pub mounts: Vec<MountRequest>,
    pub landlock: Option<LandlockCompat>,
    pub run_as_user: Option<String>,
    pub run_as_group: Option<String>,
    pub network_mode: Option<NetworkMode>,
    pub allowed_domains: Vec<String>,
    pub denied_domains: Vec<String>,
    pub rules: BTreeMap<String, NetworkRule>,
    pub seccomp: Option<String>,
    /// `sandbox.prompts`: hold denied requests for an answer.
    pub prompts: Option<bool>,
    /// `environment` and `limits`.
    pub runtime: RuntimeFragment,
    pub warnings: Vec<String>,
}

impl Fragment {
    pub fn new(source: Source) -> Self {
        Fragment {
            source,
            fs_mode: None,
            include_workdir: None,
            read_only: Vec::new(),
            read_write: Vec::new(),
            deny_write: Vec::new(),
            deny_read: Vec::new(),
            unix_sockets: Vec::new(),
            mounts: Vec::new(),
            landlock: None,
            run_as_user: None,
            run_as_group: None,
            network_mode: None,
            allowed_domains: Vec::new(),
            denied_domains: Vec::new(),
            rules: BTreeMap::new(),
            seccomp: None,
            prompts: None,
            runtime: RuntimeFragment::default(),
            warnings: Vec::new(),
        }
    }
}
