//! The one internal policy model that every input format is translated into.
//!
//! Inputs (OpenShell YAML, agent settings JSON, command-line flags, the org > project > user
//! hierarchy) are parsed elsewhere in `policy/`; everything downstream (the filesystem layout,
//! Landlock, the proxy) reads only this.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

/// Where a rule came from, so `sandbox-launch check` can say so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "path")]
pub enum Source {
    /// `/etc/sandbox-launch/...`: managed by the organisation; its denies cannot be removed.
    Org(PathBuf),
    /// `<project>/.sandbox-launch/...`: comes from the repository, may only narrow unless trusted.
    Project(PathBuf),
    /// `$XDG_CONFIG_HOME/sandbox-launch/...`
    User(PathBuf),
    /// `--policy FILE`
    PolicyFile(PathBuf),
    /// `--settings FILE`
    SettingsFile(PathBuf),
    /// A command-line flag.
    CommandLine,
    /// Added to a running sandbox (`sandbox-launch allow`/`deny`, the host a person allowed
    /// in a prompt); this sandbox only.
    Control,
    /// Built in (for example the always-protected paths).
    Default,
}

/// A value with the place it was declared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

impl<T> Sourced<T> {
    pub fn new(value: T, source: Source) -> Self {
        Sourced { value, source }
    }
}

/// How the filesystem is presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FsMode {
    /// Agent-settings semantics: the whole host is readable except `deny_read`; writable are the
    /// working directory, `read_write` and a private `/tmp`.
    #[default]
    HostReadable,
    /// OpenShell semantics (`filesystem_policy` given): only `read_only` and `read_write` (plus the
    /// working directory when `include_workdir`) exist; everything else is not there.
    AllowListOnly,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct FilesystemPolicy {
    pub mode: FsMode,
    /// Whether the working directory is writable (always for agent settings).
    pub include_workdir: bool,
    /// Readable (and executable) trees. Only meaningful in `AllowListOnly`.
    pub read_only: Vec<Sourced<PathBuf>>,
    /// Writable trees (OpenShell `read_write`, agent `allowWrite`, `--allow-write`).
    pub read_write: Vec<Sourced<PathBuf>>,
    /// Read-only even inside a writable tree; beats `read_write`.
    pub deny_write: Vec<Sourced<PathBuf>>,
    /// Unreadable; beats everything.
    pub deny_read: Vec<Sourced<PathBuf>>,
    /// Pathname unix sockets handed into the sandbox (`--allow-unix-socket`).
    pub unix_sockets: Vec<Sourced<PathBuf>>,
    /// Mounts asked for by name (`--bind`, `--ro-bind`, `--overlay`, `--tmpfs`, a policy's
    /// `mounts`), highest precedence source first, each source's in its own order.
    pub mounts: Vec<Sourced<MountRequest>>,
}

/// A mount placed by name, as asked: `source` (host, absolute, symlinks not resolved yet) at
/// `target` (inside: absolute, no `..`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MountRequest {
    pub kind: MountKind,
    /// `None` for a tmpfs.
    pub source: Option<PathBuf>,
    /// `None`: where the source really is (its resolved path), as bwrap's `--bind SRC SRC`.
    pub target: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MountKind {
    /// Writable bind of a host path.
    Bind,
    /// Read-only bind (for every user inside, root included).
    RoBind,
    /// A host directory under a writable layer kept in the sandbox's memory.
    Overlay,
    /// An empty, writable tmpfs.
    Tmpfs,
}

impl MountKind {
    /// The command-line flag that asks for it.
    pub fn flag(self) -> &'static str {
        match self {
            MountKind::Bind => "--bind",
            MountKind::RoBind => "--ro-bind",
            MountKind::Overlay => "--overlay",
            MountKind::Tmpfs => "--tmpfs",
        }
    }
}

