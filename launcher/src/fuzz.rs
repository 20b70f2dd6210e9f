//! Entry points of the fuzz targets in `fuzz/` (cargo-fuzz, run by `scripts/fuzz.sh`): each
//! takes arbitrary bytes, must not panic, and asserts what its parser promises. The unit tests
//! below run every entry point over its seeds (`fuzz/seeds/<target>/`), so the harnesses are
//! built and exercised in CI on the stable toolchain, where libFuzzer itself is not run.
//!
//! Other streams add their targets here too (one function per target, same shape).

use std::path::Path;
use std::sync::OnceLock;

use crate::policy::model::{NetworkPolicy, Source, Sourced};
use crate::proxy::decide::Decider;
use crate::proxy::events::EventSink;
use crate::proxy::glob::Glob;
use crate::proxy::matcher::{Host, HostPattern};
use crate::proxy::resolve::Resolver;
use crate::proxy::{dns, head, hello, request_path, socks5, Proxy};

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

/// The OpenShell policy loader: any text is loaded or refused, never a panic; a policy it
/// loads compiles into proxy rules (the loader accepts nothing the proxy cannot enforce).
pub fn openshell_policy(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let source = Source::PolicyFile("fuzz.yaml".into());
    if let Ok(frag) = crate::policy::openshell::parse(&text, Path::new("fuzz.yaml"), source) {
        let mut policy = NetworkPolicy::default();
        for (key, rule) in frag.rules {
            policy
                .rules
                .insert(key, Sourced::new(rule, Source::CommandLine));
        }
        if let Err(e) = Decider::from_policy(&policy) {
            panic!("a loaded policy does not compile: {e:#}\n{text}");
        }
    }
}

/// The settings loader (both formats): loaded or refused; loaded domains compile.
pub fn settings_json(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let source = Source::SettingsFile("fuzz.json".into());
    let (cwd, home) = (Path::new("/work/p"), Path::new("/home/u"));
    let parsed =
        crate::policy::agent_settings::parse(&text, Path::new("fuzz.json"), source, cwd, home);
    if let Ok(frag) = parsed {
        let sourced = |list: Vec<String>| -> Vec<Sourced<String>> {
            list.into_iter()
                .map(|d| Sourced::new(d, Source::CommandLine))
                .collect()
        };
        let policy = NetworkPolicy {
            allowed_domains: sourced(frag.allowed_domains),
            denied_domains: sourced(frag.denied_domains),
            ..Default::default()
        };
        if let Err(e) = Decider::from_policy(&policy) {
            panic!("loaded domains do not compile: {e:#}\n{text}");
        }
    }
}

/// Host and path globs: `PATTERN\0TEXT`. Building and matching never panic; a glob without
/// metacharacters matches exactly its own text; host patterns match as they parse.
pub fn globs(data: &[u8]) {
    let (pattern, text) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &data[..0]),
    };
    let (pattern, text) = (
        String::from_utf8_lossy(pattern),
        String::from_utf8_lossy(text),
    );
    for delimiter in [b'/', b'.'] {
        if let Ok(g) = Glob::new(&pattern, delimiter) {
            g.is_match(&text);
            let plain = !pattern.contains(['*', '?', '[', ']', '{', '}', '\\', '\0']);
            if plain {
                assert!(g.is_match(&pattern), "{pattern:?} does not match itself");
            }
        }
    }
    if let Ok(host) = Host::parse(&text) {
        for parse in [
            HostPattern::parse,
            HostPattern::parse_endpoint,
            HostPattern::parse_deny,
        ] {
            if let Ok(p) = parse(&pattern) {
                p.matches(&host);
            }
        }
    }
}

/// Request-path canonicalisation: never a panic; a canonical path is its own canonical form
/// (nothing left to resolve) and holds no `.`/`..` segment.
pub fn request_path(data: &[u8]) {
    let target = String::from_utf8_lossy(data);
    for allow_slash in [false, true] {
        if let Ok(c) = request_path::canonicalize(&target, allow_slash) {
            let again = request_path::canonicalize(&c.path, allow_slash)
                .unwrap_or_else(|e| panic!("{target:?} -> {:?} refused: {e}", c.path));
            assert_eq!(again.path, c.path, "{target:?}");
            assert!(!again.rewritten, "{target:?}");
            assert!(
                !c.path.split('/').any(|s| s == "." || s == ".."),
                "{target:?} -> {:?}",
                c.path
            );
        }
    }
    if let Some((_, query)) = target.split_once('?') {
        let _ = request_path::parse_query(query);
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

    #[test]
    fn the_policy_harnesses_pass_their_seeds() {
        seeds("openshell_policy")
            .iter()
            .for_each(|s| openshell_policy(s));
        seeds("settings_json").iter().for_each(|s| settings_json(s));
        seeds("globs").iter().for_each(|s| globs(s));
        seeds("request_path").iter().for_each(|s| request_path(s));
    }
}
