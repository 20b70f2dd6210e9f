//! Plain HTTP inside a tunnel opened for a name (CONNECT to port 80, SOCKS5, transparent egress):
//! relayed request by request, so that every request on a kept-alive connection is checked, not
//! only the first. Each request head is parsed by hyper (httparse), its hosts found by the same
//! rules as the first flight (`head::names`), and a request naming another host is answered 403
//! and the connection closed. What passes is sent on naming the checked host only
//! ([`tell_checked_host`]), as the plain-HTTP proxy does. A protocol switch (`101`) hands both sockets to a plain byte copy
//! once the server has agreed — to WebSocket only, whose frames name no host. An offer to switch
//! to anything else (HTTP/2 over cleartext, `Upgrade: h2c`, after which the server reads requests
//! that each name their own host) is taken off the request, which the server then answers as the
//! HTTP/1.1 request it also is (RFC 9113 §3.2 lets any server ignore the offer).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONNECTION, HOST, UPGRADE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Mutex as AsyncMutex;

use super::answer::{text_response, Body};
use super::head;
use super::idle::{bounded, Activity, Tracked};
use super::matcher::Host;
use super::Timeouts;
use http_body_util::BodyExt;

type Sender = hyper::client::conn::http1::SendRequest<Incoming>;

/// Relay HTTP between `client` (whose first `prefix` bytes were already read from it) and
/// `upstream`, a tunnel decided for `host`:`port` (the upstream socket may be a parent proxy's),
/// until either side closes. The reason of the first refusal, if any.
pub async fn serve(
    client: TcpStream,
    prefix: Vec<u8>,
    upstream: TcpStream,
    (host, port): (&Host, u16),
    timeouts: &Timeouts,
) -> Option<String> {
    let activity = Activity::new();
    let idle = (activity.clone(), timeouts.tunnel_idle);
    let upstream = Tracked::new(upstream, activity.clone());
    let (sender, conn) = match hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .handshake::<_, Incoming>(TokioIo::new(upstream))
        .await
    {
        Ok(x) => x,
        Err(_) => return None,
    };
    tokio::spawn(conn.with_upgrades());
    let sender = Arc::new(AsyncMutex::new(sender));
    let refused: Arc<Mutex<Option<String>>> = Arc::default();
    let svc = {
        let refused = refused.clone();
        let host = host.clone();
        service_fn(move |req: Request<Incoming>| {
            let sender = sender.clone();
            let refused = refused.clone();
            let host = host.clone();
            let idle = idle.clone();
            async move {
                Ok::<_, std::convert::Infallible>(
                    one_request(&sender, (&host, port), &refused, idle, req).await,
                )
            }
        })
    };
    let client = Tracked::new(Prefixed::new(prefix, client), activity.clone());
    let connection = http1::Builder::new()
        .preserve_header_case(true)
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header)
        .max_buf_size(super::head::MAX_HEAD)
        .serve_connection(TokioIo::new(client), svc)
        .with_upgrades();
    let _ = bounded(timeouts.tunnel_idle, &activity, connection).await;
    let why = refused.lock().ok()?.take();
    why
}

async fn one_request(
    sender: &AsyncMutex<Sender>,
    (host, port): (&Host, u16),
    refused: &Mutex<Option<String>>,
    (activity, idle_limit): (Arc<Activity>, Option<Duration>),
    mut req: Request<Incoming>,
) -> Response<Body> {
    let target = req.uri().to_string();
    let names = head::names(
        req.method().as_str(),
        &target,
        req.headers()
            .get_all(HOST)
            .iter()
            .map(HeaderValue::as_bytes),
    );
    let why = match names {
        Ok(names) => head::mismatch(host, &names),
        Err(why) => Some(why),
    };
    let why = why.or_else(|| tell_checked_host(&mut req, host, port, 80).err());
    if let Some(why) = why {
        let mut resp = text_response(
            StatusCode::FORBIDDEN,
            format!("sandbox-launch: the sandbox's network policy refused this request.\nReason: {why}\nThis is a policy decision, not a network failure: retrying will not help.\n"),
        );
        resp.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        if let Ok(mut r) = refused.lock() {
            r.get_or_insert(why);
        }
        return resp;
    }
    let switching = keep_only_websocket_upgrades(req.headers_mut());
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut sender = sender.lock().await;
    if sender.ready().await.is_err() {
        return gateway_error(host);
    }
    let mut resp = match sender.send_request(req).await {
        Ok(resp) => resp,
        Err(_) => return gateway_error(host),
    };
    drop(sender);
    if switching && resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let server_upgrade = hyper::upgrade::on(&mut resp);
        // The switched connection's bytes still pass through the tracked sockets.
        tokio::spawn(async move {
            if let (Ok(c), Ok(s)) = (client_upgrade.await, server_upgrade.await) {
                let (mut c, mut s) = (TokioIo::new(c), TokioIo::new(s));
                let copy = tokio::io::copy_bidirectional(&mut c, &mut s);
                let _ = bounded(idle_limit, &activity, copy).await;
            }
        });
    }
    resp.map(|b| b.boxed())
}

/// Make a request that was checked against `host` tell the server that host only: the target
/// in origin form (a server obeys an absolute-form target over `Host`) and one `Host` header
/// built from the checked host and the tunnel's `port` (left out when it is `default_port`).
/// Whatever spelling of the host the client wrote — `ALLOWED.TEST.`, a full-width dot, another
/// port, or no `Host` at all, which lets the server pick any site it hosts on that address — the
/// server reads the name that was decided on.
pub fn tell_checked_host<B>(
    req: &mut Request<B>,
    host: &Host,
    port: u16,
    default_port: u16,
) -> Result<(), String> {
    let origin_form = req.method() != Method::CONNECT && req.uri().scheme().is_some();
    if origin_form {
        let target = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
        *req.uri_mut() = target
            .parse::<Uri>()
            .map_err(|e| format!("the request target cannot be sent in origin form: {e}"))?;
    }
    let value = match port == default_port {
        true => host.to_string(),
        false => format!("{host}:{port}"),
    };
    let value = HeaderValue::from_str(&value)
        .map_err(|_| format!("{host} cannot be written as a Host header"))?;
    req.headers_mut().insert(HOST, value);
    Ok(())
}

