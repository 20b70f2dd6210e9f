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
//! Validation follows the format's reference: `version` must be 1; filesystem paths absolute,
//! without `..`, at most 4096 bytes, at most 256 of them, `/` never writable; no root identity;
//! `access` and `rules` are mutually exclusive; `endpoints` and `binaries` are required. On top of
//! the reference: hosts are checked (see `hosts`), an endpoint takes `port` or `ports`, and globs
//! must compile. A `filesystem_policy` switches to allow-list semantics (`FsMode::AllowListOnly`).
//! Unknown keys are warnings, misspelt known keys errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use globset::GlobBuilder;
use serde_json::{Map, Value};

use super::document::{given, Doc, KeyPath};
use super::fragment::Fragment;
use super::hosts;
use super::model::{Endpoint, Enforcement, FsMode, HttpRule, LandlockCompat, NetworkRule, Source};
use super::paths;

/// The most paths `read_only` and `read_write` may list together.
pub const MAX_FS_PATHS: usize = 256;

const TOP_KEYS: &[&str] = &[
    "version",
    "filesystem_policy",
    "landlock",
    "process",
    "network_policies",
    "environment",
];

/// Read and parse the policy file at `file`.
pub fn load(file: &Path, source: Source) -> Result<Fragment> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read policy file {}", file.display()))?;
    parse(&text, file, source)
}

/// Parse policy YAML; `file` is only used in messages.
pub fn parse(text: &str, file: &Path, source: Source) -> Result<Fragment> {
    let root: Value = serde_norway::from_str(text)
        .with_context(|| format!("{}: not valid policy YAML", file.display()))?;
    let mut doc = Doc::new(file);
    let mut frag = Fragment::new(source);
    let top = KeyPath::root("");
    if root.is_null() {
        return Err(doc.error(
            &top,
            "the file is empty (a policy needs at least `version: 1`)",
        ));
    }
    let map = doc.object(&root, &top, TOP_KEYS)?;
    version(&doc, map)?;
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
        frag.rules = network_policies(&mut doc, v)?;
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
    let map = doc.object(v, &at, &["include_workdir", "read_only", "read_write"])?;
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
    let map = doc.object(v, &at, &["compatibility"])?;
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
    let map = doc.object(v, &at, &["run_as_user", "run_as_group"])?;
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

fn network_policies(doc: &mut Doc, v: &Value) -> Result<BTreeMap<String, NetworkRule>> {
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
    let map = doc.object(v, at, &["name", "endpoints", "binaries"])?;
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

const ENDPOINT_KEYS: &[&str] = &[
    "host",
    "port",
    "ports",
    "protocol",
    "tls",
    "enforcement",
    "access",
    "rules",
];

fn endpoint(doc: &mut Doc, v: &Value, at: &KeyPath) -> Result<Endpoint> {
    let map = doc.object(v, at, ENDPOINT_KEYS)?;
    let host_at = at.key("host");
    let host = given(map, "host").ok_or_else(|| doc.error(&host_at, "required"))?;
    let host = hosts::pattern(doc.string(host, &host_at)?).map_err(|e| doc.error(&host_at, e))?;
    let ports = ports(doc, map, at)?;
    let protocol = match given(map, "protocol") {
        Some(v) => Some(doc.choice(v, &at.key("protocol"), &["rest"])?.to_string()),
        None => None,
    };
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
    let rules = match given(map, "rules") {
        Some(v) => http_rules(doc, v, &at.key("rules"))?,
        None => Vec::new(),
    };
    if access.is_some() && given(map, "rules").is_some() {
        return Err(doc.error(
            at,
            "`access` and `rules` are mutually exclusive (use one of them)",
        ));
    }
    if protocol.is_none() && (access.is_some() || !rules.is_empty()) {
        doc.warn(
            at,
            "`access`/`rules` without `protocol: rest`: HTTPS to this endpoint is not inspected, so only plain HTTP is checked against them",
        );
    }
    Ok(Endpoint {
        host,
        ports,
        protocol,
        tls,
        enforcement,
        access,
        rules,
    })
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

fn http_rules(doc: &mut Doc, v: &Value, at: &KeyPath) -> Result<Vec<HttpRule>> {
    doc.list(v, at)?
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let at = at.index(i);
            let map = doc.object(r, &at, &["allow"])?;
            let allow_at = at.key("allow");
            let allow = given(map, "allow")
                .ok_or_else(|| doc.error(&allow_at, "required ({method, path, query})"))?;
            http_allow(doc, allow, &allow_at)
        })
        .collect()
}

fn http_allow(doc: &mut Doc, v: &Value, at: &KeyPath) -> Result<HttpRule> {
    let map = doc.object(v, at, &["method", "path", "query"])?;
    let m_at = at.key("method");
    let method = given(map, "method").ok_or_else(|| doc.error(&m_at, "required"))?;
    let method = doc.string(method, &m_at)?;
    if method.is_empty() || !method.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err(doc.error(
            &m_at,
            format!("{method:?} is not an HTTP method (for example GET, POST)"),
        ));
    }
    let p_at = at.key("path");
    let path = given(map, "path").ok_or_else(|| doc.error(&p_at, "required"))?;
    let path = doc.string(path, &p_at)?;
    if !path.starts_with('/') && !path.starts_with('*') {
        return Err(doc.error(
            &p_at,
            format!("{path:?} must start with `/` (or a glob `*`)"),
        ));
    }
    glob(path).map_err(|e| doc.error(&p_at, e))?;
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
            let map = doc.object(v, at, &["any"])?;
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
        glob(g).map_err(|e| doc.error(at, e))?;
    }
    Ok(globs)
}

