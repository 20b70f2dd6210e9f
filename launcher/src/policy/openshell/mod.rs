//! The OpenShell policy YAML (`--policy FILE`, `policy.yaml` in the org/project/user dirs).
//!
//! ```yaml
//! version: 1
//! filesystem_policy: {include_workdir: true, read_only: [/usr], read_write: [/tmp]}
//! landlock: {compatibility: best_effort}          # or hard_requirement
//! process: {run_as_user: sandbox, run_as_group: sandbox}
//! network_policies:
//!   github:
//!     name: github-rest-api
//!     endpoints: [{host: api.github.com, port: 443, protocol: rest, access: read-only}]
//!     binaries: [{path: /usr/bin/gh}]
//! ```
//!
//! Every key is checked while the file is parsed (`keys`): an unknown key anywhere is an error
//! that names it and its line, as OpenShell's own loader refuses it. Validation follows the
//! format's reference and OpenShell's validator: `version` must be 1; filesystem paths absolute,
//! without `..`, at most 4096 bytes, at most 256 of them, `/` never writable; no root identity;
//! network entries as `network` and `http_rules` describe. A key OpenShell knows but
//! sandbox-launch does not implement is refused with the reason, never ignored. A
//! `filesystem_policy` switches to allow-list semantics (`FsMode::AllowListOnly`).

mod http_rules;
mod keys;
pub use keys::ENVIRONMENT;
mod network;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Map, Value};

use super::document::{given, Doc, KeyPath};
use super::fragment::Fragment;
use super::model::{FsMode, LandlockCompat, Source};
use super::{paths, shape};

/// The most paths `read_only` and `read_write` may list together.
pub const MAX_FS_PATHS: usize = 256;

/// Read and parse the policy file at `file`.
pub fn load(file: &Path, source: Source) -> Result<Fragment> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read policy file {}", file.display()))?;
    parse(&text, file, source)
}

/// Parse policy YAML; `file` is only used in messages.
pub fn parse(text: &str, file: &Path, source: Source) -> Result<Fragment> {
    // Syntax errors and unknown keys both read `FILE: [KEY PATH: ]WHAT at line L column C`.
    let root =
        shape::yaml(text, &keys::POLICY).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let mut doc = Doc::new(file);
    let mut frag = Fragment::new(source);
    let top = KeyPath::root("");
    if root.is_null() {
        return Err(doc.error(
            &top,
            "the file is empty (a policy needs at least `version: 1`)",
        ));
    }
    let map = doc.object(&root, &top)?;
    version(&doc, map)?;
    if given(map, "network_middlewares").is_some() {
        return Err(doc.error(
            &KeyPath::root("network_middlewares"),
            "OpenShell's request middlewares are not supported by sandbox-launch; remove the section (its rules would not run)",
        ));
    }
    if let Some(v) = given(map, "filesystem_policy") {
        filesystem(&mut doc, v, &mut frag)?;
    }
    if let Some(v) = given(map, "landlock") {
        frag.landlock = Some(landlock(&mut doc, v)?);
    }
    if let Some(v) = given(map, "process") {
        process(&mut doc, v, &mut frag)?;
    }
    if let Some(v) = given(map, "network_policies") {
        frag.rules = network::policies(&mut doc, v)?;
    }
    if let Some(v) = given(map, "mounts") {
        frag.mounts = crate::policy::mounts::read(
            &doc,
            v,
            &KeyPath::root("mounts"),
            super::runtime::Style::Snake,
            None,
        )?;
    }
    super::runtime::read(
        &mut doc,
        map,
        &top,
        super::runtime::Style::Snake,
        &mut frag.runtime,
    )?;
    frag.warnings = doc.warnings;
    Ok(frag)
}

fn version(doc: &Doc, map: &Map<String, Value>) -> Result<()> {
    let at = KeyPath::root("version");
    match given(map, "version") {
        None => Err(doc.error(&at, "required (this format has `version: 1`)")),
        Some(v) if v.as_u64() == Some(1) => Ok(()),
        Some(v) => Err(doc.error(&at, format!("{v} is not supported (allowed: 1)"))),
    }
}

fn filesystem(doc: &mut Doc, v: &Value, frag: &mut Fragment) -> Result<()> {
    let at = KeyPath::root("filesystem_policy");
    let map = doc.object(v, &at)?;
    frag.fs_mode = Some(FsMode::AllowListOnly);
    if let Some(v) = given(map, "include_workdir") {
        frag.include_workdir = Some(doc.boolean(v, &at.key("include_workdir"))?);
    }
    let null = Value::Null;
    frag.read_only = path_list(
        doc,
        map.get("read_only").unwrap_or(&null),
        &at.key("read_only"),
    )?;
    let rw_at = at.key("read_write");
    frag.read_write = path_list(doc, map.get("read_write").unwrap_or(&null), &rw_at)?;
    if let Some(i) = frag.read_write.iter().position(|p| paths::is_root(p)) {
        return Err(doc.error(
            &rw_at.index(i),
            "`/` cannot be read-write (it would make the whole host writable); list the directories that need writing",
        ));
    }
    let total = frag.read_only.len() + frag.read_write.len();
    if total > MAX_FS_PATHS {
        return Err(doc.error(
            &at,
            format!("{total} paths in read_only and read_write; the limit is {MAX_FS_PATHS}"),
        ));
    }
    Ok(())
}

fn path_list(doc: &Doc, v: &Value, at: &KeyPath) -> Result<Vec<PathBuf>> {
    doc.strings(v, at)?
        .into_iter()
        .map(|(at, s)| paths::openshell(s).map_err(|e| doc.error(&at, e)))
        .collect()
}

fn landlock(doc: &mut Doc, v: &Value) -> Result<LandlockCompat> {
    let at = KeyPath::root("landlock");
    let map = doc.object(v, &at)?;
    match given(map, "compatibility") {
        None => Ok(LandlockCompat::default()),
        Some(v) => match doc.choice(
            v,
            &at.key("compatibility"),
            &["hard_requirement", "best_effort"],
        )? {
            "best_effort" => Ok(LandlockCompat::BestEffort),
            _ => Ok(LandlockCompat::HardRequirement),
        },
    }
}

fn process(doc: &mut Doc, v: &Value, frag: &mut Fragment) -> Result<()> {
    let at = KeyPath::root("process");
    let map = doc.object(v, &at)?;
    if let Some(v) = given(map, "run_as_user") {
        frag.run_as_user = Some(identity(doc, v, &at.key("run_as_user"))?);
    }
    if let Some(v) = given(map, "run_as_group") {
        frag.run_as_group = Some(identity(doc, v, &at.key("run_as_group"))?);
    }
    Ok(())
}

/// A user or group name, or a numeric id; never root.
fn identity(doc: &Doc, v: &Value, at: &KeyPath) -> Result<String> {
    let s = match v {
        Value::Number(n) => n.to_string(),
        _ => doc.string(v, at)?.to_string(),
    };
    if s == "root" || s.parse::<u64>() == Ok(0) {
        return Err(doc.error(
            at,
            "the sandbox never runs as root (name an unprivileged user or group)",
        ));
    }
    let ok = !s.is_empty()
        && s.len() <= 32
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'));
    if !ok {
        return Err(doc.error(at, format!("{s:?} is not a user/group name or numeric id")));
    }
    if let Ok(n) = s.parse::<u64>() {
        if n >= u64::from(u32::MAX) {
            return Err(doc.error(at, format!("{n} is not a valid id")));
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests;
