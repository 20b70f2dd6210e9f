//! The decision: may this program reach this host on this port (decided on the name alone,
//! before anything is looked up), and may this HTTP request pass on a connection that was let
//! through. The rules come compiled from [`super::rules`]; the words of every refusal from
//! [`super::explain`].
//!
//! Requests are decided as OpenShell decides them: the path is made canonical first
//! ([`super::request_path`]) and the server is sent that path; a `deny_rules` entry of any rule
//! that speaks for the connection beats every allow; when some rule that lets the connection
//! through checks requests, only request rules can allow a request (a rule without request rules
//! does not wave it through). A request is also decided as each method it asks the server to
//! take it for instead ([`super::request_method`]).

use anyhow::Result;
use hyper::header::HeaderMap;

use super::explain;
use super::identify::Program;
use super::matcher::Host;
use super::request_method;
use super::request_path::{self, CanonicalPath, PathError};
use super::rules::{Rule, Rules};
use crate::policy::model::{Enforcement, NetworkPolicy};

pub use super::rules::split_host_port;

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
    /// Indices of the rules whose request rules decide every plain-HTTP (or inspected) request
    /// on this connection; empty when requests are not looked at.
    pub rest_rules: Vec<usize>,
    /// An allowing rule says `tls: skip`: a tunnel's bytes may pass even when they are neither
    /// a TLS ClientHello nor an HTTP request the proxy can check (SSH, a database protocol).
    pub opaque_ok: bool,
    /// For a request let through: the canonical path to send the server instead of the one the
    /// client wrote (`None`: send it as written).
    pub canonical_path: Option<String>,
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
    rule.rest.is_some() && (channel == Channel::PlainHttp || !rule.tls_skip)
}

/// All rules of the effective policy.
#[derive(Debug, Default)]
pub struct Decider {
    rules: Rules,
}

impl Decider {
    /// Compile the policy's network section. Every bad pattern is an error naming its rule.
    pub fn from_policy(policy: &NetworkPolicy) -> Result<Decider> {
        Ok(Decider {
            rules: Rules::compile(policy)?,
        })
    }

    /// Whether some rule checks requests over HTTPS (and so needs TLS inspection).
    pub fn needs_inspection(&self) -> bool {
        self.rules
            .allows
            .iter()
            .any(|r| checks_requests(r, Channel::Inspectable))
    }

    /// Whether any rule depends on which program connects (identifying it costs a /proc walk).
    pub fn needs_binary(&self) -> bool {
        self.rules.allows.iter().any(|r| r.binaries.is_some())
    }

