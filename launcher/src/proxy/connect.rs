//! `CONNECT host:port` on the HTTP listener: decide on the authority, dial the checked address,
//! answer 200, then hand the client's socket either to TLS inspection (endpoints whose requests
//! must be checked) or to the tunnel, which checks the client's first flight against the host.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use super::answer::{bad_gateway, bad_request, denied, empty, Body};
use super::decide::{Channel, Decision, Verdict};
use super::head::authority_host;
use super::identify::Program;
use super::matcher::Host;
use super::resolve::DialError;
use super::Proxy;
use crate::reload::revoke::until_revoked;

/// Decide, dial, answer 200, then relay (in a task of its own, once hyper hands the socket over).
pub async fn connect(
    proxy: &Arc<Proxy>,
    binary: Option<Program>,
    req: Request<Incoming>,
) -> Response<Body> {
    let Some(authority) = req.uri().authority().cloned() else {
        return bad_request("CONNECT needs a host:port target");
    };
    if let Err(why) = authority_host(authority.as_str()) {
        return bad_request(&why);
    }
    let Some(port) = authority.port_u16() else {
        return bad_request("CONNECT needs a port (host:port)");
    };
    let host = match Host::parse(authority.host()) {
        Ok(h) => h,
        Err(e) => return bad_request(&format!("{e:#}")),
    };
    let channel = match proxy.inspector {
        Some(_) => Channel::Inspectable,
        None => Channel::Tunnel,
    };
    let rules = proxy.decider.current();
    let decision = rules.decide(&host, port, binary.as_ref(), channel);
    let (rules, decision) = proxy
        .admit(rules, decision, binary.as_ref(), channel, "connect")
        .await;
    let upstream = match dial(proxy, decision.clone(), binary.as_ref(), "connect", None).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let proxy = proxy.clone();
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let parts = match upgraded.downcast::<TokioIo<tokio::net::TcpStream>>() {
            Ok(parts) => parts,
            Err(upgraded) => {
                // Not our own socket type: cannot happen with hyper's server on a TcpStream.
                drop(upgraded);
                return;
            }
        };
        let client = parts.io.into_inner();
        let early = parts.read_buf.to_vec();
        let credentials = proxy
            .credentials
            .as_ref()
            .is_some_and(|c| c.wanted_by(&host, port));
        let opened = !decision.rest_rules.is_empty() || credentials;
        if let (Some(inspector), true) = (&proxy.inspector, opened) {
            // Each request must be checked; the client waits for our 200 before it speaks, so
            // nothing should be buffered yet (if it is, the client did not wait: refuse).
            if early.is_empty() {
                let intercept = super::inspect::intercept(
                    proxy.clone(),
                    rules,
                    inspector.clone(),
                    client,
                    upstream,
                    decision.clone(),
                    binary.clone(),
                );
                let r = until_revoked(
                    &proxy,
                    &decision,
                    binary.as_ref(),
                    channel,
                    "connect",
                    intercept,
                )
                .await;
                if let Some(Err(e)) = r {
                    proxy.events.emit(serde_json::json!({
                        "event": "network_error",
                        "host": host.to_string(),
                        "port": port,
                        "error": format!("{e:#}"),
                    }));
                }
            }
            return;
        }
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
            &proxy,
            &decision,
            binary.as_ref(),
            channel,
            "connect",
            relay,
        )
        .await
        .flatten();
        if let Some(why) = refused {
            let mut refused = decision;
            refused.verdict = Verdict::Deny;
            refused.reason = why;
            proxy
                .events
                .decision("connect", &refused, binary.as_ref(), None);
        }
    });
    Response::new(empty())
}

