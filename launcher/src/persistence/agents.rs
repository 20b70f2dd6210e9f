//! The agents' own state stays writable: `~/.claude`, `~/.factory` and `~/.codex` (or where
//! `CLAUDE_CONFIG_DIR`, `FACTORY_HOME_OVERRIDE`, `CODEX_HOME` put them) are writable trees by
//! default, so droid, Claude Code and codex run with no extra flag; what in them names commands
//! (hooks, MCP servers, custom commands and subagents, settings, `config.toml`...) stays
//! protected by the table. The launched agent's directory is created on the host when it is
//! missing; nothing else is.
//!
//! `~/.claude.json` mixes state (onboarding, per-project history) with commands (`mcpServers`,
//! and per project `mcpServers`, `allowedTools`, MCP approvals, trust). Claude Code replaces it
//! with a temporary file and a lock directory in the home directory, which is not writable. So
//! the sandbox's Claude Code gets `CLAUDE_CONFIG_DIR=~/.claude` and, there, a copy of the host's
//! file made at launch (`~/.claude/.claude.json`, which the host's Claude Code does not read).
//! When the sandbox ends the copy is merged back into `~/.claude.json` with every
//! command-bearing key taken from the host's current file: the state the agent wrote is kept,
//! a command it added never reaches the host, and each dropped change is reported.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use shim::spec::ProtectRule;

/// The agents whose state directory the sandbox keeps writable: name of the program, the
/// variable that moves its directory, the directory under HOME.
const AGENTS: &[(&str, &str, &str)] = &[
    ("claude", "CLAUDE_CONFIG_DIR", ".claude"),
    ("droid", "FACTORY_HOME_OVERRIDE", ".factory"),
    ("codex", "CODEX_HOME", ".codex"),
];

/// Top-level keys of `.claude.json` that name commands or widen what runs.
const COMMAND_KEYS: &[&str] = &["mcpServers"];
/// Keys of each `projects.<path>` entry that do.
const PROJECT_COMMAND_KEYS: &[&str] = &[
    "mcpServers",
    "allowedTools",
    "enabledMcpjsonServers",
    "disabledMcpjsonServers",
    "enableAllProjectMcpServers",
    "hasTrustDialogAccepted",
    "hasClaudeMdExternalIncludesApproved",
    "mcpContextUris",
];

/// The copy of `~/.claude.json` the sandbox's Claude Code works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeCopy {
    /// The host's file.
    pub host: PathBuf,
    /// The sandbox's copy (in the state directory).
    pub copy: PathBuf,
}

/// What the launch does for the agents.
#[derive(Debug, Default)]
pub struct AgentState {
    /// State directories to make writable (they exist).
    pub dirs: Vec<PathBuf>,
    /// Of those, what the launcher created.
    pub created: Vec<PathBuf>,
    /// Of those, the ones moved away from their usual name, with that name (`.codex`).
    pub moved: Vec<(PathBuf, &'static str)>,
    /// Variables the program gets.
    pub env: Vec<(String, String)>,
    pub claude: Option<ClaudeCopy>,
}

/// Whether [`plan`] would keep an agent's state directory in `home`: one exists there, or the
/// launched program is an agent whose directory would be created there.
pub fn keeps_state_in(
    home: &Path,
    host_env: &dyn Fn(&str) -> Option<String>,
    program: &str,
) -> bool {
    let launched = Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    AGENTS.iter().any(|(name, var, default)| {
        host_env(var).filter(|v| v.starts_with('/')).is_none()
            && (launched == *name || home.join(default).is_dir())
    })
}

/// Plan the agents' state: `home` is the program's home directory, `host_env` the launcher's
/// environment, `program` what is launched.
pub fn plan(
    home: Option<&Path>,
    host_env: &dyn Fn(&str) -> Option<String>,
    program: &str,
) -> AgentState {
    let mut out = AgentState::default();
    let Some(home) = home.filter(|h| h.is_dir()) else {
        return out;
    };
    let launched = Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    for (name, var, default) in AGENTS {
        let moved = host_env(var).filter(|v| v.starts_with('/'));
        let dir = moved
            .as_deref()
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(default));
        let mut there = dir.is_dir();
        if !there
            && launched == *name
            && std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .is_ok()
        {
            own_like(&dir, home);
            out.created.push(dir.clone());
            there = dir.is_dir();
        }
        if !there {
            continue;
        }
        if moved.is_some() {
            out.moved.push((dir.clone(), default));
        }
        if *name == "claude" && moved.is_none() {
            out.claude = Some(ClaudeCopy {
                host: home.join(".claude.json"),
                copy: dir.join(".claude.json"),
            });
            out.env
                .push(("CLAUDE_CONFIG_DIR".into(), dir.display().to_string()));
        }
        out.dirs.push(dir);
    }
    out
}

/// For a state directory moved away from its default name (`CODEX_HOME=/x/codex`), the
/// table's rules for that name (`.codex/config.toml`...) anchored at where it is.
pub fn moved_rules(state: &AgentState, rules: &[ProtectRule]) -> Vec<ProtectRule> {
    let mut out = Vec::new();
    for (dir, default) in &state.moved {
        if *default == ".claude" {
            // There, `.claude.json` is the host's live file, state and commands together.
            out.push(ProtectRule {
                anchor: Some(dir.clone()),
                pattern: ".claude.json".into(),
                surface: "Claude Code's .claude.json (mcpServers, approvals)".into(),
            });
        }
        let prefix = format!("{default}/");
        for r in rules.iter().filter(|r| r.anchor.is_none()) {
            if let Some(rest) = r.pattern.strip_prefix(&prefix) {
                out.push(ProtectRule {
                    anchor: Some(dir.clone()),
                    pattern: rest.to_string(),
                    surface: r.surface.clone(),
                });
            }
        }
    }
    out
}

