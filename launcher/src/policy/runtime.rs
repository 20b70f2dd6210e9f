//! What the program runs with besides its filesystem and network: its environment and its
//! resource limits. Read from the same sections in both file formats — top level in the
//! OpenShell YAML, inside `sandbox` in agent settings — and from the command line:
//!
//! ```yaml
//! environment:
//!   pass: [GITHUB_USER, CARGO_HOME]   # from the launcher's environment (--env NAME)
//!   set: {RUST_LOG: info}             # (--env NAME=VALUE)
//!   all: false                        # the launcher's whole environment (--env-all; warned)
//! limits:
//!   timeout: 30m                      # --timeout
//!   memory: 4G                        # --memory
//!   pids: 512                         # --pids
//!   cpus: 1.5                         # --cpus
//!   tmp_size: 1G                      # --tmp-size (`tmpSize` in settings JSON)
//!   rlimits: {nofile: "1024:4096", core: 0}   # --rlimit NAME=SOFT[:HARD]
//!   compatibility: hard_requirement   # or best_effort: start without a limit the host cannot apply (reported)
//! ```
//!
//! Their keys are checked with the format's others (`openshell/keys.rs` `ENVIRONMENT`, and
//! [`LIMITS_YAML`]/[`LIMITS_JSON`] here); a new key goes there too.
//!
//! Merge: variables passed or set are grants — an untrusted project's are dropped, and the
//! highest layer's value of a variable set twice wins. Limits only narrow, so every layer's
//! count, the untrusted project's included: the smallest value of each wins. `compatibility`
//! is a single value like Landlock's (the org's `hard_requirement` cannot be widened).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use serde_json::{Map, Value};

use super::document::{given, Doc, KeyPath};
use super::merge::{decide, describe_source, Layer, Role};
use super::model::{Policy, Source, Sourced};
use super::shape::{Field, Shape};
use crate::limits::{quantity, rlimit};

/// The keys of `limits` in the OpenShell YAML.
pub const LIMITS_YAML: Shape = Shape::Fields(&[
    Field::value("timeout"),
    Field::value("memory"),
    Field::value("pids"),
    Field::value("cpus"),
    Field::value("tmp_size"),
    Field::new("rlimits", Shape::Named(&Shape::Value)),
    Field::value("compatibility"),
]);

/// The keys of `limits` in settings JSON (`tmpSize`, as the format spells keys).
pub const LIMITS_JSON: Shape = Shape::Fields(&[
    Field::value("timeout"),
    Field::value("memory"),
    Field::value("pids"),
    Field::value("cpus"),
    Field::value("tmpSize"),
    Field::new("rlimits", Shape::Named(&Shape::Value)),
    Field::value("compatibility"),
]);

/// Whether a limit the host cannot apply stops the launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LimitsCompat {
    #[default]
    HardRequirement,
    BestEffort,
}

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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct LimitsPolicy {
    pub timeout: Option<Sourced<Duration>>,
    /// Bytes.
    pub memory: Option<Sourced<u64>>,
    pub pids: Option<Sourced<u64>>,
    /// Thousandths of a CPU.
    pub cpus: Option<Sourced<u64>>,
    /// Bytes, for each of /tmp and /dev/shm.
    pub tmp_size: Option<Sourced<u64>>,
    pub rlimits: BTreeMap<String, Sourced<rlimit::Value>>,
    pub compat: LimitsCompat,
    pub compat_origin: Option<Source>,
}

/// The merged sections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Runtime {
    pub env: EnvPolicy,
    pub limits: LimitsPolicy,
    /// See `policy::credentials`.
    pub credentials: Vec<Sourced<super::credentials::CredentialSpec>>,
}

/// What one source says.
#[derive(Debug, Clone, Default)]
pub struct RuntimeFragment {
    pub env_pass: Vec<String>,
    pub env_set: Vec<(String, String)>,
    pub env_all: bool,
    pub timeout: Option<Duration>,
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    pub cpus: Option<u64>,
    pub tmp_size: Option<u64>,
    pub rlimits: Vec<(String, rlimit::Value)>,
    pub limits_compat: Option<LimitsCompat>,
    /// NAME and the hosts its value may go to (see `policy::credentials`).
    pub credentials: Vec<(String, Vec<String>)>,
}

