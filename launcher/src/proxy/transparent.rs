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
use super::identify::Program;
use super::matcher::Host;
use super::peek::{self, FirstBytes};
use super::Proxy;

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
    let binary = proxy.binary_of(peer, Some(SocketAddr::V4(orig)));
    let (ip, port) = (IpAddr::V4(*orig.ip()), orig.port());
    let (mut decision, address) = match stand_in(proxy, ip) {
        // A name the DNS stub gave: decided on now; what the client asks for is checked as it
        // comes, while the server's bytes already flow (server-first protocols).
        Some(Ok(host)) => (
            proxy
                .decider
                .decide(&host, port, binary.as_ref(), Channel::Tunnel),
            None,
        ),
        Some(Err(why)) => {
            let mut d = proxy
                .decider
                .decide(&Host::Ip(ip), port, binary.as_ref(), Channel::Tunnel);
            refuse(&mut d, why);
            (d, None)
        }
        // An address the program found itself: its first bytes may name the host.
        None => {
            let first = peek::first_bytes(&client, Some(peek::FIRST_BYTES_WAIT)).await;
            decide_address(proxy, ip, port, binary.as_ref(), &first).await
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
            decision.verdict = Verdict::Deny;
            decision.reason = e;
            proxy
                .events
                .decision("transparent", &decision, binary.as_ref(), None);
            return super::tunnel::reset(client);
        }
    };
    let _ = upstream.set_nodelay(true);
    proxy
        .events
        .decision("transparent", &decision, binary.as_ref(), None);
    let host = decision.host.clone();
    if let Some(why) = super::tunnel::relay_for(client, upstream, Vec::new(), &host).await {
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
    first: &FirstBytes,
) -> (Decision, Option<SocketAddr>) {
    let host = Host::Ip(ip);
    let mut decision = proxy.decider.decide(&host, port, binary, Channel::Tunnel);
    if let Some(why) = peek::mismatch(&host, first) {
        if decision.verdict.lets_through() {
            refuse(&mut decision, why);
            return (decision, None);
        }
    }
    if decision.verdict.lets_through() {
        return (decision, None);
    }
    // Decide on the name it asks for instead, and dial the address it chose only if that name
    // resolves to it here too.
    let FirstBytes::Named { via, name } = first else {
        return (decision, None);
    };
    let Ok(named) = Host::parse(name) else {
        return (decision, None);
    };
    let by_name = proxy.decider.decide(&named, port, binary, Channel::Tunnel);
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
