//! Dialling through a parent proxy: a nested sandbox's proxy (see `crate::nest`) runs inside
//! an outer sandbox, whose own proxy decides by name too. Each allowed connection is opened with
//! `CONNECT host:port` to that parent, so the outer policy judges the same name (and resolves
//! it its own way): an inner allow of what the outer denies is refused there.

use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::matcher::Host;
use super::resolve::DialError;

/// How a refusal of the parent begins (its reason follows).
pub const OUTER_DENIES: &str = "the outer sandbox denies";

/// The longest response head read from the parent.
const MAX_HEAD: usize = 16 * 1024;

/// `host:port` as a CONNECT request names it.
fn authority(host: &Host, port: u16) -> String {
    match host {
        Host::Name(n) => format!("{n}:{port}"),
        Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        Host::Ip(ip) => format!("{ip}:{port}"),
    }
}

/// A tunnel to `host:port` through the HTTP proxy at `parent`.
pub async fn connect(parent: SocketAddr, host: &Host, port: u16) -> Result<TcpStream, DialError> {
    let target = authority(host, port);
    let mut s = TcpStream::connect(parent).await.map_err(|e| {
        DialError::Connect(format!(
            "cannot reach the outer sandbox's proxy {parent} for {target}: {e}"
        ))
    })?;
    let _ = s.set_nodelay(true);
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    s.write_all(request.as_bytes())
        .await
        .map_err(|e| DialError::Connect(format!("the outer sandbox's proxy {parent}: {e}")))?;
    // Byte by byte: nothing of the tunnel may be read past the head.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte).await {
            Ok(1) if head.len() < MAX_HEAD => head.push(byte[0]),
            _ => {
                return Err(DialError::Connect(format!(
                    "the outer sandbox's proxy {parent} gave no answer to CONNECT {target}"
                )))
            }
        }
    }
    let head = String::from_utf8_lossy(&head);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or(0);
    match status {
        200..=299 => Ok(s),
        403 => {
            let why = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case(super::answer::DENIED_HEADER)
                        .then(|| v.trim().to_string())
                })
                .unwrap_or_else(|| "no reason given".into());
            Err(DialError::Forbidden(format!(
                "{OUTER_DENIES} {target} ({why})"
            )))
        }
        _ => Err(DialError::Connect(format!(
            "the outer sandbox's proxy answered CONNECT {target} with {}",
            head.lines().next().unwrap_or("")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A parent that answers every CONNECT with `answer`, then echoes.
    async fn parent(answer: &'static str) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut b = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if s.read(&mut b).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(b[0]);
                    }
                    let line = String::from_utf8_lossy(&head)
                        .lines()
                        .next()
                        .unwrap()
                        .to_string();
                    s.write_all(answer.as_bytes()).await.unwrap();
                    s.write_all(format!("{line}\n").as_bytes()).await.unwrap();
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn an_allowed_connect_becomes_the_tunnel_by_name() {
        let p = parent("HTTP/1.1 200 OK\r\n\r\n").await;
        let mut s = connect(p, &Host::Name("allowed.test".into()), 443)
            .await
            .unwrap();
        let mut rest = String::new();
        s.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "CONNECT allowed.test:443 HTTP/1.1\n");
    }

    #[tokio::test]
    async fn the_parents_refusal_is_a_policy_denial() {
        let p = parent(
            "HTTP/1.1 403 Forbidden\r\nX-Sandbox-Denied: host=denied.test:80; rule=none\r\n\r\n",
        )
        .await;
        match connect(p, &Host::Name("denied.test".into()), 80).await {
            Err(DialError::Forbidden(why)) => assert!(why.contains("denied.test:80"), "{why}"),
            other => panic!("{other:?}"),
        }
        let v6 = authority(&Host::Ip("::1".parse().unwrap()), 8080);
        assert_eq!(v6, "[::1]:8080");
    }
}