/// Started as root, what the launcher makes in a home directory belongs to the home's owner
/// (as the agent would have made it), not to root.
fn own_like(path: &Path, like: &Path) {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    if let Ok(m) = std::fs::metadata(like) {
        let _ = std::os::unix::fs::lchown(path, Some(m.uid()), Some(m.gid()));
    }
}

/// Write `bytes` to `path` atomically (a temporary file next to it, renamed over it), with
/// `mode`.
fn replace(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_file_name(format!(
        ".{}.sandbox-launch-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

impl ClaudeCopy {
    /// At launch: the copy starts as the host's file (nothing when there is none).
    pub fn seed(&self) -> std::io::Result<()> {
        match std::fs::read(&self.host) {
            Ok(bytes) => {
                replace(&self.copy, &bytes, 0o600)?;
                own_like(&self.copy, &self.host);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// When the sandbox ends: merge the copy back into the host's file. Returns the
    /// command-bearing changes that were dropped (`mcpServers`, `projects[/w].allowedTools`...).
    pub fn merge_back(&self) -> Result<Vec<String>, String> {
        let copy = match std::fs::read(&self.copy) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("{}: {e}", self.copy.display())),
        };
        let copy: Value = serde_json::from_slice(&copy).map_err(|e| {
            format!(
                "{}: not JSON ({e}); nothing merged back",
                self.copy.display()
            )
        })?;
        let (host, mode) = match std::fs::read(&self.host) {
            Ok(b) => {
                let mode = std::os::unix::fs::PermissionsExt::mode(
                    &std::fs::metadata(&self.host)
                        .map_err(|e| e.to_string())?
                        .permissions(),
                );
                let v = serde_json::from_slice(&b).map_err(|e| {
                    format!(
                        "{}: not JSON ({e}); nothing merged back",
                        self.host.display()
                    )
                })?;
                (v, mode & 0o7777)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                (Value::Object(Map::new()), 0o600)
            }
            Err(e) => return Err(format!("{}: {e}", self.host.display())),
        };
        let (merged, dropped) = merge(copy, &host);
        if merged == host {
            return Ok(dropped);
        }
        let bytes = serde_json::to_vec_pretty(&merged).map_err(|e| e.to_string())?;
        let owner = self.copy.parent().unwrap_or(Path::new("/")).to_path_buf();
        replace(&self.host, &bytes, mode).map_err(|e| format!("{}: {e}", self.host.display()))?;
        if std::fs::metadata(&self.host).is_ok() {
            own_like(&self.host, &owner);
        }
        Ok(dropped)
    }
}

/// The copy, with every command-bearing key as the host has it; and which the copy changed.
pub fn merge(mut copy: Value, host: &Value) -> (Value, Vec<String>) {
    let mut dropped = Vec::new();
    let Some(obj) = copy.as_object_mut() else {
        return (host.clone(), vec!["(the whole file: not an object)".into()]);
    };
    let keep = |dst: &mut Map<String, Value>,
                src: Option<&Value>,
                key: &str,
                path: String,
                dropped: &mut Vec<String>| {
        let theirs = src.and_then(|s| s.get(key)).cloned();
        if dst.get(key) != theirs.as_ref() {
            dropped.push(path);
        }
        match theirs {
            Some(v) => {
                dst.insert(key.to_string(), v);
            }
            None => {
                dst.remove(key);
            }
        }
    };
    for k in COMMAND_KEYS {
        keep(obj, Some(host), k, (*k).to_string(), &mut dropped);
    }
    if let Some(Value::Object(projects)) = obj.get_mut("projects") {
        for (name, entry) in projects.iter_mut() {
            let Some(entry) = entry.as_object_mut() else {
                continue;
            };
            let theirs = host.get("projects").and_then(|p| p.get(name));
            for k in PROJECT_COMMAND_KEYS {
                keep(
                    entry,
                    theirs,
                    k,
                    format!("projects[{name}].{k}"),
                    &mut dropped,
                );
            }
        }
    }
    (copy, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn state_is_kept_and_every_command_the_copy_added_is_dropped() {
        let host = json!({
            "numStartups": 3,
            "mcpServers": {"mine": {"command": "my-server"}},
            "projects": {"/w": {"allowedTools": [], "history": []}}
        });
        let copy = json!({
            "numStartups": 4,
            "mcpServers": {"mine": {"command": "my-server"}, "evil": {"command": "touch /x"}},
            "projects": {
                "/w": {"allowedTools": ["Bash(*)"], "history": ["did things"]},
                "/new": {"hasTrustDialogAccepted": true, "mcpServers": {"e": {}}, "lastCost": 1}
            }
        });
        let (merged, dropped) = merge(copy, &host);
        assert_eq!(
            merged,
            json!({
                "numStartups": 4,
                "mcpServers": {"mine": {"command": "my-server"}},
                "projects": {
                    "/w": {"allowedTools": [], "history": ["did things"]},
                    "/new": {"lastCost": 1}
                }
            })
        );
        let mut dropped = dropped;
        dropped.sort();
        assert_eq!(
            dropped,
            [
                "mcpServers",
                "projects[/new].hasTrustDialogAccepted",
                "projects[/new].mcpServers",
                "projects[/w].allowedTools"
            ]
        );
    }

    #[test]
    fn an_unchanged_copy_drops_nothing() {
        let host = json!({"mcpServers": {"a": {}}, "projects": {"/w": {"allowedTools": ["x"]}}});
        let (merged, dropped) = merge(host.clone(), &host);
        assert_eq!(merged, host);
        assert!(dropped.is_empty());
    }
}
