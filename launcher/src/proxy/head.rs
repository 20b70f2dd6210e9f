//! An HTTP/1 request head as a server parses it, and the hosts it names.
//!
//! The head is parsed by `httparse`, the parser hyper's servers use: empty lines before the
//! request line are skipped (RFC 9112 §2.2), a method is any token in any case, malformed lines
//! are errors. A request names its host in two places, and a server acts on either: the request
//! target when it is in absolute form (RFC 9112 §3.2.2: the server then ignores `Host`) or
//! authority form (CONNECT), and the `Host` header. Every one of them must name the host the
//! connection was allowed for; more than one `Host` header, userinfo in the target, or a target
//! that is none of the standard forms is refused outright.

use super::matcher::Host;

/// A request head larger than this is not waited for (refused).
pub const MAX_HEAD: usize = 64 * 1024;
/// As many header lines as hyper's server accepts.
pub const MAX_HEADERS: usize = 100;

/// A host a request names, and where it names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// `HTTP Host` or `HTTP request target`.
    pub via: &'static str,
    /// As the client wrote it, without the port.
    pub name: String,
}

/// What the bytes received so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// Not a whole request head yet.
    NeedMore,
    /// A whole head of `len` bytes, naming these hosts (none: an HTTP/1.0-style request).
    Parsed { len: usize, names: Vec<Named> },
    /// Not a request head a server would accept, or one that names its host ambiguously.
    Invalid(String),
}

/// Parse the start of a client's stream as an HTTP/1 request head.
pub fn parse(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => Head::Invalid(format!(
            "the HTTP request head is not complete within {} KiB",
            MAX_HEAD / 1024
        )),
        Ok(httparse::Status::Partial) => Head::NeedMore,
        Ok(httparse::Status::Complete(len)) => {
            let method = req.method.unwrap_or("");
            let target = req.path.unwrap_or("");
            let hosts = req
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("host"))
                .map(|h| h.value);
            match names(method, target, hosts) {
                Ok(names) => Head::Parsed { len, names },
                Err(why) => Head::Invalid(why),
            }
        }
        Err(e) => Head::Invalid(format!("not an HTTP request head a server accepts ({e})")),
    }
}

/// The hosts a request names through its target and its `Host` headers (values as bytes).
pub fn names<'a>(
    method: &str,
    target: &str,
    hosts: impl Iterator<Item = &'a [u8]>,
) -> Result<Vec<Named>, String> {
    let mut out = Vec::new();
    if let Some(name) = target_host(method, target)? {
        out.push(Named {
            via: "HTTP request target",
            name,
        });
    }
    let hosts: Vec<&[u8]> = hosts.collect();
    if hosts.len() > 1 {
        return Err(format!(
            "the request has {} Host headers; servers disagree on which one counts",
            hosts.len()
        ));
    }
    if let Some(value) = hosts.first() {
        let value = std::str::from_utf8(value)
            .map_err(|_| "the Host header is not ASCII".to_string())?
            .trim();
        if !value.is_empty() {
            out.push(Named {
                via: "HTTP Host",
                name: authority_host(value)?.to_string(),
            });
        }
    }
    Ok(out)
}

