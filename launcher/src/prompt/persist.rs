//! The lasting answers, written to the user's settings file
//! (`$XDG_CONFIG_HOME/sandbox-launch/settings.json`): *allow always* adds a domain to
//! `allowedDomains`, *remove from deny list* takes entries out of `deniedDomains`. The text is
//! edited in place (comments, order and layout kept), the result is loaded as settings before
//! it replaces the file, and it replaces it atomically (a new file renamed over the old one, in
//! the same directory; through a symlink, the file it points to).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};

use super::jsonc_edit;
use crate::policy::agent_settings;
use crate::policy::model::Source;

/// What the lasting answer did to the file.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    Changed,
    /// It already said so.
    Unchanged,
}

/// Where a list lives in the file's format: inside `sandbox` (agent settings) or at the top
/// (sandbox-runtime settings).
fn list_path(text: &str, section: &'static str, list: &'static str) -> Vec<&'static str> {
    let plain = crate::policy::jsonc::strip(text);
    let runtime = serde_json::from_str::<serde_json::Value>(&plain).is_ok_and(|v| {
        v.get("sandbox").is_none() && (v.get("network").is_some() || v.get("filesystem").is_some())
    });
    if runtime {
        vec![section, list]
    } else {
        vec!["sandbox", section, list]
    }
}

/// Add `domain` to `allowedDomains`.
pub fn allow_domain(file: &Path, domain: &str, cwd: &Path, home: &Path) -> Result<Written> {
    edit(file, cwd, home, |text| {
        jsonc_edit::add_to_list(text, &list_path(text, "network", "allowedDomains"), domain)
    })
}

/// Add `dir` to `filesystem.allowWrite` (for the next launch).
pub fn allow_write(file: &Path, dir: &str, cwd: &Path, home: &Path) -> Result<Written> {
    edit(file, cwd, home, |text| {
        jsonc_edit::add_to_list(text, &list_path(text, "filesystem", "allowWrite"), dir)
    })
}

/// Remove `entries` from `deniedDomains`.
pub fn remove_denied(file: &Path, entries: &[String], cwd: &Path, home: &Path) -> Result<Written> {
    edit(file, cwd, home, |text| {
        jsonc_edit::remove_from_list(text, &list_path(text, "network", "deniedDomains"), entries)
    })
}

fn edit(
    file: &Path,
    cwd: &Path,
    home: &Path,
    change: impl Fn(&str) -> Result<Option<String>>,
) -> Result<Written> {
    let target = resolve(file);
    let old = match std::fs::read_to_string(&target) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", target.display())),
    };
    // A new file starts as an empty agent-settings object, laid out as people write them.
    let base = old.clone().unwrap_or_else(|| {
        "{\n  \"sandbox\": {\n    \"network\": {\n      \"allowedDomains\": [],\n      \"deniedDomains\": []\n    }\n  }\n}\n".to_string()
    });
    if old.is_some() {
        check(&base, file, cwd, home)
            .map_err(|e| anyhow!("{e:#}; fix {} first (it is left as it is)", file.display()))?;
    }
    let Some(new) = change(&base).with_context(|| format!("cannot edit {}", file.display()))?
    else {
        return Ok(Written::Unchanged);
    };
    check(&new, file, cwd, home).context("the edited settings would not load (nothing written)")?;
    write_atomically(&target, &new)?;
    Ok(Written::Changed)
}

fn check(text: &str, file: &Path, cwd: &Path, home: &Path) -> Result<()> {
    agent_settings::parse(text, file, Source::User(file.to_path_buf()), cwd, home).map(|_| ())
}

/// The file a symlink (a dotfiles checkout) points to, so that the link stays a link.
fn resolve(file: &Path) -> PathBuf {
    std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf())
}

fn write_atomically(target: &Path, text: &str) -> Result<()> {
    let dir = target
        .parent()
        .ok_or_else(|| anyhow!("{} has no directory", target.display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.sandbox-launch-{}", std::process::id()));
    let mode = std::fs::metadata(target)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o600);
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, target)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.with_context(|| format!("cannot write {}", target.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sl-persist-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn allow_always_makes_the_file_keeps_comments_and_is_idempotent() {
        let d = dir("allow");
        let file = d.join("sandbox-launch/settings.json");
        assert_eq!(
            allow_domain(&file, "*.npmjs.org", &d, &d).unwrap(),
            Written::Changed
        );
        let frag = agent_settings::load(&file, Source::User(file.clone()), &d, &d).unwrap();
        assert_eq!(frag.allowed_domains, ["*.npmjs.org"]);
        let with_comment = "{\n  // mine\n  \"sandbox\": {\"network\": {\"allowedDomains\": [\"github.com\"]}}\n}\n";
        std::fs::write(&file, with_comment).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        allow_domain(&file, "*.npmjs.org", &d, &d).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("// mine"), "{text}");
        let frag = agent_settings::load(&file, Source::User(file.clone()), &d, &d).unwrap();
        assert_eq!(frag.allowed_domains, ["*.npmjs.org", "github.com"]);
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(
            allow_domain(&file, "*.npmjs.org", &d, &d).unwrap(),
            Written::Unchanged
        );
        assert_eq!(
            std::fs::read_dir(file.parent().unwrap()).unwrap().count(),
            1,
            "no temp file left"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_broken_file_is_left_alone() {
        let d = dir("broken");
        let file = d.join("settings.json");
        std::fs::write(&file, "{\"sandbox\": {\"netwrk\": {}}}").unwrap();
        let e = allow_domain(&file, "a.test", &d, &d).unwrap_err();
        assert!(format!("{e:#}").contains("fix"), "{e:#}");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "{\"sandbox\": {\"netwrk\": {}}}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn remove_from_deny_list_edits_the_runtime_format_too() {
        let d = dir("deny");
        let file = d.join("settings.json");
        std::fs::write(
            &file,
            r#"{"network": {"allowedDomains": [], "deniedDomains": ["a.test", "b.test"]}, "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}}"#,
        )
        .unwrap();
        remove_denied(&file, &["a.test".into()], &d, &d).unwrap();
        let frag = agent_settings::load(&file, Source::User(file.clone()), &d, &d).unwrap();
        assert_eq!(frag.denied_domains, ["b.test"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_symlinked_file_stays_a_symlink() {
        let d = dir("link");
        let real = d.join("dotfiles-settings.json");
        std::fs::write(&real, "{\"sandbox\": {}}").unwrap();
        let link = d.join("settings.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        allow_domain(&link, "a.test", &d, &d).unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(std::fs::read_to_string(&real).unwrap().contains("a.test"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
