//! The decision engine: from the policy's network section to "may this program reach this host
//! on this port", decided on the name alone, before anything is looked up.
//!
//! Rules come from two places: domain-only rules (`--allow-domain`, `allowedDomains`), which allow
//! any port unless written `host:port`, and OpenShell `network_policies` endpoints, which carry
//! ports, binaries, an enforcement mode and optional L7 (REST) rules for plain HTTP.

use anyhow::{bail, Context, Result};
use globset::{Glob, GlobSet, GlobSetBuilder};

use super::identify::Program;
use super::matcher::{Host, HostPattern};
use crate::policy::model::{Endpoint, Enforcement, NetworkPolicy, NetworkRule, Source, Sourced};

/// One compiled allow rule.
#[derive(Debug)]
pub struct Rule {
    /// How a person recognises the rule in a message (`--allow-domain github.com`).
    pub label: String,
    pub pattern: HostPattern,
    /// Allowed ports; empty means any.
    pub ports: Vec<u16>,
    /// Executable path globs; `None` means any program.
    pub binaries: Option<(GlobSet, Vec<String>)>,
    pub enforcement: Enforcement,
    /// Method/path/query rules (`protocol: rest`); `None` means any request.
    pub rest: Option<RestRules>,
    /// `tls: skip`: tunnel HTTPS without inspecting it even when `rest` is set.
    pub tls_skip: bool,
}

/// OpenShell `protocol: rest`: `access` presets or explicit `rules`.
#[derive(Debug)]
pub struct RestRules {
    pub allow: Vec<RequestRule>,
}

#[derive(Debug)]
pub struct RequestRule {
    /// Upper-case method or `*`.
    pub method: String,
    pub path: PathGlob,
    /// Parameter name -> any of these globs.
    pub query: Vec<(String, GlobSet)>,
}

/// A path glob where `*` matches within one segment and `**` across segments.
#[derive(Debug)]
pub struct PathGlob {
    matcher: globset::GlobMatcher,
}

impl PathGlob {
    pub fn new(glob: &str) -> Result<Self> {
        let g = globset::GlobBuilder::new(glob)
            .literal_separator(true)
            .build()
            .with_context(|| format!("path glob `{glob}`"))?;
        Ok(PathGlob {
            matcher: g.compile_matcher(),
        })
    }

    pub fn matches(&self, path: &str) -> bool {
        self.matcher.is_match(path)
    }
}

/// What a connection or request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    /// Would be denied, but the rule in charge says `enforcement: audit`: logged and let through.
    Audit,
    Deny,
}

impl Verdict {
    pub fn lets_through(self) -> bool {
        self != Verdict::Deny
    }
}

/// A decision, with everything needed to explain it.
#[derive(Debug, Clone)]
pub struct Decision {
    pub verdict: Verdict,
    pub host: Host,
    pub port: u16,
    /// The rule that allowed (or audited) it, if any.
    pub rule: Option<String>,
    pub reason: String,
    /// How a person can allow it (for denials).
    pub hint: Option<String>,
    /// A rule names the host itself, so it may resolve to loopback/private addresses.
    pub explicit: bool,
    /// Indices of the matching rules whose L7 rules every plain-HTTP request must pass; empty
    /// when some matching rule allows any request.
    pub rest_rules: Vec<usize>,
    /// An allowing rule says `tls: skip`: a tunnel's bytes may pass even when they are neither
    /// a TLS ClientHello nor an HTTP request the proxy can check (SSH, a database protocol).
    pub opaque_ok: bool,
}

/// How the client will talk through the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Opaque bytes (CONNECT, SOCKS5): L7 rules cannot be checked.
    Tunnel,
    /// Plain HTTP requests the proxy sees one by one.
    PlainHttp,
    /// A CONNECT tunnel the proxy can open (TLS inspection): requests are seen one by one,
    /// except for rules that say `tls: skip`.
    Inspectable,
}

/// Whether `rule` wants each request checked on this channel.
fn checks_requests(rule: &Rule, channel: Channel) -> bool {
    match channel {
        Channel::Tunnel => false,
        Channel::PlainHttp => rule.rest.is_some(),
        Channel::Inspectable => rule.rest.is_some() && !rule.tls_skip,
    }
}

