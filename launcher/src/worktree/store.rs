//! Where kept worktrees live: one private directory per user,
//! `$XDG_STATE_HOME/sandbox-launch/worktrees/` (else `~/.local/state/sandbox-launch/worktrees/`),
//! and in it one directory per worktree, named by the sandbox's id:
//!
//! * `meta.json` — id, `--name`, the checkout, the program, when it started and ended;
//! * `layers/upper/`, `layers/work/` — overlayfs's upper and work directories (the program's
//!   writes);
//! * `base` — the checkout's state at launch (see `manifest`), what `apply` compares with.
//!
//! Not in `/tmp` or `/var/tmp` (private inside sandboxes, cleaned by the system): a worktree
//! outlives its sandbox until it is applied or discarded. Every directory is created 0700 and
//! must be a real directory owned by the caller with no access for others.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The user's worktrees directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Store {
    pub root: PathBuf,
}

/// What is known of a worktree.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Meta {
    pub id: String,
    pub name: Option<String>,
    /// The checkout (canonical): the overlay's lower layer, where `apply` writes.
    pub project: PathBuf,
    pub program: Vec<String>,
    /// Seconds since the epoch.
    pub started: u64,
    /// The launcher that runs the sandbox (while `ended` is `None`).
    pub launcher_pid: u32,
    #[serde(default)]
    pub ended: Option<u64>,
    #[serde(default)]
    pub exit_code: Option<i32>,
}

/// One kept worktree.
#[derive(Debug, Clone)]
pub struct Worktree {
    pub dir: PathBuf,
    pub meta: Meta,
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

impl Store {
    /// Where this user's worktrees are (not created).
    pub fn locate() -> Result<Store> {
        let abs = |v: &str| {
            std::env::var_os(v)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        Self::choose(abs("XDG_STATE_HOME"), abs("HOME"))
    }

    fn choose(xdg_state: Option<PathBuf>, home: Option<PathBuf>) -> Result<Store> {
        let base = match (xdg_state, home) {
            (Some(s), _) => s,
            (None, Some(h)) => h.join(".local/state"),
            (None, None) => bail!(
                "no place for worktrees: neither XDG_STATE_HOME nor HOME is set to an absolute path; set one of them"
            ),
        };
        let root = base.join("sandbox-launch").join("worktrees");
        for t in ["/tmp", "/var/tmp", "/dev/shm"] {
            if root.starts_with(t) {
                bail!(
                    "worktrees would be kept in {} (under {t}, which the system cleans and every sandbox has a private one of): set XDG_STATE_HOME to a directory of yours elsewhere",
                    root.display()
                );
            }
        }
        Ok(Store { root })
    }

    /// Create the directory (and `sandbox-launch` above it) 0700 if missing; check both are
    /// private.
    pub fn ensure(&self) -> Result<()> {
        let parent = self.root.parent().unwrap_or(Path::new("/"));
        if let Some(base) = parent.parent() {
            std::fs::create_dir_all(base)
                .with_context(|| format!("cannot create {}", base.display()))?;
        }
        for d in [parent, self.root.as_path()] {
            match std::fs::DirBuilder::new().mode(0o700).create(d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "cannot create {} (set XDG_STATE_HOME to a directory of yours)",
                            d.display()
                        )
                    })
                }
            }
            private(d)?;
        }
        Ok(())
    }

    /// Every kept worktree, oldest first. Unreadable entries are skipped.
    pub fn list(&self) -> Vec<Worktree> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut out: Vec<Worktree> = entries
            .flatten()
            .filter_map(|e| Worktree::load(&e.path()).ok())
            .collect();
        out.sort_by(|a, b| (a.meta.started, &a.meta.id).cmp(&(b.meta.started, &b.meta.id)));
        out
    }

    /// The worktree whose id or name is `target`.
    pub fn find(&self, target: &str) -> Result<Worktree> {
        let all = self.list();
        if let Some(w) = all
            .iter()
            .find(|w| w.meta.id == target || w.meta.name.as_deref() == Some(target))
        {
            return Ok(w.clone());
        }
        let known: Vec<String> = all
            .iter()
            .map(|w| match &w.meta.name {
                Some(n) => format!("{} ({n})", w.meta.id),
                None => w.meta.id.clone(),
            })
            .collect();
        bail!(
            "no worktree {target:?} in {}{}",
            self.root.display(),
            if known.is_empty() {
                " (there is none: `whole-process --worktree` makes one)".to_string()
            } else {
                format!("; there are: {}", known.join(", "))
            }
        )
    }

    /// A new worktree for sandbox `id`: its directory, `upper/` and `work/`, and its meta. A
    /// `--name` that a kept worktree has already is refused (apply or discard that one first).
    pub fn create(&self, meta: Meta) -> Result<Worktree> {
        self.ensure()?;
        if let Some(name) = &meta.name {
            if let Some(w) = self
                .list()
                .into_iter()
                .find(|w| w.meta.name.as_deref() == Some(name))
            {
                bail!(
                    "a kept worktree is named {name} already (id {}, of {}): `sandbox-launch apply {name}` or `sandbox-launch discard {name}` first, or choose another --name",
                    w.meta.id,
                    w.meta.project.display()
                );
            }
        }
        let dir = self.root.join(&meta.id);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let w = Worktree { dir, meta };
        for d in [w.layers(), w.upper(), w.work()] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&d)
                .with_context(|| format!("cannot create {}", d.display()))?;
        }
        w.save()?;
        Ok(w)
    }
}

