//! The shape of a policy format — which keys may appear where — and parsing a document against
//! it. The text is parsed once into a `serde_json::Value`; while it is parsed, a key that the
//! shape does not know, or a key given twice, stops the parse with an error that names the key
//! path, says which keys are known there, and carries the line it is on (the YAML and JSON
//! parsers add the position of the error to every message).
//!
//! Only keys are checked here. Whether a value is of the right kind and allowed is the format
//! reader's business (`openshell`, `agent_settings`), which reports it against the same key path.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Which keys may appear in a value.
#[derive(Debug)]
pub enum Shape {
    /// Anything; the reader checks it.
    Value,
    /// A mapping with these keys only.
    Fields(&'static [Field]),
    /// A mapping with these keys checked; other keys are kept unchecked (they belong to another
    /// program, as the agent's own keys of a settings file do).
    Open(&'static [Field]),
    /// A mapping whose keys are names the author chose; every value has this shape.
    Named(&'static Shape),
    /// A list whose items have this shape.
    List(&'static Shape),
}

/// One known key and the shape of its value.
#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    pub shape: Shape,
}

impl Field {
    pub const fn new(name: &'static str, shape: Shape) -> Field {
        Field { name, shape }
    }

    pub const fn value(name: &'static str) -> Field {
        Field {
            name,
            shape: Shape::Value,
        }
    }
}

/// Parse YAML `text`, checking its keys against `shape`. Errors read `PATH: MESSAGE at line L
/// column C` (the YAML parser puts the key path in front).
pub fn yaml(text: &str, shape: &Shape) -> Result<Value, serde_norway::Error> {
    Checked {
        shape,
        path: String::new(),
        name_paths: false,
    }
    .deserialize(serde_norway::Deserializer::from_str(text))
}

/// Parse JSON `text`, checking its keys against `shape`. Errors read `PATH: MESSAGE at line L
/// column C`.
pub fn json(text: &str, shape: &Shape) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Checked {
        shape,
        path: String::new(),
        name_paths: true,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// A value being parsed at `path` against `shape`.
struct Checked<'s> {
    shape: &'s Shape,
    path: String,
    /// Whether messages must name the key path themselves (the JSON parser does not).
    name_paths: bool,
}

impl<'s> Checked<'s> {
    fn child(&self, shape: &'s Shape, key: &str) -> Checked<'s> {
        let path = if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        };
        Checked {
            shape,
            path,
            name_paths: self.name_paths,
        }
    }

    fn item(&self, shape: &'s Shape, index: usize) -> Checked<'s> {
        Checked {
            shape,
            path: format!("{}[{index}]", self.path),
            name_paths: self.name_paths,
        }
    }

    fn shape_of_item(&self) -> &'s Shape {
        match self.shape {
            Shape::List(item) => item,
            _ => &Shape::Value,
        }
    }

    /// The shape of `key`'s value, or why the key does not belong here.
    fn shape_of_key(&self, key: &str) -> Result<&'s Shape, String> {
        let fields = match self.shape {
            Shape::Value | Shape::List(_) => return Ok(&Shape::Value),
            Shape::Named(each) => return Ok(each),
            Shape::Fields(fields) | Shape::Open(fields) => fields,
        };
        if let Some(f) = fields.iter().find(|f| f.name == key) {
            return Ok(&f.shape);
        }
        if matches!(self.shape, Shape::Open(_)) {
            return Ok(&Shape::Value);
        }
        let known: Vec<&str> = fields.iter().map(|f| f.name).collect();
        let hint = match known.iter().find(|k| looks_like(key, k)) {
            Some(meant) => format!("did you mean `{meant}`? "),
            None => String::new(),
        };
        Err(format!(
            "unknown key ({hint}known here: {})",
            known.join(", ")
        ))
    }

    /// The error for the value at this path, as the parser will show it.
    fn message(&self, msg: &str) -> String {
        if self.name_paths {
            format!("{}: {msg}", self.path)
        } else {
            msg.to_string()
        }
    }
}

impl<'de> DeserializeSeed<'de> for Checked<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Checked<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping, list, string, number, boolean or null")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let item_shape = self.shape_of_item();
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(self.item(item_shape, items.len()))? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // Errors are raised while the value is read, so that the parser reports the line of
            // the offending entry rather than the start of the mapping.
            let (shape, problem) = match self.shape_of_key(&key) {
                Ok(shape) if out.contains_key(&key) => {
                    (shape, Some("given twice (keep one)".to_string()))
                }
                Ok(shape) => (shape, None),
                Err(why) => (&Shape::Value, Some(why)),
            };
            let child = self.child(shape, &key);
            if let Some(problem) = problem {
                let msg = child.message(&problem);
                return map.next_value_seed(Refuse(msg)).map(|_| Value::Null);
            }
            let value = map.next_value_seed(child)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// A value that is refused whatever it is: it carries the error for its key.
struct Refuse(String);

impl<'de> DeserializeSeed<'de> for Refuse {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Refuse {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(self.0))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(self.0))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(self.0))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(self.0))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(self.0))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(self.0))
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(self.0))
    }

    fn visit_some<D: Deserializer<'de>>(self, _: D) -> Result<(), D::Error> {
        Err(de::Error::custom(self.0))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(self.0))
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(self.0))
    }
}