impl RuntimeFragment {
    fn grants(&self) -> usize {
        self.env_pass.len()
            + self.env_set.len()
            + usize::from(self.env_all)
            + self.credentials.len()
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

/// Read `environment` and `limits` from `map` (at `at`) into `frag`.
pub fn read(
    doc: &mut Doc,
    map: &Map<String, Value>,
    at: &KeyPath,
    style: Style,
    frag: &mut RuntimeFragment,
) -> Result<()> {
    if let Some(v) = given(map, "environment") {
        read_environment(doc, v, &at.key("environment"), frag)?;
    }
    if let Some(v) = given(map, "limits") {
        read_limits(doc, v, &at.key("limits"), style, frag)?;
    }
    if let Some(v) = given(map, "credentials") {
        frag.credentials = super::credentials::read(doc, v, &at.key("credentials"))?;
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

fn read_limits(
    doc: &mut Doc,
    v: &Value,
    at: &KeyPath,
    style: Style,
    frag: &mut RuntimeFragment,
) -> Result<()> {
    let tmp_key = match style {
        Style::Snake => "tmp_size",
        Style::Camel => "tmpSize",
    };
    let map = doc.object(v, at)?;
    let text = |doc: &Doc, key: &str| -> Result<Option<(KeyPath, String)>> {
        let at = at.key(key);
        match given(map, key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some((at, s.clone()))),
            Some(Value::Number(n)) => Ok(Some((at, n.to_string()))),
            Some(_) => Err(doc.error(&at, "expected a number or a string such as \"2G\"")),
        }
    };
    let parse = |doc: &Doc, key: &str, f: fn(&str) -> Result<u64, String>| {
        text(doc, key)?
            .map(|(at, t)| f(&t).map_err(|e| doc.error(&at, e)))
            .transpose()
    };
    if let Some((k_at, t)) = text(doc, "timeout")? {
        frag.timeout = Some(quantity::duration(&t).map_err(|e| doc.error(&k_at, e))?);
    }
    frag.memory = parse(doc, "memory", quantity::size)?;
    frag.pids = parse(doc, "pids", quantity::count)?;
    frag.cpus = parse(doc, "cpus", quantity::cpus)?;
    frag.tmp_size = parse(doc, tmp_key, quantity::size)?;
    if let Some(v) = given(map, "rlimits") {
        let r_at = at.key("rlimits");
        let list = v
            .as_object()
            .ok_or_else(|| doc.error(&r_at, "expected a mapping of NAME: SOFT[:HARD]"))?;
        for (name, value) in list {
            let at = r_at.key(name);
            let t = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(doc.error(&at, "expected SOFT[:HARD], e.g. \"1024:4096\"")),
            };
            let v = rlimit::parse_value(name, &t).map_err(|e| doc.error(&at, e))?;
            frag.rlimits.push((name.to_ascii_lowercase(), v));
        }
    }
    if let Some(v) = given(map, "compatibility") {
        let c = doc.choice(
            v,
            &at.key("compatibility"),
            &["hard_requirement", "best_effort"],
        )?;
        frag.limits_compat = Some(if c == "best_effort" {
            LimitsCompat::BestEffort
        } else {
            LimitsCompat::HardRequirement
        });
    }
    Ok(())
}

/// Fold every layer's sections into `p.runtime` (see the module documentation).
pub fn merge(layers: &[Layer], p: &mut Policy) -> Result<()> {
    let rt = &mut p.runtime;
    for l in layers {
        let f = &l.frag.runtime;
        let src = &l.frag.source;
        narrow(&mut rt.limits.timeout, f.timeout, src);
        narrow(&mut rt.limits.memory, f.memory, src);
        narrow(&mut rt.limits.pids, f.pids, src);
        narrow(&mut rt.limits.cpus, f.cpus, src);
        narrow(&mut rt.limits.tmp_size, f.tmp_size, src);
        for (name, v) in &f.rlimits {
            match rt.limits.rlimits.get_mut(name) {
                Some(kept) => {
                    kept.value.soft = kept.value.soft.min(v.soft);
                    kept.value.hard = kept.value.hard.min(v.hard);
                }
                None => {
                    rt.limits
                        .rlimits
                        .insert(name.clone(), Sourced::new(*v, src.clone()));
                }
            }
        }
        if let Role::Narrowing { hint } = &l.role {
            if f.grants() > 0 {
                p.warnings.push(format!(
                    "{}: {} environment or credential grant(s) ignored: the project is not trusted, so its policy may only narrow; {hint}",
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
    super::credentials::merge(layers, p);
    let compat = decide(
        layers,
        "limits.compatibility",
        |f| f.runtime.limits_compat,
        |c| u8::from(*c == LimitsCompat::BestEffort),
        |c| show_compat(*c).to_string(),
        &mut p.warnings,
    )?;
    // An untrusted project may make limits stricter, never let them go unapplied.
    let untrusted = |src: &Source| {
        layers
            .iter()
            .any(|l| &l.frag.source == src && matches!(l.role, Role::Narrowing { .. }))
    };
    match compat {
        Some((LimitsCompat::BestEffort, src)) if untrusted(&src) => {}
        Some((c, src)) => {
            p.runtime.limits.compat = c;
            p.runtime.limits.compat_origin = Some(src);
        }
        None => {}
    }
    Ok(())
}

/// Keep the smaller of two limits (the higher layer's on a tie).
fn narrow<T: Ord + Copy>(kept: &mut Option<Sourced<T>>, new: Option<T>, src: &Source) {
    if let Some(v) = new {
        match kept {
            Some(k) if k.value <= v => {}
            _ => *kept = Some(Sourced::new(v, src.clone())),
        }
    }
}

pub fn show_compat(c: LimitsCompat) -> &'static str {
    match c {
        LimitsCompat::HardRequirement => "hard_requirement",
        LimitsCompat::BestEffort => "best_effort",
    }
}

/// The sections in words, for `sandbox-launch check`.
pub fn describe(out: &mut String, rt: &Runtime) {
    super::credentials::describe(out, &rt.credentials);
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
    let l = &rt.limits;
    let _ = writeln!(out, "\nlimits:");
    let line = |out: &mut String, what: &str, v: Option<(String, &Source)>| {
        let _ = match v {
            Some((v, src)) => writeln!(out, "  {what}: {v}  [{}]", describe_source(src)),
            None => writeln!(out, "  {what}: none"),
        };
    };
    fn show(s: &Option<Sourced<u64>>, f: fn(u64) -> String) -> Option<(String, &Source)> {
        s.as_ref().map(|s| (f(s.value), &s.source))
    }
    line(
        out,
        "timeout",
        l.timeout
            .as_ref()
            .map(|s| (quantity::show_duration(s.value), &s.source)),
    );
    line(out, "memory", show(&l.memory, quantity::show_size));
    line(out, "pids", show(&l.pids, |n| n.to_string()));
    line(out, "cpus", show(&l.cpus, quantity::show_cpus));
    match &l.tmp_size {
        Some(s) => line(
            out,
            "/tmp and /dev/shm size",
            Some((quantity::show_size(s.value), &s.source)),
        ),
        None => {
            let _ = writeln!(
                out,
                "  /tmp and /dev/shm size: a quarter of the RAM (half of --memory if smaller)"
            );
        }
    }
    for (name, v) in &l.rlimits {
        let _ = writeln!(
            out,
            "  rlimit {}  [{}]",
            rlimit::describe(name, v.value),
            describe_source(&v.source)
        );
    }
    if !l.rlimits.contains_key("core") {
        let _ = writeln!(out, "  rlimit core=0 (no core files)  [built-in default]");
    }
    let _ = writeln!(
        out,
        "  compatibility: {}  [{}]\n",
        show_compat(l.compat),
        l.compat_origin
            .as_ref()
            .map(describe_source)
            .unwrap_or_else(|| "built-in default".into())
    );
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
    fn both_sections_parse_with_units() {
        let f = read_yaml(
            "environment: {pass: [A, B], set: {C: 'x=y'}, all: false}\n\
             limits: {timeout: 1h, memory: 2G, pids: 100, cpus: 1.5, tmp_size: 512M,\n\
             \x20 rlimits: {nofile: '64:128', core: 0}, compatibility: best_effort}\n",
        )
        .unwrap();
        assert_eq!(f.env_pass, vec!["A", "B"]);
        assert_eq!(f.env_set, vec![("C".to_string(), "x=y".to_string())]);
        assert_eq!(f.timeout, Some(Duration::from_secs(3600)));
        assert_eq!(f.memory, Some(2 << 30));
        assert_eq!(f.pids, Some(100));
        assert_eq!(f.cpus, Some(1500));
        assert_eq!(f.tmp_size, Some(512 << 20));
        assert_eq!(f.rlimits.len(), 2);
        assert_eq!(f.limits_compat, Some(LimitsCompat::BestEffort));
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = format!("{:#}", read_yaml("limits: {memory: lots}").unwrap_err());
        assert!(
            e.contains("limits.memory") && e.contains("not a size"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            read_yaml("limits: {rlimits: {files: 3}}").unwrap_err()
        );
        assert!(e.contains("limits.rlimits.files"), "{e}");
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

    #[test]
    fn an_unknown_limits_key_stops_the_load_in_both_formats() {
        let file = Path::new("p.yaml");
        let e = super::super::openshell::parse(
            "version: 1\nlimits: {memroy: 1G}\n",
            file,
            Source::PolicyFile(file.into()),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("memroy"), "{e:#}");
        let f = super::super::openshell::parse(
            "version: 1\nlimits: {tmp_size: 1G, rlimits: {nofile: 10}}\n",
            file,
            Source::PolicyFile(file.into()),
        )
        .unwrap();
        assert_eq!(f.runtime.tmp_size, Some(1 << 30));
        let settings = Path::new("s.json");
        let e = super::super::agent_settings::parse(
            r#"{"sandbox": {"limits": {"tmp_size": "1G"}}}"#,
            settings,
            Source::SettingsFile(settings.into()),
            Path::new("/w"),
            Path::new("/h"),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("tmp_size"), "{e:#}");
    }

    fn layer(source: Source, role: Role, rt: RuntimeFragment) -> Layer {
        let mut frag = super::super::fragment::Fragment::new(source);
        frag.runtime = rt;
        Layer { frag, role }
    }

    #[test]
    fn the_smallest_limit_of_any_layer_wins_and_untrusted_grants_are_dropped() {
        let flags = RuntimeFragment {
            memory: Some(4 << 30),
            pids: Some(500),
            rlimits: vec![(
                "nofile".into(),
                rlimit::Value {
                    soft: 100,
                    hard: 1000,
                },
            )],
            env_pass: vec!["A".into()],
            ..Default::default()
        };
        let project = RuntimeFragment {
            memory: Some(1 << 30),
            rlimits: vec![(
                "nofile".into(),
                rlimit::Value {
                    soft: 200,
                    hard: 300,
                },
            )],
            env_pass: vec!["AWS_SECRET_ACCESS_KEY".into()],
            env_all: true,
            limits_compat: Some(LimitsCompat::BestEffort),
            ..Default::default()
        };
        let layers = [
            layer(Source::CommandLine, Role::Grants { explicit: true }, flags),
            layer(
                Source::Project("p".into()),
                Role::Narrowing {
                    hint: "trust it".into(),
                },
                project,
            ),
        ];
        let p = super::super::merge::merge(&layers).unwrap();
        let l = &p.runtime.limits;
        assert_eq!(l.memory.as_ref().unwrap().value, 1 << 30);
        assert_eq!(
            l.memory.as_ref().unwrap().source,
            Source::Project("p".into())
        );
        assert_eq!(l.pids.as_ref().unwrap().value, 500);
        assert_eq!(
            l.rlimits["nofile"].value,
            rlimit::Value {
                soft: 100,
                hard: 300
            }
        );
        assert_eq!(l.compat, LimitsCompat::HardRequirement);
        let passed: Vec<&str> = p
            .runtime
            .env
            .pass
            .iter()
            .map(|s| s.value.as_str())
            .collect();
        assert_eq!(passed, vec!["A"]);
        assert!(p.runtime.env.all.is_none());
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("2 environment or credential grant(s) ignored")),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn the_org_keeps_limits_a_hard_requirement() {
        let org = RuntimeFragment {
            limits_compat: Some(LimitsCompat::HardRequirement),
            ..Default::default()
        };
        let flags = RuntimeFragment {
            limits_compat: Some(LimitsCompat::BestEffort),
            ..Default::default()
        };
        let layers = [
            layer(Source::Org("o".into()), Role::Org, org),
            layer(Source::CommandLine, Role::Grants { explicit: true }, flags),
        ];
        let e = format!("{:#}", super::super::merge::merge(&layers).unwrap_err());
        assert!(e.contains("limits.compatibility"), "{e}");
    }
}