/// Log the decision and, when it lets the connection through, resolve, check and connect.
pub async fn dial(
    proxy: &Proxy,
    mut decision: Decision,
    binary: Option<&Program>,
    protocol: &str,
    request: Option<(&str, &str)>,
) -> Result<tokio::net::TcpStream, Response<Body>> {
    if !decision.verdict.lets_through() {
        proxy.events.decision(protocol, &decision, binary, request);
        return Err(denied(&decision));
    }
    match proxy.resolver.dial(&decision).await {
        Ok(s) => {
            proxy.events.decision(protocol, &decision, binary, request);
            Ok(s)
        }
        Err(DialError::Forbidden(why)) => {
            decision.verdict = Verdict::Deny;
            decision.hint = Some(if why.starts_with(super::parent::OUTER_DENIES) {
                "the outer sandbox's policy must allow it as well".to_string()
            } else {
                format!("name the host exactly: `--allow-domain {}`", decision.host)
            });
            decision.reason = why;
            proxy.events.decision(protocol, &decision, binary, request);
            Err(denied(&decision))
        }
        Err(e) => {
            proxy
                .events
                .dial_error(protocol, &decision, binary, &e.to_string());
            Err(bad_gateway(&e.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use crate::proxy::events::EventSink;
    use crate::proxy::testing;
    use std::net::SocketAddr;

    /// Send a CONNECT, return the status line and head; the stream is then the tunnel.
    async fn connect_raw(
        proxy: SocketAddr,
        target: &str,
        host_header: &str,
    ) -> (TcpStream, String) {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {host_header}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut byte).await.unwrap() == 0 {
                break;
            }
            head.push(byte[0]);
        }
        (s, String::from_utf8_lossy(&head).into_owned())
    }

    #[tokio::test]
    async fn connect_uses_the_authority_not_the_host_header() {
        let up = testing::upstream().await;
        let (http, _) = testing::proxy(
            &["allowed.test"],
            &[("allowed.test", "127.0.0.1"), ("denied.test", "127.0.0.1")],
            EventSink::none(),
        )
        .await;
        let (_, head) = connect_raw(
            http,
            &format!("denied.test:{}", up.port()),
            &format!("allowed.test:{}", up.port()),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 403"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("x-sandbox-denied: host=denied.test"),
            "{head}"
        );

        let (mut tunnel, head) = connect_raw(
            http,
            &format!("allowed.test:{}", up.port()),
            &format!("denied.test:{}", up.port()),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        tunnel
            .write_all(b"GET /through HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        tunnel.read_to_string(&mut out).await.unwrap();
        assert!(
            out.starts_with("HTTP/1.1 200") && out.contains("path=/through"),
            "{out}"
        );
    }

    #[tokio::test]
    async fn a_tunnel_whose_request_or_sni_names_another_host_is_closed() {
        let up = testing::upstream().await;
        let path = std::env::temp_dir().join(format!("sl-fronting-events-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let (http, _) = testing::proxy(
            &["allowed.test"],
            &[("allowed.test", "127.0.0.1")],
            EventSink::open(path.to_str().unwrap()).unwrap(),
        )
        .await;
        let target = format!("allowed.test:{}", up.port());
        let first_bytes: [Vec<u8>; 2] = [
            b"GET /fronted HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n".to_vec(),
            crate::proxy::hello::tests::client_hello(Some("denied.test")),
        ];
        for bytes in first_bytes {
            let (mut tunnel, head) = connect_raw(http, &target, &target).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            tunnel.write_all(&bytes).await.unwrap();
            let mut out = Vec::new();
            let _ = tunnel.read_to_end(&mut out).await;
            assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        }
        let log = std::fs::read_to_string(&path).unwrap();
        assert!(log.contains("HTTP Host asks for denied.test"), "{log}");
        assert!(log.contains("TLS SNI asks for denied.test"), "{log}");
        std::fs::remove_file(&path).unwrap();
    }

    #[tokio::test]
    async fn hundreds_of_tunnels_are_open_at_once_on_one_thread() {
        crate::proxy::tunnel::raise_fd_limit();
        let up = testing::upstream().await;
        let (http, _) = testing::proxy(
            &["allowed.test"],
            &[("allowed.test", "127.0.0.1")],
            EventSink::none(),
        )
        .await;
        let target = format!("allowed.test:{}", up.port());
        let mut tunnels = Vec::new();
        for _ in 0..250 {
            let (t, head) = connect_raw(http, &target, &target).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            tunnels.push(t);
        }
        let mut tasks = Vec::new();
        for (i, mut t) in tunnels.into_iter().enumerate() {
            tasks.push(tokio::spawn(async move {
                t.write_all(
                    format!(
                        "GET /t{i} HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .await
                .unwrap();
                let mut out = String::new();
                t.read_to_string(&mut out).await.unwrap();
                assert!(out.contains(&format!("path=/t{i} ")), "{out}");
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    }

    #[tokio::test]
    async fn denials_are_written_to_the_events_file() {
        let path = std::env::temp_dir().join(format!("sl-proxy-events-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let (http, _) =
            testing::proxy(&[], &[], EventSink::open(path.to_str().unwrap()).unwrap()).await;
        let (_, head) = connect_raw(http, "blocked.test:443", "blocked.test:443").await;
        assert!(head.starts_with("HTTP/1.1 403"), "{head}");
        let text = std::fs::read_to_string(&path).unwrap();
        let event: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(event["host"], "blocked.test");
        assert_eq!(event["port"], 443);
        assert_eq!(event["decision"], "deny");
        assert_eq!(event["protocol"], "connect");
        assert_eq!(event["reason"], "no rule allows blocked.test");
        assert!(event["binary"].is_null());
        std::fs::remove_file(&path).unwrap();
    }
}
