//! Settings JSON (`--settings FILE`, `settings.json` in the org/project/user dirs), in either of
//! two formats, told apart by their top level:
//!
//! * **agent settings** (Droid, Claude Code): the `sandbox` object of the agent's settings file;
//!   the file's other top-level keys belong to the agent and are not looked at;
//! * **sandbox-runtime settings** (Anthropic's `srt`): `network` and `filesystem` at the top,
//!   with the lists its schema requires (`allowedDomains`, `deniedDomains`, `denyRead`,
//!   `allowWrite`, `denyWrite`).
//!
//! A file with neither is an error (a misspelt `sandbx` must not turn a deny list into no
//! policy), as is a file with both. Comments and trailing commas are accepted. Every key is
//! checked while the file is parsed (`keys`): an unknown key is an error naming it and its line.
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
//! relative paths are relative to the working directory; domains follow sandbox-runtime's
//! grammar (`hosts::domain_rule`). What each further key does is in `sandbox.rs`.

mod keys;
mod sandbox;

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use serde_json::{Map, Value};

use super::document::{given, Doc, KeyPath};
use super::fragment::Fragment;
use super::model::Source;
use super::{jsonc, shape};

/// The two formats a settings file may be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Agent,
    Runtime,
}

/// Read and parse the settings file at `file`.
pub fn load(file: &Path, source: Source, cwd: &Path, home: &Path) -> Result<Fragment> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read settings file {}", file.display()))?;
    parse(&text, file, source, cwd, home)
}

/// Parse settings JSON; `file` is only used in messages.
pub fn parse(text: &str, file: &Path, source: Source, cwd: &Path, home: &Path) -> Result<Fragment> {
    let plain = jsonc::strip(text);
    let probe: Value = serde_json::from_str(&plain)
        .with_context(|| format!("{}: not valid settings JSON", file.display()))?;
    let mut doc = Doc::new(file);
    let top = KeyPath::root("");
    let Some(top_map) = probe.as_object() else {
        return Err(doc.error(&top, "expected a JSON object"));
    };
    let format = format(&doc, top_map)?;
    let shape = match format {
        Format::Agent => &keys::AGENT,
        Format::Runtime => &keys::RUNTIME,
    };
    let root = shape::json(&plain, shape).map_err(|e| anyhow!("{}: {e}", file.display()))?;
    let root = root.as_object().cloned().unwrap_or_default();
    let mut frag = Fragment::new(source);
    let ctx = PathCtx { cwd, home };
    match format {
        Format::Agent => {
            let sandbox = given(&root, "sandbox").unwrap_or(&Value::Null);
            read_agent(&mut doc, sandbox, &ctx, &mut frag)?;
        }
        Format::Runtime => read_runtime(&mut doc, &root, &ctx, &mut frag)?,
    }
    frag.warnings = doc.warnings;
    Ok(frag)
}

/// The top-level keys that decide the format.
const FORMAT_KEYS: [&str; 3] = ["sandbox", "network", "filesystem"];

/// A top-level key that looks like a misspelt format key (`sandbx`, `Sandbox`), with a note
/// saying so; the file's other keys are the agent's own and are not looked at. `alike` says how
/// alike counts.
fn misspelt(top: &Map<String, Value>, alike: fn(&str, &str) -> bool) -> Option<String> {
    top.keys()
        .filter(|k| !FORMAT_KEYS.contains(&k.as_str()))
        .find_map(|k| {
            FORMAT_KEYS
                .into_iter()
                .find(|known| alike(k, known))
                .map(|known| format!("`{k}` looks like a misspelt `{known}`"))
        })
}

