//! SOCKS5 (RFC 1928): no authentication, CONNECT only; IPv4, IPv6 and domain-name targets.
//! Names are decided on and resolved here, in the supervisor (`socks5h://`): the sandbox never
//! looks anything up. A policy denial is reply 0x02 ("connection not allowed by ruleset").

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::decide::{Channel, Decision, Verdict};
use super::matcher::Host;
use super::resolve::DialError;
use super::Proxy;
use crate::reload::revoke::until_revoked;

const VERSION: u8 = 5;
const NO_AUTH: u8 = 0x00;
const NO_ACCEPTABLE_METHOD: u8 = 0xff;
const CMD_CONNECT: u8 = 0x01;
const ATYP_IPV4: u8 = 0x01;
const ATYP_DOMAIN: u8 = 0x03;
const ATYP_IPV6: u8 = 0x04;

/// Reply codes.
const SUCCEEDED: u8 = 0x00;
const GENERAL_FAILURE: u8 = 0x01;
pub const NOT_ALLOWED: u8 = 0x02;
const HOST_UNREACHABLE: u8 = 0x04;
const CONNECTION_REFUSED: u8 = 0x05;
const COMMAND_NOT_SUPPORTED: u8 = 0x07;
const ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;

pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>) {
    super::accept_each(listener, proxy, |stream, peer, proxy| async move {
        let _ = handle(stream, peer, &proxy).await;
    })
    .await
}

async fn handle(mut client: TcpStream, peer: SocketAddr, proxy: &Proxy) -> std::io::Result<()> {
    // The whole handshake within the header timeout, or the client is dropped.
    let target = tokio::time::timeout(proxy.timeouts.header, handshake(&mut client)).await;
    let (request, early) = match target {
        Ok(Ok(Handshake::Request(r, early))) => (r, early),
        Ok(Ok(Handshake::Malformed(why))) => {
            let binary = proxy.binary_of(peer, client.local_addr().ok()).await;
            proxy.events.malformed("socks5", &why, binary.as_ref());
            return Ok(());
        }
        Ok(Ok(Handshake::Closed)) | Err(_) => return Ok(()),
        Ok(Err(e)) => return Err(e),
    };
    let Request { host, port } = request;
    let binary = proxy.binary_of(peer, client.local_addr().ok()).await;
    let rules = proxy.decider.current();
    let decision = rules.decide(&host, port, binary.as_ref(), Channel::Tunnel);
    let (_, mut decision) = proxy
        .admit(rules, decision, binary.as_ref(), Channel::Tunnel, "socks5")
        .await;
    if !decision.verdict.lets_through() {
        proxy
            .events
            .decision("socks5", &decision, binary.as_ref(), None);
        return reply(&mut client, NOT_ALLOWED, None).await;
    }
    let upstream = match proxy.resolver.dial(&decision).await {
        Ok(s) => s,
        Err(DialError::Forbidden(why)) => {
            deny(&mut decision, &why);
            proxy
                .events
                .decision("socks5", &decision, binary.as_ref(), None);
            return reply(&mut client, NOT_ALLOWED, None).await;
        }
        Err(e) => {
            let code = match &e {
                DialError::Unresolved(_) => HOST_UNREACHABLE,
                _ => CONNECTION_REFUSED,
            };
            proxy
                .events
                .dial_error("socks5", &decision, binary.as_ref(), &e.to_string());
            return reply(&mut client, code, None).await;
        }
    };
    proxy
        .events
        .decision("socks5", &decision, binary.as_ref(), None);
    reply(&mut client, SUCCEEDED, upstream.local_addr().ok()).await?;
    let relay = super::tunnel::relay_for(
        client,
        upstream,
        early,
        &host,
        port,
        decision.opaque_ok,
        &proxy.timeouts,
    );
    let refused = until_revoked(
        proxy,
        &decision,
        binary.as_ref(),
        Channel::Tunnel,
        "socks5",
        relay,
    )
    .await
    .flatten();
    if let Some(why) = refused {
        deny(&mut decision, &why);
        proxy
            .events
            .decision("socks5", &decision, binary.as_ref(), None);
    }
    Ok(())
}

fn deny(decision: &mut Decision, why: &str) {
    decision.verdict = Verdict::Deny;
    decision.reason = why.to_string();
}