/// A real directory, owned by us, with no access for others.
fn private(d: &Path) -> Result<()> {
    let m = std::fs::symlink_metadata(d).with_context(|| format!("{}", d.display()))?;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if !m.is_dir() {
        bail!(
            "{} is not a directory (a symlink or file is in its place); remove it",
            d.display()
        );
    }
    if m.uid() != uid {
        bail!(
            "{} belongs to uid {}, not to you (uid {uid}); remove it or set XDG_STATE_HOME",
            d.display(),
            m.uid()
        );
    }
    if m.mode() & 0o077 != 0 {
        bail!(
            "{} has mode {:o}: others could read the worktrees; run `chmod 700 {}`",
            d.display(),
            m.mode() & 0o7777,
            d.display()
        );
    }
    Ok(())
}

impl Worktree {
    pub fn load(dir: &Path) -> Result<Worktree> {
        let text = std::fs::read_to_string(dir.join("meta.json"))
            .with_context(|| format!("{}", dir.join("meta.json").display()))?;
        let meta: Meta = serde_json::from_str(&text)
            .with_context(|| format!("{}", dir.join("meta.json").display()))?;
        Ok(Worktree {
            dir: dir.to_path_buf(),
            meta,
        })
    }

    /// What the sandbox's mount takes: `upper/` and `work/` (one tree: overlayfs wants both
    /// on the same mount).
    pub fn layers(&self) -> PathBuf {
        self.dir.join("layers")
    }

    pub fn upper(&self) -> PathBuf {
        self.layers().join("upper")
    }

    pub fn work(&self) -> PathBuf {
        self.layers().join("work")
    }

    pub fn base(&self) -> PathBuf {
        self.dir.join("base")
    }

    /// Write `meta.json` (a new file renamed over the old one).
    pub fn save(&self) -> Result<()> {
        let tmp = self.dir.join(".meta.json.new");
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(serde_json::to_string_pretty(&self.meta)?.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.dir.join("meta.json"))?;
        Ok(())
    }

    /// Whether its sandbox still runs: not ended, and its launcher alive.
    pub fn running(&self) -> bool {
        if self.meta.ended.is_some() {
            return false;
        }
        let pid = self.meta.launcher_pid as libc::pid_t;
        // SAFETY: signal 0 only checks that the process exists.
        pid > 0
            && (unsafe { libc::kill(pid, 0) } == 0
                || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
    }

    /// Refuse while the sandbox runs (its upper layer is still being written).
    pub fn check_ended(&self, what: &str) -> Result<()> {
        if self.running() {
            bail!(
                "worktree {} is still in use by a running sandbox (launcher pid {}): {what} once it has ended (`sandbox-launch stop {}`)",
                self.label(),
                self.meta.launcher_pid,
                self.meta.name.as_deref().unwrap_or(&self.meta.id)
            );
        }
        Ok(())
    }

    /// `id (name)` for messages.
    pub fn label(&self) -> String {
        match &self.meta.name {
            Some(n) => format!("{} ({n})", self.meta.id),
            None => self.meta.id.clone(),
        }
    }

    /// Remove it from disk. Directories the program made unreadable (and overlayfs's own
    /// `work/work`, mode 000) are opened up first; nothing below is followed.
    pub fn remove(self) -> Result<()> {
        remove_tree(&self.dir).with_context(|| format!("cannot remove {}", self.dir.display()))
    }
}

/// Remove `path` and everything below it without following any symlink.
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !m.is_dir() {
        return std::fs::remove_file(path);
    }
    if m.mode() & 0o700 != 0o700 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    }
    let dir = super::beneath::open_root(path)?;
    for name in super::beneath::names(&dir)? {
        let _ = dir.as_raw_fd();
        remove_tree(&path.join(name))?;
    }
    std::fs::remove_dir(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(id: &str, name: Option<&str>) -> Meta {
        Meta {
            id: id.into(),
            name: name.map(Into::into),
            project: "/p".into(),
            program: vec!["sh".into()],
            started: 1,
            launcher_pid: 0,
            ended: Some(2),
            exit_code: Some(0),
        }
    }

    #[test]
    fn worktrees_are_found_by_id_or_name_and_a_name_is_unique() {
        let base = std::env::temp_dir().join(format!("sl-wt-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let store = Store {
            root: base.join("sandbox-launch/worktrees"),
        };
        store.create(meta("0000000a", Some("feat"))).unwrap();
        store.create(meta("0000000b", None)).unwrap();
        assert_eq!(store.find("feat").unwrap().meta.id, "0000000a");
        assert_eq!(store.find("0000000b").unwrap().meta.name, None);
        let e = store.find("nope").unwrap_err().to_string();
        assert!(e.contains("0000000a (feat)"), "{e}");
        let e = store
            .create(meta("0000000c", Some("feat")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("discard feat"), "{e}");
        assert_eq!(
            std::fs::metadata(&store.root).unwrap().mode() & 0o777,
            0o700
        );
        let w = store.find("feat").unwrap();
        std::fs::create_dir(w.upper().join("locked")).unwrap();
        std::fs::write(w.upper().join("locked/f"), b"x").unwrap();
        std::fs::set_permissions(
            w.upper().join("locked"),
            std::fs::Permissions::from_mode(0o0),
        )
        .unwrap();
        w.remove().unwrap();
        assert_eq!(store.list().len(), 1);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn xdg_state_home_then_home_and_never_tmp() {
        let s = Store::choose(Some("/s".into()), Some("/h".into())).unwrap();
        assert_eq!(s.root, Path::new("/s/sandbox-launch/worktrees"));
        let s = Store::choose(None, Some("/h".into())).unwrap();
        assert_eq!(
            s.root,
            Path::new("/h/.local/state/sandbox-launch/worktrees")
        );
        for t in ["/tmp/x", "/var/tmp"] {
            let e = Store::choose(Some(t.into()), None).unwrap_err().to_string();
            assert!(e.contains("set XDG_STATE_HOME"), "{e}");
        }
        assert!(Store::choose(None, None).is_err());
    }
}