/// Take every protocol-switch offer but WebSocket off a request; whether one is left.
fn keep_only_websocket_upgrades(headers: &mut HeaderMap) -> bool {
    let websocket = headers.get_all(UPGRADE).iter().count() == 1
        && headers
            .get(UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"));
    if !websocket {
        headers.remove(UPGRADE);
        headers.remove("http2-settings");
    }
    websocket
}

fn gateway_error(host: &Host) -> Response<Body> {
    text_response(
        StatusCode::BAD_GATEWAY,
        format!("sandbox-launch proxy: the connection to {host} failed\n"),
    )
}

/// A socket whose first bytes were already read: they are read again first.
pub struct Prefixed<T> {
    prefix: Vec<u8>,
    at: usize,
    inner: T,
}

impl<T> Prefixed<T> {
    pub fn new(prefix: Vec<u8>, inner: T) -> Self {
        Prefixed {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Prefixed<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = (self.prefix.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            if self.at == self.prefix.len() {
                self.prefix = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Prefixed<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::proxy::testing;

    #[tokio::test]
    async fn a_second_request_on_the_same_connection_is_checked_too() {
        let up = testing::upstream().await;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (client, _) = l.accept().await.unwrap();
        let upstream = TcpStream::connect(up).await.unwrap();
        let host = Host::parse("allowed.test").unwrap();
        let first = b"GET /one HTTP/1.1\r\nHost: allowed.test\r\n\r\n".to_vec();
        let task = tokio::spawn(async move {
            serve(client, first, upstream, (&host, 80), &Timeouts::default()).await
        });
        c.write_all(b"GET /two HTTP/1.1\r\nHost: denied.test\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).await.unwrap();
        assert!(out.contains("path=/one"), "{out}");
        assert!(!out.contains("path=/two"), "{out}");
        assert!(out.contains("403 Forbidden"), "{out}");
        let why = task.await.unwrap().unwrap();
        assert!(why.contains("HTTP Host asks for denied.test"), "{why}");
    }

    #[tokio::test]
    async fn the_server_is_told_the_checked_host_whatever_spelling_the_client_wrote() {
        let up = testing::upstream().await;
        let host = Host::parse("allowed.test").unwrap();
        let heads = [
            "GET /a HTTP/1.1\r\nHost: ALLOWED.TEST.\r\nConnection: close\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: allowed\u{ff0e}test\r\nConnection: close\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: allowed.test:1\r\nConnection: close\r\n\r\n",
            "GET http://Allowed.Test./a HTTP/1.1\r\nConnection: close\r\n\r\n",
            // No Host at all: the server would pick a site of its own.
            "GET /a HTTP/1.0\r\n\r\n",
            "GET /a HTTP/1.1\r\nConnection: close\r\n\r\n",
        ];
        for head in heads {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let (client, _) = l.accept().await.unwrap();
            let upstream = TcpStream::connect(up).await.unwrap();
            let (host, prefix) = (host.clone(), head.as_bytes().to_vec());
            let task = tokio::spawn(async move {
                serve(
                    client,
                    prefix,
                    upstream,
                    (&host, up.port()),
                    &Timeouts::default(),
                )
                .await
            });
            let mut out = String::new();
            c.read_to_string(&mut out).await.unwrap();
            let told = format!("upstream host=allowed.test:{} path=/a body=0", up.port());
            assert!(out.contains(&told), "{head:?}: {out}");
            assert_eq!(task.await.unwrap(), None, "{head:?}");
        }
    }

    #[tokio::test]
    async fn the_port_told_is_the_decided_one_not_the_upstream_sockets() {
        // Through a parent proxy (a nested sandbox), the socket leads to the parent's port.
        let up = testing::upstream().await;
        let host = Host::parse("allowed.test").unwrap();
        for (decided, told) in [(80, "allowed.test"), (8080, "allowed.test:8080")] {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
            let (client, _) = l.accept().await.unwrap();
            let upstream = TcpStream::connect(up).await.unwrap();
            let host = host.clone();
            let head = b"GET /a HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n";
            tokio::spawn(async move {
                let timeouts = Timeouts::default();
                serve(client, head.to_vec(), upstream, (&host, decided), &timeouts).await
            });
            let mut out = String::new();
            c.read_to_string(&mut out).await.unwrap();
            assert!(
                out.contains(&format!("upstream host={told} path=/a")),
                "{out}"
            );
        }
    }

    #[test]
    fn only_a_websocket_upgrade_offer_is_kept() {
        let offer = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(UPGRADE, HeaderValue::from_str(v).unwrap());
            }
            h.insert(
                "http2-settings",
                HeaderValue::from_static("AAMAAABkAAQAAP__"),
            );
            let kept = keep_only_websocket_upgrades(&mut h);
            (
                kept,
                h.contains_key(UPGRADE),
                h.contains_key("http2-settings"),
            )
        };
        assert_eq!(offer(&["websocket"]), (true, true, true));
        assert_eq!(offer(&[" WebSocket "]), (true, true, true));
        for h2 in [
            &["h2c"][..],
            &["websocket, h2c"],
            &["websocket", "h2c"],
            &["HTTP/2.0"],
            &[],
        ] {
            assert_eq!(offer(h2), (false, false, false), "{h2:?}");
        }
    }
}
