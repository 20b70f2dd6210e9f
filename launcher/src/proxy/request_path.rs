//! The request path and query as a server will act on them, made canonical before any rule
//! looks at them — as OpenShell's `l7/path.rs` does it, and for the same reason: a rule that
//! matches `/public/**` against `/public/../secret` allows `/secret`.
//!
//! * Bytes below 0x20, 0x7f (also percent-encoded), raw bytes above 0x7f, a `#` fragment, a
//!   malformed `%` escape, and a path longer than 4096 bytes are refused.
//! * Percent-escapes are decoded; `%2F` (an encoded `/`) is refused unless the endpoint says
//!   `allow_encoded_slash`, in which case it stays a `%2F` inside its segment.
//! * `;parameters` are cut from every segment *before* dot segments are resolved (so `..;` is a
//!   `..`); `.` and `..` are resolved, a `..` above the root is refused, repeated slashes collapse
//!   and a trailing slash is kept; a `.`/`..` that survives (behind a kept `%2F`) is refused.
//! * The result is re-encoded: letters, digits and `-._~!$&'()*+,;=:@` literally, everything else
//!   as upper-case `%HH`. That path is what the rules see and what the server is sent.
//!
//! Query parameters are decoded as forms are (`+` is a space); a malformed escape or a value
//! that is not UTF-8 is refused rather than guessed at.

use std::fmt;

/// The longest request path accepted (OpenShell's limit).
pub const MAX_PATH_LEN: usize = 4096;

/// Stands for a kept `%2F` while segments are split on `/` (raw control bytes never get here).
const ENCODED_SLASH: u8 = 0x01;

/// Why a request target was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    ControlByte,
    NonAscii,
    Fragment,
    BadEscape,
    EncodedSlash,
    AboveRoot,
    DotSegment,
    TooLong,
    NotAbsolute,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathError::ControlByte => "the path holds a control byte (raw or percent-encoded)",
            PathError::NonAscii => "the path holds raw non-ASCII bytes (they must be percent-encoded)",
            PathError::Fragment => "the request target holds a `#` fragment",
            PathError::BadEscape => "the path or query holds a malformed `%` escape",
            PathError::EncodedSlash => {
                "the path holds an encoded `/` (%2F), which this endpoint does not allow (`allow_encoded_slash: true` would)"
            }
            PathError::AboveRoot => "a `..` in the path climbs above the root",
            PathError::DotSegment => "a `.` or `..` segment remains in the path after resolving it",
            PathError::TooLong => "the path is longer than 4096 bytes",
            PathError::NotAbsolute => "the path does not start with `/`",
        })
    }
}

impl std::error::Error for PathError {}

/// The canonical form of a request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalPath {
    pub path: String,
    /// Whether it differs from what the client sent (the server must then be sent `path`).
    pub rewritten: bool,
}

/// Canonicalise the path of an origin-form request target (`/a/b`; a query after `?` is cut
/// off and left alone).
pub fn canonicalize(target: &str, allow_encoded_slash: bool) -> Result<CanonicalPath, PathError> {
    for &b in target.as_bytes() {
        if b < 0x20 || b == 0x7f {
            return Err(PathError::ControlByte);
        }
        if b >= 0x80 {
            return Err(PathError::NonAscii);
        }
    }
    if target.contains('#') {
        return Err(PathError::Fragment);
    }
    let raw = target.split_once('?').map_or(target, |(p, _)| p);
    let raw = if raw.is_empty() { "/" } else { raw };
    if !raw.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if raw.len() > MAX_PATH_LEN {
        return Err(PathError::TooLong);
    }
    let decoded = decode_path(raw.as_bytes(), allow_encoded_slash)?;
    let segments = resolve(&decoded[1..])?;
    for seg in &segments {
        if seg
            .split(|&b| b == ENCODED_SLASH)
            .any(|part| part == b"." || part == b"..")
        {
            return Err(PathError::DotSegment);
        }
    }
    let path = encode(&segments);
    Ok(CanonicalPath {
        rewritten: path != raw,
        path,
    })
}

/// Percent-decode a path; a kept `%2F` becomes [`ENCODED_SLASH`].
fn decode_path(raw: &[u8], allow_encoded_slash: bool) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'%' {
            out.push(raw[i]);
            i += 1;
            continue;
        }
        let b = escape(raw, i)?;
        match b {
            b'/' if allow_encoded_slash => out.push(ENCODED_SLASH),
            b'/' => return Err(PathError::EncodedSlash),
            b if b < 0x20 || b == 0x7f => return Err(PathError::ControlByte),
            b => out.push(b),
        }
        i += 3;
    }
    Ok(out)
}

