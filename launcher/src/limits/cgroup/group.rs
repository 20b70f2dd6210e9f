//! The sandbox's group in one hierarchy: made below the launcher's own group (never anywhere
//! else), given its limits, entered by the launcher only around the clone — so the sandbox's
//! first process is born inside and everything it starts stays there, while the launcher
//! itself is never charged or limited — and removed when the sandbox is gone.
//!
//! cgroup v2 lets a group's children use a controller only when the group lists it in
//! `cgroup.subtree_control`, which the kernel refuses for a group that holds processes (the
//! root excepted). When the launcher's own group lacks a controller and holds nothing but the
//! launcher — `systemd-run --user --scope -p Delegate=yes sandbox-launch …`, a container
//! entrypoint — the launcher moves itself into a leaf `sandbox-launch-<pid>.launcher`, enables
//! the controller, and undoes both at the end. It never moves another process and never
//! enables a controller in the host's root group.

use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::hierarchy::{Hierarchy, Version};

pub struct Group {
    pub version: Version,
    /// The launcher's own group.
    own: PathBuf,
    /// The sandbox's group.
    pub dir: PathBuf,
    /// Where the launcher lives while the sandbox's group exists: its own group, or the leaf
    /// it moved to (v2).
    home: PathBuf,
    leaf: Option<PathBuf>,
    /// v2: controllers enabled in the own group's `cgroup.subtree_control` by this launcher.
    enabled: Vec<String>,
    removed: bool,
}

fn pid() -> String {
    std::process::id().to_string()
}

impl Group {
    /// Make the sandbox's group below the launcher's own, with `controllers` available in it.
    pub fn create(h: &Hierarchy, controllers: &[&str]) -> Result<Group, String> {
        let mut g = Group {
            version: h.version,
            own: h.own.clone(),
            dir: h.own.join(format!("sandbox-launch-{}", pid())),
            home: h.own.clone(),
            leaf: None,
            enabled: Vec::new(),
            removed: false,
        };
        if h.version == Version::V2 {
            g.delegate(controllers)?;
        }
        mkdir(&g.dir, &g.own)?;
        Ok(g)
    }

    /// v2: make `controllers` available to the own group's children.
    fn delegate(&mut self, controllers: &[&str]) -> Result<(), String> {
        let active = read(&self.own.join("cgroup.subtree_control")).unwrap_or_default();
        let missing: Vec<String> = controllers
            .iter()
            .filter(|c| !active.split_whitespace().any(|a| a == **c))
            .map(|c| c.to_string())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let own = self.own.display().to_string();
        if !self.own.join("cgroup.type").exists() {
            return Err(format!(
                "{} not enabled for the children of the root group {own}; enabling it would change every group of the host",
                missing.join(", ")
            ));
        }
        let procs = read(&self.own.join("cgroup.procs")).unwrap_or_default();
        let others = procs.split_whitespace().filter(|p| *p != pid()).count();
        if others > 0 {
            return Err(format!(
                "cgroup v2 gives a group's children {} only when the group holds no process, and {own} holds {others} besides the launcher; start sandbox-launch in a group of its own, e.g. `systemd-run --user --scope -p Delegate=yes sandbox-launch …`",
                missing.join(", ")
            ));
        }
        let leaf = self.own.join(format!("sandbox-launch-{}.launcher", pid()));
        mkdir(&leaf, &self.own)?;
        self.leaf = Some(leaf.clone());
        write(&leaf.join("cgroup.procs"), &pid())?;
        self.home = leaf;
        let change: Vec<String> = missing.iter().map(|c| format!("+{c}")).collect();
        write(&self.own.join("cgroup.subtree_control"), &change.join(" "))?;
        self.enabled = missing;
        Ok(())
    }

    /// Write a control file of the group.
    pub fn set(&self, file: &str, value: &str) -> Result<(), String> {
        write(&self.dir.join(file), value)
    }

    pub fn get(&self, file: &str) -> Option<String> {
        read(&self.dir.join(file))
    }

    pub fn has(&self, file: &str) -> bool {
        self.dir.join(file).exists()
    }

    /// Move the launcher into the group (for the clone).
    pub fn enter(&self) -> Result<(), String> {
        write(&self.dir.join("cgroup.procs"), &pid())
    }

    /// Move the launcher back out.
    pub fn leave(&self) -> Result<(), String> {
        write(&self.home.join("cgroup.procs"), &pid())
    }

    /// Remove the group (it must be empty: the sandbox has ended and its init is reaped) and
    /// undo what was done to make room for it. What could not be undone is returned.
    pub fn remove(&mut self) -> Vec<String> {
        if self.removed {
            return Vec::new();
        }
        self.removed = true;
        let mut problems = Vec::new();
        if let Err(e) = rmdir(&self.dir) {
            problems.push(e);
        }
        if !self.enabled.is_empty() {
            let change: Vec<String> = self.enabled.iter().map(|c| format!("-{c}")).collect();
            if let Err(e) = write(&self.own.join("cgroup.subtree_control"), &change.join(" ")) {
                problems.push(e);
            }
        }
        if let Some(leaf) = &self.leaf {
            if let Err(e) = write(&self.own.join("cgroup.procs"), &pid()) {
                problems.push(e);
            }
            if let Err(e) = rmdir(leaf) {
                problems.push(e);
            }
        }
        problems
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        for p in self.remove() {
            crate::say!("sandbox-launch: warning: {p}");
        }
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("write {value:?} to {}: {e}", path.display()))
}

fn mkdir(dir: &Path, parent: &Path) -> Result<(), String> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            let owner = std::fs::metadata(parent).map(|m| m.uid()).unwrap_or(0);
            Err(format!(
                "cannot create {}: {e}; the launcher's own group {} belongs to uid {owner} — as an unprivileged user, run in a group delegated to you (systemd: `systemd-run --user --scope -p Delegate=yes …`; or have an administrator `chown -R` a group to you and start from there)",
                dir.display(),
                parent.display()
            ))
        }
        // Named after this process: the launcher that made it had this pid and is gone (one
        // killed before it could remove its group). Empty, it is removed and made anew; with
        // processes or groups in it, rmdir refuses and so does the launch.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            std::fs::remove_dir(dir).map_err(|e| {
                format!(
                    "cannot create {0}: a group of that name is left from an earlier launch with this \
                     process id and cannot be removed ({e}); remove it (rmdir {0}) once nothing runs in it",
                    dir.display()
                )
            })?;
            std::fs::create_dir(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
        }
        Err(e) => Err(format!("cannot create {}: {e}", dir.display())),
    }
}

/// rmdir, waiting briefly while the kernel finishes taking the last exited process out.
fn rmdir(dir: &Path) -> Result<(), String> {
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => return Err(format!("cannot remove {}: {e}", dir.display())),
        }
    }
    Err(format!(
        "cannot remove {}: still busy after 500 ms",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_left_empty_by_an_earlier_launch_with_this_pid_is_made_anew_and_a_busy_one_refused() {
        let parent = std::env::temp_dir().join(format!("sl-cgroup-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&parent);
        let dir = parent.join("sandbox-launch-1");
        std::fs::create_dir_all(&dir).unwrap();
        // Left empty: removed and made again.
        mkdir(&dir, &parent).unwrap();
        assert!(dir.is_dir());
        // Not empty (on cgroupfs: processes or child groups): refused, left as it is.
        std::fs::create_dir(dir.join("child")).unwrap();
        let err = mkdir(&dir, &parent).unwrap_err();
        assert!(err.contains("left from an earlier launch"), "{err}");
        assert!(err.contains("rmdir"), "{err}");
        assert!(dir.join("child").is_dir());
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
