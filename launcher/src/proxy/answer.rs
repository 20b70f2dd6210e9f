//! What the proxy answers a client itself, rather than a server: denials that say in words what
//! the sandbox's policy blocked and how to allow it, and the errors of a proxy.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};

use super::decide::Decision;

pub type Body = BoxBody<Bytes, hyper::Error>;

/// The header a denial carries, for programs (and agents) that read headers rather than bodies.
pub const DENIED_HEADER: &str = "x-sandbox-denied";

/// A 403 that says, in words, that the sandbox's policy blocked the host and how to allow it.
pub fn denied(d: &Decision) -> Response<Body> {
    let target = format!("{}:{}", d.host, d.port);
    let rule = d.rule.as_deref().unwrap_or("no matching rule");
    let mut body = format!(
        "sandbox-launch: the sandbox's network policy blocked {target}.\nReason: {}\n",
        d.reason
    );
    if let Some(hint) = &d.hint {
        body.push_str(&format!("How to allow it: {hint}\n"));
    }
    body.push_str("This is a policy decision, not a network failure: retrying will not help.\n");
    let header = format!(
        "host={target}; rule={rule}; reason={}{}",
        d.reason,
        d.hint
            .as_deref()
            .map(|h| format!("; allow={h}"))
            .unwrap_or_default()
    );
    let mut resp = Response::new(full(body));
    *resp.status_mut() = StatusCode::FORBIDDEN;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(&header_safe(&header)) {
        resp.headers_mut()
            .insert(HeaderName::from_static(DENIED_HEADER), v);
    }
    resp
}

/// Header values are visible ASCII; anything else becomes `?`.
fn header_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect()
}

pub fn bad_request(msg: &str) -> Response<Body> {
    text_response(
        StatusCode::BAD_REQUEST,
        format!("sandbox-launch proxy: {msg}\n"),
    )
}

pub fn bad_gateway(msg: &str) -> Response<Body> {
    text_response(
        StatusCode::BAD_GATEWAY,
        format!("sandbox-launch proxy: {msg}\n"),
    )
}

pub fn text_response(status: StatusCode, body: String) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

pub fn full(s: String) -> Body {
    Full::new(Bytes::from(s)).map_err(|e| match e {}).boxed()
}

pub fn empty() -> Body {
    Empty::<Bytes>::new().map_err(|e| match e {}).boxed()
}