/// The byte of the `%HH` escape at `i`.
fn escape(raw: &[u8], i: usize) -> Result<u8, PathError> {
    let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
    match (hex(raw.get(i + 1)), hex(raw.get(i + 2))) {
        (Some(hi), Some(lo)) => Ok((hi * 16 + lo) as u8),
        _ => Err(PathError::BadEscape),
    }
}

/// Split the path after its leading `/` into segments without `;parameters`, with `.` and `..`
/// resolved and empty segments dropped (but a trailing one kept: it is the trailing slash).
fn resolve(path: &[u8]) -> Result<Vec<Vec<u8>>, PathError> {
    let parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    let last = parts.len() - 1;
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(parts.len());
    for (i, part) in parts.into_iter().enumerate() {
        let seg = part.split(|&b| b == b';').next().unwrap_or_default();
        match seg {
            b".." => {
                if out.pop().is_none() {
                    return Err(PathError::AboveRoot);
                }
                if i == last {
                    out.push(Vec::new());
                }
            }
            b"." if i == last => out.push(Vec::new()),
            b"." => {}
            b"" if i != last => {}
            _ => out.push(seg.to_vec()),
        }
    }
    Ok(out)
}

fn encode(segments: &[Vec<u8>]) -> String {
    let mut out = String::from("/");
    for (i, seg) in segments.iter().enumerate() {
        if i > 0 {
            out.push('/');
        }
        for &b in seg {
            if b == ENCODED_SLASH {
                out.push_str("%2F");
            } else if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b) {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// The origin-form target `path` with `uri`'s query, for the request sent to the server.
pub fn with_path(uri: &http::Uri, path: &str) -> http::Uri {
    let target = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    // A canonical path and the client's own query always form a valid target.
    target.parse().unwrap_or_else(|_| uri.clone())
}

/// Decode `a=1&b=x%20y&c` into name/value pairs (`+` is a space, a name without `=` has the
/// empty value).
pub fn parse_query(query: &str) -> Result<Vec<(String, String)>, PathError> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode_component(k)?, decode_component(v)?))
        })
        .collect()
}

