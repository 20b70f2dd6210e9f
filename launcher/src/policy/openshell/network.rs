//! `network_policies`: named entries of endpoints (host, ports, how requests are checked) and the
//! programs allowed to use them.
//!
//! Validation follows OpenShell's validator where it refuses (host wildcards, ports, the L7
//! field combinations of `http_rules`), and goes further where OpenShell would silently not do
//! what the policy says: `access`/`rules` without `protocol: rest`, keys OpenShell implements and
//! sandbox-launch does not, and empty `endpoints`/`binaries` lists are errors here.

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::{Map, Value};

use super::http_rules;
use crate::policy::document::{given, Doc, KeyPath};
use crate::policy::hosts;
use crate::policy::model::{Endpoint, Enforcement, NetworkRule};

/// OpenShell endpoint keys sandbox-launch does not implement, each with what it is for. They are
/// accepted at their default values (off, empty) and refused otherwise.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "allowed_ips",
        "admitting private addresses resolved from a host name",
    ),
    (
        "websocket_credential_rewrite",
        "credential placeholders in WebSocket messages",
    ),
    (
        "request_body_credential_rewrite",
        "credential placeholders in request bodies",
    ),
    (
        "allow_uninspected_credentials",
        "credentials on uninspected traffic",
    ),
    ("persisted_queries", "GraphQL persisted queries"),
    ("graphql_persisted_queries", "GraphQL persisted queries"),
    ("graphql_max_body_bytes", "GraphQL body limits"),
    (
        "credential_signing",
        "request signing with provider credentials",
    ),
    (
        "signing_service",
        "request signing with provider credentials",
    ),
    (
        "signing_region",
        "request signing with provider credentials",
    ),
    ("credential_binding", "provider credential injection"),
    ("json_rpc", "JSON-RPC inspection"),
    ("mcp", "MCP inspection"),
];

/// The protocols OpenShell inspects that sandbox-launch does not.
const UNSUPPORTED_PROTOCOLS: &[&str] = &["websocket", "graphql", "sql", "json-rpc", "mcp"];

pub fn policies(doc: &mut Doc, v: &Value) -> Result<BTreeMap<String, NetworkRule>> {
    let at = KeyPath::root("network_policies");
    let map = v
        .as_object()
        .ok_or_else(|| doc.error(&at, "expected a mapping of named entries"))?;
    let mut rules = BTreeMap::new();
    for (key, entry) in map {
        let at = at.key(key);
        if key.is_empty() {
            return Err(doc.error(&at, "an entry needs a non-empty key"));
        }
        rules.insert(key.clone(), network_rule(doc, key, entry, &at)?);
    }
    Ok(rules)
}

fn network_rule(doc: &mut Doc, key: &str, v: &Value, at: &KeyPath) -> Result<NetworkRule> {
    let map = doc.object(v, at)?;
    let name = match given(map, "name") {
        Some(v) => doc.string(v, &at.key("name"))?.to_string(),
        None => key.to_string(),
    };
    let ep_at = at.key("endpoints");
    let eps = given(map, "endpoints")
        .ok_or_else(|| doc.error(&ep_at, "required (a list of {host, port})"))?;
    let eps = doc.list(eps, &ep_at)?;
    if eps.is_empty() {
        return Err(doc.error(&ep_at, "list at least one endpoint"));
    }
    let endpoints = eps
        .iter()
        .enumerate()
        .map(|(i, e)| endpoint(doc, e, &ep_at.index(i)))
        .collect::<Result<Vec<_>>>()?;
    let bin_at = at.key("binaries");
    let bins = given(map, "binaries").ok_or_else(|| {
        doc.error(
            &bin_at,
            "required (a list of {path: GLOB}; `/**` allows every program)",
        )
    })?;
    let bins = doc.list(bins, &bin_at)?;
    if bins.is_empty() {
        return Err(doc.error(
            &bin_at,
            "list at least one binary (`- path: /**` allows every program)",
        ));
    }
    let binaries = bins
        .iter()
        .enumerate()
        .map(|(i, b)| binary(doc, b, &bin_at.index(i)))
        .collect::<Result<Vec<_>>>()?;
    Ok(NetworkRule {
        name,
        endpoints,
        binaries,
    })
}

