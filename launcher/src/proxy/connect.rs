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
    let decision = proxy.decider.decide(&host, port, binary.as_ref(), channel);
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
                let r = super::inspect::intercept(
                    proxy.clone(),
                    inspector.clone(),
                    client,
                    upstream,
                    decision,
                    binary,
                )
                .await;
                if let Err(e) = r {
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
        let refused = super::tunnel::relay_for(
            client,
            upstream,
            early,
            &host,
            decision.opaque_ok,
            &proxy.timeouts,
        )
        .await;
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
            decision.reason = why;
            decision.hint = Some(format!(
                "name the host exactly: `--allow-domain {}`",
                decision.host
            ));
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
