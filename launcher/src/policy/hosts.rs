//! Host patterns (`example.com`, `*.example.com`, IP literals) and domain rules (`host` or
//! `host:port`), checked and normalised once at load time so the proxy compares plain strings:
//! lower-case, punycode, no trailing dot, IPv6 in brackets inside a domain rule.

use std::net::{Ipv4Addr, Ipv6Addr};

/// A host pattern for an OpenShell endpoint's `host`. IPv6 literals are returned without
/// brackets (the port is a separate field there).
pub fn pattern(raw: &str) -> Result<String, String> {
    let inner = raw
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(raw);
    if let Ok(v6) = inner.parse::<Ipv6Addr>() {
        return Ok(v6.to_string());
    }
    name_or_v4(raw)
}

/// An OpenShell endpoint `host`: a name, an IP literal, or a host glob as OpenShell's validator
/// accepts it: `*` within the first label (`*.example.com`, `*-api.example.com`), `**` as the
/// whole first label (one or more labels), `*` as a whole later label (`*.s3.*.amazonaws.com`);
/// never `*`/`**` alone nor a wildcard over a top-level domain (`*.com`).
pub fn endpoint_pattern(raw: &str) -> Result<String, String> {
    if !raw.contains('*') {
        return pattern(raw);
    }
    if raw == "*" || raw == "**" {
        return Err(format!(
            "{raw:?} would match every host; name the hosts (e.g. `*.example.com`)"
        ));
    }
    if raw
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '/' | '@' | ':'))
    {
        return Err(format!(
            "{raw:?} is not a host name (no spaces, `/`, `@` or `:`; write only the host)"
        ));
    }
    let trimmed = raw.strip_suffix('.').unwrap_or(raw);
    let labels: Vec<&str> = trimmed.split('.').collect();
    let mut out = Vec::with_capacity(labels.len());
    for (i, label) in labels.iter().enumerate() {
        let wild = label.contains('*');
        if wild && i == 0 && label.contains("**") && *label != "**" {
            return Err(format!(
                "{raw:?}: `**` is allowed only as the whole first label (`**.example.com`)"
            ));
        }
        if wild && i > 0 && *label != "*" {
            return Err(format!(
                "{raw:?}: after the first label a wildcard must be the whole label (`*`)"
            ));
        }
        if !wild {
            out.push(literal_label(raw, label)?);
            continue;
        }
        let ok = label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '*'));
        if !ok {
            return Err(format!(
                "{raw:?}: label {label:?} may hold only a-z, 0-9, `-`, `_` and `*`"
            ));
        }
        out.push(label.to_ascii_lowercase());
    }
    if labels.len() <= 2 {
        return Err(format!(
            "{raw:?} would match a whole top-level domain; name at least two labels after the wildcard (`*.example.com`)"
        ));
    }
    Ok(out.join("."))
}

fn literal_label(raw: &str, label: &str) -> Result<String, String> {
    let ascii = idna::domain_to_ascii(label)
        .map_err(|_| format!("{raw:?}: label {label:?} is not a valid domain label"))?;
    check_labels(raw, &ascii)?;
    Ok(ascii)
}

/// A domain-only rule (`allowedDomains`, `--allow-domain`) in sandbox-runtime's grammar: a
/// host pattern, optionally `:PORT` (1-65535, no leading zero). The host is a name with at least
/// one dot (or `localhost`), `*.` in front of at least two labels, an IPv4 address, or an IPv6
/// literal in brackets (`[::1]`, `[::1]:443`; without brackets `::1:443` could be either).
/// Names come back lower-case and in punycode.
pub fn domain_rule(raw: &str) -> Result<String, String> {
    domain_entry(raw, false)
}

/// A `deniedDomains` entry: what [`domain_rule`] accepts, or `*`/`*:PORT` (every host).
pub fn denied_domain_rule(raw: &str) -> Result<String, String> {
    domain_entry(raw, true)
}

