//! The `credentials` section (top level in the OpenShell YAML, inside `sandbox` in settings JSON)
//! and `--credential NAME=HOST[,HOST…]`: which of the launcher's variables the program gets only
//! as placeholders, and the hosts their real values may go to (see `crate::credentials`).
//!
//! ```yaml
//! credentials:
//!   GITHUB_TOKEN: [github.com, api.github.com]
//!   ANTHROPIC_API_KEY: [api.anthropic.com]
//! ```
//!
//! Hosts are written as `--allow-domain` takes them (`host`, `*.suffix`, `host:port`); a
//! credential does not allow a host by itself. A credential is a grant (it decides where a
//! secret may go): an untrusted project's are dropped, and of one NAME declared twice the
//! highest layer's wins.

use std::fmt::Write;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

use super::document::{Doc, KeyPath};
use super::hosts;
use super::merge::{describe_source, Layer, Role};
use super::model::{Policy, Sourced};
use super::runtime::check_name;

/// One credential: the variable and where its value may be sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialSpec {
    pub name: String,
    /// Normalised as `--allow-domain` entries are.
    pub hosts: Vec<String>,
}

fn host_list<'a>(hosts: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>, String> {
    let list: Vec<String> = hosts
        .into_iter()
        .map(hosts::domain_rule)
        .collect::<Result<_, _>>()?;
    if list.is_empty() {
        return Err("no host: name the hosts its value may be sent to".into());
    }
    Ok(list)
}

/// `NAME=HOST[,HOST…]` as `--credential` takes it.
pub fn parse_flag(text: &str) -> Result<(String, Vec<String>), String> {
    let (name, hosts) = text.split_once('=').ok_or_else(|| {
        format!("{text:?}: expected NAME=HOST[,HOST…], e.g. GITHUB_TOKEN=github.com,api.github.com")
    })?;
    check_name(name)?;
    let hosts = host_list(hosts.split(',').map(str::trim).filter(|h| !h.is_empty()))
        .map_err(|e| format!("{name}: {e}"))?;
    Ok((name.to_string(), hosts))
}

/// `credentials: {NAME: [hosts]}` at `at`.
pub fn read(doc: &Doc, v: &Value, at: &KeyPath) -> Result<Vec<(String, Vec<String>)>> {
    let map = doc.object(v, at)?;
    let mut out = Vec::new();
    for (name, hosts) in map {
        let at = at.key(name);
        check_name(name).map_err(|e| doc.error(&at, e))?;
        let listed: Vec<&str> = doc
            .strings(hosts, &at)?
            .into_iter()
            .map(|(_, h)| h)
            .collect();
        let hosts = host_list(listed).map_err(|e| doc.error(&at, e))?;
        out.push((name.clone(), hosts));
    }
    Ok(out)
}

/// Fold every layer's credentials into `p.runtime.credentials`; the number an untrusted layer
/// tried to grant is returned for the caller's warning.
pub fn merge(layers: &[Layer], p: &mut Policy) {
    for l in layers {
        if matches!(l.role, Role::Narrowing { .. }) {
            continue;
        }
        let src = &l.frag.source;
        for (name, hosts) in &l.frag.runtime.credentials {
            match p.runtime.credentials.iter().find(|c| &c.value.name == name) {
                Some(kept) => p.warnings.push(format!(
                    "credential {name} from {} is shadowed by the one from {}",
                    describe_source(src),
                    describe_source(&kept.source)
                )),
                None => p.runtime.credentials.push(Sourced::new(
                    CredentialSpec {
                        name: name.clone(),
                        hosts: hosts.clone(),
                    },
                    src.clone(),
                )),
            }
        }
    }
}

/// For `check`.
pub fn describe(out: &mut String, list: &[Sourced<CredentialSpec>]) {
    if list.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "credentials (the program sees a placeholder; the proxy puts the real value in for these hosts only):"
    );
    for c in list {
        let _ = writeln!(
            out,
            "  {} -> {}  [{}]",
            c.value.name,
            c.value.hosts.join(", "),
            describe_source(&c.source)
        );
    }
    let _ = writeln!(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_name_a_variable_and_its_hosts() {
        assert_eq!(
            parse_flag("GITHUB_TOKEN=GitHub.com, api.github.com:443"),
            Ok((
                "GITHUB_TOKEN".into(),
                vec!["github.com".into(), "api.github.com:443".into()]
            ))
        );
        assert!(parse_flag("GITHUB_TOKEN")
            .unwrap_err()
            .contains("NAME=HOST"));
        assert!(parse_flag("T=").unwrap_err().contains("no host"));
        assert!(parse_flag("T=*.com").is_err());
    }
}
