//! The HTTP proxy listener, on hyper 1: absolute-URI plain HTTP here, `CONNECT` in `connect`.
//!
//! The host that is dialled is always the one that was checked: the absolute URI's authority,
//! never a `Host` header. The upstream is told the checked host and port only (a `Host` header
//! built from them); a URI with userinfo (`http://other@host/`) is refused. Every request on a
//! kept-alive connection is decided on its own; bodies are streamed, never buffered. A client
//! has `Timeouts::header` to send each request head, also while a kept-alive connection idles.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONNECTION, HOST};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::answer::{bad_gateway, bad_request, Body};
use super::connect::{connect, dial};
use super::decide::Channel;
use super::head::authority_host;
use super::identify::Program;
use super::matcher::Host;
use super::Proxy;

/// hyper's read buffer per connection may grow to this (its default is ~400 KiB, which a
/// thousand slow clients turn into hundreds of MiB); a request head must fit in it.
pub const MAX_BUF: usize = super::head::MAX_HEAD;

pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>) {
    super::accept_each(listener, proxy, |stream, peer, proxy| async move {
        let binary = proxy.binary_of(peer, stream.local_addr().ok()).await;
        let proxy_timeouts = proxy.timeouts;
        // One upstream connection kept per client connection, for the authority it was
        // dialled (and checked) for; every request is still decided on its own.
        let upstream: Upstream = Arc::new(tokio::sync::Mutex::new(None));
        let svc =
            service_fn(move |req| handle(proxy.clone(), binary.clone(), upstream.clone(), req));
        let _ = http1::Builder::new()
            .preserve_header_case(true)
            .timer(TokioTimer::new())
            .header_read_timeout(proxy_timeouts.header)
            .max_buf_size(MAX_BUF)
            .serve_connection(TokioIo::new(stream), svc)
            .with_upgrades()
            .await;
    })
    .await
}

/// A kept-alive upstream connection: the authority it serves and its sender.
type Upstream =
    Arc<tokio::sync::Mutex<Option<(String, hyper::client::conn::http1::SendRequest<Incoming>)>>>;

async fn handle(
    proxy: Arc<Proxy>,
    binary: Option<Program>,
    upstream: Upstream,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    Ok(if req.method() == Method::CONNECT {
        connect(&proxy, binary, req).await
    } else {
        forward(&proxy, binary, &upstream, req).await
    })
}

/// Absolute-URI plain HTTP: decide this request, dial the checked host, relay.
async fn forward(
    proxy: &Proxy,
    binary: Option<Program>,
    kept: &Upstream,
    mut req: Request<Incoming>,
) -> Response<Body> {
    let uri = req.uri().clone();
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return bad_request(&format!(
                "{other}:// URLs go through CONNECT (HTTPS_PROXY), not as plain requests"
            ))
        }
        None => return bad_request(
            "this is the sandbox's HTTP proxy: send absolute URIs (http://host/path) or CONNECT",
        ),
    }
    let Some(authority) = uri.authority().cloned() else {
        return bad_request("the URI has no host");
    };
    if let Err(why) = authority_host(authority.as_str()) {
        return bad_request(&why);
    }
    let host = match Host::parse(authority.host()) {
        Ok(h) => h,
        Err(e) => return bad_request(&format!("{e:#}")),
    };
    let port = authority.port_u16().unwrap_or(80);
    if let Some(refused) = crate::credentials::rewrite::guard(proxy, &host, port, &mut req, "http")
    {
        return refused;
    }
    let uri = req.uri().clone();
    let path = uri.path().to_string();
    let method = req.method().as_str().to_string();
    // One snapshot of the rules for the connection and its request.
    let rules = proxy.decider.current();
    let connection = rules.decide(&host, port, binary.as_ref(), Channel::PlainHttp);
    let (rules, connection) = proxy
        .admit(
            rules,
            connection,
            binary.as_ref(),
            Channel::PlainHttp,
            "http",
        )
        .await;
    let decision = rules.check_http(&connection, &method, req.headers(), &path, uri.query());
    // Reuse the connection kept for this very authority when the request is allowed.
    let key = format!("{host}:{port}");
    let mut reused = None;
    if decision.verdict.lets_through() {
        let mut slot = kept.lock().await;
        if let Some((k, mut sender)) = slot.take() {
            if k == key && sender.ready().await.is_ok() {
                reused = Some(sender);
            }
        }
    }
    let canonical = decision.canonical_path.clone();
    let mut sender = match reused {
        Some(sender) => {
            proxy
                .events
                .decision("http", &decision, binary.as_ref(), Some((&method, &path)));
            sender
        }
        None => {
            let upstream = match dial(
                proxy,
                decision,
                binary.as_ref(),
                "http",
                Some((&method, &path)),
            )
            .await
            {
                Ok(s) => s,
                Err(resp) => return resp,
            };
            let (sender, conn) = match hyper::client::conn::http1::Builder::new()
                .preserve_header_case(true)
                .handshake(TokioIo::new(upstream))
                .await
            {
                Ok(x) => x,
                Err(e) => return bad_gateway(&format!("{host}:{port}: {e}")),
            };
            tokio::spawn(conn);
            sender
        }
    };
    let (mut parts, body) = req.into_parts();
    parts.uri = origin_form(&uri);
    if let Some(path) = &canonical {
        // The server is sent the path the rules were checked against.
        parts.uri = super::request_path::with_path(&parts.uri, path);
    }
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove("proxy-authorization");
    // The host that was checked is the host the server is told about.
    let checked = match port {
        80 => host.to_string(),
        p => format!("{host}:{p}"),
    };
    match HeaderValue::from_str(&checked) {
        Ok(v) => {
            parts.headers.insert(HOST, v);
        }
        Err(_) => return bad_request("the URI's authority is not a valid Host header"),
    }
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            let keep = resp.status() != StatusCode::SWITCHING_PROTOCOLS
                && !resp
                    .headers()
                    .get(hyper::header::CONNECTION)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.eq_ignore_ascii_case("close"));
            if keep {
                *kept.lock().await = Some((key, sender));
            }
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, body.boxed())
        }
        Err(e) => bad_gateway(&format!("{host}:{port}: {e}")),
    }
}

