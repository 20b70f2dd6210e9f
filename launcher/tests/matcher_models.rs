//! The host and path matchers agree with small reference models on generated inputs. The
//! models are written from the rules as the README states them, as directly as possible (slow,
//! recursive, no tokens, no tables), so that a disagreement means the fast matcher is wrong.

use proptest::prelude::*;
use sandbox_launch::proxy::glob::Glob;
use sandbox_launch::proxy::matcher::{Host, HostPattern};

/// Paths and program paths: `*` within a segment, a whole-segment `**` across segments (`**/`
/// for any number of leading segments, a final `**` for anything; a `**` is whole when the
/// pattern before it ends with `/` or nothing), `?` one byte of a segment, `[..]` one byte of a
/// class, `{a,b}` alternatives. `at_segment_start`: the pattern so far is empty or ends in `/`.
fn model(pattern: &[u8], text: &[u8], at_segment_start: bool) -> bool {
    let Some((&p, rest)) = pattern.split_first() else {
        return text.is_empty();
    };
    match p {
        b'*' if rest.first() == Some(&b'*') => {
            let after = &rest[1..];
            let whole = at_segment_start && (after.is_empty() || after[0] == b'/');
            if !whole {
                return model(&[b"*" as &[u8], after].concat(), text, false);
            }
            if after.is_empty() {
                return true;
            }
            // `**/`: nothing, or any run of text that ends with a `/`.
            let after = &after[1..];
            model(after, text, true)
                || (0..text.len())
                    .filter(|&i| text[i] == b'/')
                    .any(|i| model(after, &text[i + 1..], true))
        }
        b'*' => (0..=text.len())
            .take_while(|&i| i == 0 || text[i - 1] != b'/')
            .any(|i| model(rest, &text[i..], false)),
        b'?' => text.first().is_some_and(|&c| c != b'/') && model(rest, &text[1..], false),
        b'[' => {
            let end = rest.iter().skip(1).position(|&c| c == b']').map(|e| e + 1);
            let end = end.expect("generated classes are closed");
            let (negated, set) = match rest[0] {
                b'!' => (true, &rest[1..end]),
                _ => (false, &rest[..end]),
            };
            text.first().is_some_and(|c| set.contains(c) != negated)
                && model(&rest[end + 1..], &text[1..], false)
        }
        b'{' => {
            let end = rest.iter().position(|&c| c == b'}').expect("closed braces");
            rest[..end]
                .split(|&c| c == b',')
                .any(|alt| model(&[alt, &rest[end + 1..]].concat(), text, at_segment_start))
        }
        c => text.first() == Some(&c) && model(rest, &text[1..], c == b'/'),
    }
}

fn path_pattern() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        Just("a"),
        Just("b"),
        Just("/"),
        Just("*"),
        Just("/**/"),
        Just("/**"),
        Just("?"),
        Just("[ab]"),
        Just("[!a]"),
        Just("{a,b}"),
        Just("{a,ab/b}"),
    ];
    prop::collection::vec(atom, 1..6).prop_map(|v| v.concat())
}

fn path_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![Just("a"), Just("b"), Just("/"), Just("ab")],
        0..8,
    )
    .prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn the_path_glob_agrees_with_its_model(pattern in path_pattern(), text in path_text()) {
        // Globs the matcher refuses to build (a trailing `**/`, `***`) have no meaning to check.
        if let Ok(glob) = Glob::new(&pattern, b'/') {
            prop_assert_eq!(
                glob.is_match(&text),
                model(pattern.as_bytes(), text.as_bytes(), true),
                "pattern {:?} text {:?}", pattern, text
            );
        }
    }
}

/// OpenShell endpoint hosts: label by label, `*` within a label, `**` one or more labels.
fn label_model(pattern: &[&str], host: &[&str]) -> bool {
    match (pattern.split_first(), host.split_first()) {
        (None, None) => true,
        (Some((&"**", prest)), Some(_)) => (1..=host.len()).any(|n| label_model(prest, &host[n..])),
        (Some((p, prest)), Some((h, hrest))) => {
            star_model(p.as_bytes(), h.as_bytes()) && label_model(prest, hrest)
        }
        _ => false,
    }
}

fn star_model(p: &[u8], h: &[u8]) -> bool {
    match p.split_first() {
        None => h.is_empty(),
        Some((b'*', rest)) => (0..=h.len()).any(|i| star_model(rest, &h[i..])),
        Some((c, rest)) => h.first() == Some(c) && star_model(rest, &h[1..]),
    }
}

fn label() -> impl Strategy<Value = String> {
    prop_oneof![Just("a"), Just("b"), Just("ab"), Just("a-b")].prop_map(String::from)
}

fn host_name() -> impl Strategy<Value = String> {
    prop::collection::vec(label(), 1..5).prop_map(|v| format!("{}.test", v.join(".")))
}

fn endpoint_pattern() -> impl Strategy<Value = String> {
    let first = prop_oneof![
        Just("*".to_string()),
        Just("**".to_string()),
        Just("a*".to_string()),
        Just("*b".to_string()),
        label(),
    ];
    let later = prop_oneof![Just("*".to_string()), label()];
    (first, prop::collection::vec(later, 0..3)).prop_map(|(f, rest)| {
        format!(
            "{f}.{}{}test",
            rest.join("."),
            if rest.is_empty() { "" } else { "." }
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn endpoint_host_globs_agree_with_their_model(pattern in endpoint_pattern(), host in host_name()) {
        if let Ok(p) = HostPattern::parse_endpoint(&pattern) {
            let h = Host::parse(&host).unwrap();
            let pl: Vec<&str> = pattern.split('.').collect();
            let hl: Vec<&str> = host.split('.').collect();
            prop_assert_eq!(p.matches(&h), label_model(&pl, &hl), "{} vs {}", pattern, host);
        }
    }

    #[test]
    fn domain_rule_wildcards_match_every_subdomain_and_nothing_else(
        suffix in prop::collection::vec(label(), 1..3),
        host in host_name(),
        upper in any::<bool>(),
    ) {
        // sandbox-runtime's definition: `*.x` matches a host that ends with `.x`; an exact
        // pattern matches the host itself; case never matters.
        let suffix = format!("{}.test", suffix.join("."));
        let shown = if upper { host.to_ascii_uppercase() } else { host.clone() };
        let h = Host::parse(&shown).unwrap();
        let wild = HostPattern::parse(&format!("*.{suffix}")).unwrap();
        prop_assert_eq!(wild.matches(&h), host.ends_with(&format!(".{suffix}")));
        let exact = HostPattern::parse(&suffix).unwrap();
        prop_assert_eq!(exact.matches(&h), host == suffix);
    }
}
