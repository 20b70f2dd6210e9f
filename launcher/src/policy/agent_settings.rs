//! Agent settings JSON (`--settings FILE`, `settings.json` in the org/project/user dirs): the
//! `sandbox` object of a Droid-style settings file. Other top-level keys belong to the agent and
//! are not looked at. Comments and trailing commas are accepted.
//!
//! ```jsonc
//! {
//!   "sandbox": {
//!     "enabled": true,
//!     "mode": "whole-process",             // or "per-command"; informational here
//!     "filesystem": {
//!       "allowWrite": ["~/.cache/npm"],    // writable besides the working directory
//!       "denyWrite": ["~/.cache/npm/_cacache/index-v5"],   // beats allowWrite
//!       "denyRead": ["~/.aws/credentials"] // everything else stays readable
//!     },
//!     "network": {
//!       "allowedDomains": ["github.com", "*.npmjs.org", "example.com:8443"],
//!       "deniedDomains": ["gist.github.com"],                // beats allowedDomains
//!       "allowUnixSockets": ["/run/user/1000/ssh-agent.sock"],
//!       "mode": "restricted"               // sandbox-launch extension: none | restricted | full
//!     }
//!   }
//! }
//! ```
//!
//! Semantics: the host is readable (`FsMode::HostReadable`, the mode is left unsaid so an
//! OpenShell `filesystem_policy` elsewhere still narrows it); `~` expands to the home directory;
//! relative paths are relative to the working directory. `deniedDomains` and `allowUnixSockets`
//! come from the sandbox runtime these settings drive; `network.mode` is ours.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use super::document::{given, Doc, KeyPath};
use super::fragment::Fragment;
use super::model::{NetworkMode, Source};
use super::{hosts, jsonc, paths};

/// Read and parse the settings file at `file`.
pub fn load(file: &Path, source: Source, cwd: &Path, home: &Path) -> Result<Fragment> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read settings file {}", file.display()))?;
    parse(&text, file, source, cwd, home)
}

/// Parse settings JSON; `file` is only used in messages.
pub fn parse(text: &str, file: &Path, source: Source, cwd: &Path, home: &Path) -> Result<Fragment> {
    let root: Value = serde_json::from_str(&jsonc::strip(text))
        .with_context(|| format!("{}: not valid settings JSON", file.display()))?;
    let mut doc = Doc::new(file);
    let mut frag = Fragment::new(source);
    let top = KeyPath::root("");
    let Some(top_map) = root.as_object() else {
        return Err(doc.error(&top, "expected a JSON object"));
    };
    let Some(sandbox) = given(top_map, "sandbox") else {
        doc.warn(&top, "no `sandbox` object; nothing taken from this file");
        frag.warnings = doc.warnings;
        return Ok(frag);
    };
    let ctx = PathCtx { cwd, home };
    read_sandbox(&mut doc, sandbox, &ctx, &mut frag)?;
    frag.warnings = doc.warnings;
    Ok(frag)
}

struct PathCtx<'a> {
    cwd: &'a Path,
    home: &'a Path,
}

fn read_sandbox(doc: &mut Doc, v: &Value, ctx: &PathCtx, frag: &mut Fragment) -> Result<()> {
    let at = KeyPath::root("sandbox");
    let map = doc.object(
        v,
        &at,
        &["enabled", "mode", "filesystem", "network", "environment"],
    )?;
    if let Some(v) = given(map, "enabled") {
        let e_at = at.key("enabled");
        if !doc.boolean(v, &e_at)? {
            doc.warn(
                &e_at,
                "is false; sandbox-launch sandboxes regardless (this file's rules still apply)",
            );
        }
    }
    if let Some(v) = given(map, "mode") {
        doc.choice(v, &at.key("mode"), &["per-command", "whole-process"])?;
    }
    if let Some(v) = given(map, "filesystem") {
        let f_at = at.key("filesystem");
        let fs = doc.object(v, &f_at, &["allowWrite", "denyWrite", "denyRead"])?;
        if let Some(v) = given(fs, "allowWrite") {
            let w_at = f_at.key("allowWrite");
            frag.read_write = path_list(doc, v, &w_at, ctx)?;
            if let Some(i) = frag.read_write.iter().position(|p| paths::is_root(p)) {
                return Err(doc.error(
                    &w_at.index(i),
                    "`/` cannot be writable (it would make the whole host writable)",
                ));
            }
        }
        if let Some(v) = given(fs, "denyWrite") {
            frag.deny_write = path_list(doc, v, &f_at.key("denyWrite"), ctx)?;
        }
        if let Some(v) = given(fs, "denyRead") {
            frag.deny_read = path_list(doc, v, &f_at.key("denyRead"), ctx)?;
        }
    }
    if let Some(v) = given(map, "network") {
        read_network(doc, v, &at.key("network"), ctx, frag)?;
    }
    super::runtime::read(
        doc,
        map,
        &at,
        super::runtime::Style::Camel,
        &mut frag.runtime,
    )?;
    Ok(())
}

