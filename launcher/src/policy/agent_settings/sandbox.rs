//! Reading the keys both settings formats share into a policy fragment: `filesystem`,
//! `network`, sandbox-runtime's `credentials`, and the switches around them.
//!
//! Each key is honoured (it maps onto the sandbox), ignored because it cannot change what the
//! sandbox allows here (macOS-only switches, sandbox-runtime's own helper programs, prompts and
//! reports), or refused because honouring it would widen the sandbox and ignoring it would make
//! the file say more than the sandbox does (`allowRead`, `allowAllUnixSockets`, external proxies,
//! credential masking, ...). A refused key at its default value (`false`, empty) is fine.

use std::path::PathBuf;

use anyhow::Result;
use serde_json::{Map, Value};

use super::PathCtx;
use crate::policy::document::{given, Doc, KeyPath};
use crate::policy::fragment::Fragment;
use crate::policy::model::NetworkMode;
use crate::policy::{hosts, paths};

/// Keys whose non-default value would widen the sandbox, with why they are refused.
const REFUSED: &[(&str, &str)] = &[
    ("allowRead", "re-allowing reads inside denied paths is not supported; narrow `denyRead` instead"),
    ("allowGitConfig", "`.git/config` stays read-only: what it configures runs on the host (core.fsmonitor, hooksPath, aliases)"),
    ("disabled", "sandbox-launch always enforces the filesystem policy"),
    ("allowAllDomains", "name the allowed domains, or use network mode `full`"),
    ("allowAllUnixSockets", "hand in the sockets that are needed with `allowUnixSockets`"),
    ("httpProxyPort", "sandbox-launch runs its own filtering proxy; an external one is not supported"),
    ("socksProxyPort", "sandbox-launch runs its own filtering proxy; an external one is not supported"),
    ("mitmProxy", "routing through another proxy is not supported"),
    ("parentProxy", "routing through another proxy is not supported"),
    ("tlsTerminate", "TLS is terminated only for OpenShell `protocol: rest` endpoints"),
    ("filterRequest", "a request callback cannot be given in a file"),
    ("enableWeakerNestedSandbox", "sandbox-launch does not weaken itself inside containers"),
];

