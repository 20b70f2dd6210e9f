//! Entry points of the fuzz targets in `fuzz/` (cargo-fuzz, run by `scripts/fuzz.sh`): each
//! takes arbitrary bytes, must not panic, and asserts what its parser promises. The unit tests
//! below run every entry point over its seeds (`fuzz/seeds/<target>/`), so the harnesses are
//! built and exercised in CI on the stable toolchain, where libFuzzer itself is not run.
//!
//! Other streams add their targets here too (one function per target, same shape).

use std::sync::OnceLock;

use crate::policy::model::{NetworkPolicy, Source, Sourced};
use crate::proxy::decide::Decider;
use crate::proxy::events::EventSink;
use crate::proxy::resolve::Resolver;
use crate::proxy::{dns, head, hello, socks5, Proxy};

/// The request-head parser: a parsed head lies within the input and parses the same with
/// anything appended; whatever a head names is text (it goes into events).
pub fn http_head(data: &[u8]) {
    if let head::Head::Parsed { len, names } = head::parse(data) {
        assert!(len <= data.len());
        let mut longer = data[..len].to_vec();
        longer.extend_from_slice(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(
            head::parse(&longer),
            head::Head::Parsed { len, names },
            "trailing bytes changed a complete head"
        );
    }
}

/// The ClientHello reader: fed in two pieces at any cut, it says what it says when fed whole.
pub fn client_hello(data: &[u8]) {
    let whole = hello::parse(data);
    let cut = data.first().map_or(0, |b| usize::from(*b)) % (data.len() + 1);
    let mut reader = hello::HelloReader::default();
    let first = reader.feed(&data[..cut]);
    let second = reader.feed(data);
    match first {
        hello::Hello::NeedMore => assert_eq!(second, whole, "split at {cut}"),
        // Decided on a prefix already: the same answer must stand for the whole.
        decided => assert_eq!(second, decided),
    }
}

/// The SOCKS5 handshake parsers: what they consume lies within the input.
pub fn socks5(data: &[u8]) {
    if let socks5::Step::Done(_, len) = socks5::greeting(data) {
        assert!(len <= data.len());
        if let socks5::Step::Done(request, n) = socks5::request(&data[len..]) {
            assert!(len + n <= data.len());
            assert!(!request.host.to_string().is_empty());
        }
    }
}

/// The DNS stub: a reply echoes the query's id, is a response, and is small.
pub fn dns_stub(data: &[u8]) {
    static PROXY: OnceLock<Proxy> = OnceLock::new();
    let proxy = PROXY.get_or_init(|| {
        let mut policy = NetworkPolicy::default();
        for d in ["allowed.test", "*.wild.test"] {
            policy
                .allowed_domains
                .push(Sourced::new(d.to_string(), Source::CommandLine));
        }
        let decider = Decider::from_policy(&policy).unwrap_or_default();
        Proxy::new(decider, Resolver::offline(vec![]), EventSink::none())
    });
    if let Some(reply) = dns::answer(data, proxy) {
        assert_eq!(reply[..2], data[..2]);
        assert!(reply[2] & 0x80 != 0);
        assert!(reply.len() <= 512 + data.len());
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// Every seed of `target`, from `fuzz/seeds/<target>/`.
    fn seeds(target: &str) -> Vec<Vec<u8>> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/seeds")
            .join(target);
        let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        assert!(!out.is_empty(), "no seeds in {}", dir.display());
        // Every prefix of every seed too: the parsers see streams arrive in pieces.
        let prefixes: Vec<Vec<u8>> = out
            .iter()
            .flat_map(|s| (0..s.len()).map(|n| s[..n].to_vec()))
            .collect();
        out.extend(prefixes);
        out
    }

    #[test]
    fn the_http_head_harness_passes_its_seeds() {
        seeds("http_head").iter().for_each(|s| http_head(s));
    }

    #[test]
    fn the_client_hello_harness_passes_its_seeds() {
        seeds("client_hello").iter().for_each(|s| client_hello(s));
    }

    #[test]
    fn the_socks5_harness_passes_its_seeds() {
        seeds("socks5").iter().for_each(|s| socks5(s));
    }

    #[test]
    fn the_dns_stub_harness_passes_its_seeds() {
        seeds("dns_stub").iter().for_each(|s| dns_stub(s));
    }
}
