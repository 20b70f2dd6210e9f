//! The persistence model as it travels (the deferred persistence plan after the clone, a
//! nested launcher's registration): each distinct surface text and anchor once, in a table,
//! and the rules as `[anchor, pattern, surface]` rows that refer to the tables by index. The
//! ~110 rules of a launch share a dozen surfaces of up to ~250 bytes and one home directory;
//! written out in every rule they made a ~24 KB message that the shim decodes on the launch's
//! critical path. In memory a rule stays a [`ProtectRule`] (the rules of one surface share its
//! text).
//!
//! A row that names an entry the tables do not have is an error, never a rule dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize, Serializer};

use crate::spec::{PersistSpec, ProtectRule};

/// One rule: the index of its anchor in `anchors` (`None`: matched at any depth), its
/// pattern, the index of its surface in `surfaces`.
#[derive(Serialize)]
struct RuleRef<'a>(Option<u32>, &'a str, u32);

#[derive(Serialize)]
struct WireRef<'a> {
    roots: &'a [PathBuf],
    surfaces: Vec<&'a str>,
    anchors: Vec<&'a Path>,
    rules: Vec<RuleRef<'a>>,
    overrides: &'a [PathBuf],
    denied: &'a [PathBuf],
}

#[derive(Deserialize)]
struct WireRule(Option<u32>, String, u32);

/// What [`PersistSpec`] decodes from (see `TryFrom`).
#[derive(Deserialize)]
pub(crate) struct Wire {
    roots: Vec<PathBuf>,
    #[serde(default)]
    surfaces: Vec<String>,
    #[serde(default)]
    anchors: Vec<PathBuf>,
    rules: Vec<WireRule>,
    overrides: Vec<PathBuf>,
    #[serde(default)]
    denied: Vec<PathBuf>,
}

/// Distinct values in first-seen order, and the index of each. Rules come in runs that share
/// a surface and an anchor, so the previous value is tried before the map.
struct Table<'a, T: ?Sized> {
    values: Vec<&'a T>,
    index: HashMap<&'a T, u32>,
    last: Option<(&'a T, u32)>,
}

impl<'a, T: ?Sized + Eq + std::hash::Hash> Table<'a, T> {
    fn new() -> Self {
        Table {
            values: Vec::new(),
            index: HashMap::new(),
            last: None,
        }
    }

    fn index_of(&mut self, value: &'a T) -> u32 {
        if let Some((v, i)) = self.last {
            if v == value {
                return i;
            }
        }
        let next = self.values.len() as u32;
        let i = *self.index.entry(value).or_insert(next);
        if i == next {
            self.values.push(value);
        }
        self.last = Some((value, i));
        i
    }
}

impl Serialize for PersistSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut surfaces = Table::<str>::new();
        let mut anchors = Table::<Path>::new();
        let rules = self
            .rules
            .iter()
            .map(|r| {
                RuleRef(
                    r.anchor.as_deref().map(|a| anchors.index_of(a)),
                    &r.pattern,
                    surfaces.index_of(&*r.surface),
                )
            })
            .collect();
        WireRef {
            roots: &self.roots,
            surfaces: surfaces.values,
            anchors: anchors.values,
            rules,
            overrides: &self.overrides,
            denied: &self.denied,
        }
        .serialize(serializer)
    }
}

impl TryFrom<Wire> for PersistSpec {
    type Error = String;

