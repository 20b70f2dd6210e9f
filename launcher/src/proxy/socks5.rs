//! SOCKS5 (RFC 1928): no authentication, CONNECT only; IPv4, IPv6 and domain-name targets.
//! Names are decided on and resolved here, in the supervisor (`socks5h://`): the sandbox never
//! looks anything up. A policy denial is reply 0x02 ("connection not allowed by ruleset").

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::decide::{Channel, Decision, Verdict};
use super::matcher::Host;
use super::resolve::DialError;
use super::Proxy;

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

/// A client that does not finish the handshake in this time is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>) {
    super::accept_each(listener, proxy, |stream, peer, proxy| async move {
        let _ = handle(stream, peer, &proxy).await;
    })
    .await
}

async fn handle(mut client: TcpStream, peer: SocketAddr, proxy: &Proxy) -> std::io::Result<()> {
    let target = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&mut client)).await;
    let (host, port) = match target {
        Ok(Ok(Some(t))) => t,
        Ok(Ok(None)) => return Ok(()),
        Ok(Err(e)) => return Err(e),
        Err(_) => return Ok(()),
    };
    let host = match Host::parse(&host) {
        Ok(h) => h,
        Err(_) => return reply(&mut client, NOT_ALLOWED, None).await,
    };
    let binary = proxy.binary_of(peer, client.local_addr().ok());
    let mut decision = proxy
        .decider
        .decide(&host, port, binary.as_ref(), Channel::Tunnel);
    if !decision.verdict.lets_through() {
        proxy
            .events
            .decision("socks5", &decision, binary.as_ref(), None);
        return reply(&mut client, NOT_ALLOWED, None).await;
    }
    let upstream = match proxy.resolver.dial(&decision).await {
        Ok(s) => s,
        Err(e) => {
            let code = match &e {
                DialError::Forbidden(why) => {
                    deny(&mut decision, why);
                    NOT_ALLOWED
                }
                DialError::Unresolved(_) => HOST_UNREACHABLE,
                DialError::Connect(_) => CONNECTION_REFUSED,
            };
            proxy
                .events
                .decision("socks5", &decision, binary.as_ref(), None);
            return reply(&mut client, code, None).await;
        }
    };
    proxy
        .events
        .decision("socks5", &decision, binary.as_ref(), None);
    reply(&mut client, SUCCEEDED, upstream.local_addr().ok()).await?;
    if let Some(why) = super::tunnel::relay_for(client, upstream, Vec::new(), &host).await {
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

/// Method negotiation and the request; the target, or `None` when the client was answered
/// with a refusal already.
async fn handshake(client: &mut TcpStream) -> std::io::Result<Option<(String, u16)>> {
    let mut head = [0u8; 2];
    client.read_exact(&mut head).await?;
    if head[0] != VERSION {
        return Ok(None);
    }
    let mut methods = vec![0u8; usize::from(head[1])];
    client.read_exact(&mut methods).await?;
    if !methods.contains(&NO_AUTH) {
        client.write_all(&[VERSION, NO_ACCEPTABLE_METHOD]).await?;
        return Ok(None);
    }
    client.write_all(&[VERSION, NO_AUTH]).await?;

    let mut req = [0u8; 4];
    client.read_exact(&mut req).await?;
    if req[0] != VERSION {
        return Ok(None);
    }
    let host = match req[3] {
        ATYP_IPV4 => {
            let mut b = [0u8; 4];
            client.read_exact(&mut b).await?;
            Ipv4Addr::from(b).to_string()
        }
        ATYP_IPV6 => {
            let mut b = [0u8; 16];
            client.read_exact(&mut b).await?;
            format!("[{}]", Ipv6Addr::from(b))
        }
        ATYP_DOMAIN => {
            let mut len = [0u8; 1];
            client.read_exact(&mut len).await?;
            let mut name = vec![0u8; usize::from(len[0])];
            client.read_exact(&mut name).await?;
            match String::from_utf8(name) {
                Ok(n) => n,
                Err(_) => {
                    reply(client, GENERAL_FAILURE, None).await?;
                    return Ok(None);
                }
            }
        }
        _ => {
            reply(client, ADDRESS_TYPE_NOT_SUPPORTED, None).await?;
            return Ok(None);
        }
    };
    let mut port = [0u8; 2];
    client.read_exact(&mut port).await?;
    if req[1] != CMD_CONNECT {
        reply(client, COMMAND_NOT_SUPPORTED, None).await?;
        return Ok(None);
    }
    Ok(Some((host, u16::from_be_bytes(port))))
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
    async fn clients_that_want_authentication_are_refused() {
        let (_, socks) = testing::proxy(&[], &[], EventSink::none()).await;
        let mut s = TcpStream::connect(socks).await.unwrap();
        s.write_all(&[5, 1, 2]).await.unwrap();
        let mut choice = [0u8; 2];
        s.read_exact(&mut choice).await.unwrap();
        assert_eq!(choice, [5, NO_ACCEPTABLE_METHOD]);
    }
}