fn domain_entry(raw: &str, deny: bool) -> Result<String, String> {
    if let Some(rest) = raw.strip_prefix('[') {
        let (addr, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{raw:?}: `[` without a closing `]`"))?;
        let v6: Ipv6Addr = addr
            .parse()
            .map_err(|_| format!("{raw:?}: {addr:?} is not an IPv6 address"))?;
        return match after {
            "" => Ok(format!("[{v6}]")),
            _ => match after.strip_prefix(':') {
                Some(p) => Ok(format!("[{v6}]:{}", port(raw, p)?)),
                None => Err(format!("{raw:?}: expected `:PORT` after `]`")),
            },
        };
    }
    if raw.matches(':').count() > 1 {
        return Err(format!(
            "{raw:?}: write an IPv6 address in brackets (`[::1]`, `[::1]:443`), so that a port cannot be mistaken for part of it"
        ));
    }
    let (host, port_suffix) = match raw.split_once(':') {
        Some((h, p)) => (h, Some(port(raw, p)?)),
        None => (raw, None),
    };
    let host = if deny && host == "*" {
        "*".to_string()
    } else {
        domain_host(raw, host)?
    };
    Ok(match port_suffix {
        Some(p) => format!("{host}:{p}"),
        None => host,
    })
}

/// The host part of a domain rule (sandbox-runtime's `isValidDomainPattern`, plus label checks).
fn domain_host(raw: &str, host: &str) -> Result<String, String> {
    if host == "localhost" {
        return Ok(host.into());
    }
    if host.starts_with('.') || host.ends_with('.') {
        return Err(format!(
            "{raw:?}: a domain does not start or end with `.` (write `example.com`)"
        ));
    }
    if !host.contains('.') {
        return Err(format!(
            "{raw:?} is not a domain (a name with at least one dot, such as `example.com`, or `localhost`)"
        ));
    }
    name_or_v4(host)
}

fn port(raw: &str, p: &str) -> Result<u16, String> {
    let digits = !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
    match p.parse::<u16>() {
        Ok(n) if digits && n != 0 && !p.starts_with('0') => Ok(n),
        _ => Err(format!(
            "{raw:?}: {p:?} is not a TCP port (allowed: 1..=65535, no leading zero)"
        )),
    }
}

fn name_or_v4(raw: &str) -> Result<String, String> {
    if raw.is_empty() {
        return Err("empty host".into());
    }
    if raw
        .chars()
        .any(|c| c.is_whitespace() || c == '/' || c == '@')
    {
        return Err(format!(
            "{raw:?} is not a host name (no spaces, `/` or `@`; write only the host, not a URL)"
        ));
    }
    let trimmed = raw.strip_suffix('.').unwrap_or(raw);
    if trimmed == "*" || trimmed == "*." {
        return Err(format!(
            "{raw:?} would match every host; use network mode `full` if that is what you want"
        ));
    }
    let (wild, name) = match trimmed.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, trimmed),
    };
    if name.contains('*') {
        return Err(format!(
            "{raw:?}: a wildcard is allowed only as a leading `*.` (as in `*.example.com`)"
        ));
    }
    if let Ok(v4) = name.parse::<Ipv4Addr>() {
        if wild {
            return Err(format!("{raw:?}: a wildcard cannot precede an IP address"));
        }
        return Ok(v4.to_string());
    }
    let ascii = idna::domain_to_ascii(name)
        .map_err(|_| format!("{raw:?} is not a valid (internationalised) domain name"))?;
    check_labels(raw, &ascii)?;
    if wild && !ascii.contains('.') {
        return Err(format!(
            "{raw:?} would match a whole top-level domain; name at least two labels after `*.`"
        ));
    }
    Ok(if wild { format!("*.{ascii}") } else { ascii })
}