/// All rules of the effective policy.
#[derive(Debug, Default)]
pub struct Decider {
    rules: Vec<Rule>,
    /// `deniedDomains`: refused even when an allow rule matches.
    denies: Vec<Rule>,
}

fn describe_source(source: &Source) -> String {
    match source {
        Source::Org(p)
        | Source::Project(p)
        | Source::User(p)
        | Source::PolicyFile(p)
        | Source::SettingsFile(p) => p.display().to_string(),
        Source::CommandLine => "the command line".into(),
        Source::Default => "the built-in defaults".into(),
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
        Ok(n) if n > 0 => Ok(n),
        _ => bail!("`{p}` is not a port number (1-65535)"),
    }
}

impl Decider {
    /// Compile the policy's network section. Every bad pattern is an error naming its rule.
    pub fn from_policy(policy: &NetworkPolicy) -> Result<Decider> {
        let mut rules = Vec::new();
        for d in &policy.allowed_domains {
            rules.push(domain_rule(d, "--allow-domain", "allowed domain")?);
        }
        let mut denies = Vec::new();
        for d in &policy.denied_domains {
            denies.push(domain_rule(d, "denied domain", "denied domain")?);
        }
        for (key, rule) in &policy.rules {
            for (i, ep) in rule.value.endpoints.iter().enumerate() {
                let label = format!(
                    "network_policies.{key} ({}) endpoint {} in {}",
                    rule.value.name,
                    i + 1,
                    describe_source(&rule.source)
                );
                rules.push(
                    endpoint_rule(label.clone(), &rule.value, ep)
                        .with_context(|| format!("{label}: host `{}`", ep.host))?,
                );
            }
        }
        Ok(Decider { rules, denies })
    }

    /// Whether some rule checks requests over HTTPS (and so needs TLS inspection).
    pub fn needs_inspection(&self) -> bool {
        self.rules
            .iter()
            .any(|r| checks_requests(r, Channel::Inspectable))
    }

    /// Whether any rule depends on which program connects (identifying it costs a /proc walk).
    pub fn needs_binary(&self) -> bool {
        self.rules.iter().any(|r| r.binaries.is_some())
    }

    /// May the DNS stub answer for `host`? Yes when some allow rule names it and no deny rule
    /// refuses it on every port; ports, programs and requests are decided when it connects.
    pub fn resolvable(&self, host: &Host) -> Decision {
        // Without a matching rule this is the usual "no rule allows" denial, with its hint.
        let mut decision = self.decide(host, 0, None, Channel::Tunnel);
        decision.port = 0;
        if let Some(deny) = self
            .denies
            .iter()
            .find(|r| r.pattern.matches(host) && r.ports.is_empty())
        {
            decision.verdict = Verdict::Deny;
            decision.rule = Some(deny.label.clone());
            decision.reason = format!("{} refuses it (a deny beats every allow)", deny.label);
        } else if let Some(rule) = self.rules.iter().find(|r| r.pattern.matches(host)) {
            decision.verdict = Verdict::Allow;
            decision.rule = Some(rule.label.clone());
            decision.reason = format!("named by {}", rule.label);
            decision.hint = None;
        }
        decision
    }

    /// The TCP ports some rule allows, for Landlock (which sees the port a program connects to,
    /// not the host): `None` when a rule allows any port.
    pub fn connect_ports(&self) -> Option<Vec<u16>> {
        let mut ports = Vec::new();
        for r in &self.rules {
            if r.ports.is_empty() {
                return None;
            }
            ports.extend(&r.ports);
        }
        ports.sort_unstable();
        ports.dedup();
        Some(ports)
    }