/// `k` is probably a misspelling of `known`: equal once case, `_` and `-` are ignored, or at
/// most two edits apart (for keys long enough that two edits is a typo, not another word).
pub fn looks_like(k: &str, known: &str) -> bool {
    let (a, b) = (fold(k), fold(known));
    a == b || (b.len() >= 5 && edit_distance(&a, &b) <= 2)
}

/// `k` differs from `known` only in case, `_` and `-`, or by one edit: almost surely a typo.
pub fn looks_much_like(k: &str, known: &str) -> bool {
    let (a, b) = (fold(k), fold(known));
    a == b || (b.len() >= 5 && edit_distance(&a, &b) <= 1)
}

fn fold(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    static RULE: Shape = Shape::Fields(&[Field::value("method"), Field::value("path")]);
    static TOP: Shape = Shape::Fields(&[
        Field::value("version"),
        Field::new(
            "policies",
            Shape::Named(&Shape::Fields(&[
                Field::value("name"),
                Field::new("rules", Shape::List(&RULE)),
            ])),
        ),
    ]);

    fn yaml(text: &str) -> Result<Value, String> {
        super::yaml(text, &TOP).map_err(|e| e.to_string())
    }

    fn json(text: &str) -> Result<Value, String> {
        super::json(text, &TOP).map_err(|e| e.to_string())
    }

    #[test]
    fn a_document_of_known_keys_parses_to_its_value() {
        let v =
            yaml("version: 1\npolicies:\n  a:\n    rules: [{method: GET, path: /x}]\n").unwrap();
        assert_eq!(
            v,
            json!({"version": 1, "policies": {"a": {"rules": [{"method": "GET", "path": "/x"}]}}})
        );
    }

    #[test]
    fn an_unknown_key_names_its_path_and_line() {
        let e =
            yaml("version: 1\npolicies:\n  a:\n    rules:\n      - path: /x\n        metod: GET\n")
                .unwrap_err();
        assert!(
            e.contains("policies.a.rules[0].metod: unknown key (did you mean `method`? known here: method, path)"),
            "{e}"
        );
        assert!(e.contains("line 6"), "{e}");
        let e = json("{\n \"version\": 1,\n \"polices\": {}\n}").unwrap_err();
        assert!(e.contains("polices: unknown key"), "{e}");
        assert!(e.contains("line 3"), "{e}");
    }

    #[test]
    fn a_key_given_twice_is_an_error() {
        let e = yaml("version: 1\nversion: 2\n").unwrap_err();
        assert!(e.contains("version: given twice"), "{e}");
        let e = json("{\"version\": 1, \"version\": 1}").unwrap_err();
        assert!(e.contains("version: given twice"), "{e}");
    }

    #[test]
    fn an_open_mapping_keeps_other_keys_unchecked() {
        static OPEN: Shape = Shape::Open(&[Field::new("sandbox", Shape::Fields(&[]))]);
        let v = super::json(r#"{"model": {"x": 1}, "sandbox": {}}"#, &OPEN).unwrap();
        assert_eq!(v, json!({"model": {"x": 1}, "sandbox": {}}));
        let e = super::json(r#"{"sandbox": {"x": 1}}"#, &OPEN).unwrap_err();
        assert!(e.to_string().contains("sandbox.x: unknown key"), "{e}");
    }

    #[test]
    fn misspelt_keys_are_recognised() {
        assert!(looks_like("denyread", "denyRead"));
        assert!(looks_like("deny_read", "denyRead"));
        assert!(looks_like("read_onyl", "read_only"));
        assert!(looks_like("allowWrites", "allowWrite"));
        assert!(!looks_like("excludedCommands", "denyRead"));
        assert!(!looks_like("tag", "tls"));
    }
}
