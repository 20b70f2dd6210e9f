//! Host names and host patterns: normalisation (case, trailing dot, IDN to punycode, IP
//! literals) and matching: exact, IP literal, `*.suffix` (domain rules: any subdomain, as the
//! agent settings and sandbox-runtime formats mean it), OpenShell's label globs (endpoint hosts:
//! `*` within one DNS label, `**` for one or more labels), and `*` (deny lists only).
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
    /// OpenShell endpoint globs, label by label (`*.example.com` is one label deep).
    Labels(Vec<HostLabel>),
    /// Every host (only in deny lists: `*`, `*:22`).
    Any,
}

/// One label of an OpenShell host glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostLabel {
    /// `**`: one or more labels.
    Labels,
    /// A label with `*` in it (`*`, `*-api`): `*` matches within the label.
    Glob(String),
    /// A literal label.
    Exact(String),
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(n) => f.write_str(n),
            HostPattern::Subdomains(s) => write!(f, "*.{s}"),
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            HostPattern::Ip(ip) => write!(f, "{ip}"),
            HostPattern::Labels(labels) => {
                let text: Vec<&str> = labels
                    .iter()
                    .map(|l| match l {
                        HostLabel::Labels => "**",
                        HostLabel::Glob(g) | HostLabel::Exact(g) => g,
                    })
                    .collect();
                f.write_str(&text.join("."))
            }
            HostPattern::Any => f.write_str("*"),
        }
    }
}

impl HostPattern {
    /// Parse an OpenShell endpoint host (checked by the policy loader): an exact name, an IP
    /// literal, or a label glob.
    pub fn parse_endpoint(pattern: &str) -> Result<HostPattern> {
        let trimmed = pattern.trim();
        if !trimmed.contains('*') {
            return Self::parse(trimmed);
        }
        if trimmed == "*" || trimmed == "**" {
            bail!("`{trimmed}` would allow every host; name the hosts (e.g. `*.example.com`)");
        }
        let trimmed = trimmed.strip_suffix('.').unwrap_or(trimmed);
        let labels = trimmed
            .split('.')
            .map(|l| {
                if l.is_empty() {
                    bail!("`{pattern}` has an empty label");
                }
                Ok(match l {
                    "**" => HostLabel::Labels,
                    l if l.contains('*') => HostLabel::Glob(l.to_ascii_lowercase()),
                    l => HostLabel::Exact(l.to_ascii_lowercase()),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if labels.len() <= 2 {
            bail!("`{pattern}` would allow a whole top-level domain");
        }
        Ok(HostPattern::Labels(labels))
    }

    /// Parse a deny-list entry: what [`HostPattern::parse`] accepts, or `*` for every host.
    pub fn parse_deny(pattern: &str) -> Result<HostPattern> {
        if pattern.trim() == "*" {
            return Ok(HostPattern::Any);
        }
        Self::parse(pattern)
    }

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
            (HostPattern::Labels(labels), Host::Name(n)) => {
                let host: Vec<&str> = n.split('.').collect();
                labels_match(labels, &host)
            }
            (HostPattern::Any, _) => true,
            _ => false,
        }
    }

    /// Whether a match names the host itself (so that it may reach special addresses such as
    /// loopback), rather than a whole family of hosts.
    pub fn is_explicit(&self) -> bool {
        matches!(self, HostPattern::Exact(_) | HostPattern::Ip(_))
    }
}

/// Whether the labels of a host match an OpenShell label glob: `**` takes one or more labels, a
/// glob label exactly one.
fn labels_match(pattern: &[HostLabel], host: &[&str]) -> bool {
    match (pattern.first(), host.first()) {
        (None, None) => true,
        (None, Some(_)) | (Some(_), None) => false,
        (Some(HostLabel::Labels), Some(_)) => {
            (1..=host.len()).any(|taken| labels_match(&pattern[1..], &host[taken..]))
        }
        (Some(HostLabel::Exact(l)), Some(h)) => l == h && labels_match(&pattern[1..], &host[1..]),
        (Some(HostLabel::Glob(g)), Some(h)) => {
            label_glob(g.as_bytes(), h.as_bytes()) && labels_match(&pattern[1..], &host[1..])
        }
    }
}

/// `*` within one label (the label holds no `.`).
fn label_glob(glob: &[u8], label: &[u8]) -> bool {
    match glob.split_first() {
        None => label.is_empty(),
        Some((b'*', rest)) => (0..=label.len()).any(|i| label_glob(rest, &label[i..])),
        Some((c, rest)) => label.first() == Some(c) && label_glob(rest, &label[1..]),
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
        let ascii = idna::domain_to_ascii(s)
            .map_err(|_| anyhow::anyhow!("`{raw}` is not a valid host name"))?;
        // Letters, digits, `-` and `_` (which real host names use), as the policy loader accepts.
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if ascii.is_empty() || !ascii.split('.').all(label_ok) {
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
    fn endpoint_globs_match_label_by_label() {
        let p = |s: &str| HostPattern::parse_endpoint(s).unwrap();
        assert!(p("*.example.com").matches(&host("api.example.com")));
        assert!(!p("*.example.com").matches(&host("deep.api.example.com")));
        assert!(!p("*.example.com").matches(&host("example.com")));
        assert!(p("*.EXAMPLE.COM").matches(&host("api.example.com")));
        assert!(p("**.example.com").matches(&host("deep.api.example.com")));
        assert!(!p("**.example.com").matches(&host("example.com")));
        assert!(p("*-aiplatform.googleapis.com")
            .matches(&host("us-central1-aiplatform.googleapis.com")));
        assert!(!p("*-aiplatform.googleapis.com")
            .matches(&host("us-central1.aiplatform.googleapis.com")));
        assert!(p("*.s3.*.amazonaws.com").matches(&host("b.s3.us-east-1.amazonaws.com")));
        assert!(!p("*.s3.*.amazonaws.com").matches(&host("s3.us-east-1.amazonaws.com")));
        assert!(!p("*.s3.*.amazonaws.com").matches(&host("b.s3.dualstack.us-east-1.amazonaws.com")));
        assert!(!p("*.example.com").matches(&host("10.0.0.1")));
        assert!(!p("*.example.com").is_explicit());
    }

    #[test]
    fn a_deny_star_matches_every_host() {
        let any = HostPattern::parse_deny("*").unwrap();
        assert!(any.matches(&host("example.com")));
        assert!(any.matches(&host("10.0.0.1")));
        assert!(HostPattern::parse("*").is_err());
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
        assert!(pat("_dmarc.example.com").matches(&host("_DMARC.example.com")));
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