fn binary(doc: &mut Doc, v: &Value, at: &KeyPath) -> Result<String> {
    let map = doc.object(v, at, &["path"])?;
    let p_at = at.key("path");
    let p = given(map, "path").ok_or_else(|| doc.error(&p_at, "required"))?;
    let p = doc.string(p, &p_at)?;
    if !p.starts_with('/') {
        return Err(doc.error(
            &p_at,
            format!("{p:?} is not absolute (binary paths start with `/`)"),
        ));
    }
    glob(p).map_err(|e| doc.error(&p_at, e))?;
    Ok(p.to_string())
}

/// A `*`/`**` glob with `/` as the segment delimiter.
fn glob(pattern: &str) -> Result<(), String> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|_| ())
        .map_err(|e| format!("{pattern:?} is not a valid glob: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(yaml: &str) -> Fragment {
        parse(
            yaml,
            Path::new("p.yaml"),
            Source::PolicyFile("p.yaml".into()),
        )
        .unwrap()
    }

    fn parse_err(yaml: &str) -> String {
        format!(
            "{:#}",
            parse(
                yaml,
                Path::new("p.yaml"),
                Source::PolicyFile("p.yaml".into())
            )
            .unwrap_err()
        )
    }

    const FULL: &str = r#"
version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /etc/]
  read_write: [/sandbox, /tmp]
landlock:
  compatibility: best_effort
process:
  run_as_user: sandbox
  run_as_group: "1000"