fn read_network(
    doc: &mut Doc,
    v: &Value,
    at: &KeyPath,
    ctx: &PathCtx,
    frag: &mut Fragment,
) -> Result<()> {
    let net = doc.object(
        v,
        at,
        &[
            "allowedDomains",
            "deniedDomains",
            "allowUnixSockets",
            "mode",
        ],
    )?;
    if let Some(v) = given(net, "allowedDomains") {
        frag.allowed_domains = domain_list(doc, v, &at.key("allowedDomains"))?;
    }
    if let Some(v) = given(net, "deniedDomains") {
        frag.denied_domains = domain_list(doc, v, &at.key("deniedDomains"))?;
    }
    if let Some(v) = given(net, "allowUnixSockets") {
        frag.unix_sockets = path_list(doc, v, &at.key("allowUnixSockets"), ctx)?;
    }
    if let Some(v) = given(net, "mode") {
        frag.network_mode = Some(
            match doc.choice(v, &at.key("mode"), &["none", "restricted", "full"])? {
                "none" => NetworkMode::None,
                "full" => NetworkMode::Full,
                _ => NetworkMode::Restricted,
            },
        );
    }
    Ok(())
}

fn path_list(doc: &Doc, v: &Value, at: &KeyPath, ctx: &PathCtx) -> Result<Vec<std::path::PathBuf>> {
    doc.strings(v, at)?
        .into_iter()
        .map(|(at, s)| paths::relaxed(s, ctx.cwd, ctx.home).map_err(|e| doc.error(&at, e)))
        .collect()
}