fn decode_component(s: &str) -> Result<String, PathError> {
    let raw = s.as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                out.push(escape(raw, i)?);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| PathError::NonAscii)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(target: &str) -> Result<String, PathError> {
        canonicalize(target, false).map(|c| c.path)
    }

    fn canon_slash(target: &str) -> Result<String, PathError> {
        canonicalize(target, true).map(|c| c.path)
    }

    #[test]
    fn dot_segments_resolve_literal_or_encoded() {
        assert_eq!(canon("/a/./b").unwrap(), "/a/b");
        assert_eq!(canon("/a/b/.").unwrap(), "/a/b/");
        assert_eq!(canon("/a/../b").unwrap(), "/b");
        assert_eq!(canon("/a/b/..").unwrap(), "/a/");
        assert_eq!(canon("/public/../secret").unwrap(), "/secret");
        assert_eq!(canon("/public/%2e%2e/secret").unwrap(), "/secret");
        assert_eq!(canon("/public/%2E%2E/secret").unwrap(), "/secret");
        assert_eq!(canon("/public/%2e/secret").unwrap(), "/public/secret");
        assert_eq!(canon("/public/./../secret").unwrap(), "/secret");
    }

    #[test]
    fn climbing_above_the_root_is_refused() {
        assert_eq!(canon("/.."), Err(PathError::AboveRoot));
        assert_eq!(canon("/a/../.."), Err(PathError::AboveRoot));
        assert_eq!(canon("/a/%2e%2e/%2e%2e"), Err(PathError::AboveRoot));
        assert_eq!(canon("/public/..;/..;/secret"), Err(PathError::AboveRoot));
        assert_eq!(canon("/..;"), Err(PathError::AboveRoot));
    }

    #[test]
    fn repeated_slashes_collapse() {
        assert_eq!(canon("//").unwrap(), "/");
        assert_eq!(canon("//public//../secret").unwrap(), "/secret");
        assert_eq!(canon("/public//secret").unwrap(), "/public/secret");
    }

    #[test]
    fn an_encoded_slash_is_refused_unless_the_endpoint_allows_it() {
        assert_eq!(canon("/a/%2f/b"), Err(PathError::EncodedSlash));
        assert_eq!(canon("/public/..%2fsecret"), Err(PathError::EncodedSlash));
        assert_eq!(
            canon("/public/%2E%2E%2Fsecret"),
            Err(PathError::EncodedSlash)
        );
        assert_eq!(canon_slash("/a/%2f/b").unwrap(), "/a/%2F/b");
        assert_eq!(
            canon_slash("/repos/group%2fproject/issues").unwrap(),
            "/repos/group%2Fproject/issues"
        );
        assert_eq!(
            canon_slash("/public/..%2fsecret"),
            Err(PathError::DotSegment)
        );
        assert_eq!(
            canon_slash("/public/.%2fsecret"),
            Err(PathError::DotSegment)
        );
    }

    #[test]
    fn control_bytes_fragments_and_raw_non_ascii_are_refused() {
        for t in [
            "/a%00b", "/a%0Ab", "/a%0Db", "/a%7Fb", "/a%09b", "/a\nb", "/a\tb",
        ] {
            assert_eq!(canon(t), Err(PathError::ControlByte), "{t:?}");
        }
        assert_eq!(canon("/a#b"), Err(PathError::Fragment));
        assert_eq!(canon("/aé"), Err(PathError::NonAscii));
        assert_eq!(canon("/a%2"), Err(PathError::BadEscape));
        assert_eq!(canon("/a%zz"), Err(PathError::BadEscape));
        assert_eq!(canon("*"), Err(PathError::NotAbsolute));
        assert_eq!(
            canon(&format!("/{}", "a".repeat(MAX_PATH_LEN))),
            Err(PathError::TooLong)
        );
    }

    #[test]
    fn path_parameters_are_cut_before_dots_resolve() {
        assert_eq!(canon("/a;jsessionid=xyz/b").unwrap(), "/a/b");
        assert_eq!(canon("/public;x=1/../secret").unwrap(), "/secret");
        assert_eq!(canon("/public/..;/secret").unwrap(), "/secret");
        assert_eq!(canon("/public/..;x/secret").unwrap(), "/secret");
        assert_eq!(canon("/public/.;/secret").unwrap(), "/public/secret");
        assert_eq!(canon("/public/%2e%2e;/secret").unwrap(), "/secret");
        assert_eq!(canon("/public/..%3B/secret").unwrap(), "/secret");
    }

    #[test]
    fn ordinary_escapes_round_trip_in_upper_case() {
        assert_eq!(
            canon("/files/hello%20world.txt").unwrap(),
            "/files/hello%20world.txt"
        );
        assert_eq!(canon("/search/a%3Fb").unwrap(), "/search/a%3Fb");
        assert_eq!(canon("/users/%40alice").unwrap(), "/users/@alice");
        assert_eq!(canon("/a/caf%c3%a9").unwrap(), "/a/caf%C3%A9");
        assert_eq!(canon("/a/%252F/b").unwrap(), "/a/%252F/b");
        assert_eq!(canon("").unwrap(), "/");
        assert_eq!(
            canon("/fetch/http://example.test").unwrap(),
            "/fetch/http:/example.test"
        );
    }

    #[test]
    fn rewritten_says_whether_the_server_needs_another_path() {
        assert!(!canonicalize("/a", false).unwrap().rewritten);
        assert!(!canonicalize("/a?x=../..", false).unwrap().rewritten);
        assert!(canonicalize("/a/../b", false).unwrap().rewritten);
    }

    #[test]
    fn queries_decode_as_forms_and_refuse_malformed_escapes() {
        assert_eq!(
            parse_query("tag=a&tag=b&slug=my%2Fskill&name=Foo+Bar&q=a%2Bb&v&e=").unwrap(),
            vec![
                ("tag".into(), "a".into()),
                ("tag".into(), "b".into()),
                ("slug".into(), "my/skill".into()),
                ("name".into(), "Foo Bar".into()),
                ("q".into(), "a+b".into()),
                ("v".into(), String::new()),
                ("e".into(), String::new()),
            ]
        );
        assert_eq!(parse_query("q=caf%C3%A9").unwrap()[0].1, "café");
        assert!(parse_query("").unwrap().is_empty());
        assert_eq!(parse_query("slug=bad%2"), Err(PathError::BadEscape));
        assert_eq!(parse_query("q=%FF"), Err(PathError::NonAscii));
    }
}
