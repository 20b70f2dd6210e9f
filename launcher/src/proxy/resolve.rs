//! Resolve an allowed name once, check every address it gave, and dial exactly those addresses:
//! no second lookup, so no window for DNS rebinding. `--resolve HOST:ADDR` (curl's convention)
//! pins a name to an address without asking DNS.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use anyhow::{bail, Context, Result};
use tokio::net::TcpStream;

use super::decide::Decision;
use super::matcher::{canonical_ip, special_range, Host};

/// Where names come from.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    overrides: HashMap<String, Vec<IpAddr>>,
    /// Ask the system resolver for names without an override. Off in unit tests, so that they
    /// never send a query anywhere.
    system: bool,
    /// A parent proxy every connection goes through, by name (a nested sandbox's; see
    /// `super::parent`).
    parent: Option<SocketAddr>,
}

/// Why an allowed name could not be dialled.
#[derive(Debug)]
pub enum DialError {
    /// The name resolved to an address the rule may not reach: a policy denial.
    Forbidden(String),
    /// DNS had no answer.
    Unresolved(String),
    /// Every checked address refused or timed out.
    Connect(String),
}

impl std::fmt::Display for DialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DialError::Forbidden(s) | DialError::Unresolved(s) | DialError::Connect(s) => {
                f.write_str(s)
            }
        }
    }
}

/// Parse `HOST:ADDR` (and curl's `HOST:PORT:ADDR`, whose port is ignored).
pub fn parse_override(spec: &str) -> Result<(String, IpAddr)> {
    let (host, rest) = spec
        .split_once(':')
        .with_context(|| format!("--resolve {spec}: expected HOST:ADDR"))?;
    let addr_text = match rest.split_once(':') {
        Some((port, addr)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => addr,
        _ => rest,
    };
    let addr_text = addr_text
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(addr_text);
    let addr: IpAddr = addr_text
        .parse()
        .with_context(|| format!("--resolve {spec}: `{addr_text}` is not an IP address"))?;
    let host = match Host::parse(host).with_context(|| format!("--resolve {spec}"))? {
        Host::Name(n) => n,
        Host::Ip(_) => bail!("--resolve {spec}: HOST must be a name"),
    };
    Ok((host, canonical_ip(addr)))
}

impl Resolver {
    /// The system resolver, with `overrides` taking precedence.
    pub fn system(overrides: Vec<(String, IpAddr)>) -> Self {
        let mut r = Self::offline(overrides);
        r.system = true;
        r
    }

    /// Only the overrides; every other name is unknown.
    pub fn offline(overrides: Vec<(String, IpAddr)>) -> Self {
        let mut map: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for (host, ip) in overrides {
            map.entry(host).or_default().push(ip);
        }
        Resolver {
            overrides: map,
            system: false,
            parent: None,
        }
    }

    /// Dial every allowed connection through the HTTP proxy at `parent`, which decides again.
    pub fn through(mut self, parent: SocketAddr) -> Self {
        self.parent = Some(parent);
        self
    }

    fn has_override(&self, host: &super::matcher::Host) -> bool {
        matches!(host, super::matcher::Host::Name(n) if self.overrides.contains_key(n))
    }

    /// The addresses of an allowed host, each checked against what the decision permits.
    pub async fn resolve_checked(
        &self,
        decision: &Decision,
    ) -> std::result::Result<Vec<SocketAddr>, DialError> {
        let port = decision.port;
        let addrs: Vec<SocketAddr> = match &decision.host {
            Host::Ip(ip) => vec![SocketAddr::new(*ip, port)],
            Host::Name(name) => match self.overrides.get(name) {
                Some(ips) => ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect(),
                None if self.system => tokio::net::lookup_host((name.as_str(), port))
                    .await
                    .map_err(|e| DialError::Unresolved(format!("cannot resolve {name}: {e}")))?
                    .collect(),
                None => Vec::new(),
            },
        };
        if addrs.is_empty() {
            return Err(DialError::Unresolved(format!(
                "{} has no address",
                decision.host
            )));
        }
        let addrs: Vec<SocketAddr> = addrs
            .into_iter()
            .map(|a| SocketAddr::new(canonical_ip(a.ip()), a.port()))
            .collect();
        check_addresses(decision, &addrs)?;
        Ok(addrs)
    }

    /// Resolve, check, and connect to the first checked address that answers.
    pub async fn dial(&self, decision: &Decision) -> std::result::Result<TcpStream, DialError> {
        if let Some(parent) = self.parent {
            // The parent resolves; only the addresses known here are checked here.
            if matches!(decision.host, super::matcher::Host::Ip(_))
                || self.has_override(&decision.host)
            {
                self.resolve_checked(decision).await?;
            }
            return super::parent::connect(parent, &decision.host, decision.port).await;
        }
        let addrs = self.resolve_checked(decision).await?;
        let mut last = None;
        for addr in &addrs {
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => last = Some(format!("{addr}: {e}")),
            }
        }
        Err(DialError::Connect(format!(
            "cannot connect to {}:{} ({})",
            decision.host,
            decision.port,
            last.unwrap_or_default()
        )))
    }
}

