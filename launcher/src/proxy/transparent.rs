//! The transparent listener: connections of programs that ignore the proxy variables, delivered
//! by the nftables redirect inside the sandbox (see `shim::egress`). The address the program
//! asked for comes from `SO_ORIGINAL_DST`; the name from the DNS stub's stand-in address, or —
//! for an address the program found by itself — from its TLS SNI or HTTP `Host`. The decision is
//! the proxy's, with the rules of a tunnel (L7 rules cannot be checked here, so endpoints that
//! have them refuse). A refused connection is reset and recorded in the events stream.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};

use super::decide::{Channel, Decision, Verdict};
use super::dns::StandIns;
use super::first_flight::{self, Flight};
use super::head;
use super::identify::Program;
use super::matcher::Host;
use super::Proxy;
use crate::reload::revoke::until_revoked;

pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>) {
    super::accept_each(listener, proxy, |stream, peer, proxy| async move {
        handle(stream, peer, &proxy).await;
    })
    .await
}

async fn handle(client: TcpStream, peer: SocketAddr, proxy: &Proxy) {
    // A connection made to the listener directly (not redirected) has no original destination.
    let Ok(orig) = shim::egress::original_destination(client.as_raw_fd()) else {
        return super::tunnel::reset(client);
    };
    // The program's socket is connected (as it sees it) to the original destination.
    let binary = proxy.binary_of(peer, Some(SocketAddr::V4(orig))).await;
    let (ip, port) = (IpAddr::V4(*orig.ip()), orig.port());
    let (mut decision, address, early) = match stand_in(proxy, ip) {
        // A name the DNS stub gave: decided on now; what the client asks for is checked as it
        // comes, while the server's bytes already flow (server-first protocols).
        // With prompts, a denied name may wait here for an answer (its DNS lookup could not).
        Some(Ok(host)) => {
            let rules = proxy.decider.current();
            let d = rules.decide(&host, port, binary.as_ref(), Channel::Tunnel);
            let (_, d) = proxy
                .admit(rules, d, binary.as_ref(), Channel::Tunnel, "transparent")
                .await;
            (d, None, Vec::new())
        }
        Some(Err(why)) => {
            let mut d = proxy.decider.current().decide(
                &Host::Ip(ip),
                port,
                binary.as_ref(),
                Channel::Tunnel,
            );
            refuse(&mut d, why);
            (d, None, Vec::new())
        }
        // An address the program found itself: its first bytes may name the host.
        None => {
            let first = first_flight::read(
                &client,
                Vec::new(),
                Some(first_flight::FIRST_BYTES_WAIT),
                proxy.timeouts.header,
            )
            .await;
            let (d, a) = decide_address(proxy, ip, port, binary.as_ref(), &first.flight).await;
            (d, a, first.bytes)
        }
    };
    if !decision.verdict.lets_through() {
        proxy
            .events
            .decision("transparent", &decision, binary.as_ref(), None);
        return super::tunnel::reset(client);
    }
    let upstream = match address {
        Some(addr) => TcpStream::connect(addr).await.map_err(|e| e.to_string()),
        None => proxy
            .resolver
            .dial(&decision)
            .await
            .map_err(|e| e.to_string()),
    };
    let upstream = match upstream {
        Ok(u) => u,
        Err(e) => {
            // Allowed, but the server cannot be reached: an error, not a denial.
            proxy
                .events
                .dial_error("transparent", &decision, binary.as_ref(), &e);
            return super::tunnel::reset(client);
        }
    };
    let _ = upstream.set_nodelay(true);
    proxy
        .events
        .decision("transparent", &decision, binary.as_ref(), None);
    let host = decision.host.clone();
    let relay = super::tunnel::relay_for(
        client,
        upstream,
        early,
        &host,
        decision.port,
        decision.opaque_ok,
        &proxy.timeouts,
    );
    let refused = until_revoked(
        proxy,
        &decision,
        binary.as_ref(),
        Channel::Tunnel,
        "transparent",
        relay,
    )
    .await
    .flatten();
    if let Some(why) = refused {
        refuse(&mut decision, why);
        proxy
            .events
            .decision("transparent", &decision, binary.as_ref(), None);
    }
}

/// The name behind a stand-in address of the DNS stub: `None` when `ip` is not one, an error
/// when it is in the range but was never given out.
fn stand_in(proxy: &Proxy, ip: IpAddr) -> Option<Result<Host, String>> {
    let IpAddr::V4(v4) = ip else { return None };
    if !StandIns::in_pool(v4) {
        return None;
    }
    Some(
        proxy
            .stand_ins
            .name_of(v4)
            .map(Host::Name)
            .ok_or_else(|| format!("{ip} is in the sandbox's DNS range but was never given out")),
    )
}

/// The decision for a redirected connection to the address `ip`:`port` that the program found
/// itself, and the address to dial when it is not the decided host's own resolution (a name
/// recovered from SNI/Host: the address the program chose, once it is known to be one of the
/// name's).
async fn decide_address(
    proxy: &Proxy,
    ip: IpAddr,
    port: u16,
    binary: Option<&Program>,
    first: &Flight,
) -> (Decision, Option<SocketAddr>) {
    let host = Host::Ip(ip);
    let rules = proxy.decider.current();
    let decision = rules.decide(&host, port, binary, Channel::Tunnel);
    if decision.verdict.lets_through() {
        // An address rule: the tunnel checks the flight (unparsed bytes need `tls: skip`).
        return (decision, None);
    }
    // Decide on the name it asks for instead, and dial the address it chose only if that name
    // resolves to it here too. Every name the flight gives must be that one name.
    let names = first.names();
    let Some(head::Named { via, name }) = names.first() else {
        return (decision, None);
    };
    let Ok(named) = Host::parse(name) else {
        return (decision, None);
    };
    if let Some(why) = head::mismatch(&named, &names) {
        let mut d = decision;
        refuse(&mut d, why);
        return (d, None);
    }
    let by_name = rules.decide(&named, port, binary, Channel::Tunnel);
    if !by_name.verdict.lets_through() {
        return (by_name, None);
    }
    let wanted = SocketAddr::new(ip, port);
    match proxy.resolver.resolve_checked(&by_name).await {
        Ok(addrs) if addrs.contains(&wanted) => (by_name, Some(wanted)),
        Ok(_) => {
            let mut d = by_name;
            refuse(
                &mut d,
                format!("{via} asks for {named}, which does not resolve to {ip} here"),
            );
            (d, None)
        }
        Err(e) => {
            let mut d = by_name;
            refuse(&mut d, e.to_string());
            (d, None)
        }
    }
}

fn refuse(d: &mut Decision, why: String) {
    d.verdict = Verdict::Deny;
    d.reason = why;
}
