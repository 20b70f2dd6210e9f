//! The sandbox's DNS stub (transparent egress). It listens on 127.0.0.1:53 inside (the socket
//! is handed over like the proxy's) and never forwards a query anywhere, so DNS carries nothing
//! out of the sandbox:
//!
//! * a name no rule allows: NXDOMAIN, and a `dns` denial in the events stream;
//! * an allowed name: an `A` record with a stand-in address from 198.18.0.0/15 (RFC 2544's
//!   benchmarking range, never routed on the internet), one per name for the sandbox's lifetime.
//!   A connection to that address reaches the transparent listener, which maps it back to the
//!   name, decides with the same rules as the proxy, resolves the name on the host and dials the
//!   checked address. Other record types get an empty answer (IPv6 has no route inside).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use tokio::net::UdpSocket;

use super::matcher::Host;
use super::Proxy;

/// First and last stand-in address (198.18.0.0/15 without its network and broadcast address).
const POOL_FIRST: u32 = u32::from_be_bytes([198, 18, 0, 1]);
const POOL_LAST: u32 = u32::from_be_bytes([198, 19, 255, 254]);
const TTL: u32 = 60;

/// Names the stub answered, and the stand-in address each was given.
#[derive(Default)]
pub struct StandIns {
    inner: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    by_name: HashMap<String, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, String>,
    next: u32,
}

impl StandIns {
    /// The address for `name`, the same every time it is asked; `None` when the pool is spent.
    pub fn address_for(&self, name: &str) -> Option<Ipv4Addr> {
        let mut t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = t.by_name.get(name) {
            return Some(*a);
        }
        let n = POOL_FIRST + t.next;
        if n > POOL_LAST {
            return None;
        }
        t.next += 1;
        let addr = Ipv4Addr::from(n);
        t.by_name.insert(name.to_string(), addr);
        t.by_addr.insert(addr, name.to_string());
        Some(addr)
    }

    /// The name an address stands in for.
    pub fn name_of(&self, addr: Ipv4Addr) -> Option<String> {
        let t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        t.by_addr.get(&addr).cloned()
    }

    /// Whether `addr` is in the stand-in range (given out or not).
    pub fn in_pool(addr: Ipv4Addr) -> bool {
        (POOL_FIRST - 1..=POOL_LAST + 1).contains(&u32::from(addr))
    }
}

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_ANY: u16 = 255;
const CLASS_IN: u16 = 1;
const RCODE_FORMERR: u8 = 1;
const RCODE_SERVFAIL: u8 = 2;
const RCODE_NXDOMAIN: u8 = 3;
const RCODE_NOTIMP: u8 = 4;

/// Answer queries until the socket fails.
pub async fn serve(socket: UdpSocket, proxy: Arc<Proxy>) {
    let mut buf = vec![0u8; 1500];
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Some(reply) = answer(&buf[..n], &proxy) {
            let _ = socket.send_to(&reply, from).await;
        }
    }
}

/// The question of a query: name (as sent), type, class, and where the question ends.
struct Question {
    name: String,
    qtype: u16,
    qclass: u16,
    end: usize,
}

fn question(q: &[u8]) -> Option<Question> {
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*q.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None; // compression pointers do not appear in a question
        }
        labels.push(String::from_utf8_lossy(q.get(i..i + len)?).into_owned());
        i += len;
    }
    let qtype = u16::from_be_bytes([*q.get(i)?, *q.get(i + 1)?]);
    let qclass = u16::from_be_bytes([*q.get(i + 2)?, *q.get(i + 3)?]);
    Some(Question {
        name: labels.join("."),
        qtype,
        qclass,
        end: i + 4,
    })
}

/// The reply to one query datagram; `None` for something that is not a query at all.
pub fn answer(q: &[u8], proxy: &Proxy) -> Option<Vec<u8>> {
    if q.len() < 12 || q[2] & 0x80 != 0 {
        return None; // too short, or a response
    }
    let opcode = (q[2] >> 3) & 0x0f;
    let qdcount = u16::from_be_bytes([q[4], q[5]]);
    let question = match question(q) {
        Some(qn) if opcode == 0 && qdcount == 1 => qn,
        Some(_) if opcode != 0 => return Some(reply(q, None, RCODE_NOTIMP, None)),
        _ => return Some(reply(q, None, RCODE_FORMERR, None)),
    };
    let echoed = &q[12..question.end];
    let name = match Host::parse(&question.name) {
        Ok(Host::Name(name)) => name,
        _ => return Some(reply(q, Some(echoed), RCODE_NXDOMAIN, None)),
    };
    let host = Host::Name(name.clone());
    let decision = proxy.decider.current().resolvable(&host);
    // With prompts, the name gets its stand-in and the connection to it waits for the answer
    // (a lookup cannot wait that long); the organisation's denials never do.
    let deferred = !decision.verdict.lets_through()
        && proxy
            .prompts
            .as_ref()
            .is_some_and(|p| p.defers_lookup(&decision));
    if !decision.verdict.lets_through() && !deferred {
        // Resolvers ask for A and AAAA together: one event per lookup is enough.
        if question.qtype != TYPE_AAAA {
            proxy.events.decision("dns", &decision, None, None);
        }
        return Some(reply(q, Some(echoed), RCODE_NXDOMAIN, None));
    }
    if question.qclass != CLASS_IN || !matches!(question.qtype, TYPE_A | TYPE_ANY) {
        return Some(reply(q, Some(echoed), 0, None));
    }
    match proxy.stand_ins.address_for(&name) {
        Some(addr) => Some(reply(q, Some(echoed), 0, Some(addr))),
        None => Some(reply(q, Some(echoed), RCODE_SERVFAIL, None)),
    }
}