fn check_labels(raw: &str, ascii: &str) -> Result<(), String> {
    if ascii.is_empty() || ascii.len() > 253 {
        return Err(format!("{raw:?}: a host name has 1 to 253 characters"));
    }
    for label in ascii.split('.') {
        let ok_chars = label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if label.is_empty()
            || label.len() > 63
            || !ok_chars
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(format!(
                "{raw:?}: label {label:?} is not valid (1-63 of a-z, 0-9, `-`, `_`; no leading or trailing `-`)"
            ));
        }
    }
    let last = ascii.rsplit('.').next().unwrap_or_default();
    if last.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "{raw:?} is neither a valid IPv4 address nor a host name (the last label is numeric)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_normalised_to_lower_case_punycode_without_trailing_dot() {
        assert_eq!(pattern("API.GitHub.com.").unwrap(), "api.github.com");
        assert_eq!(pattern("*.NPMJS.org").unwrap(), "*.npmjs.org");
        assert_eq!(pattern("bücher.de").unwrap(), "xn--bcher-kva.de");
        assert_eq!(pattern("127.0.0.1").unwrap(), "127.0.0.1");
        assert_eq!(pattern("[::1]").unwrap(), "::1");
        assert_eq!(pattern("localhost").unwrap(), "localhost");
    }

    #[test]
    fn nonsense_wildcards_are_refused() {
        assert!(pattern("*").unwrap_err().contains("every host"));
        assert!(pattern("*.com").unwrap_err().contains("top-level"));
        assert!(pattern("foo*.example.com")
            .unwrap_err()
            .contains("leading `*.`"));
        assert!(pattern("a.*.example.com")
            .unwrap_err()
            .contains("leading `*.`"));
        assert!(pattern("*.10.0.0.1").unwrap_err().contains("IP"));
    }

    #[test]
    fn malformed_hosts_are_refused() {
        assert!(pattern("https://example.com").unwrap_err().contains("URL"));
        assert!(pattern("-bad.example.com").is_err());
        assert!(pattern("a..b").is_err());
        assert!(pattern("999.1.1.1").unwrap_err().contains("numeric"));
        assert!(pattern("").is_err());
    }

    #[test]
    fn endpoint_hosts_take_openshell_label_globs() {
        assert_eq!(endpoint_pattern("*.Example.com").unwrap(), "*.example.com");
        assert_eq!(
            endpoint_pattern("**.example.com").unwrap(),
            "**.example.com"
        );
        assert_eq!(
            endpoint_pattern("*-aiplatform.googleapis.com").unwrap(),
            "*-aiplatform.googleapis.com"
        );
        assert_eq!(
            endpoint_pattern("*.s3.*.amazonaws.com").unwrap(),
            "*.s3.*.amazonaws.com"
        );
        assert_eq!(
            endpoint_pattern("API.github.com").unwrap(),
            "api.github.com"
        );
        for bad in [
            "*",
            "**",
            "*.com",
            "**.com",
            "api.**.example.com",
            "a**.example.com",
            "*.s3.x*.amazonaws.com",
            "*.exa mple.com",
        ] {
            assert!(endpoint_pattern(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn domain_rules_take_an_optional_port() {
        assert_eq!(domain_rule("github.com").unwrap(), "github.com");
        assert_eq!(domain_rule("GitHub.com:443").unwrap(), "github.com:443");
        assert_eq!(domain_rule("*.npmjs.org:8443").unwrap(), "*.npmjs.org:8443");
        assert!(domain_rule("::1").unwrap_err().contains("brackets"));
        assert_eq!(domain_rule("[::1]").unwrap(), "[::1]");
        assert_eq!(domain_rule("[::1]:8080").unwrap(), "[::1]:8080");
        assert_eq!(domain_rule("localhost:3000").unwrap(), "localhost:3000");
        for bad in [
            "not-a-domain",
            "example.com.",
            ".example.com",
            "example.com:0443",
            "example.com:",
            "example.com:80:443",
            "https://example.com",
            "*",
            "*:22",
        ] {
            assert!(domain_rule(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(denied_domain_rule("*").unwrap(), "*");
        assert_eq!(denied_domain_rule("*:22").unwrap(), "*:22");
        assert!(domain_rule("github.com:0")
            .unwrap_err()
            .contains("1..=65535"));
        assert!(domain_rule("github.com:70000")
            .unwrap_err()
            .contains("1..=65535"));
        assert!(domain_rule("[::1]x").is_err());
    }
}
