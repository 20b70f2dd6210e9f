//! Host names and host patterns: normalisation (case, trailing dot, IDN to punycode, IP
//! literals) and matching (exact, `*.suffix` for subdomains only, IP literal).
//!
//! Everything is compared in one canonical form: lower-case ASCII (punycode), no trailing dot,
//! IPv6 without brackets and IPv4-mapped IPv6 addresses as IPv4.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{bail, Context, Result};

/// A host as asked for by a client, in canonical form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// What a rule's host names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this name.
    Exact(String),
    /// Any name strictly below this suffix (`*.example.com` stores `example.com`).
    Subdomains(String),
    /// Exactly this address.
    Ip(IpAddr),
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(n) => f.write_str(n),
            HostPattern::Subdomains(s) => write!(f, "*.{s}"),
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            HostPattern::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl HostPattern {
    /// Parse a rule's host: `example.com`, `*.example.com`, `127.0.0.1`, `[::1]` or `::1`.
    /// Rejects patterns that would open everything (`*`, `*.com`) or that are not host names.
    pub fn parse(pattern: &str) -> Result<HostPattern> {
        let trimmed = pattern.trim();
        if trimmed == "*" || trimmed == "*." {
            bail!("`*` would allow every host; name the hosts (e.g. `*.example.com`)");
        }
        if let Some(suffix) = trimmed.strip_prefix("*.") {
            let suffix = match Host::parse(suffix)? {
                Host::Name(n) => n,
                Host::Ip(_) => bail!("a wildcard cannot stand in front of an IP address"),
            };
            if !suffix.contains('.') {
                bail!("`*.{suffix}` would allow a whole top-level domain; name a registered domain (e.g. `*.example.{suffix}`)");
            }
            return Ok(HostPattern::Subdomains(suffix));
        }
        if trimmed.contains('*') {
            bail!("`*` is only allowed as the whole first label (`*.example.com`)");
        }
        Ok(match Host::parse(trimmed)? {
            Host::Name(n) => HostPattern::Exact(n),
            Host::Ip(ip) => HostPattern::Ip(ip),
        })
    }

    pub fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Exact(p), Host::Name(n)) => p == n,
            (HostPattern::Subdomains(s), Host::Name(n)) => n
                .strip_suffix(s.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostPattern::Ip(p), Host::Ip(ip)) => p == ip,
            _ => false,
        }
    }

    /// Whether a match names the host itself (so that it may reach special addresses such as
    /// loopback), rather than a whole family of hosts.
    pub fn is_explicit(&self) -> bool {
        !matches!(self, HostPattern::Subdomains(_))
    }
}

impl Host {
    /// Canonicalise a host as a client sent it (URI authority host, CONNECT target, SOCKS name).
    pub fn parse(raw: &str) -> Result<Host> {
        let s = raw.trim();
        if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let ip: Ipv6Addr = inner
                .parse()
                .with_context(|| format!("`{raw}` is not an IPv6 address"))?;
            return Ok(Host::Ip(canonical_ip(IpAddr::V6(ip))));
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Host::Ip(canonical_ip(ip)));
        }
        let s = s.strip_suffix('.').unwrap_or(s);
        if s.is_empty() {
            bail!("empty host name");
        }
        if s.len() > 253 {
            bail!("host name `{raw}` is longer than 253 characters");
        }
        let ascii = idna::domain_to_ascii_strict(s)
            .map_err(|_| anyhow::anyhow!("`{raw}` is not a valid host name"))?;
        if ascii.is_empty() || ascii.split('.').any(str::is_empty) {
            bail!("`{raw}` is not a valid host name");
        }
        if looks_numeric(&ascii) {
            // `127.1`, `0x7f.0.0.1`, `2130706433`: resolvers read these as addresses.
            bail!("`{raw}` is an unusual spelling of an IP address; write it as a dotted quad");
        }
        Ok(Host::Name(ascii))
    }
}

/// A name whose last label is a number is read as an IPv4 address by `inet_aton` and browsers.
fn looks_numeric(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    let hex = last
        .strip_prefix("0x")
        .is_some_and(|h| h.chars().all(|c| c.is_ascii_hexdigit()));
    hex || (!last.is_empty() && last.chars().all(|c| c.is_ascii_digit()))
}