    fn try_from(wire: Wire) -> Result<Self, String> {
        let Wire {
            roots,
            surfaces,
            anchors,
            rules,
            overrides,
            denied,
        } = wire;
        let surfaces: Vec<Arc<str>> = surfaces.into_iter().map(Arc::from).collect();
        // Sized at once: grown by doubling, the vector wrote twice its size in fresh pages.
        let mut out = Vec::with_capacity(rules.len());
        for (n, WireRule(anchor, pattern, surface)) in rules.into_iter().enumerate() {
            let missing = |what: &str, i: u32, len: usize| {
                format!(
                    "protected path {n} ({pattern:?}) names {what} {i}, but the plan's table has \
                     {len}: the plan is malformed"
                )
            };
            let anchor = match anchor {
                None => None,
                Some(i) => Some(
                    anchors
                        .get(i as usize)
                        .ok_or_else(|| missing("anchor", i, anchors.len()))?
                        .clone(),
                ),
            };
            let surface = surfaces
                .get(surface as usize)
                .ok_or_else(|| missing("surface", surface, surfaces.len()))?
                .clone();
            out.push(ProtectRule {
                anchor,
                pattern,
                surface,
            });
        }
        Ok(PersistSpec {
            roots,
            rules: out,
            overrides,
            denied,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(anchor: Option<&str>, pattern: &str, surface: &str) -> ProtectRule {
        ProtectRule {
            anchor: anchor.map(PathBuf::from),
            pattern: pattern.into(),
            surface: surface.into(),
        }
    }

    fn spec() -> PersistSpec {
        let hooks = "git hook managers: runs on git commit, through the installed hook";
        let shell = "shell start-up: runs on opening a shell";
        PersistSpec {
            roots: vec!["/w".into(), "/h".into()],
            rules: vec![
                rule(None, ".husky/**", hooks),
                rule(None, "lefthook.yml", hooks),
                rule(Some("/h"), ".bashrc", shell),
                rule(Some("/h"), ".zshrc", shell),
                rule(None, ".pre-commit-config.yaml", hooks),
                rule(Some("/w/sub"), "", shell),
                rule(Some("/h"), ".profile", shell),
            ],
            overrides: vec!["/h/.zshrc".into()],
            denied: vec!["/w/locked".into()],
        }
    }

    #[test]
    fn a_persistence_model_survives_its_wire_form() {
        let spec = spec();
        let json = serde_json::to_string(&spec).unwrap();
        let back: PersistSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn each_surface_and_anchor_travels_once() {
        let json = serde_json::to_string(&spec()).unwrap();
        assert_eq!(json.matches("git hook managers").count(), 1, "{json}");
        assert_eq!(json.matches("shell start-up").count(), 1, "{json}");
        assert_eq!(json.matches("\"/w/sub\"").count(), 1, "{json}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["anchors"], serde_json::json!(["/h", "/w/sub"]));
        assert_eq!(v["rules"][2], serde_json::json!([0, ".bashrc", 1]));
        assert_eq!(v["rules"][0], serde_json::json!([null, ".husky/**", 0]));
    }

    #[test]
    fn a_rule_naming_a_surface_the_plan_lacks_is_refused() {
        let mut v = serde_json::to_value(spec()).unwrap();
        v["rules"][3][2] = serde_json::json!(2);
        let err = serde_json::from_value::<PersistSpec>(v)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("protected path 3 (\".zshrc\") names surface 2"),
            "{err}"
        );
        assert!(err.contains("table has 2"), "{err}");
    }

    #[test]
    fn a_rule_naming_an_anchor_the_plan_lacks_is_refused() {
        let mut v = serde_json::to_value(spec()).unwrap();
        v["anchors"] = serde_json::json!(["/h"]);
        let err = serde_json::from_value::<PersistSpec>(v)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("protected path 5 (\"\") names anchor 1"),
            "{err}"
        );
    }

    #[test]
    fn rules_in_the_old_form_are_refused_not_dropped() {
        let mut v = serde_json::to_value(spec()).unwrap();
        v["rules"] = serde_json::json!([{"anchor": null, "pattern": ".envrc", "surface": "x"}]);
        assert!(serde_json::from_value::<PersistSpec>(v).is_err());
    }

    #[test]
    fn a_model_without_rules_needs_no_tables() {
        let v = serde_json::json!({"roots": ["/p"], "rules": [], "overrides": []});
        let spec: PersistSpec = serde_json::from_value(v).unwrap();
        assert_eq!(spec.roots, [PathBuf::from("/p")]);
        assert!(spec.rules.is_empty() && spec.denied.is_empty());
    }
}
