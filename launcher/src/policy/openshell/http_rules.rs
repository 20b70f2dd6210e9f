//! What an endpoint says about HTTP requests: `access` presets, `rules` (allow), `deny_rules`,
//! the endpoint's `path` scope, and which combinations make sense.
//!
//! As OpenShell's validator: `access` and `rules` are mutually exclusive; `protocol: rest` needs
//! `rules` or `access`; `rules: []` and `deny_rules: []` are errors (the first would deny
//! everything, the second do nothing); `deny_rules` need `protocol: rest` and a base allow set;
//! `protocol: tcp` takes none of the request fields. Beyond it: a rule needs both `method` and
//! `path` (OpenShell accepts a rule without them and it then never matches — for a deny rule
//! that is a denial that silently does nothing), and `access`/`rules` without `protocol: rest`
//! are an error (OpenShell ignores them and lets every request through).

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::{Map, Value};

use crate::policy::document::{given, Doc, KeyPath};
use crate::policy::model::{Endpoint, HttpRule};
use crate::proxy::glob::Glob;

/// Request selectors of OpenShell's other protocols.
const OTHER_PROTOCOL_KEYS: &[&str] = &[
    "command",
    "operation_type",
    "operation_name",
    "fields",
    "tool",
    "params",
];

/// `rules: [{allow: {method, path, query}}]`.
pub fn allow_rules(doc: &mut Doc, v: &Value, at: &KeyPath) -> Result<Vec<HttpRule>> {
    let list = doc.list(v, at)?;
    if list.is_empty() {
        return Err(doc.error(
            at,
            "the list is empty, which would deny every request; use `access: full`, or list rules",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, r)| {
            let at = at.index(i);
            let map = doc.object(r, &at)?;
            let allow_at = at.key("allow");
            let allow = given(map, "allow")
                .ok_or_else(|| doc.error(&allow_at, "required ({method, path, query})"))?;
            request(doc, allow, &allow_at)
        })
        .collect()
}

/// `deny_rules: [{method, path, query}]`.
pub fn deny_rules(doc: &mut Doc, v: &Value, at: &KeyPath) -> Result<Vec<HttpRule>> {
    let list = doc.list(v, at)?;
    if list.is_empty() {
        return Err(doc.error(
            at,
            "the list is empty and would deny nothing; remove it if no denials are needed",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, r)| request(doc, r, &at.index(i)))
        .collect()
}

/// The endpoint's `path`: which request paths its rules apply to.
pub fn endpoint_path(doc: &Doc, v: &Value, at: &KeyPath) -> Result<String> {
    let p = doc.string(v, at)?;
    if !p.starts_with('/') && p != "**" {
        return Err(doc.error(at, format!("{p:?} must start with `/` or be `**`")));
    }
    glob(p, b'/').map_err(|e| doc.error(at, e))?;
    Ok(p.to_string())
}

/// The combinations OpenShell refuses, and those it would silently not enforce.
pub fn check_combination(
    doc: &Doc,
    map: &Map<String, Value>,
    ep: &Endpoint,
    at: &KeyPath,
) -> Result<()> {
    let has_rules = given(map, "rules").is_some();
    let has_denies = given(map, "deny_rules").is_some();
    if ep.access.is_some() && has_rules {
        return Err(doc.error(
            at,
            "`access` and `rules` are mutually exclusive (use one of them)",
        ));
    }
    match ep.protocol.as_deref() {
        Some("rest") => {
            if ep.access.is_none() && !has_rules {
                return Err(doc.error(
                    at,
                    "`protocol: rest` needs `rules` or `access` to say which requests are allowed (`access: full` allows all)",
                ));
            }
        }
        Some("tcp") => {
            let l7: Vec<&str> = [
                "access",
                "rules",
                "deny_rules",
                "enforcement",
                "path",
                "allow_encoded_slash",
            ]
            .into_iter()
            .filter(|k| given(map, k).is_some())
            .collect();
            if !l7.is_empty() {
                return Err(doc.error(
                    at,
                    format!(
                        "`protocol: tcp` does not look at requests, so it takes no {}; remove them or use `protocol: rest`",
                        l7.join(", ")
                    ),
                ));
            }
        }
        _ => {
            let l7: Vec<&str> = [
                "access",
                "rules",
                "deny_rules",
                "path",
                "allow_encoded_slash",
            ]
            .into_iter()
            .filter(|k| given(map, k).is_some())
            .collect();
            if !l7.is_empty() {
                return Err(doc.error(
                    at,
                    format!(
                        "{} need `protocol: rest` (without it requests are not looked at, and every request would pass)",
                        l7.join(", ")
                    ),
                ));
            }
        }
    }
    if has_denies && ep.access.is_none() && !has_rules {
        return Err(doc.error(at, "`deny_rules` need `rules` or `access` to deny from"));
    }
    Ok(())
}

fn request(doc: &mut Doc, v: &Value, at: &KeyPath) -> Result<HttpRule> {
    let map = doc.object(v, at)?;
    if let Some(k) = OTHER_PROTOCOL_KEYS.iter().find(|k| given(map, k).is_some()) {
        return Err(doc.error(
            &at.key(k),
            "selects GraphQL, SQL, JSON-RPC or MCP requests, which sandbox-launch does not inspect; use `method`, `path` and `query`",
        ));
    }
    let m_at = at.key("method");
    let method = given(map, "method").ok_or_else(|| doc.error(&m_at, "required (`*` for any)"))?;
    let method = doc.string(method, &m_at)?;
    let token = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if method != "*" && (method.is_empty() || !method.chars().all(token)) {
        return Err(doc.error(
            &m_at,
            format!("{method:?} is not an HTTP method (for example GET, POST, or `*` for any)"),
        ));
    }
    let p_at = at.key("path");
    let path = given(map, "path").ok_or_else(|| doc.error(&p_at, "required (`**` for any)"))?;
    let path = doc.string(path, &p_at)?;
    if !path.starts_with('/') && !path.starts_with('*') {
        return Err(doc.error(
            &p_at,
            format!("{path:?} must start with `/` (or a glob `*`)"),
        ));
    }
    glob(path, b'/').map_err(|e| doc.error(&p_at, e))?;
    let mut query = BTreeMap::new();
    if let Some(q) = given(map, "query") {
        let q_at = at.key("query");
        let q = q
            .as_object()
            .ok_or_else(|| doc.error(&q_at, "expected a mapping of parameter name to glob"))?;
        for (name, matcher) in q {
            let at = q_at.key(name);
            query.insert(name.clone(), query_matcher(doc, matcher, &at)?);
        }
    }
    Ok(HttpRule {
        method: method.to_ascii_uppercase(),
        path: path.to_string(),
        query,
    })
}

/// `"glob"` or `{any: ["glob", ...]}`.
fn query_matcher(doc: &mut Doc, v: &Value, at: &KeyPath) -> Result<Vec<String>> {
    let globs: Vec<String> = match v {
        Value::String(s) => vec![s.clone()],
        Value::Object(_) => {
            let map = doc.object(v, at)?;
            let any_at = at.key("any");
            let any = given(map, "any").ok_or_else(|| doc.error(&any_at, "required"))?;
            let list = doc.strings(any, &any_at)?;
            if list.is_empty() {
                return Err(doc.error(&any_at, "list at least one glob"));
            }
            list.into_iter().map(|(_, s)| s.to_string()).collect()
        }
        _ => return Err(doc.error(at, "expected a glob string or `{any: [globs]}`")),
    };
    for g in &globs {
        glob(g, b'.').map_err(|e| doc.error(at, e))?;
    }
    Ok(globs)
}

/// Check that `pattern` compiles as a glob over `delimiter`-separated segments.
pub fn glob(pattern: &str, delimiter: u8) -> Result<(), String> {
    Glob::new(pattern, delimiter)
        .map(|_| ())
        .map_err(|e| format!("{pattern:?} is not a valid glob: {e}"))
}
