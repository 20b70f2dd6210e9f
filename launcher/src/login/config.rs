//! `/etc/sandbox-launch/login.yaml`: what a login gets — the real shell, and the policy.
//!
//! ```yaml
//! shell: /bin/bash                                   # $SHELL inside, and what a login runs
//! policy: /etc/sandbox-launch/login-policy.yaml      # as --policy (OpenShell YAML)
//! settings: /etc/sandbox-launch/login-settings.json  # as --settings (agent settings JSON)
//! options: [--network, none]                         # more whole-process options
//! ```
//!
//! Every key is optional; an unknown key is an error. The file and the files it names must
//! belong to root and be writable by nobody else: a login policy the logged-in user could edit
//! would be no policy (the same rule sshd's StrictModes applies to its files). A missing
//! `login.yaml` means the defaults; one that exists but cannot be read stops the login.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// Where the configuration is read from. Fixed: an environment variable naming another file
/// would let whoever starts the shell (`su` keeps the caller's environment) pick the policy.
pub const PATH: &str = "/etc/sandbox-launch/login.yaml";

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginConfig {
    /// The real shell (absolute path).
    pub shell: Option<PathBuf>,
    /// An OpenShell policy, as `--policy`.
    pub policy: Option<PathBuf>,
    /// Agent settings JSON, as `--settings`.
    pub settings: Option<PathBuf>,
    /// More `whole-process` options (`--network none`, `--allow-domain x`…).
    #[serde(default)]
    pub options: Vec<String>,
}

impl LoginConfig {
    /// Read `path`; the defaults when it does not exist.
    pub fn load(path: &Path) -> Result<LoginConfig> {
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LoginConfig::default()),
            Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", path.display())),
        };
        check_owner(path, &meta)?;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let config: LoginConfig = if text.trim().is_empty() {
            LoginConfig::default()
        } else {
            serde_norway::from_str(&text).with_context(|| format!("{}", path.display()))?
        };
        config.check(path)?;
        Ok(config)
    }

    fn check(&self, path: &Path) -> Result<()> {
        for (key, value) in [
            ("shell", &self.shell),
            ("policy", &self.policy),
            ("settings", &self.settings),
        ] {
            let Some(p) = value else { continue };
            if !p.is_absolute() {
                bail!(
                    "{}: {key}: {} is not an absolute path",
                    path.display(),
                    p.display()
                );
            }
            if key != "shell" {
                let meta = std::fs::metadata(p)
                    .with_context(|| format!("{}: {key}: {}", path.display(), p.display()))?;
                check_owner(p, &meta)?;
            }
        }
        let stray = self.options.iter().find(|o| *o == "--");
        let first = self.options.first().filter(|o| !o.starts_with('-'));
        if let Some(o) = stray.or(first) {
            bail!(
                "{}: options: {o:?}: only whole-process options go here (the shell is `shell`)",
                path.display()
            );
        }
        Ok(())
    }
}

/// Root's, and writable by root only.
fn check_owner(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    if meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        bail!(
            "{} must belong to root and be writable by root only (owner uid {}, mode {:o}): a \
             login policy that others can edit is no policy; run `chown root: {0}; chmod go-w {0}`",
            path.display(),
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<LoginConfig, serde_norway::Error> {
        serde_norway::from_str(text)
    }

    #[test]
    fn every_key_is_optional_and_unknown_keys_are_errors() {
        assert_eq!(parse("{}").unwrap(), LoginConfig::default());
        let c = parse("shell: /bin/zsh\noptions: [--network, none]\n").unwrap();
        assert_eq!(c.shell.as_deref(), Some(Path::new("/bin/zsh")));
        assert_eq!(c.options, ["--network", "none"]);
        let e = parse("shel: /bin/zsh\n").unwrap_err().to_string();
        assert!(e.contains("shel") && e.contains("shell"), "{e}");
    }

    #[test]
    fn a_file_others_can_write_is_refused() {
        let dir = std::env::temp_dir().join(format!("sl-login-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("login.yaml");
        std::fs::write(&file, "shell: /bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = LoginConfig::load(&file).unwrap_err().to_string();
        assert!(e.contains("writable by root only"), "{e}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let owned_by_root = std::fs::metadata(&file).unwrap().uid() == 0;
        assert_eq!(LoginConfig::load(&file).is_ok(), owned_by_root);
        assert_eq!(
            LoginConfig::load(&dir.join("missing.yaml")).unwrap(),
            LoginConfig::default()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn paths_must_be_absolute_and_options_only_options() {
        let c = LoginConfig {
            shell: Some("bash".into()),
            ..Default::default()
        };
        assert!(c
            .check(Path::new("x"))
            .unwrap_err()
            .to_string()
            .contains("absolute"));
        let c = LoginConfig {
            options: vec!["--".into(), "sh".into()],
            ..Default::default()
        };
        assert!(c.check(Path::new("x")).is_err());
        let c = LoginConfig {
            options: vec!["--allow-domain".into(), "example.com".into()],
            ..Default::default()
        };
        assert!(c.check(Path::new("x")).is_ok());
    }
}