/// A CONNECT request: where to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub host: Host,
    pub port: u16,
}

/// One step of reading the client's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<T> {
    /// More bytes are needed.
    More,
    /// Parsed from the first `usize` bytes.
    Done(T, usize),
    /// Not acceptable: the reply code to send (none: not SOCKS5 at all, just close) and why.
    Refuse(Option<u8>, String),
}

/// The method negotiation: whether the client offers "no authentication".
pub fn greeting(b: &[u8]) -> Step<bool> {
    let Some(&version) = b.first() else {
        return Step::More;
    };
    if version != VERSION {
        return Step::Refuse(None, format!("not SOCKS5 (version byte {version})"));
    }
    let Some(&n) = b.get(1) else {
        return Step::More;
    };
    let len = 2 + usize::from(n);
    match b.get(2..len) {
        Some(methods) => Step::Done(methods.contains(&NO_AUTH), len),
        None => Step::More,
    }
}

/// The request after the negotiation.
pub fn request(b: &[u8]) -> Step<Request> {
    if b.len() < 4 {
        return Step::More;
    }
    if b[0] != VERSION {
        return Step::Refuse(
            None,
            format!("not a SOCKS5 request (version byte {})", b[0]),
        );
    }
    let (addr_len, at) = match b[3] {
        ATYP_IPV4 => (4, 4),
        ATYP_IPV6 => (16, 4),
        ATYP_DOMAIN => match b.get(4) {
            Some(&n) => (usize::from(n), 5),
            None => return Step::More,
        },
        other => {
            return Step::Refuse(
                Some(ADDRESS_TYPE_NOT_SUPPORTED),
                format!("SOCKS5 address type {other} is not supported"),
            )
        }
    };
    let len = at + addr_len + 2;
    if b.len() < len {
        return Step::More;
    }
    let addr = &b[at..at + addr_len];
    let port = u16::from_be_bytes([b[len - 2], b[len - 1]]);
    if b[1] != CMD_CONNECT {
        return Step::Refuse(
            Some(COMMAND_NOT_SUPPORTED),
            format!("SOCKS5 command {} is not supported (only CONNECT)", b[1]),
        );
    }
    let host = match b[3] {
        ATYP_IPV4 => Host::Ip(super::matcher::canonical_ip(IpAddr::V4(Ipv4Addr::new(
            addr[0], addr[1], addr[2], addr[3],
        )))),
        ATYP_IPV6 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(addr);
            Host::Ip(super::matcher::canonical_ip(IpAddr::V6(Ipv6Addr::from(o))))
        }
        _ => {
            let shown: String = String::from_utf8_lossy(addr)
                .chars()
                .map(|c| if c.is_control() { '?' } else { c })
                .collect();
            let Ok(name) = std::str::from_utf8(addr) else {
                return Step::Refuse(
                    Some(GENERAL_FAILURE),
                    format!("the SOCKS5 host name `{shown}` is not UTF-8"),
                );
            };
            match Host::parse(name) {
                Ok(h) if name.trim() == name => h,
                _ => {
                    return Step::Refuse(
                        Some(NOT_ALLOWED),
                        format!("the SOCKS5 host name `{shown}` is not a valid host name"),
                    )
                }
            }
        }
    };
    Step::Done(Request { host, port }, len)
}

enum Handshake {
    /// The request, and whatever the client sent after it (its first bytes for the tunnel).
    Request(Request, Vec<u8>),
    /// Refused with a reply (or closed) because it was malformed: why.
    Malformed(String),
    /// The client left, or wanted something we do not offer (answered already).
    Closed,
}

/// Method negotiation and the request.
async fn handshake(client: &mut TcpStream) -> std::io::Result<Handshake> {
    let mut buf = Vec::with_capacity(64);
    let offers_no_auth = loop {
        match greeting(&buf) {
            Step::More => {}
            Step::Done(ok, len) => {
                buf.drain(..len);
                break ok;
            }
            Step::Refuse(_, why) => return Ok(Handshake::Malformed(why)),
        }
        if read_more(client, &mut buf).await? == 0 {
            return Ok(Handshake::Closed);
        }
    };
    if !offers_no_auth {
        client.write_all(&[VERSION, NO_ACCEPTABLE_METHOD]).await?;
        return Ok(Handshake::Closed);
    }
    client.write_all(&[VERSION, NO_AUTH]).await?;
    loop {
        match request(&buf) {
            Step::More => {}
            Step::Done(r, len) => {
                buf.drain(..len);
                return Ok(Handshake::Request(r, buf));
            }
            Step::Refuse(code, why) => {
                if let Some(code) = code {
                    reply(client, code, None).await?;
                }
                return Ok(Handshake::Malformed(why));
            }
        }
        if read_more(client, &mut buf).await? == 0 {
            return Ok(Handshake::Closed);
        }
    }
}