fn endpoint(doc: &mut Doc, v: &Value, at: &KeyPath) -> Result<Endpoint> {
    let map = doc.object(v, at)?;
    refuse_unsupported(doc, map, at)?;
    let host_at = at.key("host");
    let host = given(map, "host").ok_or_else(|| doc.error(&host_at, "required"))?;
    let host =
        hosts::endpoint_pattern(doc.string(host, &host_at)?).map_err(|e| doc.error(&host_at, e))?;
    let ports = ports(doc, map, at)?;
    let protocol = protocol(doc, map, at)?;
    let tls = match given(map, "tls") {
        Some(v) => {
            let t_at = at.key("tls");
            let t = doc.choice(v, &t_at, &["skip", "terminate", "passthrough"])?;
            if t != "skip" {
                doc.warn(&t_at, format!("`{t}` is deprecated and has no effect (TLS is detected automatically; `skip` turns detection off)"));
            }
            Some(t.to_string())
        }
        None => None,
    };
    let enforcement = match given(map, "enforcement") {
        Some(v) => match doc.choice(v, &at.key("enforcement"), &["enforce", "audit"])? {
            "audit" => Enforcement::Audit,
            _ => Enforcement::Enforce,
        },
        None => Enforcement::default(),
    };
    let access = match given(map, "access") {
        Some(v) => Some(
            doc.choice(v, &at.key("access"), &["read-only", "read-write", "full"])?
                .to_string(),
        ),
        None => None,
    };
    let path = match given(map, "path") {
        Some(v) => Some(http_rules::endpoint_path(doc, v, &at.key("path"))?),
        None => None,
    };
    let allow_encoded_slash = match given(map, "allow_encoded_slash") {
        Some(v) => doc.boolean(v, &at.key("allow_encoded_slash"))?,
        None => false,
    };
    let rules = match given(map, "rules") {
        Some(v) => http_rules::allow_rules(doc, v, &at.key("rules"))?,
        None => Vec::new(),
    };
    let deny_rules = match given(map, "deny_rules") {
        Some(v) => http_rules::deny_rules(doc, v, &at.key("deny_rules"))?,
        None => Vec::new(),
    };
    let ep = Endpoint {
        host,
        ports,
        protocol,
        tls,
        enforcement,
        access,
        rules,
        deny_rules,
        path,
        allow_encoded_slash,
    };
    http_rules::check_combination(doc, map, &ep, at)?;
    Ok(ep)
}

/// The keys of [`UNSUPPORTED`] are accepted only at their defaults.
fn refuse_unsupported(doc: &Doc, map: &Map<String, Value>, at: &KeyPath) -> Result<()> {
    for (key, what) in UNSUPPORTED {
        let Some(v) = map.get(*key) else { continue };
        let default = match v {
            Value::Null => true,
            Value::Bool(b) => !b,
            Value::Number(n) => n.as_u64() == Some(0),
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
        };
        if !default {
            return Err(doc.error(
                &at.key(key),
                format!("OpenShell's `{key}` ({what}) is not supported by sandbox-launch; remove it, or the policy would not do what it says"),
            ));
        }
    }
    Ok(())
}

fn protocol(doc: &Doc, map: &Map<String, Value>, at: &KeyPath) -> Result<Option<String>> {
    let Some(v) = given(map, "protocol") else {
        return Ok(None);
    };
    let p_at = at.key("protocol");
    let p = doc.string(v, &p_at)?;
    if UNSUPPORTED_PROTOCOLS.contains(&p.to_ascii_lowercase().as_str()) {
        return Err(doc.error(
            &p_at,
            format!("`{p}` inspection is not supported by sandbox-launch (supported: rest, tcp); use `rest` rules on its HTTP requests, or `tcp`"),
        ));
    }
    Ok(Some(doc.choice(v, &p_at, &["rest", "tcp"])?.to_string()))
}

fn ports(doc: &Doc, map: &Map<String, Value>, at: &KeyPath) -> Result<Vec<u16>> {
    match (given(map, "port"), given(map, "ports")) {
        (Some(_), Some(_)) => Err(doc.error(at, "give either `port` or `ports`, not both")),
        (Some(p), None) => Ok(vec![doc.port(p, &at.key("port"))?]),
        (None, Some(list)) => {
            let l_at = at.key("ports");
            let list = doc.list(list, &l_at)?;
            if list.is_empty() {
                return Err(doc.error(&l_at, "list at least one port"));
            }
            list.iter()
                .enumerate()
                .map(|(i, p)| doc.port(p, &l_at.index(i)))
                .collect()
        }
        (None, None) => Err(doc.error(
            &at.key("port"),
            "required (a TCP port 1..=65535, or `ports: [..]`)",
        )),
    }
}

fn binary(doc: &mut Doc, v: &Value, at: &KeyPath) -> Result<String> {
    let map = doc.object(v, at)?;
    if given(map, "harness").is_some() {
        doc.warn(
            &at.key("harness"),
            "is deprecated and ignored (as OpenShell ignores it)",
        );
    }
    let p_at = at.key("path");
    let p = given(map, "path").ok_or_else(|| doc.error(&p_at, "required"))?;
    let p = doc.string(p, &p_at)?;
    if !p.starts_with('/') {
        return Err(doc.error(
            &p_at,
            format!("{p:?} is not absolute (binary paths start with `/`)"),
        ));
    }
    http_rules::glob(p, b'/').map_err(|e| doc.error(&p_at, e))?;
    Ok(p.to_string())
}
