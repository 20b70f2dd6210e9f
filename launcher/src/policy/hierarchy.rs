//! Finding the policy files of the org > project > user hierarchy, and whether the project is
//! trusted.
//!
//! Each level is a directory that may hold `policy.yaml` (OpenShell) and/or `settings.json`
//! (agent settings); both are read when both exist. A missing file is fine; a file that exists
//! but cannot be read or parsed stops the launch (an unreadable org policy must not be skipped).
//!
//! * org: `/etc/sandbox-launch/` (`LoadRequest::org_dir`)
//! * project: `<cwd>/.sandbox-launch/` if that directory exists, else
//!   `<git root>/.sandbox-launch/` (the nearest ancestor of the working directory with `.git`)
//! * user: `$XDG_CONFIG_HOME/sandbox-launch/` (`LoadRequest::user_dir`)
//!
//! **Trusted projects**: `<user dir>/trusted-projects` lists one project directory per line (the
//! directory that holds `.sandbox-launch/`), absolute or `~/…`; blank lines and lines starting
//! with `#` are ignored. Only an exact match trusts a project (listing `~/src` does not trust
//! `~/src/x`); symlinks in either path are resolved for this comparison. An untrusted project's
//! files may only narrow: their denies and narrower settings apply, their allows do not.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::fragment::Fragment;
use super::model::Source;
use super::{agent_settings, openshell, paths};

pub const POLICY_FILE: &str = "policy.yaml";
pub const SETTINGS_FILE: &str = "settings.json";
pub const PROJECT_DIR: &str = ".sandbox-launch";
pub const TRUSTED_PROJECTS: &str = "trusted-projects";

/// The fragments of one level's directory, `policy.yaml` first.
pub fn level_files(
    dir: &Path,
    source: fn(PathBuf) -> Source,
    cwd: &Path,
    home: &Path,
) -> Result<Vec<Fragment>> {
    let mut out = Vec::new();
    let policy = dir.join(POLICY_FILE);
    if exists(&policy)? {
        out.push(openshell::load(&policy, source(policy.clone()))?);
    }
    let settings = dir.join(SETTINGS_FILE);
    if exists(&settings)? {
        out.push(agent_settings::load(
            &settings,
            source(settings.clone()),
            cwd,
            home,
        )?);
    }
    Ok(out)
}

/// Whether `p` exists; any error other than "not found" is returned (fail closed).
fn exists(p: &Path) -> Result<bool> {
    match std::fs::metadata(p) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("cannot inspect policy file {}", p.display())),
    }
}

/// The project directory (the one holding `.sandbox-launch/`), if there is one.
pub fn project_root(cwd: &Path) -> Option<PathBuf> {
    if cwd.join(PROJECT_DIR).is_dir() {
        return Some(cwd.to_path_buf());
    }
    let git_root = cwd.ancestors().find(|a| a.join(".git").exists())?;
    git_root
        .join(PROJECT_DIR)
        .is_dir()
        .then(|| git_root.to_path_buf())
}

/// Whether `project` is listed in `<user_dir>/trusted-projects`.
pub fn is_trusted(project: &Path, user_dir: &Path, home: &Path) -> Result<bool> {
    let list = user_dir.join(TRUSTED_PROJECTS);
    let text = match std::fs::read_to_string(&list) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", list.display())),
    };
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let project = canonical(project);
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !line.starts_with('/') && !line.starts_with('~') {
            anyhow::bail!(
                "{}:{}: {line:?} is not absolute (one project directory per line, absolute or ~/…)",
                list.display(),
                i + 1
            );
        }
        let entry = paths::relaxed(line, Path::new("/"), home)
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", list.display(), i + 1))?;
        if canonical(&entry) == project {
            return Ok(true);
        }
    }
    Ok(false)
}

/// How to trust `project`, for messages.
pub fn trust_hint(project: &Path, user_dir: &Path) -> String {
    format!(
        "to trust it, add the line {} to {}",
        project.display(),
        user_dir.join(TRUSTED_PROJECTS).display()
    )
}
