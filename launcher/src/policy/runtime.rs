//! What the program runs with besides its filesystem and network: its environment. Read from
//! the same section in both file formats — top level in the OpenShell YAML, inside `sandbox` in
//! agent settings — and from the command line:
//!
//! ```yaml
//! environment:
//!   pass: [GITHUB_USER, CARGO_HOME]   # from the launcher's environment (--env NAME)
//!   set: {RUST_LOG: info}             # (--env NAME=VALUE)
//!   all: false                        # the launcher's whole environment (--env-all; warned)
//! ```
//!
//! Its keys are checked with the format's others (`openshell/keys.rs` `ENVIRONMENT`); a new key goes
//! there too.
//!
//! Merge: variables passed or set are grants — an untrusted project's are dropped, and the
//! highest layer's value of a variable set twice wins.

use std::fmt::Write;

use anyhow::Result;
use serde::Serialize;
use serde_json::{Map, Value};

use super::document::{given, Doc, KeyPath};
use super::merge::{describe_source, Layer, Role};
use super::model::{Policy, Source, Sourced};

/// A variable set to a value. The value is never printed (it may be a secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvSet {
    pub name: String,
    #[serde(skip)]
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct EnvPolicy {
    /// Passed from the launcher's environment.
    pub pass: Vec<Sourced<String>>,
    pub set: Vec<Sourced<EnvSet>>,
    /// The launcher's whole environment: who asked for it.
    pub all: Option<Source>,
}

/// The merged sections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Runtime {
    pub env: EnvPolicy,
}

/// What one source says.
#[derive(Debug, Clone, Default)]
pub struct RuntimeFragment {
    pub env_pass: Vec<String>,
    pub env_set: Vec<(String, String)>,
    pub env_all: bool,
}

impl RuntimeFragment {
    fn grants(&self) -> usize {
        self.env_pass.len() + self.env_set.len() + usize::from(self.env_all)
    }
}

/// How multi-word keys are spelt in a format.
#[derive(Clone, Copy)]
pub enum Style {
    /// OpenShell YAML: `tmp_size`.
    Snake,
    /// Agent settings JSON: `tmpSize`.
    Camel,
}

/// Read `environment` from `map` (at `at`) into `frag`.
pub fn read(
    doc: &mut Doc,
    map: &Map<String, Value>,
    at: &KeyPath,
    _style: Style,
    frag: &mut RuntimeFragment,
) -> Result<()> {
    if let Some(v) = given(map, "environment") {
        read_environment(doc, v, &at.key("environment"), frag)?;
    }
    Ok(())
}

/// A variable name as the environment takes it.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        Err(format!(
            "{name:?} is not a variable name (non-empty, without `=` or NUL)"
        ))
    } else {
        Ok(())
    }
}

fn read_environment(
    doc: &mut Doc,
    v: &Value,
    at: &KeyPath,
    frag: &mut RuntimeFragment,
) -> Result<()> {
    let map = doc.object(v, at)?;
    if let Some(v) = given(map, "pass") {
        for (at, name) in doc.strings(v, &at.key("pass"))? {
            check_name(name).map_err(|e| doc.error(&at, e))?;
            frag.env_pass.push(name.to_string());
        }
    }
    if let Some(v) = given(map, "set") {
        let set_at = at.key("set");
        let vars = v
            .as_object()
            .ok_or_else(|| doc.error(&set_at, "expected a mapping of NAME: VALUE"))?;
        for (name, value) in vars {
            let at = set_at.key(name);
            check_name(name).map_err(|e| doc.error(&at, e))?;
            let value = doc.string(value, &at).map_err(|_| {
                doc.error(&at, "expected a string value (quote numbers and booleans)")
            })?;
            frag.env_set.push((name.clone(), value.to_string()));
        }
    }
    if let Some(v) = given(map, "all") {
        frag.env_all = doc.boolean(v, &at.key("all"))?;
    }
    Ok(())
}

/// Fold every layer's sections into `p.runtime` (see the module documentation).
pub fn merge(layers: &[Layer], p: &mut Policy) -> Result<()> {
    let rt = &mut p.runtime;
    for l in layers {
        let f = &l.frag.runtime;
        let src = &l.frag.source;
        if let Role::Narrowing { hint } = &l.role {
            if f.grants() > 0 {
                p.warnings.push(format!(
                    "{}: {} environment grant(s) ignored: the project is not trusted, so its policy may only narrow; {hint}",
                    describe_source(src),
                    f.grants()
                ));
            }
            continue;
        }
        for name in &f.env_pass {
            if !rt.env.pass.iter().any(|s| &s.value == name) {
                rt.env.pass.push(Sourced::new(name.clone(), src.clone()));
            }
        }
        for (name, value) in &f.env_set {
            match rt.env.set.iter().find(|s| &s.value.name == name) {
                Some(kept) => p.warnings.push(format!(
                    "environment.set.{name} from {} is shadowed by the value from {}",
                    describe_source(src),
                    describe_source(&kept.source)
                )),
                None => rt.env.set.push(Sourced::new(
                    EnvSet {
                        name: name.clone(),
                        value: value.clone(),
                    },
                    src.clone(),
                )),
            }
        }
        if f.env_all && rt.env.all.is_none() {
            rt.env.all = Some(src.clone());
        }
    }
    Ok(())
}

/// The sections in words, for `sandbox-launch check`.
pub fn describe(out: &mut String, rt: &Runtime) {
    let env = &rt.env;
    match &env.all {
        Some(src) => {
            let _ = writeln!(
                out,
                "environment: the launcher's whole environment  [{}]",
                describe_source(src)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "environment: only {} (and the proxy's variables)",
                crate::environment::describe_allowlist()
            );
        }
    }
    for s in &env.pass {
        let _ = writeln!(out, "  pass {}  [{}]", s.value, describe_source(&s.source));
    }
    for s in &env.set {
        let _ = writeln!(
            out,
            "  set {}=(value not shown)  [{}]",
            s.value.name,
            describe_source(&s.source)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn read_yaml(text: &str) -> Result<RuntimeFragment> {
        let v: Value = serde_norway::from_str(text).unwrap();
        let mut doc = Doc::new(Path::new("p.yaml"));
        let mut f = RuntimeFragment::default();
        read(
            &mut doc,
            v.as_object().unwrap(),
            &KeyPath::root(""),
            Style::Snake,
            &mut f,
        )?;
        Ok(f)
    }

    #[test]
    fn the_section_parses() {
        let f = read_yaml("environment: {pass: [A, B], set: {C: 'x=y'}, all: true}\n").unwrap();
        assert_eq!(f.env_pass, vec!["A", "B"]);
        assert_eq!(f.env_set, vec![("C".to_string(), "x=y".to_string())]);
        assert!(f.env_all);
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = format!("{:#}", read_yaml("environment: {set: {A: 1}}").unwrap_err());
        assert!(
            e.contains("environment.set.A") && e.contains("quote"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            read_yaml("environment: {pass: ['A=B']}").unwrap_err()
        );
        assert!(e.contains("environment.pass[0]"), "{e}");
        let e = format!("{:#}", read_yaml("environment: {all: maybe}").unwrap_err());
        assert!(
            e.contains("environment.all") && e.contains("true or false"),
            "{e}"
        );
    }
}