/// Whether `v` is the default (absent) value of a switch or list.
fn is_default(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Refuse the keys of [`REFUSED`] present in `map` with a non-default value.
pub fn refuse_widening(doc: &Doc, map: &Map<String, Value>, at: &KeyPath) -> Result<()> {
    for (key, why) in REFUSED {
        if map.get(*key).is_some_and(|v| !is_default(v)) {
            return Err(doc.error(&at.key(key), format!("not supported: {why}")));
        }
    }
    Ok(())
}

/// Lists that a format requires (sandbox-runtime's schema requires its five lists).
pub fn require(doc: &Doc, map: &Map<String, Value>, at: &KeyPath, keys: &[&str]) -> Result<()> {
    match keys.iter().find(|k| !map.contains_key(**k)) {
        Some(k) => Err(doc.error(
            &at.key(k),
            "required by the sandbox-runtime format (write `[]` for none)",
        )),
        None => Ok(()),
    }
}

pub fn filesystem(
    doc: &mut Doc,
    fs: &Map<String, Value>,
    at: &KeyPath,
    ctx: &PathCtx,
    frag: &mut Fragment,
) -> Result<()> {
    refuse_widening(doc, fs, at)?;
    if let Some(v) = given(fs, "allowWrite") {
        let w_at = at.key("allowWrite");
        frag.read_write = path_list(doc, v, &w_at, ctx)?;
        if let Some(i) = frag.read_write.iter().position(|p| paths::is_root(p)) {
            return Err(doc.error(
                &w_at.index(i),
                "`/` cannot be writable (it would make the whole host writable)",
            ));
        }
    }
    if let Some(v) = given(fs, "denyWrite") {
        frag.deny_write = path_list(doc, v, &at.key("denyWrite"), ctx)?;
    }
    if let Some(v) = given(fs, "denyRead") {
        frag.deny_read = path_list(doc, v, &at.key("denyRead"), ctx)?;
    }
    if let Some(v) = given(fs, "mounts") {
        frag.mounts = crate::policy::mounts::read(
            doc,
            v,
            &at.key("mounts"),
            crate::policy::runtime::Style::Camel,
            Some((ctx.cwd, ctx.home)),
        )?;
    }
    Ok(())
}

pub fn network(
    doc: &mut Doc,
    net: &Map<String, Value>,
    at: &KeyPath,
    ctx: &PathCtx,
    frag: &mut Fragment,
) -> Result<()> {
    refuse_widening(doc, net, at)?;
    if let Some(v) = given(net, "allowedDomains") {
        frag.allowed_domains = domain_list(doc, v, &at.key("allowedDomains"), false)?;
    }
    if let Some(v) = given(net, "deniedDomains") {
        frag.denied_domains = domain_list(doc, v, &at.key("deniedDomains"), true)?;
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
    for key in ["strictAllowlist", "allowLocalBinding", "httpProxyDualStack"] {
        if let Some(v) = given(net, key) {
            doc.boolean(v, &at.key(key))?;
        }
    }
    if let Some(v) = given(net, "deniedDomainReasons") {
        let r_at = at.key("deniedDomainReasons");
        let reasons = doc.object(v, &r_at)?;
        for (k, v) in reasons {
            doc.string(v, &r_at.key(k))?;
        }
    }
    Ok(())
}

/// sandbox-runtime's `credentials`: files with `mode: deny` become unreadable; masking (a
/// placeholder in the file that the proxy swaps for the secret) and environment variables are
/// not supported and refused.
pub fn credentials(
    doc: &mut Doc,
    v: &Value,
    at: &KeyPath,
    ctx: &PathCtx,
    frag: &mut Fragment,
) -> Result<()> {
    let map = doc.object(v, at)?;
    for key in ["envVars", "awsPairs", "sigv4", "allowPlaintextInject"] {
        if map.get(key).is_some_and(|v| !is_default(v)) {
            return Err(doc.error(
                &at.key(key),
                "not supported in this format: the launcher's variables stay out of the sandbox unless passed (--env), and a credential the program may use only through the proxy is `--credential NAME=HOST` (or `credentials` in the `sandbox` object of agent settings)",
            ));
        }
    }
    let Some(files) = given(map, "files") else {
        return Ok(());
    };
    let f_at = at.key("files");
    for (i, file) in doc.list(files, &f_at)?.iter().enumerate() {
        let at = f_at.index(i);
        let entry = doc.object(file, &at)?;
        let mode_at = at.key("mode");
        let mode =
            given(entry, "mode").ok_or_else(|| doc.error(&mode_at, "required (deny or mask)"))?;
        if doc.choice(mode, &mode_at, &["deny", "mask"])? == "mask" {
            return Err(doc.error(
                &mode_at,
                "not supported: `mask` (a placeholder swapped for the secret by the proxy); use `deny`",
            ));
        }
        let p_at = at.key("path");
        let p = given(entry, "path").ok_or_else(|| doc.error(&p_at, "required"))?;
        let p = doc.string(p, &p_at)?;
        let path = paths::relaxed(p, ctx.cwd, ctx.home).map_err(|e| doc.error(&p_at, e))?;
        frag.deny_read.push(path);
    }
    Ok(())
}

/// `ignoreViolations`: which violations not to report; the sandbox enforces them all the same.
pub fn ignore_violations(doc: &Doc, v: &Value, at: &KeyPath) -> Result<()> {
    let map = doc.object(v, at)?;
    for (k, list) in map {
        doc.strings(list, &at.key(k))?;
    }
    Ok(())
}

fn path_list(doc: &Doc, v: &Value, at: &KeyPath, ctx: &PathCtx) -> Result<Vec<PathBuf>> {
    doc.strings(v, at)?
        .into_iter()
        .map(|(at, s)| paths::relaxed(s, ctx.cwd, ctx.home).map_err(|e| doc.error(&at, e)))
        .collect()
}

fn domain_list(doc: &Doc, v: &Value, at: &KeyPath, deny: bool) -> Result<Vec<String>> {
    doc.strings(v, at)?
        .into_iter()
        .map(|(at, s)| {
            let rule = if deny {
                hosts::denied_domain_rule(s)
            } else {
                hosts::domain_rule(s)
            };
            rule.map_err(|e| doc.error(&at, e))
        })
        .collect()
}