fn domain_list(doc: &Doc, v: &Value, at: &KeyPath) -> Result<Vec<String>> {
    doc.strings(v, at)?
        .into_iter()
        .map(|(at, s)| hosts::domain_rule(s).map_err(|e| doc.error(&at, e)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn parse_ok(text: &str) -> Fragment {
        parse(
            text,
            Path::new("settings.json"),
            Source::SettingsFile("settings.json".into()),
            Path::new("/work/proj"),
            Path::new("/home/u"),
        )
        .unwrap()
    }

    fn parse_err(text: &str) -> String {
        let e = parse(
            text,
            Path::new("settings.json"),
            Source::SettingsFile("settings.json".into()),
            Path::new("/work/proj"),
            Path::new("/home/u"),
        )
        .unwrap_err();
        format!("{e:#}")
    }

    #[test]
    fn the_documented_example_parses_with_comments_and_tilde() {
        let f = parse_ok(
            r#"{
  "model": "whatever the agent keeps here",
  "sandbox": {
    "enabled": true,
    // Isolation scope: "per-command" (default) or "whole-process" (Linux only)
    "mode": "per-command",
    "filesystem": {
      // Additional writable paths beyond CWD (which is always writable)
      "allowWrite": ["/tmp/build-output", "~/.config"],
      "denyWrite": ["/tmp/build-output/cache/locks", "~/.config/secrets"],
      "denyRead": ["~/.aws/credentials", "~/.ssh/id_rsa"],
    },
    "network": {
      "allowedDomains": ["github.com", "*.npmjs.org"],
    },
  },
}"#,
        );
        assert_eq!(
            f.fs_mode, None,
            "agent settings leave the mode to the default"
        );
        assert_eq!(
            f.read_write,
            vec![PathBuf::from("/tmp/build-output"), "/home/u/.config".into()]
        );
        assert_eq!(
            f.deny_write,
            vec![
                PathBuf::from("/tmp/build-output/cache/locks"),
                "/home/u/.config/secrets".into()
            ]
        );
        assert_eq!(
            f.deny_read,
            vec![
                PathBuf::from("/home/u/.aws/credentials"),
                "/home/u/.ssh/id_rsa".into()
            ]
        );
        assert_eq!(f.allowed_domains, vec!["github.com", "*.npmjs.org"]);
        assert_eq!(f.network_mode, None);
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
    }

    #[test]
    fn network_extras_are_read() {
        let f = parse_ok(
            r#"{"sandbox": {"network": {
                "deniedDomains": ["Gist.GitHub.com"],
                "allowUnixSockets": ["~/.ssh/agent.sock"],
                "mode": "none"}}}"#,
        );
        assert_eq!(f.denied_domains, vec!["gist.github.com"]);
        assert_eq!(
            f.unix_sockets,
            vec![PathBuf::from("/home/u/.ssh/agent.sock")]
        );
        assert_eq!(f.network_mode, Some(NetworkMode::None));
    }

    #[test]
    fn relative_paths_are_relative_to_the_working_directory() {
        let f = parse_ok(r#"{"sandbox": {"filesystem": {"denyWrite": ["./.env", "secrets"]}}}"#);
        assert_eq!(
            f.deny_write,
            vec![
                PathBuf::from("/work/proj/.env"),
                "/work/proj/secrets".into()
            ]
        );
    }

    #[test]
    fn a_file_without_a_sandbox_object_contributes_nothing_but_a_warning() {
        let f = parse_ok(r#"{"model": "x"}"#);
        assert!(f.read_write.is_empty() && f.deny_read.is_empty());
        assert!(f.warnings[0].contains("no `sandbox` object"));
    }

    #[test]
    fn errors_name_the_file_and_key() {
        let e = parse_err(r#"{"sandbox": {"filesystem": {"denyRead": "~/.ssh"}}}"#);
        assert!(
            e.contains(
                "settings.json: sandbox.filesystem.denyRead: expected a list, found a string"
            ),
            "{e}"
        );
        let e = parse_err(r#"{"sandbox": {"filesystem": {"denyRead": ["~/.ssh", 3]}}}"#);
        assert!(
            e.contains("sandbox.filesystem.denyRead[1]: expected a string"),
            "{e}"
        );
        let e = parse_err(r#"{"sandbox": {"network": {"allowedDomains": ["*"]}}}"#);
        assert!(
            e.contains("sandbox.network.allowedDomains[0]") && e.contains("every host"),
            "{e}"
        );
        let e = parse_err(r#"{"sandbox": {"mode": "sometimes"}}"#);
        assert!(e.contains("(allowed: per-command, whole-process)"), "{e}");
        let e = parse_err(r#"{"sandbox": {"filesystem": {"allowWrite": ["/"]}}}"#);
        assert!(e.contains("allowWrite[0]: `/` cannot be writable"), "{e}");
        let e = parse_err(r#"{"sandbox": {"filesystem": {"denyread": ["/x"]}}}"#);
        assert!(e.contains("did you mean `denyRead`?"), "{e}");
        let e = parse_err(r#"{"sandbox": {"enabled": "yes"}}"#);
        assert!(e.contains("sandbox.enabled: expected true or false"), "{e}");
    }

    #[test]
    fn json_syntax_errors_keep_their_line_numbers() {
        let e = parse_err("{\n // c\n \"sandbox\": {\"a\" 1}\n}");
        assert!(e.contains("settings.json: not valid settings JSON"), "{e}");
        assert!(e.contains("line 3"), "{e}");
    }

    #[test]
    fn unknown_sandbox_keys_and_disabled_sandboxes_warn() {
        let f = parse_ok(r#"{"sandbox": {"enabled": false, "excludedCommands": ["docker"]}}"#);
        assert!(f.warnings.iter().any(|w| w.contains("sandbox.enabled")));
        assert!(f
            .warnings
            .iter()
            .any(|w| w.contains("sandbox.excludedCommands: unknown key")));
    }
}
