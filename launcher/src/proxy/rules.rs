//! The network rules of a policy, compiled once for the proxy: host patterns, ports, program
//! globs, and for `protocol: rest` endpoints the request rules (allow and deny).
//!
//! Domain-only rules (`--allow-domain`, `allowedDomains`, `deniedDomains`) allow or refuse any
//! port unless written `host:port`; `*.example.com` there means every subdomain. OpenShell
//! endpoints carry ports, programs, an enforcement mode, and request rules; their hosts are
//! OpenShell globs (`*.example.com` is one label deep), and `access` presets expand to rules as
//! OpenShell expands them.

use anyhow::{bail, Context, Result};

use super::explain::describe_source;
use super::glob::Glob;
use super::matcher::HostPattern;
use crate::policy::model::{
    Endpoint, Enforcement, HttpRule, NetworkPolicy, NetworkRule, Source, Sourced,
};

/// One compiled allow or deny rule.
#[derive(Debug)]
pub struct Rule {
    /// How a person recognises the rule in a message (`--allow-domain github.com`).
    pub label: String,
    pub pattern: HostPattern,
    /// Allowed ports; empty means any.
    pub ports: Vec<u16>,
    /// Program path globs and how they were written; `None` means any program.
    pub binaries: Option<Binaries>,
    pub enforcement: Enforcement,
    /// Request rules (`protocol: rest`); `None` means the connection is not looked into.
    pub rest: Option<RestRules>,
    /// `tls: skip`: tunnel HTTPS without inspecting it even when `rest` is set.
    pub tls_skip: bool,
}

/// The programs a rule allows: exact paths and `/`-separated globs.
#[derive(Debug)]
pub struct Binaries {
    pub globs: Vec<Glob>,
    pub written: Vec<String>,
}

impl Binaries {
    /// Whether `path` is one of them.
    pub fn allows(&self, path: &str) -> bool {
        self.globs.iter().any(|g| g.is_match(path))
    }
}

/// OpenShell `protocol: rest`: what the endpoint allows and refuses, and where.
#[derive(Debug)]
pub struct RestRules {
    pub allow: Vec<RequestRule>,
    pub deny: Vec<RequestRule>,
    /// The endpoint's `path`: its rules apply to requests under it only.
    pub scope: Option<Glob>,
    pub allow_encoded_slash: bool,
}

impl RestRules {
    /// Whether this endpoint speaks for a request to `path` (canonical).
    pub fn covers(&self, path: &str) -> bool {
        self.scope.as_ref().is_none_or(|g| g.is_match(path))
            && (self.allow_encoded_slash || !path.contains("%2F"))
    }
}

#[derive(Debug)]
pub struct RequestRule {
    /// Upper-case method or `*`.
    pub method: String,
    pub path: Glob,
    /// Parameter name -> any of these globs (`.`-separated, as OpenShell matches values).
    pub query: Vec<(String, Vec<Glob>)>,
}

impl RequestRule {
    /// Method and path match (HEAD is allowed where GET is, as OpenShell does it).
    pub fn selects(&self, method: &str, path: &str) -> bool {
        let method_ok = self.method == "*"
            || self.method.eq_ignore_ascii_case(method)
            || (self.method == "GET" && method.eq_ignore_ascii_case("HEAD"));
        method_ok && self.path.is_match(path)
    }

    /// As an allow rule: every value of every named parameter matches (and each is present).
    pub fn allows(&self, method: &str, path: &str, params: &[(String, String)]) -> bool {
        self.selects(method, path)
            && self.query.iter().all(|(name, globs)| {
                let mut values = params.iter().filter(|(k, _)| k == name).peekable();
                values.peek().is_some() && values.all(|(_, v)| globs.iter().any(|g| g.is_match(v)))
            })
    }

    /// As a deny rule: some value of every named parameter matches (a missing one does not).
    pub fn denies(&self, method: &str, path: &str, params: &[(String, String)]) -> bool {
        self.selects(method, path)
            && self.query.iter().all(|(name, globs)| {
                params
                    .iter()
                    .filter(|(k, _)| k == name)
                    .any(|(_, v)| globs.iter().any(|g| g.is_match(v)))
            })
    }
}

/// Every rule of a policy's network section.
#[derive(Debug, Default)]
pub struct Rules {
    pub allows: Vec<Rule>,
    /// `deniedDomains`: refused even when an allow rule matches.
    pub denies: Vec<Rule>,
}

impl Rules {
    /// Compile the policy's network section. Every bad pattern is an error naming its rule.
    pub fn compile(policy: &NetworkPolicy) -> Result<Rules> {
        let mut allows = Vec::new();
        for d in &policy.allowed_domains {
            allows.push(domain_rule(d, "--allow-domain", "allowed domain", false)?);
        }
        let mut denies = Vec::new();
        for d in &policy.denied_domains {
            denies.push(domain_rule(d, "denied domain", "denied domain", true)?);
        }
        for (key, rule) in &policy.rules {
            for (i, ep) in rule.value.endpoints.iter().enumerate() {
                let label = format!(
                    "network_policies.{key} ({}) endpoint {} in {}",
                    rule.value.name,
                    i + 1,
                    describe_source(&rule.source)
                );
                allows.push(
                    endpoint_rule(label.clone(), &rule.value, ep)
                        .with_context(|| format!("{label}: host `{}`", ep.host))?,
                );
            }
        }
        Ok(Rules { allows, denies })
    }
}