fn origin_form(uri: &Uri) -> Uri {
    uri.path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/")
        .parse()
        .unwrap_or_else(|_| Uri::from_static("/"))
}

/// Headers that describe one hop, not the message (RFC 9110 §7.6.1), plus those the
/// `Connection` header names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    for name in named {
        headers.remove(name.as_str());
    }
    for name in [
        "connection",
        "proxy-connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::proxy::answer::DENIED_HEADER;
    use crate::proxy::events::EventSink;
    use crate::proxy::testing;

    async fn client(proxy: SocketAddr) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
        let stream = TcpStream::connect(proxy).await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        sender
    }

    async fn get(
        sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
        url: &str,
        host_header: Option<&str>,
    ) -> (StatusCode, HeaderMap, String) {
        let mut req = Request::get(url);
        if let Some(h) = host_header {
            req = req.header(HOST, h);
        }
        let resp = sender
            .send_request(req.body(Full::new(Bytes::new())).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, headers, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn allowed_host_answers_and_denied_twin_gets_an_explained_403() {
        let up = testing::upstream().await;
        let (http, _) = testing::proxy(
            &["allowed.test"],
            &[("allowed.test", "127.0.0.1"), ("denied.test", "127.0.0.1")],
            EventSink::none(),
        )
        .await;
        let mut c = client(http).await;
        let (status, _, body) = get(
            &mut c,
            &format!("http://allowed.test:{}/a?b=1", up.port()),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            body,
            format!(
                "upstream host=allowed.test:{} path=/a?b=1 body=0",
                up.port()
            )
        );
        let (status, headers, body) =
            get(&mut c, &format!("http://denied.test:{}/", up.port()), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(
            body.contains("network policy blocked denied.test"),
            "{body}"
        );
        assert!(body.contains("--allow-domain denied.test"), "{body}");
        let h = headers.get(DENIED_HEADER).unwrap().to_str().unwrap();
        assert!(
            h.contains("host=denied.test:") && h.contains("rule=no matching rule"),
            "{h}"
        );
        assert!(h.contains("--allow-domain denied.test"), "{h}");
    }

    #[tokio::test]
    async fn every_request_on_a_kept_alive_connection_is_checked() {
        let up = testing::upstream().await;
        let (http, _) = testing::proxy(
            &["allowed.test"],
            &[("allowed.test", "127.0.0.1"), ("denied.test", "127.0.0.1")],
            EventSink::none(),
        )
        .await;
        let mut c = client(http).await;
        let ok = format!("http://allowed.test:{}/", up.port());
        assert_eq!(get(&mut c, &ok, None).await.0, StatusCode::OK);
        let bad = format!("http://denied.test:{}/", up.port());
        assert_eq!(get(&mut c, &bad, None).await.0, StatusCode::FORBIDDEN);
        assert_eq!(get(&mut c, &ok, None).await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn kept_alive_requests_reuse_the_upstream_connection_of_the_same_host_only() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let accepted = Arc::new(AtomicUsize::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let svc = service_fn(|_req: Request<Incoming>| async {
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("ok"))))
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        let (http, _) = testing::proxy(
            &["a.test", "b.test"],
            &[
                ("a.test", "127.0.0.1"),
                ("b.test", "127.0.0.1"),
                ("denied.test", "127.0.0.1"),
            ],
            EventSink::none(),
        )
        .await;
        let mut c = client(http).await;
        let a = format!("http://a.test:{port}/");
        for _ in 0..5 {
            assert_eq!(get(&mut c, &a, None).await.0, StatusCode::OK);
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "five requests, one upstream connection"
        );
        // A denied host in between is refused and does not disturb the kept connection's host.
        let denied = format!("http://denied.test:{port}/");
        assert_eq!(get(&mut c, &denied, None).await.0, StatusCode::FORBIDDEN);
        // Another host gets a connection of its own: never the one dialled for a.test.
        let b = format!("http://b.test:{port}/");
        assert_eq!(get(&mut c, &b, None).await.0, StatusCode::OK);
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn host_header_cannot_redirect_a_plain_request() {
        let up = testing::upstream().await;
        let (http, _) = testing::proxy(
            &["allowed.test"],
            &[("allowed.test", "127.0.0.1")],
            EventSink::none(),
        )
        .await;
        let mut c = client(http).await;
        // Allowed URI, lying Host header: the allowed host is dialled and named to the server.
        let (status, _, body) = get(
            &mut c,
            &format!("http://allowed.test:{}/", up.port()),
            Some("denied.test"),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains(&format!("host=allowed.test:{}", up.port())),
            "{body}"
        );
        // Denied URI, Host header of an allowed one: denied.
        let (status, _, _) = get(
            &mut c,
            &format!("http://denied.test:{}/", up.port()),
            Some("allowed.test"),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }

    #[tokio::test]
    async fn loopback_name_denied_unless_named_and_ip_literal_needs_a_rule() {
        let up = testing::upstream().await;
        let (http, _) = testing::proxy(
            &["*.corp.test", "127.0.0.1"],
            &[("svc.corp.test", "127.0.0.1")],
            EventSink::none(),
        )
        .await;
        let mut c = client(http).await;
        let (status, _, body) = get(
            &mut c,
            &format!("http://svc.corp.test:{}/", up.port()),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(
            body.contains("loopback") && body.contains("exactly"),
            "{body}"
        );
        // The IP literal is named by a rule, so it may be reached.
        let (status, _, _) = get(&mut c, &format!("http://127.0.0.1:{}/", up.port()), None).await;
        assert_eq!(status, StatusCode::OK);
        let (status, _, body) =
            get(&mut c, &format!("http://127.0.0.2:{}/", up.port()), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(body.contains("IP addresses"), "{body}");
    }

    #[tokio::test]
    async fn large_chunked_upload_is_streamed_through() {
        let up = testing::upstream().await;
        let (http, _) = testing::proxy(
            &["allowed.test"],
            &[("allowed.test", "127.0.0.1")],
            EventSink::none(),
        )
        .await;
        let mut s = TcpStream::connect(http).await.unwrap();
        let head = format!(
            "POST http://allowed.test:{}/up HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            up.port()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..64 {
            s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                .await
                .unwrap();
            s.write_all(&chunk).await.unwrap();
            s.write_all(b"\r\n").await.unwrap();
        }
        s.write_all(b"0\r\n\r\n").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.contains(&format!("body={}", 64 * 64 * 1024)), "{out}");
    }

    #[tokio::test]
    async fn a_denied_name_is_refused_before_any_lookup() {
        // The test resolver knows no names: reaching the lookup answers 502 "has no address".
        let (http, _) = testing::proxy(&["allowed.test"], &[], EventSink::none()).await;
        let mut c = client(http).await;
        let (status, _, body) = get(&mut c, "http://secret-data.evil.test/", None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        let (status, _, body) = get(&mut c, "http://allowed.test/", None).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert!(body.contains("allowed.test has no address"), "{body}");
    }

    #[tokio::test]
    async fn origin_form_requests_are_refused_with_an_explanation() {
        let (http, _) = testing::proxy(&[], &[], EventSink::none()).await;
        let mut c = client(http).await;
        let (status, _, body) = get(&mut c, "/", Some("anything")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("absolute URIs"), "{body}");
    }
}