impl MountRequest {
    /// How it is written on the command line (`--bind /a:/b`).
    pub fn describe(&self) -> String {
        let flag = self.kind.flag();
        match (&self.source, &self.target) {
            (Some(s), Some(t)) => format!("{flag} {}:{}", s.display(), t.display()),
            (Some(p), None) | (None, Some(p)) => format!("{flag} {}", p.display()),
            (None, None) => flag.to_string(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LandlockCompat {
    /// Refuse to start unless every requested Landlock right is enforced.
    #[default]
    HardRequirement,
    /// Start anyway and report every right that was not enforced.
    BestEffort,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct ProcessPolicy {
    /// User name or uid the agent runs as when the launcher is started as real root.
    pub run_as_user: Option<String>,
    pub run_as_group: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// A network namespace with only `lo`.
    None,
    /// A network namespace plus the domain-filtering proxy.
    Restricted,
    /// The host network (reported as a warning).
    Full,
}

/// OpenShell `network_policies.<key>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkRule {
    pub name: String,
    pub endpoints: Vec<Endpoint>,
    /// Executable path globs; empty means any binary.
    pub binaries: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Endpoint {
    /// Exact host, IP literal, or an OpenShell host glob (`*` within one DNS label, `**` as the
    /// whole first label for one or more labels); lower-case, no trailing dot, punycode.
    pub host: String,
    /// Allowed ports; empty means any port.
    pub ports: Vec<u16>,
    /// `rest` (requests are checked) or `tcp` (said explicitly: bytes only); `None` is `tcp`.
    pub protocol: Option<String>,
    pub tls: Option<String>,
    pub enforcement: Enforcement,
    pub access: Option<String>,
    /// Requests allowed (`rules`); a request no rule allows is refused.
    pub rules: Vec<HttpRule>,
    /// Requests refused even when `rules` or `access` allow them.
    pub deny_rules: Vec<HttpRule>,
    /// The request paths this endpoint's rules apply to (OpenShell's endpoint `path` glob);
    /// `None`: every path.
    pub path: Option<String>,
    /// Keep `%2F` inside path segments instead of refusing the request.
    pub allow_encoded_slash: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    #[default]
    Enforce,
    Audit,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpRule {
    /// Upper-case method, or `*` for any.
    pub method: String,
    /// Path glob (`*` within a segment, `**` across), matched against the canonical path.
    pub path: String,
    /// Decoded query parameter name -> any of these globs.
    pub query: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct NetworkPolicy {
    /// `None` here means "not said": the launcher picks its default.
    pub mode: Option<NetworkMode>,
    /// Domain-only rules (`allowedDomains`, `--allow-domain`), `host` or `host:port`.
    /// Hosts are normalised: lower-case, punycode, no trailing dot; IPv6 literals in brackets
    /// (`[::1]`, `[::1]:443`); a wildcard only as a leading `*.` with at least two labels after it.
    pub allowed_domains: Vec<Sourced<String>>,
    /// Domains that are refused even when an allow rule matches (`deniedDomains`); same syntax
    /// as `allowed_domains`. Deny beats allow.
    pub denied_domains: Vec<Sourced<String>>,
    /// OpenShell `network_policies`, by key.
    pub rules: BTreeMap<String, Sourced<NetworkRule>>,
}

/// The effective policy after merging every source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Policy {
    pub filesystem: FilesystemPolicy,
    pub landlock: LandlockCompat,
    pub process: ProcessPolicy,
    pub network: NetworkPolicy,
    /// Name of an embedded seccomp policy or a path to a seccompiler JSON file.
    pub seccomp: Option<String>,
    /// Denied requests wait for a person's answer: `Some(true)` when a settings file says
    /// `sandbox.prompts: true`, `Some(false)` when the organisation's says `false` (which wins
    /// over every other level and `--prompts`), `None` when unsaid.
    pub prompts: Option<bool>,
    /// The program's environment and resource limits.
    pub runtime: super::runtime::Runtime,
    /// Non-fatal remarks made while loading (unknown keys, deprecated values).
    pub warnings: Vec<String>,
    /// Where each single-valued setting was decided; `None` means the built-in default.
    pub origins: Origins,
    /// Every policy file that was read, highest precedence first.
    pub loaded: Vec<LoadedFile>,
}

/// Where the single-valued settings of a [`Policy`] came from (for `sandbox-launch check`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Origins {
    pub fs_mode: Option<Source>,
    pub include_workdir: Option<Source>,
    pub landlock: Option<Source>,
    pub run_as_user: Option<Source>,
    pub run_as_group: Option<Source>,
    pub network_mode: Option<Source>,
    pub seccomp: Option<Source>,
}

/// A policy file that took part in the merge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadedFile {
    pub source: Source,
    /// An untrusted project file: only its denies and narrowing settings were used.
    pub narrowing_only: bool,
}