/// IPv4-mapped IPv6 (`::ffff:127.0.0.1`) is the IPv4 address it carries.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Why an address is not an ordinary public one, if it is not: such addresses are reachable
/// only when a rule names the host explicitly.
pub fn special_range(ip: IpAddr) -> Option<&'static str> {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
        return Some("a cloud metadata service");
    }
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_private() {
        Some("a private network")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("shared address space (carrier-grade NAT)")
    } else if o[0] == 0 {
        Some("\"this network\" (0.0.0.0/8)")
    } else if ip.is_multicast() || ip.is_broadcast() || o[0] >= 240 {
        Some("multicast or reserved")
    } else {
        None
    }
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let seg = ip.segments();
    if seg[0] == 0xfd00 && seg[1] == 0x0ec2 {
        return Some("a cloud metadata service");
    }
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("the unspecified address")
    } else if (seg[0] & 0xffc0) == 0xfe80 {
        Some("link-local")
    } else if (seg[0] & 0xfe00) == 0xfc00 {
        Some("a private network (unique local)")
    } else if ip.is_multicast() {
        Some("multicast or reserved")
    } else if let Some(v4) = ip.to_ipv4() {
        // IPv4-compatible and NAT64-style embeddings of special IPv4 addresses.
        if seg[0..6] == [0; 6] {
            special_v4(v4)
        } else {
            None
        }
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap()
    }

    fn pat(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap()
    }

    #[test]
    fn wildcard_matches_subdomains_but_not_the_apex_or_lookalikes() {
        let p = pat("*.example.com");
        assert!(p.matches(&host("api.example.com")));
        assert!(p.matches(&host("a.b.example.com")));
        assert!(!p.matches(&host("example.com")));
        assert!(!p.matches(&host("evil-example.com")));
        assert!(!p.matches(&host("example.com.evil.net")));
        assert!(!p.matches(&host("notexample.com")));
    }

    #[test]
    fn exact_matches_only_itself() {
        let p = pat("github.com");
        assert!(p.matches(&host("github.com")));
        assert!(!p.matches(&host("api.github.com")));
        assert!(!p.matches(&host("github.com.evil.net")));
    }

    #[test]
    fn case_and_trailing_dot_are_ignored() {
        let p = pat("*.Example.COM.");
        assert!(p.matches(&host("API.example.com.")));
        assert!(pat("GitHub.com").matches(&host("github.COM.")));
    }

    #[test]
    fn idn_is_compared_in_punycode() {
        let p = pat("bücher.example");
        assert_eq!(p, HostPattern::Exact("xn--bcher-kva.example".into()));
        assert!(p.matches(&host("xn--bcher-kva.example")));
        assert!(p.matches(&host("BÜCHER.example")));
        assert!(pat("*.bücher.example").matches(&host("www.xn--bcher-kva.example")));
    }

    #[test]
    fn patterns_that_open_everything_are_rejected() {
        for bad in [
            "*",
            "*.com",
            "*.",
            "a.*.com",
            "*example.com",
            "*.127.0.0.1",
            "exa mple.com",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad} accepted");
        }
        assert!(HostPattern::parse("*.co.uk").is_ok());
    }

    #[test]
    fn ip_literals_are_parsed_and_canonical() {
        assert_eq!(host("127.0.0.1"), Host::Ip("127.0.0.1".parse().unwrap()));
        assert_eq!(host("[::1]"), Host::Ip("::1".parse().unwrap()));
        assert_eq!(
            host("::ffff:10.0.0.1"),
            Host::Ip("10.0.0.1".parse().unwrap())
        );
        assert!(pat("[::1]").matches(&host("::1")));
        assert!(!pat("127.0.0.1").matches(&host("127.0.0.2")));
        assert!(!pat("localhost").matches(&host("127.0.0.1")));
    }

    #[test]
    fn odd_ip_spellings_are_refused() {
        for bad in ["127.1", "2130706433", "0x7f.0.0.1", "foo.0x10"] {
            assert!(Host::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn special_ranges_are_recognised() {
        let special = |s: &str| special_range(s.parse().unwrap());
        assert_eq!(special("127.0.0.1"), Some("loopback"));
        assert_eq!(special("169.254.169.254"), Some("a cloud metadata service"));
        assert_eq!(special("169.254.1.1"), Some("link-local"));
        assert_eq!(special("10.1.2.3"), Some("a private network"));
        assert_eq!(special("192.168.1.1"), Some("a private network"));
        assert_eq!(special("::1"), Some("loopback"));
        assert_eq!(special("::ffff:127.0.0.1"), Some("loopback"));
        assert_eq!(special("fe80::1"), Some("link-local"));
        assert_eq!(special("fd12::1"), Some("a private network (unique local)"));
        assert_eq!(special("0.0.0.0"), Some("\"this network\" (0.0.0.0/8)"));
        assert_eq!(special("93.184.216.34"), None);
        assert_eq!(special("2606:4700::1111"), None);
    }
}
