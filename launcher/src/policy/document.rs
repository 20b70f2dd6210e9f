//! Reading a parsed policy document (YAML or JSON, both held as a `serde_json::Value`) with
//! errors that name the file, the key path and what is allowed. Which keys may appear was
//! checked while the text was parsed (`shape`).

use std::fmt::Display;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Error, Result};
use serde_json::{Map, Value};

/// One file being read: where errors point and where warnings collect.
pub struct Doc {
    pub file: PathBuf,
    pub warnings: Vec<String>,
}

/// A key path inside a document, e.g. `network_policies.github.endpoints[0].port`.
#[derive(Clone, Debug)]
pub struct KeyPath(String);

impl KeyPath {
    pub fn root(name: &str) -> Self {
        KeyPath(name.to_string())
    }

    pub fn key(&self, k: &str) -> Self {
        if self.0.is_empty() {
            KeyPath(k.to_string())
        } else {
            KeyPath(format!("{}.{k}", self.0))
        }
    }

    pub fn index(&self, i: usize) -> Self {
        KeyPath(format!("{}[{i}]", self.0))
    }
}

impl Display for KeyPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("(top level)")
        } else {
            f.write_str(&self.0)
        }
    }
}

impl Doc {
    pub fn new(file: &Path) -> Self {
        Doc {
            file: file.to_path_buf(),
            warnings: Vec::new(),
        }
    }

    /// `FILE: KEY: MESSAGE`.
    pub fn error(&self, at: &KeyPath, msg: impl Display) -> Error {
        anyhow!("{}: {at}: {msg}", self.file.display())
    }

    pub fn warn(&mut self, at: &KeyPath, msg: impl Display) {
        self.warnings
            .push(format!("{}: {at}: {msg}", self.file.display()));
    }

    /// A mapping (its keys were checked against the format's shape while parsing).
    pub fn object<'v>(&self, v: &'v Value, at: &KeyPath) -> Result<&'v Map<String, Value>> {
        v.as_object()
            .ok_or_else(|| self.error(at, format!("expected a mapping, found {}", kind(v))))
    }

    pub fn string<'v>(&self, v: &'v Value, at: &KeyPath) -> Result<&'v str> {
        v.as_str()
            .ok_or_else(|| self.error(at, format!("expected a string, found {}", kind(v))))
    }

    pub fn boolean(&self, v: &Value, at: &KeyPath) -> Result<bool> {
        v.as_bool()
            .ok_or_else(|| self.error(at, format!("expected true or false, found {}", kind(v))))
    }

    pub fn list<'v>(&self, v: &'v Value, at: &KeyPath) -> Result<&'v [Value]> {
        match v {
            Value::Array(a) => Ok(a),
            _ => Err(self.error(at, format!("expected a list, found {}", kind(v)))),
        }
    }

    /// A list of strings; `null` (a key with nothing after it) counts as empty.
    pub fn strings<'v>(&self, v: &'v Value, at: &KeyPath) -> Result<Vec<(KeyPath, &'v str)>> {
        if v.is_null() {
            return Ok(Vec::new());
        }
        self.list(v, at)?
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let at = at.index(i);
                let s = self.string(item, &at)?;
                Ok((at, s))
            })
            .collect()
    }

    /// One of `allowed` (spelt exactly).
    pub fn choice<'v>(&self, v: &'v Value, at: &KeyPath, allowed: &[&str]) -> Result<&'v str> {
        let s = self.string(v, at)?;
        if allowed.contains(&s) {
            Ok(s)
        } else {
            Err(self.error(
                at,
                format!("{s:?} is not allowed (allowed: {})", allowed.join(", ")),
            ))
        }
    }

    /// A TCP port, 1..=65535.
    pub fn port(&self, v: &Value, at: &KeyPath) -> Result<u16> {
        match v.as_u64() {
            Some(n) if (1..=65535).contains(&n) => Ok(n as u16),
            _ => Err(self.error(
                at,
                format!(
                    "{} is not a TCP port (allowed: an integer 1..=65535)",
                    show(v)
                ),
            )),
        }
    }
}

/// Present and not `null`.
pub fn given<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    map.get(key).filter(|v| !v.is_null())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Number(n) => n.to_string(),
        other => kind(other).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_read_like_the_document() {
        let p = KeyPath::root("network_policies")
            .key("gh")
            .key("endpoints")
            .index(0)
            .key("port");
        assert_eq!(p.to_string(), "network_policies.gh.endpoints[0].port");
    }
}