    /// May `binary` (when known) open a connection to `host`:`port`? Decided on the name only.
    pub fn decide(
        &self,
        host: &Host,
        port: u16,
        binary: Option<&Program>,
        channel: Channel,
    ) -> Decision {
        let mut decision = Decision {
            verdict: Verdict::Deny,
            host: host.clone(),
            port,
            rule: None,
            reason: String::new(),
            hint: Some(allow_hint(host, None)),
            explicit: false,
            rest_rules: Vec::new(),
            opaque_ok: false,
        };
        if let Some(deny) = self
            .denies
            .iter()
            .find(|r| r.pattern.matches(host) && !port_refused(r, port))
        {
            decision.rule = Some(deny.label.clone());
            decision.reason = format!("{} refuses it (a deny beats every allow)", deny.label);
            decision.hint = Some(format!(
                "remove {} from the denied domains where it is declared",
                deny.pattern
            ));
            return decision;
        }
        let host_matches: Vec<(usize, &Rule)> = self
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.pattern.matches(host))
            .collect();
        if host_matches.is_empty() {
            decision.reason = match host {
                Host::Ip(_) => format!(
                    "no rule names the address {host}; IP addresses are reachable only when a rule names them"
                ),
                Host::Name(_) => format!("no rule allows {host}"),
            };
            return decision;
        }
        let mut refusals = Vec::new();
        let mut allowing = Vec::new();
        for (i, rule) in &host_matches {
            match refusal(rule, port, binary, channel) {
                Some(why) => refusals.push((*rule, why)),
                None => allowing.push((*i, *rule)),
            }
        }
        if let Some((_, first)) = allowing.first() {
            decision.verdict = Verdict::Allow;
            decision.rule = Some(first.label.clone());
            decision.reason = format!("allowed by {}", first.label);
            decision.hint = None;
            decision.explicit = allowing.iter().any(|(_, r)| r.pattern.is_explicit());
            decision.opaque_ok = allowing.iter().any(|(_, r)| r.tls_skip);
            // L7 applies only if every allowing rule restricts requests.
            if allowing.iter().all(|(_, r)| checks_requests(r, channel)) {
                decision.rest_rules = allowing.iter().map(|(i, _)| *i).collect();
            }
            return decision;
        }
        let (rule, why) = &refusals[0];
        decision.reason = why.clone();
        if port_refused(rule, port) {
            decision.hint = Some(allow_hint(host, Some(port)));
        }
        if let Some((audit, why)) = refusals
            .iter()
            .find(|(r, _)| r.enforcement == Enforcement::Audit)
        {
            decision.verdict = Verdict::Audit;
            decision.rule = Some(audit.label.clone());
            decision.reason = format!("audit only, would be denied: {why}");
            decision.explicit = audit.pattern.is_explicit();
            decision.hint = None;
            return decision;
        }
        decision.rule = Some(rule.label.clone());
        decision
    }

    /// Check one plain-HTTP request on a connection that `decide` allowed.
    pub fn check_request(
        &self,
        conn: &Decision,
        method: &str,
        path: &str,
        query: Option<&str>,
    ) -> Decision {
        let mut d = conn.clone();
        if !conn.verdict.lets_through() || conn.rest_rules.is_empty() {
            return d;
        }
        let params = parse_query(query.unwrap_or(""));
        let mut audit = None;
        for &i in &conn.rest_rules {
            let rule = &self.rules[i];
            let Some(rest) = &rule.rest else { continue };
            if rest.allow.iter().any(|r| r.matches(method, path, &params)) {
                d.verdict = Verdict::Allow;
                d.rule = Some(rule.label.clone());
                d.reason = format!("{method} {path} allowed by {}", rule.label);
                return d;
            }
            if rule.enforcement == Enforcement::Audit && audit.is_none() {
                audit = Some(rule);
            }
        }
        let first = &self.rules[conn.rest_rules[0]];
        let why = format!(
            "{} does not allow {method} {path}{}{} on {}",
            first.label,
            if query.is_some() { "?" } else { "" },
            query.unwrap_or(""),
            conn.host
        );
        match audit {
            Some(rule) => {
                d.verdict = Verdict::Audit;
                d.rule = Some(rule.label.clone());
                d.reason = format!("audit only, would be denied: {why}");
            }
            None => {
                d.verdict = Verdict::Deny;
                d.rule = Some(first.label.clone());
                d.reason = why;
                d.hint = Some(format!(
                    "add a rule for {method} {path} to the network policy that names {}",
                    conn.host
                ));
            }
        }
        d
    }
}