/// A response with the query's id and RD bit, its question echoed, and at most one A record.
fn reply(q: &[u8], question: Option<&[u8]>, rcode: u8, a: Option<Ipv4Addr>) -> Vec<u8> {
    let mut r = Vec::with_capacity(64);
    r.extend_from_slice(&q[0..2]);
    r.push(0x80 | (q[2] & 0x79)); // QR, opcode, RD
    r.push(0x80 | rcode); // RA
    r.extend_from_slice(&u16::from(question.is_some()).to_be_bytes());
    r.extend_from_slice(&u16::from(a.is_some()).to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]);
    if let Some(qn) = question {
        r.extend_from_slice(qn);
    }
    if let Some(addr) = a {
        r.extend_from_slice(&[0xc0, 12]); // the name in the question
        r.extend_from_slice(&TYPE_A.to_be_bytes());
        r.extend_from_slice(&CLASS_IN.to_be_bytes());
        r.extend_from_slice(&TTL.to_be_bytes());
        r.extend_from_slice(&4u16.to_be_bytes());
        r.extend_from_slice(&addr.octets());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::events::EventSink;
    use crate::proxy::testing::proxy_with;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.trim_end_matches('.').split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&CLASS_IN.to_be_bytes());
        q
    }

    fn rcode(r: &[u8]) -> u8 {
        r[3] & 0x0f
    }

    #[test]
    fn allowed_names_get_a_stable_stand_in_address() {
        let proxy = proxy_with(&["*.allowed.test"], EventSink::none());
        let r = answer(&query("api.Allowed.test", TYPE_A), &proxy).unwrap();
        assert_eq!(&r[0..2], &[0x12, 0x34]);
        assert_eq!(rcode(&r), 0);
        assert_eq!(u16::from_be_bytes([r[6], r[7]]), 1, "one answer");
        let addr = Ipv4Addr::new(
            r[r.len() - 4],
            r[r.len() - 3],
            r[r.len() - 2],
            r[r.len() - 1],
        );
        assert!(StandIns::in_pool(addr));
        assert_eq!(
            proxy.stand_ins.name_of(addr).as_deref(),
            Some("api.allowed.test")
        );
        let again = answer(&query("API.allowed.test", TYPE_A), &proxy).unwrap();
        assert_eq!(&again[again.len() - 4..], &addr.octets());
        // AAAA: no data, no error.
        let v6 = answer(&query("api.allowed.test", TYPE_AAAA), &proxy).unwrap();
        assert_eq!((rcode(&v6), v6[7]), (0, 0));
    }

    #[test]
    fn other_names_do_not_exist_and_are_never_given_an_address() {
        let proxy = proxy_with(&["*.allowed.test"], EventSink::none());
        for name in [
            "allowed.test",
            "evil-allowed.test",
            "exfil.data.attacker.test",
        ] {
            let r = answer(&query(name, TYPE_A), &proxy).unwrap();
            assert_eq!(rcode(&r), RCODE_NXDOMAIN, "{name}");
            assert_eq!(r[7], 0);
        }
        let r = answer(&query("x.test", 16 /* TXT */), &proxy).unwrap();
        assert_eq!(rcode(&r), RCODE_NXDOMAIN);
    }

    #[test]
    fn malformed_queries_get_formerr_and_responses_are_ignored() {
        let proxy = proxy_with(&["a.test"], EventSink::none());
        assert_eq!(
            rcode(&answer(&[0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 9], &proxy).unwrap()),
            RCODE_FORMERR
        );
        let mut response = query("a.test", TYPE_A);
        response[2] |= 0x80;
        assert!(answer(&response, &proxy).is_none());
    }

    #[test]
    fn the_pool_is_198_18_slash_15() {
        assert!(StandIns::in_pool(Ipv4Addr::new(198, 19, 1, 1)));
        assert!(!StandIns::in_pool(Ipv4Addr::new(198, 20, 0, 1)));
        assert!(!StandIns::in_pool(Ipv4Addr::new(198, 17, 255, 255)));
    }
}
