//! Putting the real values in, or refusing the request: what the proxy does with each plain-HTTP
//! request and each request inside an inspected tunnel, just before it goes out.

use http::header::{HeaderMap, HeaderValue, AUTHORIZATION, PROXY_AUTHORIZATION};
use http::uri::{PathAndQuery, Uri};
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use super::{basic, Credential, Credentials};
use crate::proxy::answer::{text_response, Body, DENIED_HEADER};
use crate::proxy::matcher::Host;
use crate::proxy::Proxy;

/// What became of a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No placeholder in it.
    Untouched,
    /// These credentials' real values were put in.
    Injected(Vec<String>),
    /// It carries the placeholder of a credential that may not go to this host (or its value
    /// cannot be written where the placeholder is); nothing was changed.
    Refused { name: String, why: String },
}

fn find(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

fn replace(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

fn is_basic(name: &http::HeaderName) -> bool {
    name == AUTHORIZATION || name == PROXY_AUTHORIZATION
}

/// Whether the request carries `c`'s placeholder anywhere this module looks.
fn carries(c: &Credential, uri: &Uri, headers: &HeaderMap) -> bool {
    let p = c.placeholder.as_bytes();
    uri.path_and_query()
        .is_some_and(|pq| find(pq.as_str().as_bytes(), p))
        || headers.iter().any(|(name, v)| {
            find(v.as_bytes(), p)
                || (is_basic(name) && basic::decode(v.as_bytes()).is_some_and(|d| find(&d, p)))
        })
}

/// Bytes outside RFC 3986's unreserved set, percent-encoded (for the path and the query).
fn uri_escaped(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    for &b in value {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

fn inject(c: &Credential, uri: &mut Uri, headers: &mut HeaderMap) -> Result<(), String> {
    let p = c.placeholder.as_bytes();
    let real = c.secret.bytes();
    if let Some(pq) = uri
        .path_and_query()
        .filter(|pq| find(pq.as_str().as_bytes(), p))
    {
        let new = replace(pq.as_str().as_bytes(), p, &uri_escaped(real));
        let pq = PathAndQuery::try_from(new).map_err(|e| format!("the URI: {e}"))?;
        let mut parts = uri.clone().into_parts();
        parts.path_and_query = Some(pq);
        *uri = Uri::from_parts(parts).map_err(|e| format!("the URI: {e}"))?;
    }
    for (name, value) in headers.iter_mut() {
        let new = if find(value.as_bytes(), p) {
            replace(value.as_bytes(), p, real)
        } else if is_basic(name) {
            match basic::decode(value.as_bytes()).filter(|d| find(d, p)) {
                Some(decoded) => basic::encode(&replace(&decoded, p, real)).into_bytes(),
                None => continue,
            }
        } else {
            continue;
        };
        *value = HeaderValue::from_bytes(&new)
            .map_err(|_| format!("the value cannot stand in the {name} header"))?;
    }
    Ok(())
}

impl Credentials {
    /// Put the real values in place of their placeholders in a request to `host:port`, or
    /// refuse it when it carries a placeholder of a credential that does not name this host.
    pub fn rewrite(
        &self,
        host: &Host,
        port: u16,
        uri: &mut Uri,
        headers: &mut HeaderMap,
    ) -> Outcome {
        let carried: Vec<&Credential> = self
            .list
            .iter()
            .filter(|c| carries(c, uri, headers))
            .collect();
        if carried.is_empty() {
            return Outcome::Untouched;
        }
        if let Some(c) = carried.iter().find(|c| !c.allows(host, port)) {
            return Outcome::Refused {
                name: c.name.clone(),
                why: format!("it may only be sent to {}", c.hosts.join(", ")),
            };
        }
        // Into copies, so a failure part-way leaves the request as it was.
        let (mut new_uri, mut new_headers) = (uri.clone(), headers.clone());
        for c in &carried {
            if let Err(e) = inject(c, &mut new_uri, &mut new_headers) {
                return Outcome::Refused {
                    name: c.name.clone(),
                    why: e,
                };
            }
        }
        *uri = new_uri;
        *headers = new_headers;
        Outcome::Injected(carried.iter().map(|c| c.name.clone()).collect())
    }
}

/// The proxy's hook: rewrite `req` bound for `host:port`; `Some(response)` when it must not go
/// out. Each use of a credential, allowed or refused, is a `credential` event.
pub fn guard<B>(
    proxy: &Proxy,
    host: &Host,
    port: u16,
    req: &mut Request<B>,
    protocol: &str,
) -> Option<Response<Body>> {
    let creds = proxy.credentials.as_ref()?;
    let mut uri = req.uri().clone();
    let outcome = creds.rewrite(host, port, &mut uri, req.headers_mut());
    *req.uri_mut() = uri;
    let event = |name: &str, decision: &str, reason: &str| {
        proxy.events.emit(json!({
            "event": "credential",
            "name": name,
            "host": host.to_string(),
            "port": port,
            "protocol": protocol,
            "decision": decision,
            "reason": reason,
        }));
    };
    match outcome {
        Outcome::Untouched => None,
        Outcome::Injected(names) => {
            for n in names {
                event(&n, "inject", "a named host of the credential");
            }
            None
        }
        Outcome::Refused { name, why } => {
            event(&name, "deny", &why);
            Some(refusal(host, port, &name, &why))
        }
    }
}

fn refusal(host: &Host, port: u16, name: &str, why: &str) -> Response<Body> {
    let body = format!(
        "sandbox-launch: the sandbox refused this request to {host}:{port}: it carries the placeholder of the credential {name}, and {why}.\nThe credential's real value never leaves for other hosts; send it only where it belongs.\n"
    );
    let mut resp = text_response(StatusCode::FORBIDDEN, body);
    let header = format!("host={host}:{port}; credential={name}; reason={why}");
    if let Ok(v) = HeaderValue::from_str(&header) {
        resp.headers_mut()
            .insert(http::HeaderName::from_static(DENIED_HEADER), v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::secret::Secret;
    use crate::credentials::target;

    fn creds() -> Credentials {
        Credentials {
            list: vec![Credential {
                name: "TOKEN".into(),
                placeholder: "sandbox-placeholder-00ff".into(),
                secret: Secret::new(b"real/value+1".to_vec()),
                targets: vec![target("api.example.com").unwrap()],
                hosts: vec!["api.example.com".into()],
            }],
        }
    }

    fn host(h: &str) -> Host {
        Host::parse(h).unwrap()
    }

    #[test]
    fn headers_query_and_basic_credentials_get_the_real_value_for_a_named_host() {
        let c = creds();
        let mut uri: Uri = "/v1/x?key=sandbox-placeholder-00ff&a=1".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            "x-api-key",
            HeaderValue::from_static("sandbox-placeholder-00ff"),
        );
        h.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&basic::encode(b"git:sandbox-placeholder-00ff")).unwrap(),
        );
        let out = c.rewrite(&host("api.example.com"), 443, &mut uri, &mut h);
        assert_eq!(out, Outcome::Injected(vec!["TOKEN".into()]));
        assert_eq!(uri.to_string(), "/v1/x?key=real%2Fvalue%2B1&a=1");
        assert_eq!(h["x-api-key"], "real/value+1");
        assert_eq!(
            basic::decode(h[AUTHORIZATION].as_bytes()).unwrap(),
            b"git:real/value+1"
        );
    }

    #[test]
    fn a_placeholder_for_another_host_refuses_and_changes_nothing() {
        let c = creds();
        let mut uri: Uri = "/?q=sandbox-placeholder-00ff".parse().unwrap();
        let mut h = HeaderMap::new();
        let before = uri.clone();
        let out = c.rewrite(&host("evil.example"), 443, &mut uri, &mut h);
        assert!(
            matches!(out, Outcome::Refused { ref name, .. } if name == "TOKEN"),
            "{out:?}"
        );
        assert_eq!(uri, before);
        let mut h = HeaderMap::new();
        h.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&basic::encode(b"u:sandbox-placeholder-00ff")).unwrap(),
        );
        let out = c.rewrite(&host("evil.example"), 80, &mut "/".parse().unwrap(), &mut h);
        assert!(
            matches!(out, Outcome::Refused { .. }),
            "hidden in Basic: {out:?}"
        );
    }

    #[test]
    fn requests_without_a_placeholder_pass_untouched() {
        let c = creds();
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            HeaderValue::from_static("Bearer something-else"),
        );
        let mut uri: Uri = "/a?b=c".parse().unwrap();
        assert_eq!(
            c.rewrite(&host("evil.example"), 80, &mut uri, &mut h),
            Outcome::Untouched
        );
    }

    #[test]
    fn a_value_that_cannot_stand_in_a_header_refuses() {
        let mut c = creds();
        c.list[0].secret = Secret::new(b"line\nbreak".to_vec());
        let mut h = HeaderMap::new();
        h.insert(
            "x-api-key",
            HeaderValue::from_static("sandbox-placeholder-00ff"),
        );
        let out = c.rewrite(
            &host("api.example.com"),
            443,
            &mut "/".parse().unwrap(),
            &mut h,
        );
        assert!(matches!(out, Outcome::Refused { .. }), "{out:?}");
        assert_eq!(h["x-api-key"], "sandbox-placeholder-00ff");
    }
}
