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
//!
//! The copy and its directory are the sandbox's, and a launcher started as root acts on them:
//! both are reached without following a symlink (from a descriptor of the state directory,
//! which must be the one the launch began with), and only a regular file of at most
//! [`COPY_LIMIT`] bytes with one name is read back — not a symlink to a file only root may
//! read, a FIFO that never ends, or a hard link.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};

use serde_json::{Map, Value};
use shim::spec::ProtectRule;

/// The agents whose state directory the sandbox keeps writable: name of the program, the
/// variable that moves its directory, the directory under HOME.
const AGENTS: &[(&str, &str, &str)] = &[
    ("claude", "CLAUDE_CONFIG_DIR", ".claude"),
    ("droid", "FACTORY_HOME_OVERRIDE", ".factory"),
    ("codex", "CODEX_HOME", ".codex"),
];

/// The variables that move the agents' state directories, each a writable tree of the sandbox.
pub fn state_variables() -> impl Iterator<Item = &'static str> {
    AGENTS.iter().map(|(_, var, _)| *var)
}

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

/// The most of the sandbox's copy of `~/.claude.json` merged back (Claude Code's own file is
/// well under a megabyte, even after long use).
pub const COPY_LIMIT: u64 = 16 << 20;

/// The copy of `~/.claude.json` the sandbox's Claude Code works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeCopy {
    /// The host's file.
    pub host: PathBuf,
    /// The sandbox's copy (in the state directory, canonical as it was at launch).
    pub copy: PathBuf,
    /// The state directory's device and inode, when [`ClaudeCopy::seed`] opened it: what is
    /// merged back must come from that directory.
    pub dir_id: Option<(u64, u64)>,
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
            // Where the host's own symlink (a stow-managed `~/.claude`) leads at launch: the
            // copy is reached from there without following any link.
            let canonical = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
            out.claude = Some(ClaudeCopy {
                host: home.join(".claude.json"),
                copy: canonical.join(".claude.json"),
                dir_id: None,
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
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_file_name(temporary_name(path));
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

/// The name of the temporary file [`replace`] writes next to `path`.
fn temporary_name(path: &Path) -> String {
    format!(
        ".{}.sandbox-launch-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    )
}

/// Open `dir`, a directory the sandbox may write in (or may have written in an earlier run),
/// without following a symlink in its place.
fn open_state_dir(dir: &Path) -> nix::Result<OwnedFd> {
    nix::fcntl::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

fn identity(st: &FileStat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

fn is_regular(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
}

/// What a file that is not a regular one is, in words.
fn kind_of(st: &FileStat) -> &'static str {
    match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFCHR | SFlag::S_IFBLK => "a device",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFLNK => "a symlink",
        _ => "not a regular file",
    }
}

/// Write `bytes` as `name` in the directory `dir` atomically, nothing followed: a temporary
/// file created there (a stale one the sandbox left in its place removed first), renamed over
/// `name` (which replaces a symlink there, never writes through it).
fn replace_at(
    dir: &OwnedFd,
    name: &Path,
    bytes: &[u8],
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    let tmp = temporary_name(name);
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mode = Mode::from_bits_truncate(0o600);
    let fd = match nix::fcntl::openat(dir, tmp.as_str(), flags, mode) {
        Err(Errno::EEXIST) => {
            nix::unistd::unlinkat(dir, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir)?;
            nix::fcntl::openat(dir, tmp.as_str(), flags, mode)?
        }
        other => other?,
    };
    let mut f = std::fs::File::from(fd);
    let written = (|| -> std::io::Result<()> {
        if let Some((uid, gid)) = owner {
            nix::unistd::fchown(&f, Some(uid.into()), Some(gid.into()))?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        Ok(nix::fcntl::renameat(dir, tmp.as_str(), dir, name)?)
    })();
    if written.is_err() {
        let _ = nix::unistd::unlinkat(dir, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
    written
}

/// Started as root, the owner the launcher gives what it makes for the agent: the home's.
fn owner_like(like: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    std::fs::metadata(like).ok().map(|m| (m.uid(), m.gid()))
}

impl ClaudeCopy {
    /// At launch: the copy starts as the host's file (nothing when there is none). The state
    /// directory is opened without following a symlink, and remembered.
    pub fn seed(&mut self) -> std::io::Result<()> {
        let (dir, name) = self.dir_and_name()?;
        let name = name.to_path_buf();
        let dir_fd = open_state_dir(dir).map_err(|e| self.dir_error(e))?;
        self.dir_id = Some(identity(&nix::sys::stat::fstat(&dir_fd)?));
        match std::fs::read(&self.host) {
            Ok(bytes) => {
                replace_at(&dir_fd, &name, &bytes, owner_like(&self.host))?;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn dir_and_name(&self) -> std::io::Result<(&Path, &Path)> {
        match (self.copy.parent(), self.copy.file_name()) {
            (Some(dir), Some(name)) => Ok((dir, Path::new(name))),
            _ => Err(std::io::Error::other("no directory")),
        }
    }

    fn dir_error(&self, e: Errno) -> std::io::Error {
        let dir = self.copy.parent().unwrap_or(Path::new("/")).display();
        match e {
            Errno::ELOOP | Errno::ENOTDIR => std::io::Error::other(format!(
                "{dir} is not a directory but a symlink or a file; it is not followed"
            )),
            e => std::io::Error::from(e),
        }
    }

    /// The sandbox's copy, read from the state directory the launch began with, nothing
    /// followed: `None` when there is none; an error (nothing to merge) when it is anything
    /// but a regular file of at most [`COPY_LIMIT`] bytes with one name.
    fn read_copy(&self) -> Result<Option<Vec<u8>>, String> {
        let at = |why: String| format!("{}: {why}; nothing merged back", self.copy.display());
        let (dir, name) = self.dir_and_name().map_err(|e| at(e.to_string()))?;
        let dir_fd = match open_state_dir(dir) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(at(self.dir_error(e).to_string())),
        };
        let Some(dir_id) = self.dir_id else {
            return Err(at("the state directory was not opened at launch".into()));
        };
        let dir_now = identity(&nix::sys::stat::fstat(&dir_fd).map_err(|e| at(e.to_string()))?);
        if dir_now != dir_id {
            return Err(at(format!(
                "{} is not the directory the launch made the copy in (the program inside \
                 replaced it)",
                dir.display()
            )));
        }
        // Look before opening (a device is not opened at all), then again at what was opened.
        let st = match nix::sys::stat::fstatat(&dir_fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(at(e.to_string())),
        };
        let check = |st: &FileStat| -> Result<(), String> {
            if !is_regular(st) {
                return Err(at(format!(
                    "{} made inside, not a regular file; it is not read",
                    kind_of(st)
                )));
            }
            if st.st_nlink != 1 {
                return Err(at(
                    "a hard link made inside (another file's content); it is not read".into(),
                ));
            }
            if st.st_size as u64 > COPY_LIMIT {
                return Err(at(format!(
                    "larger than {} MiB; it is not read",
                    COPY_LIMIT >> 20
                )));
            }
            Ok(())
        };
        check(&st)?;
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(&dir_fd, name, flags, Mode::empty())
            .map_err(|e| at(e.to_string()))?;
        let opened = nix::sys::stat::fstat(&fd).map_err(|e| at(e.to_string()))?;
        check(&opened)?;
        if identity(&opened) != identity(&st) {
            return Err(at("replaced while it was read".into()));
        }
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(COPY_LIMIT + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| at(e.to_string()))?;
        if bytes.len() as u64 > COPY_LIMIT {
            return Err(at(format!(
                "larger than {} MiB; it is not read",
                COPY_LIMIT >> 20
            )));
        }
        Ok(Some(bytes))
    }

    /// When the sandbox ends: merge the copy back into the host's file. Returns the
    /// command-bearing changes that were dropped (`mcpServers`, `projects[/w].allowedTools`...).
    pub fn merge_back(&self) -> Result<Vec<String>, String> {
        let Some(copy) = self.read_copy()? else {
            return Ok(Vec::new());
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
        // Owned as the home is (not as the state directory, which the sandbox could replace).
        let owner = self.host.parent().unwrap_or(Path::new("/")).to_path_buf();
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

    /// A state directory with a host file, seeded; what the test does to the copy, merged back.
    fn merged_after(tag: &str, plant: impl Fn(&Path)) -> (Result<Vec<String>, String>, Value) {
        let base = std::env::temp_dir().join(format!("sl-claudecopy-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join(".claude")).unwrap();
        let base = base.canonicalize().unwrap();
        std::fs::write(base.join(".claude.json"), "{\"numStartups\": 1}").unwrap();
        let mut c = ClaudeCopy {
            host: base.join(".claude.json"),
            copy: base.join(".claude/.claude.json"),
            dir_id: None,
        };
        c.seed().unwrap();
        assert!(std::fs::symlink_metadata(&c.copy).unwrap().is_file());
        plant(&c.copy);
        let result = c.merge_back();
        let host = serde_json::from_slice(&std::fs::read(&c.host).unwrap()).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
        (result, host)
    }

    #[test]
    fn a_regular_copy_is_merged_back() {
        let (r, host) = merged_after("regular", |copy| {
            std::fs::write(copy, "{\"numStartups\": 2}").unwrap()
        });
        assert_eq!(r, Ok(vec![]));
        assert_eq!(host["numStartups"], 2);
    }

    #[test]
    fn a_copy_that_is_a_hard_link_or_too_large_is_not_read() {
        let (r, host) = merged_after("hardlink", |copy| {
            let other = copy.with_file_name("other.json");
            std::fs::write(&other, "{\"numStartups\": 9}").unwrap();
            std::fs::remove_file(copy).unwrap();
            std::fs::hard_link(&other, copy).unwrap();
        });
        assert!(r.unwrap_err().contains("a hard link"));
        assert_eq!(host["numStartups"], 1);
        let (r, host) = merged_after("large", |copy| {
            let f = std::fs::File::create(copy).unwrap();
            f.set_len(COPY_LIMIT + 1).unwrap();
        });
        assert!(r.unwrap_err().contains("larger than 16 MiB"));
        assert_eq!(host["numStartups"], 1);
    }

    #[test]
    fn a_copy_in_a_replaced_state_directory_is_not_read() {
        let (r, host) = merged_after("swapped", |copy| {
            let dir = copy.parent().unwrap();
            std::fs::rename(dir, dir.with_file_name("moved")).unwrap();
            std::fs::create_dir(dir).unwrap();
            std::fs::write(copy, "{\"numStartups\": 9}").unwrap();
        });
        assert!(r
            .unwrap_err()
            .contains("not the directory the launch made the copy in"));
        assert_eq!(host["numStartups"], 1);
    }
}