/// Append what the client sent next (at most 512 bytes at a time: a handshake is smaller).
async fn read_more(client: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; 512];
    let n = client.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

async fn reply(client: &mut TcpStream, code: u8, bound: Option<SocketAddr>) -> std::io::Result<()> {
    let bound = bound.unwrap_or_else(|| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
    let mut msg = vec![VERSION, code, 0];
    match bound.ip() {
        IpAddr::V4(ip) => {
            msg.push(ATYP_IPV4);
            msg.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            msg.push(ATYP_IPV6);
            msg.extend_from_slice(&ip.octets());
        }
    }
    msg.extend_from_slice(&bound.port().to_be_bytes());
    client.write_all(&msg).await?;
    client.flush().await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::proxy::events::EventSink;
    use crate::proxy::testing;

    enum Target<'a> {
        Name(&'a str),
        V4(Ipv4Addr),
        V6(Ipv6Addr),
    }

    /// Greet, request CONNECT, return the reply code and the stream.
    async fn socks_connect(proxy: SocketAddr, target: Target<'_>, port: u16) -> (u8, TcpStream) {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        s.write_all(&[5, 1, 0]).await.unwrap();
        let mut choice = [0u8; 2];
        s.read_exact(&mut choice).await.unwrap();
        assert_eq!(choice, [5, 0]);
        let mut req = vec![5, 1, 0];
        match target {
            Target::Name(n) => {
                req.push(3);
                req.push(n.len() as u8);
                req.extend_from_slice(n.as_bytes());
            }
            Target::V4(ip) => {
                req.push(1);
                req.extend_from_slice(&ip.octets());
            }
            Target::V6(ip) => {
                req.push(4);
                req.extend_from_slice(&ip.octets());
            }
        }
        req.extend_from_slice(&port.to_be_bytes());
        s.write_all(&req).await.unwrap();
        let mut head = [0u8; 4];
        s.read_exact(&mut head).await.unwrap();
        let rest = if head[3] == 4 { 18 } else { 6 };
        let mut tail = vec![0u8; rest];
        s.read_exact(&mut tail).await.unwrap();
        (head[1], s)
    }

    async fn http_get_over(s: TcpStream) -> String {
        http_get_host(s, "allowed.test").await
    }

    /// A request naming `host`; what came back (empty when the tunnel was reset).
    async fn http_get_host(mut s: TcpStream, host: &str) -> String {
        s.write_all(
            format!("GET /socks HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn allowed_name_is_tunnelled_and_denied_twin_gets_0x02() {
        let up = testing::upstream().await;
        let (_, socks) = testing::proxy(
            &["allowed.test"],
            &[("allowed.test", "127.0.0.1"), ("denied.test", "127.0.0.1")],
            EventSink::none(),
        )
        .await;
        let (code, s) = socks_connect(socks, Target::Name("allowed.test"), up.port()).await;
        assert_eq!(code, SUCCEEDED);
        assert!(http_get_over(s).await.contains("path=/socks"));
        let (code, _) = socks_connect(socks, Target::Name("denied.test"), up.port()).await;
        assert_eq!(code, NOT_ALLOWED);
        // Tunnelled to the allowed name, but the request names another host: closed.
        let (code, s) = socks_connect(socks, Target::Name("allowed.test"), up.port()).await;
        assert_eq!(code, SUCCEEDED);
        assert_eq!(http_get_host(s, "denied.test").await, "");
    }

    #[tokio::test]
    async fn address_targets_need_a_rule_naming_the_address() {
        let up = testing::upstream().await;
        let (_, socks) = testing::proxy(&["127.0.0.1"], &[], EventSink::none()).await;
        let (code, s) = socks_connect(socks, Target::V4(Ipv4Addr::LOCALHOST), up.port()).await;
        assert_eq!(code, SUCCEEDED);
        assert!(http_get_over(s).await.contains("path=/socks"));
        let (code, _) =
            socks_connect(socks, Target::V4(Ipv4Addr::new(127, 0, 0, 2)), up.port()).await;
        assert_eq!(code, NOT_ALLOWED);
        let (code, _) = socks_connect(socks, Target::V6(Ipv6Addr::LOCALHOST), up.port()).await;
        assert_eq!(code, NOT_ALLOWED);
        // IPv4-mapped IPv6 is the IPv4 address it carries.
        let (code, _) = socks_connect(
            socks,
            Target::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped()),
            up.port(),
        )
        .await;
        assert_eq!(code, SUCCEEDED);
    }

    #[tokio::test]
    async fn wildcard_name_resolving_to_loopback_is_not_allowed() {
        let up = testing::upstream().await;
        let (_, socks) = testing::proxy(
            &["*.corp.test"],
            &[("svc.corp.test", "127.0.0.1")],
            EventSink::none(),
        )
        .await;
        let (code, _) = socks_connect(socks, Target::Name("svc.corp.test"), up.port()).await;
        assert_eq!(code, NOT_ALLOWED);
    }

    #[tokio::test]
    async fn a_malformed_name_is_refused_with_an_event() {
        let path = std::env::temp_dir().join(format!("sl-socks-events-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let (_, socks) = testing::proxy(
            &["allowed.test"],
            &[],
            EventSink::open(path.to_str().unwrap()).unwrap(),
        )
        .await;
        for name in [&b"a\x00b.test"[..], b"\xff\xfe", b"allowed.test "] {
            let mut s = TcpStream::connect(socks).await.unwrap();
            s.write_all(&[5, 1, 0]).await.unwrap();
            let mut choice = [0u8; 2];
            s.read_exact(&mut choice).await.unwrap();
            let mut req = vec![5, 1, 0, 3, name.len() as u8];
            req.extend_from_slice(name);
            req.extend_from_slice(&80u16.to_be_bytes());
            s.write_all(&req).await.unwrap();
            let mut reply = [0u8; 10];
            s.read_exact(&mut reply).await.unwrap();
            assert!(
                reply[1] == NOT_ALLOWED || reply[1] == GENERAL_FAILURE,
                "{reply:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let log = std::fs::read_to_string(&path).unwrap();
        let events: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(events.len(), 3, "{log}");
        for e in &events {
            assert_eq!(e["protocol"], "socks5");
            assert_eq!(e["decision"], "deny");
            assert!(
                e["reason"].as_str().unwrap().contains("SOCKS5 host name"),
                "{e}"
            );
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn requests_parse_from_bytes_as_they_arrive() {
        let mut req = vec![5, 1, 0, 3, 12];
        req.extend_from_slice(b"Allowed.Test");
        req.extend_from_slice(&443u16.to_be_bytes());
        for end in 0..req.len() {
            assert_eq!(request(&req[..end]), Step::More, "prefix {end}");
        }
        let want = Request {
            host: Host::parse("allowed.test").unwrap(),
            port: 443,
        };
        assert_eq!(request(&req), Step::Done(want, req.len()));
        assert_eq!(greeting(&[5, 2, 2, 0, 9]), Step::Done(true, 4));
        assert!(matches!(greeting(&[4, 1, 0]), Step::Refuse(None, _)));
        assert!(matches!(
            request(&[5, 2, 0, 1, 1, 2, 3, 4, 0, 80]),
            Step::Refuse(Some(COMMAND_NOT_SUPPORTED), _)
        ));
        assert!(matches!(
            request(&[5, 1, 0, 9, 0]),
            Step::Refuse(Some(ADDRESS_TYPE_NOT_SUPPORTED), _)
        ));
    }

    #[tokio::test]
    async fn clients_that_want_authentication_are_refused() {
        let (_, socks) = testing::proxy(&[], &[], EventSink::none()).await;
        let mut s = TcpStream::connect(socks).await.unwrap();
        s.write_all(&[5, 1, 2]).await.unwrap();
        let mut choice = [0u8; 2];
        s.read_exact(&mut choice).await.unwrap();
        assert_eq!(choice, [5, NO_ACCEPTABLE_METHOD]);
    }
}
