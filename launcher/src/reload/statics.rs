//! What a reload may not change: every section of a policy file but its network rules. The
//! static sections (OpenShell's `filesystem_policy`, `landlock`, `process`, and this project's
//! `environment`, `limits`, `credentials`; in settings JSON everything but `network`'s domain
//! lists) are fixed when the sandbox is built — mounts, Landlock, identity and environment
//! cannot be redone under a running program. They are compared as written, key by key, with
//! what the file given at launch said (nothing, when none was given).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};

/// The two kinds of file `policy set` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// OpenShell policy YAML (the `--policy` layer).
    Policy,
    /// Settings JSON (the `--settings` layer).
    Settings,
}

/// By its name (`.yaml`/`.yml`, `.json`/`.jsonc`), else by its first character (`{`: JSON).
pub fn kind_of(file: &Path, text: &str) -> Kind {
    match file.extension().and_then(|e| e.to_str()) {
        Some("yaml" | "yml") => Kind::Policy,
        Some("json" | "jsonc") => Kind::Settings,
        _ if text.trim_start().starts_with('{') => Kind::Settings,
        _ => Kind::Policy,
    }
}

/// The static sections of a file, by the key path they are written at.
pub type Statics = BTreeMap<String, Value>;

/// Keys of settings' `network` that a reload may change.
const DYNAMIC_NETWORK: &[&str] = &["allowedDomains", "deniedDomains", "deniedDomainReasons"];

pub fn static_part(kind: Kind, file: &Path, text: &str) -> Result<Statics> {
    let mut out = Statics::new();
    match kind {
        Kind::Policy => {
            let doc: Value = serde_norway::from_str(text)
                .with_context(|| format!("{}: not valid YAML", file.display()))?;
            for (k, v) in object(&doc) {
                if k != "version" && k != "network_policies" {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        Kind::Settings => {
            let doc: Value = serde_json::from_str(&crate::policy::jsonc::strip(text))
                .with_context(|| format!("{}: not valid JSON", file.display()))?;
            let (prefix, top) = match doc.get("sandbox") {
                Some(sandbox) => ("sandbox.", sandbox),
                None => ("", &doc),
            };
            for (k, v) in object(top) {
                if k != "network" {
                    out.insert(format!("{prefix}{k}"), v.clone());
                    continue;
                }
                for (nk, nv) in object(&v) {
                    if !DYNAMIC_NETWORK.contains(&nk.as_str()) {
                        out.insert(format!("{prefix}network.{nk}"), nv.clone());
                    }
                }
            }
        }
    }
    Ok(out)
}

fn object(v: &Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// Refuse a file whose static sections differ from those of the launch, naming them.
pub fn check_unchanged(file: &Path, new: &Statics, launch: &Statics) -> Result<()> {
    let changed: Vec<&str> = new
        .keys()
        .chain(launch.keys())
        .filter(|k| new.get(*k) != launch.get(*k))
        .map(String::as_str)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !changed.is_empty() {
        bail!(
            "{}: refused: it changes {} — fixed when the sandbox was built; only network rules \
             (network_policies, allowedDomains, deniedDomains) change on a running sandbox. \
             Restart the sandbox for the rest, or leave {} as at launch",
            file.display(),
            changed.join(", "),
            if changed.len() == 1 { "it" } else { "them" },
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statics(kind: Kind, text: &str) -> Statics {
        static_part(kind, Path::new("f"), text).unwrap()
    }

    #[test]
    fn only_network_rules_are_dynamic_in_yaml() {
        let launch = statics(
            Kind::Policy,
            "version: 1\nlandlock: {compatibility: best_effort}\nnetwork_policies: {a: {endpoints: [], binaries: []}}\n",
        );
        let wider = statics(
            Kind::Policy,
            "version: 1\nlandlock: {compatibility: best_effort}\nnetwork_policies: {b: {endpoints: [], binaries: []}}\n",
        );
        check_unchanged(Path::new("new.yaml"), &wider, &launch).unwrap();
        let more_fs = statics(
            Kind::Policy,
            "version: 1\nlandlock: {compatibility: best_effort}\nfilesystem_policy: {read_write: [/x]}\n",
        );
        let e = check_unchanged(Path::new("new.yaml"), &more_fs, &launch).unwrap_err();
        assert!(e.to_string().contains("changes filesystem_policy"), "{e}");
        let e = check_unchanged(Path::new("n"), &Statics::new(), &launch).unwrap_err();
        assert!(e.to_string().contains("landlock"), "{e}");
    }

    #[test]
    fn settings_may_change_their_domain_lists_only() {
        let launch = statics(
            Kind::Settings,
            r#"{"sandbox": {"network": {"allowedDomains": ["a.test"], "mode": "restricted"}}}"#,
        );
        let ok = statics(
            Kind::Settings,
            r#"{"sandbox": {"network": {"allowedDomains": ["b.test"], "deniedDomains": ["c.test"], "mode": "restricted"}}} // new"#,
        );
        check_unchanged(Path::new("s.json"), &ok, &launch).unwrap();
        let full = statics(
            Kind::Settings,
            r#"{"sandbox": {"network": {"mode": "full"}, "filesystem": {"allowWrite": ["/"]}}}"#,
        );
        let e = check_unchanged(Path::new("s.json"), &full, &launch).unwrap_err();
        assert!(
            e.to_string()
                .contains("changes sandbox.filesystem, sandbox.network.mode"),
            "{e}"
        );
    }

    #[test]
    fn the_kind_comes_from_the_name_or_the_first_character() {
        assert_eq!(kind_of(Path::new("p.yaml"), "{}"), Kind::Policy);
        assert_eq!(kind_of(Path::new("s.json"), "version: 1"), Kind::Settings);
        assert_eq!(kind_of(Path::new("x"), "  {\"a\": 1}"), Kind::Settings);
        assert_eq!(kind_of(Path::new("x"), "version: 1"), Kind::Policy);
    }
}