network_policies:
  github_rest_api:
    name: github-rest-api
    endpoints:
      - host: API.github.com
        port: 443
        protocol: rest
        enforcement: audit
        access: read-only
    binaries:
      - path: /usr/bin/gh
  git:
    endpoints:
      - host: "*.github.com"
        ports: [22, 443]
        protocol: rest
        tls: skip
        rules:
          - allow:
              method: get
              path: /**/info/refs*
              query:
                service: "git-*"
          - allow:
              method: POST
              path: /**/git-upload-pack
              query:
                tag: {any: ["v1.*", "v2.*"]}
    binaries:
      - path: /usr/lib/git-core/**
"#;

    #[test]
    fn a_complete_policy_becomes_an_allow_list_fragment() {
        let f = parse_ok(FULL);
        assert_eq!(f.fs_mode, Some(FsMode::AllowListOnly));
        assert_eq!(f.include_workdir, Some(true));
        assert_eq!(
            f.read_only,
            vec![PathBuf::from("/usr"), "/lib".into(), "/etc".into()]
        );
        assert_eq!(f.read_write, vec![PathBuf::from("/sandbox"), "/tmp".into()]);
        assert_eq!(f.landlock, Some(LandlockCompat::BestEffort));
        assert_eq!(f.run_as_user.as_deref(), Some("sandbox"));
        assert_eq!(f.run_as_group.as_deref(), Some("1000"));
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);

        let gh = &f.rules["github_rest_api"];
        assert_eq!(gh.name, "github-rest-api");
        assert_eq!(gh.endpoints[0].host, "api.github.com");
        assert_eq!(gh.endpoints[0].ports, vec![443]);
        assert_eq!(gh.endpoints[0].enforcement, Enforcement::Audit);
        assert_eq!(gh.endpoints[0].access.as_deref(), Some("read-only"));
        assert_eq!(gh.binaries, vec!["/usr/bin/gh".to_string()]);

        let git = &f.rules["git"];
        assert_eq!(git.name, "git", "the name defaults to the key");
        let ep = &git.endpoints[0];
        assert_eq!(ep.host, "*.github.com");
        assert_eq!(ep.ports, vec![22, 443]);
        assert_eq!(ep.tls.as_deref(), Some("skip"));
        assert_eq!(ep.enforcement, Enforcement::Enforce);
        assert_eq!(ep.rules[0].method, "GET");
        assert_eq!(ep.rules[0].query["service"], vec!["git-*".to_string()]);
        assert_eq!(
            ep.rules[1].query["tag"],
            vec!["v1.*".to_string(), "v2.*".to_string()]
        );
    }

    #[test]
    fn a_policy_without_filesystem_policy_keeps_the_mode_unsaid() {
        let f = parse_ok("version: 1\nlandlock: {compatibility: hard_requirement}\n");
        assert_eq!(f.fs_mode, None);
        assert_eq!(f.landlock, Some(LandlockCompat::HardRequirement));
    }

    #[test]
    fn version_is_required_and_must_be_one() {
        assert!(parse_err("filesystem_policy: {}\n").contains("p.yaml: version: required"));
        assert!(parse_err("version: 2\n").contains("version: 2 is not supported (allowed: 1)"));
        assert!(parse_err("").contains("empty"));
    }

    #[test]
    fn yaml_syntax_errors_name_the_file_and_line() {
        let e = parse_err("version: 1\nfilesystem_policy: [\n");
        assert!(e.contains("p.yaml: not valid policy YAML"), "{e}");
        assert!(e.contains("line"), "{e}");
    }

    #[test]
    fn filesystem_paths_are_validated_with_their_key_path() {
        let e = parse_err("version: 1\nfilesystem_policy:\n  read_only: [usr]\n");
        assert!(
            e.contains("filesystem_policy.read_only[0]: \"usr\" is not absolute"),
            "{e}"
        );
        let e = parse_err("version: 1\nfilesystem_policy:\n  read_write: [/tmp, /a/../etc]\n");
        assert!(e.contains("filesystem_policy.read_write[1]"), "{e}");
        assert!(e.contains("`..`"), "{e}");
        let e = parse_err("version: 1\nfilesystem_policy:\n  read_write: [/]\n");
        assert!(e.contains("`/` cannot be read-write"), "{e}");
        let many: Vec<String> = (0..257).map(|i| format!("/p{i}")).collect();
        let e = parse_err(&format!(
            "version: 1\nfilesystem_policy:\n  read_only: [{}]\n",
            many.join(", ")
        ));
        assert!(e.contains("257 paths") && e.contains("256"), "{e}");
        let e = parse_err("version: 1\nfilesystem_policy:\n  include_workdir: yes please\n");
        assert!(e.contains("include_workdir: expected true or false"), "{e}");
    }

    #[test]
    fn landlock_and_process_values_are_checked() {
        let e = parse_err("version: 1\nlandlock: {compatibility: sometimes}\n");
        assert!(
            e.contains("landlock.compatibility: \"sometimes\" is not allowed (allowed: hard_requirement, best_effort)"),
            "{e}"
        );
        let e = parse_err("version: 1\nprocess: {run_as_user: root}\n");
        assert!(
            e.contains("process.run_as_user: the sandbox never runs as root"),
            "{e}"
        );
        let e = parse_err("version: 1\nprocess: {run_as_group: 0}\n");
        assert!(
            e.contains("process.run_as_group: the sandbox never runs as root"),
            "{e}"
        );
        let e = parse_err("version: 1\nprocess: {run_as_user: \"a b\"}\n");
        assert!(e.contains("not a user/group name"), "{e}");
    }

    fn endpoint_err(endpoint: &str) -> String {
        parse_err(&format!(
            "version: 1\nnetwork_policies:\n  n:\n    endpoints:\n      - {endpoint}\n    binaries: [{{path: /usr/bin/curl}}]\n"
        ))
    }

    #[test]
    fn endpoint_errors_name_the_key_and_the_allowed_values() {
        let e = endpoint_err("{host: example.com, port: 70000}");
        assert!(
            e.contains("network_policies.n.endpoints[0].port: 70000 is not a TCP port (allowed: an integer 1..=65535)"),
            "{e}"
        );
        let e = endpoint_err("{host: example.com}");
        assert!(e.contains("endpoints[0].port: required"), "{e}");
        let e = endpoint_err("{host: example.com, port: 1, ports: [2]}");
        assert!(e.contains("either `port` or `ports`"), "{e}");
        let e = endpoint_err("{host: '*', port: 443}");
        assert!(
            e.contains("endpoints[0].host") && e.contains("every host"),
            "{e}"
        );
        let e = endpoint_err("{host: '*.com', port: 443}");
        assert!(e.contains("top-level"), "{e}");
        let e = endpoint_err("{host: example.com, port: 443, protocol: grpc}");
        assert!(
            e.contains("protocol: \"grpc\" is not allowed (allowed: rest)"),
            "{e}"
        );
        let e = endpoint_err("{host: example.com, port: 443, enforcement: warn}");
        assert!(e.contains("(allowed: enforce, audit)"), "{e}");
        let e = endpoint_err("{host: example.com, port: 443, access: write}");
        assert!(e.contains("(allowed: read-only, read-write, full)"), "{e}");
        let e = endpoint_err(
            "{host: example.com, port: 443, protocol: rest, access: full, rules: [{allow: {method: GET, path: /}}]}",
        );
        assert!(e.contains("mutually exclusive"), "{e}");
        let e = endpoint_err(
            "{host: example.com, port: 443, protocol: rest, rules: [{allow: {method: GET, path: 'api'}}]}",
        );
        assert!(
            e.contains("rules[0].allow.path: \"api\" must start with `/`"),
            "{e}"
        );
        let e = endpoint_err(
            "{host: example.com, port: 443, protocol: rest, rules: [{allow: {method: 'GET /', path: /}}]}",
        );
        assert!(e.contains("rules[0].allow.method"), "{e}");
        let e = endpoint_err(
            "{host: example.com, port: 443, protocol: rest, rules: [{allow: {method: GET, path: '/a[', query: {}}}]}",
        );
        assert!(e.contains("not a valid glob"), "{e}");
    }

    #[test]
    fn entries_need_endpoints_and_binaries() {
        let e = parse_err("version: 1\nnetwork_policies:\n  n:\n    binaries: [{path: /bin/x}]\n");
        assert!(e.contains("network_policies.n.endpoints: required"), "{e}");
        let e = parse_err(
            "version: 1\nnetwork_policies:\n  n:\n    endpoints: [{host: a.example, port: 1}]\n",
        );
        assert!(e.contains("network_policies.n.binaries: required"), "{e}");
        let e = parse_err(
            "version: 1\nnetwork_policies:\n  n:\n    endpoints: [{host: a.example, port: 1}]\n    binaries: [{path: bin/x}]\n",
        );
        assert!(
            e.contains("binaries[0].path: \"bin/x\" is not absolute"),
            "{e}"
        );
    }

    #[test]
    fn unknown_keys_warn_and_misspelt_keys_fail() {
        let f = parse_ok("version: 1\nfuture_section: {}\n");
        assert_eq!(f.warnings.len(), 1);
        assert!(f.warnings[0].contains("p.yaml: future_section: unknown key"));
        let e = parse_err("version: 1\nfilesystem_policy:\n  readonly: [/usr]\n");
        assert!(
            e.contains("filesystem_policy.readonly: unknown key (did you mean `read_only`?)"),
            "{e}"
        );
    }

    #[test]
    fn deprecated_tls_modes_and_uninspected_rules_warn() {
        let f = parse_ok(
            "version: 1\nnetwork_policies:\n  n:\n    endpoints: [{host: a.example, port: 443, tls: terminate, access: read-only}]\n    binaries: [{path: /**}]\n",
        );
        assert!(
            f.warnings.iter().any(|w| w.contains("deprecated")),
            "{:?}",
            f.warnings
        );
        assert!(
            f.warnings.iter().any(|w| w.contains("not inspected")),
            "{:?}",
            f.warnings
        );
    }
}