    /// May the DNS stub answer for `host`? Yes when some allow rule names it and no deny rule
    /// refuses it on every port; ports, programs and requests are decided when it connects.
    pub fn resolvable(&self, host: &Host) -> Decision {
        // Without a matching rule this is the usual "no rule allows" denial, with its hint.
        let mut decision = self.decide(host, 0, None, Channel::Tunnel);
        decision.port = 0;
        if let Some(deny) = self
            .rules
            .denies
            .iter()
            .find(|r| r.pattern.matches(host) && r.ports.is_empty())
        {
            decision.verdict = Verdict::Deny;
            decision.rule = Some(deny.label.clone());
            decision.reason = explain::denied_domain(deny).0;
        } else if let Some(rule) = self.rules.allows.iter().find(|r| r.pattern.matches(host)) {
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
        for r in &self.rules.allows {
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
            hint: Some(explain::allow_hint(host, None)),
            explicit: false,
            rest_rules: Vec::new(),
            opaque_ok: false,
            canonical_path: None,
        };
        if let Some(deny) = self
            .rules
            .denies
            .iter()
            .find(|r| r.pattern.matches(host) && !explain::port_refused(r, port))
        {
            let (reason, hint) = explain::denied_domain(deny);
            decision.rule = Some(deny.label.clone());
            decision.reason = reason;
            decision.hint = Some(hint);
            return decision;
        }
        let named: Vec<(usize, &Rule)> = self
            .rules
            .allows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.pattern.matches(host))
            .collect();
        if named.is_empty() {
            decision.reason = explain::unnamed(host);
            return decision;
        }
        let mut refusals = Vec::new();
        let mut allowing = Vec::new();
        for (i, rule) in &named {
            match explain::refusal(rule, port, binary, channel) {
                Some(why) => refusals.push((*rule, why)),
                None => allowing.push((*i, *rule)),
            }
        }
        // A rule that checks requests and cannot here (an opaque tunnel) refuses the connection
        // even when a broader rule would let it through: its request rules would be skipped.
        let unchecked = refusals.iter().find(|(r, _)| {
            checks_requests(r, channel)
                && explain::refusal(r, port, binary, Channel::PlainHttp).is_none()
        });
        if let (Some((_, first)), None) = (allowing.first(), unchecked) {
            decision.verdict = Verdict::Allow;
            decision.rule = Some(first.label.clone());
            decision.reason = format!("allowed by {}", first.label);
            decision.hint = None;
            decision.explicit = allowing.iter().any(|(_, r)| r.pattern.is_explicit());
            decision.opaque_ok = allowing.iter().any(|(_, r)| r.tls_skip);
            decision.rest_rules = allowing
                .iter()
                .filter(|(_, r)| checks_requests(r, channel))
                .map(|(i, _)| *i)
                .collect();
            return decision;
        }
        let (rule, why) = unchecked.unwrap_or(&refusals[0]);
        decision.reason = why.clone();
        if explain::port_refused(rule, port) {
            decision.hint = Some(explain::allow_hint(host, Some(port)));
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

    /// Check one HTTP request on a connection that `decide` allowed. `path` and `query` are as
    /// the client wrote them; the decision's `canonical_path` says what to send the server.
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
        let rules: Vec<&Rule> = conn
            .rest_rules
            .iter()
            .map(|&i| &self.rules.allows[i])
            .collect();
        let shown = explain::request(method, path, query);
        let canonical = match self.canonical(&rules, path, query) {
            Ok(c) => c,
            Err(e) => {
                d.verdict = Verdict::Deny;
                d.rule = Some(rules[0].label.clone());
                d.reason = format!("{shown} on {} is refused: {e}", conn.host);
                d.hint = Some(
                    "send the request with a plain path (no `..`, encoded `/`, control bytes or fragment)"
                        .into(),
                );
                return d;
            }
        };
        let (cpath, params) = canonical;
        let verdict = decide_request(&rules, method, &cpath.path, &params);
        let shown = explain::request(method, &cpath.path, query);
        match verdict {
            RequestVerdict::Allowed(rule) => {
                d.verdict = Verdict::Allow;
                d.rule = Some(rule.label.clone());
                d.reason = format!("{shown} allowed by {}", rule.label);
            }
            RequestVerdict::Refused { by, deny, audit } => {
                let why = if deny {
                    format!(
                        "{shown} on {} is refused by a deny rule of {}",
                        conn.host, by.label
                    )
                } else {
                    format!("{} does not allow {shown} on {}", by.label, conn.host)
                };
                if audit {
                    d.verdict = Verdict::Audit;
                    d.reason = format!("audit only, would be denied: {why}");
                } else {
                    d.verdict = Verdict::Deny;
                    d.reason = why;
                    d.hint = Some(explain::request_hint(method, &cpath.path, &conn.host));
                }
                d.rule = Some(by.label.clone());
            }
        }
        if d.verdict.lets_through() && cpath.rewritten {
            d.canonical_path = Some(cpath.path);
        }
        d
    }

    /// [`Decider::check_request`] for a request as a server may take it: also as every method
    /// its method-override headers or `_method` parameter name ([`request_method`]). The
    /// strictest answer counts.
    pub fn check_http(
        &self,
        conn: &Decision,
        method: &str,
        headers: &HeaderMap,
        path: &str,
        query: Option<&str>,
    ) -> Decision {
        let mut worst = self.check_request(conn, method, path, query);
        if !worst.verdict.lets_through() || conn.rest_rules.is_empty() {
            return worst;
        }
        // The query parsed, or the request would have been refused above.
        let params = request_path::parse_query(query.unwrap_or("")).unwrap_or_default();
        let overrides = match request_method::overrides(headers, &params) {
            Ok(o) => o,
            Err(why) => {
                worst.verdict = Verdict::Deny;
                worst.reason = format!("{} on {} is refused: {why}", method, conn.host);
                worst.hint = Some("send the method on the request line".into());
                worst.canonical_path = None;
                return worst;
            }
        };
        for o in overrides {
            let mut d = self.check_request(conn, &o.method, path, query);
            d.reason = format!("taken as {} (the {}): {}", o.method, o.via, d.reason);
            match d.verdict {
                Verdict::Deny => return d,
                Verdict::Audit if worst.verdict == Verdict::Allow => {
                    worst.verdict = Verdict::Audit;
                    worst.rule = d.rule;
                    worst.reason = d.reason;
                }
                _ => {}
            }
        }
        worst
    }

    /// The canonical path (allowing `%2F` if one of the rules does) and the decoded query.
    fn canonical(
        &self,
        rules: &[&Rule],
        path: &str,
        query: Option<&str>,
    ) -> Result<(CanonicalPath, Vec<(String, String)>), PathError> {
        let allow_slash = rules
            .iter()
            .any(|r| r.rest.as_ref().is_some_and(|rest| rest.allow_encoded_slash));
        let cpath = request_path::canonicalize(path, allow_slash)?;
        let params = request_path::parse_query(query.unwrap_or(""))?;
        Ok((cpath, params))
    }
}

enum RequestVerdict<'r> {
    Allowed(&'r Rule),
    /// `deny`: a deny rule matched; `audit`: every rule that refuses it only audits.
    Refused {
        by: &'r Rule,
        deny: bool,
        audit: bool,
    },
}

/// Denies of every rule that speaks for the path first, then allows.
fn decide_request<'r>(
    rules: &[&'r Rule],
    method: &str,
    path: &str,
    params: &[(String, String)],
) -> RequestVerdict<'r> {
    let covering: Vec<&Rule> = rules
        .iter()
        .copied()
        .filter(|r| r.rest.as_ref().is_some_and(|rest| rest.covers(path)))
        .collect();
    let denying: Vec<&Rule> = covering
        .iter()
        .copied()
        .filter(|r| {
            r.rest
                .as_ref()
                .is_some_and(|rest| rest.deny.iter().any(|d| d.denies(method, path, params)))
        })
        .collect();
    if let Some(first) = denying.first() {
        return RequestVerdict::Refused {
            by: first,
            deny: true,
            audit: denying.iter().all(|r| r.enforcement == Enforcement::Audit),
        };
    }
    if let Some(rule) = covering.iter().find(|r| {
        r.rest
            .as_ref()
            .is_some_and(|rest| rest.allow.iter().any(|a| a.allows(method, path, params)))
    }) {
        return RequestVerdict::Allowed(rule);
    }
    let audit = covering.iter().any(|r| r.enforcement == Enforcement::Audit);
    RequestVerdict::Refused {
        by: covering.first().copied().unwrap_or(rules[0]),
        deny: false,
        audit,
    }
}

#[cfg(test)]
mod tests;