/// Loopback, link-local, private and metadata addresses are reachable only through a rule that
/// names the host itself; one such address among the answers denies the whole name.
fn check_addresses(decision: &Decision, addrs: &[SocketAddr]) -> Result<(), DialError> {
    if decision.explicit {
        return Ok(());
    }
    for a in addrs {
        if let Some(range) = special_range(a.ip()) {
            return Err(DialError::Forbidden(format!(
                "{} resolves to {} ({range}), which is reachable only when a rule names {} exactly",
                decision.host,
                a.ip(),
                decision.host
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::decide::{Channel, Decider, Verdict};

    fn decider(domains: &[&str]) -> Decider {
        Decider::from_policy(&crate::proxy::testing::allowing(domains)).unwrap()
    }

    #[test]
    fn override_syntax_follows_curl() {
        assert_eq!(
            parse_override("allowed.test:127.0.0.1").unwrap(),
            ("allowed.test".to_string(), "127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            parse_override("Allowed.Test.:443:127.0.0.2").unwrap(),
            ("allowed.test".to_string(), "127.0.0.2".parse().unwrap())
        );
        assert_eq!(
            parse_override("v6.test:[::1]").unwrap().1,
            "::1".parse::<IpAddr>().unwrap()
        );
        assert!(parse_override("nocolon").is_err());
        assert!(parse_override("x.test:notanip").is_err());
    }

    #[tokio::test]
    async fn loopback_name_is_refused_unless_named_exactly() {
        let resolver = Resolver::offline(vec![
            ("api.corp.test".into(), "127.0.0.1".parse().unwrap()),
            ("meta.corp.test".into(), "169.254.169.254".parse().unwrap()),
        ]);
        let wide = decider(&["*.corp.test"]);
        for name in ["api.corp.test", "meta.corp.test"] {
            let d = wide.decide(&Host::parse(name).unwrap(), 80, None, Channel::Tunnel);
            assert_eq!(d.verdict, Verdict::Allow);
            match resolver.resolve_checked(&d).await {
                Err(DialError::Forbidden(why)) => assert!(why.contains("exactly"), "{why}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        let named = decider(&["api.corp.test"]);
        let d = named.decide(
            &Host::parse("api.corp.test").unwrap(),
            80,
            None,
            Channel::Tunnel,
        );
        let addrs = resolver.resolve_checked(&d).await.unwrap();
        assert_eq!(addrs, vec!["127.0.0.1:80".parse().unwrap()]);
    }

    #[tokio::test]
    async fn offline_resolver_never_looks_names_up() {
        let d = decider(&["example.com"]).decide(
            &Host::parse("example.com").unwrap(),
            80,
            None,
            Channel::Tunnel,
        );
        assert!(matches!(
            Resolver::offline(vec![]).resolve_checked(&d).await,
            Err(DialError::Unresolved(_))
        ));
    }
}