/// Split `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address.
pub fn split_host_port(s: &str) -> Result<(&str, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (inner, tail) = rest
            .split_once(']')
            .with_context(|| format!("`{s}`: missing `]`"))?;
        let port = match tail {
            "" => None,
            t => Some(parse_port(
                t.strip_prefix(':').with_context(|| format!("`{s}`"))?,
            )?),
        };
        return Ok((&s[..inner.len() + 2], port));
    }
    if s.matches(':').count() == 1 {
        let (h, p) = s.split_once(':').unwrap_or((s, ""));
        return Ok((h, Some(parse_port(p)?)));
    }
    Ok((s, None))
}

fn parse_port(p: &str) -> Result<u16> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 && !p.starts_with('0') => Ok(n),
        _ => bail!("`{p}` is not a port number (1-65535)"),
    }
}

fn domain_rule(d: &Sourced<String>, flag: &str, kind: &str, deny: bool) -> Result<Rule> {
    let label = match d.source {
        Source::CommandLine => format!("{flag} {}", d.value),
        Source::Org(ref p) => format!(
            "{kind} `{}` in {} (organization policy)",
            d.value,
            p.display()
        ),
        ref other => format!("{kind} `{}` in {}", d.value, describe_source(other)),
    };
    let (host, port) = split_host_port(d.value.trim()).with_context(|| label.clone())?;
    let pattern = if deny {
        HostPattern::parse_deny(host)
    } else {
        HostPattern::parse(host)
    }
    .with_context(|| label.clone())?;
    Ok(Rule {
        label,
        pattern,
        ports: port.into_iter().collect(),
        binaries: None,
        enforcement: Enforcement::Enforce,
        rest: None,
        tls_skip: false,
    })
}

/// The program a literal binary path names when a symlink leads to it (`/usr/bin/python3` ->
/// `python3.11`, or `/bin/curl` with `/bin` -> `usr/bin`), as a glob matching that path only:
/// the kernel names the target as the executable, so the target is allowed next to the path as
/// written (OpenShell does the same). Resolved when the rules are compiled, on the host; the
/// sandbox sees system directories at the same paths. Globs are not resolved.
fn symlink_target(path: &str) -> Option<String> {
    if !path.starts_with('/') || path.bytes().any(|b| b"*?[]{}\\".contains(&b)) {
        return None;
    }
    let target = std::fs::canonicalize(path).ok()?;
    let target = target.to_str()?;
    (target != path).then(|| {
        target
            .chars()
            .flat_map(|c| match "*?[]{}\\,".contains(c) {
                true => vec!['\\', c],
                false => vec![c],
            })
            .collect()
    })
}

fn endpoint_rule(label: String, rule: &NetworkRule, ep: &Endpoint) -> Result<Rule> {
    let pattern = HostPattern::parse_endpoint(&ep.host)?;
    let binaries = if rule.binaries.is_empty() {
        None
    } else {
        let mut globs = Vec::new();
        for g in &rule.binaries {
            globs.push(Glob::new(g, b'/').with_context(|| format!("binary glob `{g}`"))?);
            if let Some(target) = symlink_target(g) {
                let glob = Glob::new(&target, b'/');
                globs.push(glob.with_context(|| format!("`{g}` leads to `{target}`"))?);
            }
        }
        Some(Binaries {
            globs,
            written: rule.binaries.clone(),
        })
    };
    let rest = match ep.protocol.as_deref() {
        Some("rest") => Some(rest_rules(ep)?),
        None | Some("tcp") => None,
        Some(other) => bail!("protocol `{other}` is not supported (only `rest` and `tcp`)"),
    };
    Ok(Rule {
        label,
        pattern,
        ports: ep.ports.clone(),
        binaries,
        enforcement: ep.enforcement,
        rest,
        tls_skip: ep.tls.as_deref() == Some("skip"),
    })
}

/// The methods of OpenShell's `access` presets (every path).
fn preset(access: &str) -> Result<&'static [&'static str]> {
    Ok(match access {
        "read-only" => &["GET", "HEAD", "OPTIONS"],
        "read-write" => &["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"],
        "full" => &["*"],
        other => bail!("access `{other}` is not one of read-only, read-write, full"),
    })
}

fn rest_rules(ep: &Endpoint) -> Result<RestRules> {
    let mut allow = Vec::new();
    if let Some(access) = &ep.access {
        for m in preset(access)? {
            allow.push(RequestRule {
                method: (*m).to_string(),
                path: Glob::new("**", b'/')?,
                query: Vec::new(),
            });
        }
    }
    for r in &ep.rules {
        allow.push(request_rule(r)?);
    }
    if allow.is_empty() {
        // The loader refuses this; a policy built another way must not allow everything.
        bail!("`protocol: rest` without `rules` or `access` allows no request; say which");
    }
    let deny = ep
        .deny_rules
        .iter()
        .map(request_rule)
        .collect::<Result<_>>()?;
    let scope = match &ep.path {
        None => None,
        Some(p) if p == "**" || p == "/**" => None,
        Some(p) => Some(Glob::new(p, b'/').with_context(|| format!("endpoint path `{p}`"))?),
    };
    Ok(RestRules {
        allow,
        deny,
        scope,
        allow_encoded_slash: ep.allow_encoded_slash,
    })
}

fn request_rule(r: &HttpRule) -> Result<RequestRule> {
    let mut query = Vec::new();
    for (name, globs) in &r.query {
        let globs = globs
            .iter()
            .map(|g| Glob::new(g, b'.').with_context(|| format!("query glob `{g}`")))
            .collect::<Result<_>>()?;
        query.push((name.clone(), globs));
    }
    Ok(RequestRule {
        method: r.method.to_ascii_uppercase(),
        path: Glob::new(&r.path, b'/').with_context(|| format!("path glob `{}`", r.path))?,
        query,
    })
}