/// Which format the top level is in; neither, or both, is an error, and so is a key that looks
/// like a misspelt format key (next to the right one it would silently take its rules away).
fn format(doc: &Doc, top: &Map<String, Value>) -> Result<Format> {
    let agent = top.contains_key("sandbox");
    let runtime = top.contains_key("network") || top.contains_key("filesystem");
    // Next to a format key, only a near certain typo: the agent's own keys may look similar.
    let typo = || misspelt(top, shape::looks_much_like);
    if let (true, Some(note)) = (agent || runtime, typo()) {
        return Err(doc.error(
            &KeyPath::root(""),
            format!(
                "{note}; its rules would be ignored, so the file is refused (rename or remove it)"
            ),
        ));
    }
    match (agent, runtime) {
        (true, false) => Ok(Format::Agent),
        (false, true) => Ok(Format::Runtime),
        (true, true) => Err(doc.error(
            &KeyPath::root(""),
            "has both a `sandbox` object (agent settings) and top-level `network`/`filesystem` (sandbox-runtime settings); keep one format per file",
        )),
        (false, false) => {
            let meant = misspelt(top, shape::looks_like).map(|note| format!(" ({note})"));
            Err(doc.error(
                &KeyPath::root(""),
                format!(
                    "no `sandbox` object (agent settings) and no top-level `network` or `filesystem` (sandbox-runtime settings){}; the file would enforce nothing, so it is refused",
                    meant.unwrap_or_default()
                ),
            ))
        }
    }
}

pub(crate) struct PathCtx<'a> {
    pub(crate) cwd: &'a Path,
    pub(crate) home: &'a Path,
}

fn read_agent(doc: &mut Doc, v: &Value, ctx: &PathCtx, frag: &mut Fragment) -> Result<()> {
    let at = KeyPath::root("sandbox");
    let map = doc.object(v, &at)?;
    sandbox::refuse_widening(doc, map, &at)?;
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
    if let Some(v) = given(map, "prompts") {
        frag.prompts = Some(doc.boolean(v, &at.key("prompts"))?);
    }
    if let Some(v) = given(map, "excludedCommands") {
        let x_at = at.key("excludedCommands");
        if !doc.strings(v, &x_at)?.is_empty() {
            doc.warn(
                &x_at,
                "has no effect: under sandbox-launch every command runs inside the sandbox",
            );
        }
    }
    for key in [
        "allowUnsandboxedCommands",
        "autoAllowBashIfSandboxed",
        "enableWeakerNetworkIsolation",
    ] {
        if let Some(v) = given(map, key) {
            doc.boolean(v, &at.key(key))?;
        }
    }
    if let Some(v) = given(map, "ignoreViolations") {
        sandbox::ignore_violations(doc, v, &at.key("ignoreViolations"))?;
    }
    if let Some(v) = given(map, "filesystem") {
        let f_at = at.key("filesystem");
        let fs = doc.object(v, &f_at)?;
        sandbox::filesystem(doc, fs, &f_at, ctx, frag)?;
    }
    if let Some(v) = given(map, "network") {
        let n_at = at.key("network");
        let net = doc.object(v, &n_at)?;
        sandbox::network(doc, net, &n_at, ctx, frag)?;
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

fn read_runtime(
    doc: &mut Doc,
    top: &Map<String, Value>,
    ctx: &PathCtx,
    frag: &mut Fragment,
) -> Result<()> {
    let root = KeyPath::root("");
    sandbox::require(doc, top, &root, &["network", "filesystem"])?;
    sandbox::refuse_widening(doc, top, &root)?;
    let n_at = KeyPath::root("network");
    let net = doc.object(&top["network"], &n_at)?;
    sandbox::require(doc, net, &n_at, &["allowedDomains", "deniedDomains"])?;
    sandbox::network(doc, net, &n_at, ctx, frag)?;
    let f_at = KeyPath::root("filesystem");
    let fs = doc.object(&top["filesystem"], &f_at)?;
    sandbox::require(doc, fs, &f_at, &["denyRead", "allowWrite", "denyWrite"])?;
    sandbox::filesystem(doc, fs, &f_at, ctx, frag)?;
    if let Some(v) = given(top, "credentials") {
        sandbox::credentials(doc, v, &KeyPath::root("credentials"), ctx, frag)?;
    }
    if let Some(v) = given(top, "ignoreViolations") {
        sandbox::ignore_violations(doc, v, &KeyPath::root("ignoreViolations"))?;
    }
    for key in [
        "enableWeakerNetworkIsolation",
        "allowAppleEvents",
        "allowPty",
    ] {
        if let Some(v) = given(top, key) {
            doc.boolean(v, &KeyPath::root(key))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