fn allow_hint(host: &Host, port: Option<u16>) -> String {
    let target = match port {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    format!("run sandbox-launch with `--allow-domain {target}`, or add {target} to the allowed domains of the sandbox policy")
}

fn port_refused(rule: &Rule, port: u16) -> bool {
    !rule.ports.is_empty() && !rule.ports.contains(&port)
}

/// Why `rule`, which matches the host, does not allow this connection (`None`: it does).
fn refusal(rule: &Rule, port: u16, binary: Option<&Program>, channel: Channel) -> Option<String> {
    if port_refused(rule, port) {
        return Some(format!(
            "{} allows this host only on port{} {}",
            rule.label,
            if rule.ports.len() == 1 { "" } else { "s" },
            rule.ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some((set, globs)) = &rule.binaries {
        match binary {
            None => {
                return Some(format!(
                    "{} allows only the programs {globs:?}, and the program that connected could not be identified",
                    rule.label
                ))
            }
            // The program or one of its ancestors (`gh` running `git`).
            Some(p) if !p.chain().any(|b| set.is_match(b)) => {
                return Some(format!(
                    "{} allows only the programs {globs:?}, not {}",
                    rule.label,
                    p.exe.display()
                ))
            }
            Some(_) => {}
        }
    }
    if channel == Channel::Tunnel && rule.rest.is_some() && !rule.tls_skip {
        return Some(format!(
            "{} allows only some HTTP requests, which cannot be checked inside an encrypted tunnel (TLS inspection is not available in this build; `tls: skip` tunnels without checking)",
            rule.label
        ));
    }
    None
}

fn domain_rule(d: &Sourced<String>, flag: &str, kind: &str) -> Result<Rule> {
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
    let pattern = HostPattern::parse(host).with_context(|| label.clone())?;
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

fn endpoint_rule(label: String, rule: &NetworkRule, ep: &Endpoint) -> Result<Rule> {
    let pattern = HostPattern::parse(&ep.host)?;
    let binaries = if rule.binaries.is_empty() {
        None
    } else {
        let mut b = GlobSetBuilder::new();
        for g in &rule.binaries {
            b.add(Glob::new(g).with_context(|| format!("binary glob `{g}`"))?);
        }
        Some((b.build()?, rule.binaries.clone()))
    };
    let rest = match ep.protocol.as_deref() {
        Some("rest") => Some(rest_rules(ep)?),
        Some(other) if !other.is_empty() => {
            bail!("protocol `{other}` is not supported (only `rest`)")
        }
        _ => None,
    };
    Ok(Rule {
        label,
        pattern,
        ports: ep.ports.clone(),
        binaries,
        // Anything that is not exactly `audit` enforces (the model already says so).
        enforcement: ep.enforcement,
        rest,
        tls_skip: ep.tls.as_deref() == Some("skip"),
    })
}

fn rest_rules(ep: &Endpoint) -> Result<RestRules> {
    let mut allow = Vec::new();
    if let Some(access) = &ep.access {
        let methods: &[&str] = match access.as_str() {
            "read-only" => &["GET", "HEAD", "OPTIONS"],
            "read-write" => &["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"],
            "full" => &["*"],
            other => bail!("access `{other}` is not one of read-only, read-write, full"),
        };
        for m in methods {
            allow.push(RequestRule {
                method: (*m).to_string(),
                path: PathGlob::new("/**")?,
                query: Vec::new(),
            });
        }
    }
    for r in &ep.rules {
        let mut query = Vec::new();
        for (name, globs) in &r.query {
            let mut b = GlobSetBuilder::new();
            for g in globs {
                b.add(Glob::new(g).with_context(|| format!("query glob `{g}`"))?);
            }
            query.push((name.clone(), b.build()?));
        }
        allow.push(RequestRule {
            method: r.method.to_ascii_uppercase(),
            path: PathGlob::new(&r.path)?,
            query,
        });
    }
    if ep.access.is_none() && ep.rules.is_empty() {
        // `protocol: rest` alone restricts nothing.
        allow.push(RequestRule {
            method: "*".into(),
            path: PathGlob::new("/**")?,
            query: Vec::new(),
        });
    }
    Ok(RestRules { allow })
}

impl RequestRule {
    fn matches(&self, method: &str, path: &str, params: &[(String, String)]) -> bool {
        let method_ok = self.method == "*" || self.method.eq_ignore_ascii_case(method);
        method_ok
            && self.path.matches(path)
            && self.query.iter().all(|(name, set)| {
                let mut values = params.iter().filter(|(k, _)| k == name).peekable();
                values.peek().is_some() && values.all(|(_, v)| set.is_match(v))
            })
    }
}

/// Decode `a=1&b=x%20y` into pairs (`+` is a space, as in forms).
fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = match bytes[i] {
            b'%' if i + 2 < bytes.len() => hex(bytes[i + 1])
                .zip(hex(bytes[i + 2]))
                .map(|(h, l)| (h * 16 + l) as u8),
            _ => None,
        };
        match (decoded, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, b) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use std::path::PathBuf;

    use super::*;
    use crate::policy::model::HttpRule;

    fn program(exe: &str, ancestors: &[&str]) -> Program {
        Program {
            exe: PathBuf::from(exe),
            ancestors: ancestors.iter().map(PathBuf::from).collect(),
        }
    }

    fn domains(list: &[&str]) -> Decider {
        Decider::from_policy(&crate::proxy::testing::allowing(list)).unwrap()
    }

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    fn endpoint(host: &str, ports: &[u16]) -> Endpoint {
        Endpoint {
            host: host.into(),
            ports: ports.to_vec(),
            protocol: None,
            tls: None,
            enforcement: Enforcement::Enforce,
            access: None,
            rules: vec![],
        }
    }

    fn openshell(endpoints: Vec<Endpoint>, binaries: &[&str]) -> Decider {
        let mut rules = BTreeMap::new();
        rules.insert(
            "api".to_string(),
            Sourced::new(
                NetworkRule {
                    name: "api".into(),
                    endpoints,
                    binaries: binaries.iter().map(|b| b.to_string()).collect(),
                },
                Source::PolicyFile("/p.yaml".into()),
            ),
        );
        Decider::from_policy(&NetworkPolicy {
            mode: None,
            denied_domains: vec![],
            allowed_domains: vec![],
            rules,
        })
        .unwrap()
    }

    #[test]
    fn empty_policy_denies_everything_and_says_how_to_allow() {
        let d = Decider::default().decide(&host("example.com"), 443, None, Channel::Tunnel);
        assert_eq!(d.verdict, Verdict::Deny);
        assert_eq!(d.reason, "no rule allows example.com");
        assert!(d.hint.unwrap().contains("--allow-domain example.com"));
    }

    #[test]
    fn domain_only_rule_allows_any_port_and_host_port_narrows() {
        let d = domains(&["github.com", "api.test:8443"]);
        for port in [80, 443, 22] {
            assert_eq!(
                d.decide(&host("github.com"), port, None, Channel::Tunnel)
                    .verdict,
                Verdict::Allow
            );
        }
        assert_eq!(
            d.decide(&host("api.test"), 8443, None, Channel::Tunnel)
                .verdict,
            Verdict::Allow
        );
        let denied = d.decide(&host("api.test"), 443, None, Channel::Tunnel);
        assert_eq!(denied.verdict, Verdict::Deny);
        assert!(
            denied.reason.contains("only on port 8443"),
            "{}",
            denied.reason
        );
        assert!(denied.hint.unwrap().contains("--allow-domain api.test:443"));
    }

    #[test]
    fn nonsense_patterns_fail_at_load_naming_the_rule() {
        for bad in ["*", "*.com", "exa*mple.com", "host:0", "host:99999"] {
            let policy = NetworkPolicy {
                mode: None,
                denied_domains: vec![],
                allowed_domains: vec![Sourced::new(bad.to_string(), Source::CommandLine)],
                rules: BTreeMap::new(),
            };
            let err = format!("{:#}", Decider::from_policy(&policy).unwrap_err());
            assert!(err.contains(&format!("--allow-domain {bad}")), "{err}");
        }
        let mut rules = BTreeMap::new();
        rules.insert(
            "wide".to_string(),
            Sourced::new(
                NetworkRule {
                    name: "too wide".into(),
                    endpoints: vec![endpoint("*.com", &[])],
                    binaries: vec![],
                },
                Source::PolicyFile("/p.yaml".into()),
            ),
        );
        let err = Decider::from_policy(&NetworkPolicy {
            mode: None,
            denied_domains: vec![],
            allowed_domains: vec![],
            rules,
        })
        .unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.contains("network_policies.wide") && err.contains("*.com"),
            "{err}"
        );
    }

    #[test]
    fn ip_literal_denied_unless_named() {
        let d = domains(&["example.com"]);
        let denied = d.decide(&host("93.184.216.34"), 80, None, Channel::Tunnel);
        assert_eq!(denied.verdict, Verdict::Deny);
        assert!(denied.reason.contains("IP addresses"), "{}", denied.reason);
        let d = domains(&["93.184.216.34", "[::1]:8080"]);
        let ok = d.decide(&host("93.184.216.34"), 80, None, Channel::Tunnel);
        assert!(ok.verdict == Verdict::Allow && ok.explicit);
        assert_eq!(
            d.decide(&host("::1"), 8080, None, Channel::Tunnel).verdict,
            Verdict::Allow
        );
        assert_eq!(
            d.decide(&host("::1"), 8081, None, Channel::Tunnel).verdict,
            Verdict::Deny
        );
    }

    #[test]
    fn wildcard_rule_is_not_explicit_exact_rule_is() {
        let d = domains(&["*.example.com", "db.internal.test"]);
        let w = d.decide(&host("api.example.com"), 443, None, Channel::Tunnel);
        assert!(w.verdict == Verdict::Allow && !w.explicit);
        let e = d.decide(&host("db.internal.test"), 5432, None, Channel::Tunnel);
        assert!(e.verdict == Verdict::Allow && e.explicit);
        assert_eq!(
            d.decide(&host("example.com"), 443, None, Channel::Tunnel)
                .verdict,
            Verdict::Deny
        );
    }

    #[test]
    fn endpoint_ports_and_binaries_narrow() {
        let d = openshell(
            vec![endpoint("api.test", &[443])],
            &["/usr/bin/curl", "/usr/lib/node*/**"],
        );
        let curl = &program("/usr/bin/curl", &[]);
        assert_eq!(
            d.decide(&host("api.test"), 443, Some(curl), Channel::Tunnel)
                .verdict,
            Verdict::Allow
        );
        assert_eq!(
            d.decide(
                &host("api.test"),
                443,
                Some(&program("/usr/lib/node18/bin/node", &[])),
                Channel::Tunnel
            )
            .verdict,
            Verdict::Allow
        );
        let wrong = d.decide(
            &host("api.test"),
            443,
            Some(&program("/usr/bin/wget", &["/bin/bash"])),
            Channel::Tunnel,
        );
        assert_eq!(wrong.verdict, Verdict::Deny);
        assert!(wrong.reason.contains("/usr/bin/wget"), "{}", wrong.reason);
        // A program started by an allowed one is allowed (`curl` running a helper).
        let child = program("/usr/bin/wget", &["/bin/sh", "/usr/bin/curl", "/bin/bash"]);
        assert_eq!(
            d.decide(&host("api.test"), 443, Some(&child), Channel::Tunnel)
                .verdict,
            Verdict::Allow
        );
        // Unknown program: fail closed.
        assert_eq!(
            d.decide(&host("api.test"), 443, None, Channel::Tunnel)
                .verdict,
            Verdict::Deny
        );
        assert_eq!(
            d.decide(&host("api.test"), 80, Some(curl), Channel::Tunnel)
                .verdict,
            Verdict::Deny
        );
    }

    #[test]
    fn audit_lets_through_and_says_it_would_deny() {
        let mut ep = endpoint("api.test", &[443]);
        ep.enforcement = Enforcement::Audit;
        let d = openshell(vec![ep], &[]);
        let a = d.decide(&host("api.test"), 80, None, Channel::Tunnel);
        assert_eq!(a.verdict, Verdict::Audit);
        assert!(
            a.reason.starts_with("audit only, would be denied"),
            "{}",
            a.reason
        );
        assert_eq!(
            d.decide(&host("other.test"), 443, None, Channel::Tunnel)
                .verdict,
            Verdict::Deny
        );
    }

    #[test]
    fn rest_rules_check_method_path_and_query() {
        let mut ep = endpoint("api.test", &[80]);
        ep.protocol = Some("rest".into());
        let mut query = BTreeMap::new();
        query.insert(
            "ref".to_string(),
            vec!["main".to_string(), "v*".to_string()],
        );
        ep.rules = vec![
            HttpRule {
                method: "GET".into(),
                path: "/repos/*/issues".into(),
                query: BTreeMap::new(),
            },
            HttpRule {
                method: "post".into(),
                path: "/upload/**".into(),
                query,
            },
        ];
        let d = openshell(vec![ep], &[]);
        let conn = d.decide(&host("api.test"), 80, None, Channel::PlainHttp);
        assert_eq!(conn.verdict, Verdict::Allow);
        let check = |m, p, q| d.check_request(&conn, m, p, q).verdict;
        assert_eq!(check("GET", "/repos/x/issues", None), Verdict::Allow);
        assert_eq!(check("GET", "/repos/x/y/issues", None), Verdict::Deny);
        assert_eq!(check("DELETE", "/repos/x/issues", None), Verdict::Deny);
        assert_eq!(
            check("POST", "/upload/a/b", Some("ref=main")),
            Verdict::Allow
        );
        assert_eq!(
            check("POST", "/upload/a/b", Some("ref=v1%2E2")),
            Verdict::Allow
        );
        assert_eq!(check("POST", "/upload/a/b", Some("ref=dev")), Verdict::Deny);
        assert_eq!(check("POST", "/upload/a/b", None), Verdict::Deny);
        // Encrypted tunnels cannot be checked: refused rather than let through unchecked.
        assert_eq!(
            d.decide(&host("api.test"), 80, None, Channel::Tunnel)
                .verdict,
            Verdict::Deny
        );
    }

    #[test]
    fn inspectable_tunnels_check_requests_unless_tls_skip() {
        let mut ep = endpoint("api.test", &[443]);
        ep.protocol = Some("rest".into());
        ep.access = Some("read-only".into());
        let d = openshell(vec![ep.clone()], &[]);
        assert!(d.needs_inspection());
        let conn = d.decide(&host("api.test"), 443, None, Channel::Inspectable);
        assert_eq!(conn.verdict, Verdict::Allow);
        assert!(!conn.rest_rules.is_empty());
        assert_eq!(
            d.check_request(&conn, "DELETE", "/x", None).verdict,
            Verdict::Deny
        );
        ep.tls = Some("skip".into());
        let d = openshell(vec![ep], &[]);
        assert!(!d.needs_inspection());
        let conn = d.decide(&host("api.test"), 443, None, Channel::Inspectable);
        assert!(conn.verdict == Verdict::Allow && conn.rest_rules.is_empty());
    }

    #[test]
    fn access_presets_map_to_methods() {
        let mut ep = endpoint("api.test", &[]);
        ep.protocol = Some("rest".into());
        ep.access = Some("read-only".into());
        let d = openshell(vec![ep], &[]);
        let conn = d.decide(&host("api.test"), 80, None, Channel::PlainHttp);
        assert_eq!(
            d.check_request(&conn, "GET", "/a/b", None).verdict,
            Verdict::Allow
        );
        assert_eq!(
            d.check_request(&conn, "POST", "/a", None).verdict,
            Verdict::Deny
        );
    }

    #[test]
    fn denied_domain_beats_an_allow_and_names_the_organization() {
        let policy = NetworkPolicy {
            allowed_domains: vec![Sourced::new("*.github.com".into(), Source::CommandLine)],
            denied_domains: vec![Sourced::new(
                "gist.github.com".into(),
                Source::Org("/etc/sandbox-launch/settings.json".into()),
            )],
            ..Default::default()
        };
        let d = Decider::from_policy(&policy).unwrap();
        assert_eq!(
            d.decide(&host("api.github.com"), 443, None, Channel::Tunnel)
                .verdict,
            Verdict::Allow
        );
        let denied = d.decide(&host("gist.github.com"), 443, None, Channel::Tunnel);
        assert_eq!(denied.verdict, Verdict::Deny);
        assert!(
            denied.reason.contains("(organization policy)"),
            "{}",
            denied.reason
        );
    }

    #[test]
    fn split_host_port_handles_ipv6() {
        assert_eq!(split_host_port("a.test:80").unwrap(), ("a.test", Some(80)));
        assert_eq!(split_host_port("[::1]:80").unwrap(), ("[::1]", Some(80)));
        assert_eq!(split_host_port("[::1]").unwrap(), ("[::1]", None));
        assert_eq!(split_host_port("::1").unwrap(), ("::1", None));
        assert_eq!(split_host_port("a.test").unwrap(), ("a.test", None));
    }
}