/// The host of a request target in absolute or authority form; `None` for origin form (`/x`)
/// and asterisk form (`*`).
fn target_host(method: &str, target: &str) -> Result<Option<String>, String> {
    if target.starts_with('/') || target == "*" {
        return Ok(None);
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        return authority_host(target).map(|h| Some(h.to_string()));
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err(format!(
            "the request target `{}` is neither a path nor an absolute URI",
            printable(target)
        ));
    };
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    {
        return Err(format!(
            "the request target `{}` has no valid scheme",
            printable(target)
        ));
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    authority_host(&rest[..end]).map(|h| Some(h.to_string()))
}

/// The host of `host[:port]`, `[v6][:port]`; userinfo (`user@host`) is refused.
pub fn authority_host(authority: &str) -> Result<&str, String> {
    if authority.contains('@') {
        return Err(format!(
            "`{}` carries userinfo (`user@`), which hides the host it names",
            printable(authority)
        ));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let close = rest
                .find(']')
                .ok_or_else(|| format!("`{}`: missing `]`", printable(authority)))?;
            let tail = &rest[close + 1..];
            let port = match tail {
                "" => None,
                t => Some(
                    t.strip_prefix(':')
                        .ok_or_else(|| format!("`{}`: junk after `]`", printable(authority)))?,
                ),
            };
            (&authority[..close + 2], port)
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    if let Some(p) = port {
        if !p.is_empty() && p.parse::<u16>().is_err() {
            return Err(format!(
                "`{}`: `{}` is not a port",
                printable(authority),
                printable(p)
            ));
        }
    }
    if host.is_empty() {
        return Err(format!("`{}` names no host", printable(authority)));
    }
    Ok(host)
}

/// Why a request naming `names` may not pass a connection allowed for `host` (`None`: it may).
/// A connection allowed for an address (an IP rule) does not compare names.
pub fn mismatch(host: &Host, names: &[Named]) -> Option<String> {
    let Host::Name(allowed) = host else {
        return None;
    };
    names.iter().find_map(|n| match Host::parse(&n.name) {
        Ok(asked) if asked == *host => None,
        _ => Some(format!(
            "{} asks for {}, but the connection was opened for {allowed}; a request must name the host it was allowed for",
            n.via,
            printable(&n.name)
        )),
    })
}

/// At most 200 characters, control characters shown as `?` (it goes into messages and events).
fn printable(s: &str) -> String {
    s.chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(buf: &[u8]) -> Vec<(&'static str, String)> {
        match parse(buf) {
            Head::Parsed { names, .. } => names.into_iter().map(|n| (n.via, n.name)).collect(),
            other => panic!("{other:?} for {}", String::from_utf8_lossy(buf)),
        }
    }

    fn invalid(buf: &[u8]) -> String {
        match parse(buf) {
            Head::Invalid(why) => why,
            other => panic!("{other:?} for {}", String::from_utf8_lossy(buf)),
        }
    }

    #[test]
    fn host_is_read_without_its_port_whatever_the_header_case() {
        assert_eq!(
            named(b"GET /x HTTP/1.1\r\nUser-Agent: t\r\nhOsT: Evil.test:8080\r\n\r\n"),
            [("HTTP Host", "Evil.test".to_string())]
        );
        assert_eq!(
            named(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"),
            [("HTTP Host", "[::1]".to_string())]
        );
        assert_eq!(named(b"GET / HTTP/1.0\r\n\r\n"), []);
    }

    #[test]
    fn empty_lines_before_the_request_line_are_skipped_as_a_server_does() {
        for prefix in ["\r\n", "\r\n\r\n", "\n", "\r\n\n"] {
            let req = format!("{prefix}GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n");
            assert_eq!(
                named(req.as_bytes()),
                [("HTTP Host", "denied.test".to_string())],
                "{prefix:?}"
            );
        }
    }

    #[test]
    fn any_method_in_any_case_is_a_request() {
        for method in ["get", "Get", "pOsT", "PROPFIND", "x"] {
            let req = format!("{method} / HTTP/1.1\r\nHost: denied.test\r\n\r\n");
            assert_eq!(
                named(req.as_bytes()),
                [("HTTP Host", "denied.test".to_string())]
            );
        }
    }

    #[test]
    fn an_absolute_form_target_names_its_host() {
        assert_eq!(
            named(b"GET http://denied.test/x HTTP/1.1\r\nHost: allowed.test\r\n\r\n"),
            [
                ("HTTP request target", "denied.test".to_string()),
                ("HTTP Host", "allowed.test".to_string())
            ]
        );
        assert_eq!(
            named(b"GET HTTPS://Denied.test:8443?q HTTP/1.1\r\n\r\n"),
            [("HTTP request target", "Denied.test".to_string())]
        );
        assert_eq!(
            named(b"CONNECT denied.test:443 HTTP/1.1\r\n\r\n"),
            [("HTTP request target", "denied.test".to_string())]
        );
        assert_eq!(
            named(b"OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n").len(),
            1
        );
    }

    #[test]
    fn ambiguous_requests_are_invalid() {
        assert!(
            invalid(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: denied.test\r\n\r\n")
                .contains("2 Host headers")
        );
        assert!(
            invalid(b"GET / HTTP/1.1\r\nHost: a.test\r\nhost: a.test\r\n\r\n")
                .contains("Host headers")
        );
        assert!(invalid(b"GET http://denied.test@up.test/ HTTP/1.1\r\n\r\n").contains("userinfo"));
        assert!(
            invalid(b"GET / HTTP/1.1\r\nHost: denied.test@up.test\r\n\r\n").contains("userinfo")
        );
        assert!(invalid(b"GET denied.test HTTP/1.1\r\n\r\n").contains("neither"));
        assert!(invalid(b"GET ://x/ HTTP/1.1\r\n\r\n").contains("scheme"));
        assert!(invalid(b"GET / HTTP/1.1\r\nHost: a.test:http\r\n\r\n").contains("not a port"));
        // Whitespace before the colon, and folded lines: servers must reject them (RFC 9112).
        invalid(b"GET / HTTP/1.1\r\nHost : denied.test\r\n\r\n");
        invalid(b"GET / HTTP/1.1\r\nX: a\r\n Host: denied.test\r\n\r\n");
        invalid(b"SSH-2.0-OpenSSH_9.2\r\n");
        invalid(b"\x00\x01binary");
    }

    #[test]
    fn heads_arrive_in_pieces_and_have_a_bound() {
        let req = b"\r\nget / HTTP/1.1\r\nHost: denied.test\r\n\r\n";
        for end in 0..req.len() {
            assert_eq!(parse(&req[..end]), Head::NeedMore, "prefix {end}");
        }
        let mut endless = b"GET / HTTP/1.1\r\nX: ".to_vec();
        endless.resize(MAX_HEAD, b'a');
        assert!(invalid(&endless).contains("not complete"));
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X{i}: 1\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        invalid(&many);
    }

    #[test]
    fn every_name_must_be_the_allowed_host() {
        let host = Host::parse("allowed.test").unwrap();
        let n = |via, name: &str| Named {
            via,
            name: name.into(),
        };
        assert_eq!(
            mismatch(
                &host,
                &[
                    n("HTTP Host", "Allowed.Test."),
                    n("HTTP request target", "allowed.test")
                ]
            ),
            None
        );
        let why = mismatch(
            &host,
            &[
                n("HTTP Host", "allowed.test"),
                n("HTTP request target", "denied.test"),
            ],
        )
        .unwrap();
        assert!(why.contains("request target asks for denied.test"), "{why}");
        assert!(mismatch(&host, &[n("HTTP Host", "not a host")]).is_some());
        assert_eq!(mismatch(&host, &[]), None);
        let ip = Host::parse("192.0.2.1").unwrap();
        assert_eq!(mismatch(&ip, &[n("HTTP Host", "denied.test")]), None);
    }
}
