//! The decision engine against the cases it must get right; the OpenShell and sandbox-runtime
//! vectors run live in `integration/tests/conformance.rs`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;
use crate::policy::model::{Endpoint, HttpRule, NetworkRule, Source, Sourced};

fn program(exe: &str, ancestors: &[&str]) -> Program {
    Program {
        exe: PathBuf::from(exe),
        ancestors: ancestors.iter().map(PathBuf::from).collect(),
        pid: None,
    }
}

fn domains(list: &[&str]) -> Decider {
    Decider::from_policy(&crate::proxy::testing::allowing(list)).unwrap()
}

fn host(s: &str) -> Host {
    Host::parse(s).unwrap()
}

fn endpoint(host: &str, ports: &[u16]) -> Endpoint {
    Endpoint {
        host: host.into(),
        ports: ports.to_vec(),
        ..Default::default()
    }
}

fn rule(method: &str, path: &str) -> HttpRule {
    HttpRule {
        method: method.into(),
        path: path.into(),
        query: BTreeMap::new(),
    }
}

fn rest(host: &str, allow: Vec<HttpRule>, deny: Vec<HttpRule>) -> Endpoint {
    Endpoint {
        protocol: Some("rest".into()),
        rules: allow,
        deny_rules: deny,
        ..endpoint(host, &[80])
    }
}

/// The verdict of `method target` (path and query) on a plain-HTTP connection to `host`:80.
fn request(d: &Decider, host_name: &str, method: &str, target: &str) -> Decision {
    let conn = d.decide(&host(host_name), 80, None, Channel::PlainHttp);
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    d.check_request(&conn, method, path, query)
}

fn openshell(endpoints: Vec<Endpoint>, binaries: &[&str]) -> Decider {
    let mut rules = BTreeMap::new();
    rules.insert(
        "api".to_string(),
        Sourced::new(
            NetworkRule {
                name: "api".into(),
                endpoints,
                binaries: binaries.iter().map(|b| b.to_string()).collect(),
            },
            Source::PolicyFile("/p.yaml".into()),
        ),
    );
    Decider::from_policy(&NetworkPolicy {
        mode: None,
        denied_domains: vec![],
        allowed_domains: vec![],
        rules,
    })
    .unwrap()
}

#[test]
fn empty_policy_denies_everything_and_says_how_to_allow() {
    let d = Decider::default().decide(&host("example.com"), 443, None, Channel::Tunnel);
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(d.reason, "no rule allows example.com");
    assert!(d.hint.unwrap().contains("--allow-domain example.com"));
}

#[test]
fn domain_only_rule_allows_any_port_and_host_port_narrows() {
    let d = domains(&["github.com", "api.test:8443"]);
    for port in [80, 443, 22] {
        assert_eq!(
            d.decide(&host("github.com"), port, None, Channel::Tunnel)
                .verdict,
            Verdict::Allow
        );
    }
    assert_eq!(
        d.decide(&host("api.test"), 8443, None, Channel::Tunnel)
            .verdict,
        Verdict::Allow
    );
    let denied = d.decide(&host("api.test"), 443, None, Channel::Tunnel);
    assert_eq!(denied.verdict, Verdict::Deny);
    assert!(
        denied.reason.contains("only on port 8443"),
        "{}",
        denied.reason
    );
    assert!(denied.hint.unwrap().contains("--allow-domain api.test:443"));
}

#[test]
fn nonsense_patterns_fail_at_load_naming_the_rule() {
    for bad in ["*", "*.com", "exa*mple.com", "host:0", "host:99999"] {
        let policy = NetworkPolicy {
            mode: None,
            denied_domains: vec![],
            allowed_domains: vec![Sourced::new(bad.to_string(), Source::CommandLine)],
            rules: BTreeMap::new(),
        };
        let err = format!("{:#}", Decider::from_policy(&policy).unwrap_err());
        assert!(err.contains(&format!("--allow-domain {bad}")), "{err}");
    }
    let mut rules = BTreeMap::new();
    rules.insert(
        "wide".to_string(),
        Sourced::new(
            NetworkRule {
                name: "too wide".into(),
                endpoints: vec![endpoint("*.com", &[])],
                binaries: vec![],
            },
            Source::PolicyFile("/p.yaml".into()),
        ),
    );
    let err = Decider::from_policy(&NetworkPolicy {
        mode: None,
        denied_domains: vec![],
        allowed_domains: vec![],
        rules,
    })
    .unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("network_policies.wide") && err.contains("*.com"),
        "{err}"
    );
}

#[test]
fn ip_literal_denied_unless_named() {
    let d = domains(&["example.com"]);
    let denied = d.decide(&host("93.184.216.34"), 80, None, Channel::Tunnel);
    assert_eq!(denied.verdict, Verdict::Deny);
    assert!(denied.reason.contains("IP addresses"), "{}", denied.reason);
    let d = domains(&["93.184.216.34", "[::1]:8080"]);
    let ok = d.decide(&host("93.184.216.34"), 80, None, Channel::Tunnel);
    assert!(ok.verdict == Verdict::Allow && ok.explicit);
    assert_eq!(
        d.decide(&host("::1"), 8080, None, Channel::Tunnel).verdict,
        Verdict::Allow
    );
    assert_eq!(
        d.decide(&host("::1"), 8081, None, Channel::Tunnel).verdict,
        Verdict::Deny
    );
}

#[test]
fn wildcard_rule_is_not_explicit_exact_rule_is() {
    let d = domains(&["*.example.com", "db.internal.test"]);
    let w = d.decide(&host("api.example.com"), 443, None, Channel::Tunnel);
    assert!(w.verdict == Verdict::Allow && !w.explicit);
    let e = d.decide(&host("db.internal.test"), 5432, None, Channel::Tunnel);
    assert!(e.verdict == Verdict::Allow && e.explicit);
    assert_eq!(
        d.decide(&host("example.com"), 443, None, Channel::Tunnel)
            .verdict,
        Verdict::Deny
    );
}

#[test]
fn endpoint_ports_and_binaries_narrow() {
    let d = openshell(
        vec![endpoint("api.test", &[443])],
        &["/usr/bin/curl", "/usr/lib/node*/**"],
    );
    let curl = &program("/usr/bin/curl", &[]);
    assert_eq!(
        d.decide(&host("api.test"), 443, Some(curl), Channel::Tunnel)
            .verdict,
        Verdict::Allow
    );
    assert_eq!(
        d.decide(
            &host("api.test"),
            443,
            Some(&program("/usr/lib/node18/bin/node", &[])),
            Channel::Tunnel
        )
        .verdict,
        Verdict::Allow
    );
    let wrong = d.decide(
        &host("api.test"),
        443,
        Some(&program("/usr/bin/wget", &["/bin/bash"])),
        Channel::Tunnel,
    );
    assert_eq!(wrong.verdict, Verdict::Deny);
    assert!(wrong.reason.contains("/usr/bin/wget"), "{}", wrong.reason);
    // A program started by an allowed one is allowed (`curl` running a helper).
    let child = program("/usr/bin/wget", &["/bin/sh", "/usr/bin/curl", "/bin/bash"]);
    assert_eq!(
        d.decide(&host("api.test"), 443, Some(&child), Channel::Tunnel)
            .verdict,
        Verdict::Allow
    );
    // Unknown program: fail closed.
    assert_eq!(
        d.decide(&host("api.test"), 443, None, Channel::Tunnel)
            .verdict,
        Verdict::Deny
    );
    assert_eq!(
        d.decide(&host("api.test"), 80, Some(curl), Channel::Tunnel)
            .verdict,
        Verdict::Deny
    );
}

#[test]
fn audit_lets_through_and_says_it_would_deny() {
    let mut ep = endpoint("api.test", &[443]);
    ep.enforcement = Enforcement::Audit;
    let d = openshell(vec![ep], &[]);
    let a = d.decide(&host("api.test"), 80, None, Channel::Tunnel);
    assert_eq!(a.verdict, Verdict::Audit);
    assert!(
        a.reason.starts_with("audit only, would be denied"),
        "{}",
        a.reason
    );
    assert_eq!(
        d.decide(&host("other.test"), 443, None, Channel::Tunnel)
            .verdict,
        Verdict::Deny
    );
}

#[test]
fn rest_rules_check_method_path_and_query() {
    let mut ep = endpoint("api.test", &[80]);
    ep.protocol = Some("rest".into());
    let mut query = BTreeMap::new();
    query.insert(
        "ref".to_string(),
        vec!["main".to_string(), "v*".to_string()],
    );
    ep.rules = vec![
        HttpRule {
            method: "GET".into(),
            path: "/repos/*/issues".into(),
            query: BTreeMap::new(),
        },
        HttpRule {
            method: "post".into(),
            path: "/upload/**".into(),
            query,
        },
    ];
    let d = openshell(vec![ep], &[]);
    let conn = d.decide(&host("api.test"), 80, None, Channel::PlainHttp);
    assert_eq!(conn.verdict, Verdict::Allow);
    let check = |m, p, q| d.check_request(&conn, m, p, q).verdict;
    assert_eq!(check("GET", "/repos/x/issues", None), Verdict::Allow);
    assert_eq!(check("GET", "/repos/x/y/issues", None), Verdict::Deny);
    assert_eq!(check("DELETE", "/repos/x/issues", None), Verdict::Deny);
    assert_eq!(
        check("POST", "/upload/a/b", Some("ref=main")),
        Verdict::Allow
    );
    assert_eq!(
        check("POST", "/upload/a/b", Some("ref=v12")),
        Verdict::Allow
    );
    // As OpenShell matches query values: `.` separates segments, so `v*` stops at the dot.
    assert_eq!(
        check("POST", "/upload/a/b", Some("ref=v1%2E2")),
        Verdict::Deny
    );
    assert_eq!(check("POST", "/upload/a/b", Some("ref=dev")), Verdict::Deny);
    assert_eq!(check("POST", "/upload/a/b", None), Verdict::Deny);
    // Encrypted tunnels cannot be checked: refused rather than let through unchecked.
    assert_eq!(
        d.decide(&host("api.test"), 80, None, Channel::Tunnel)
            .verdict,
        Verdict::Deny
    );
}

#[test]
fn inspectable_tunnels_check_requests_unless_tls_skip() {
    let mut ep = endpoint("api.test", &[443]);
    ep.protocol = Some("rest".into());
    ep.access = Some("read-only".into());
    let d = openshell(vec![ep.clone()], &[]);
    assert!(d.needs_inspection());
    let conn = d.decide(&host("api.test"), 443, None, Channel::Inspectable);
    assert_eq!(conn.verdict, Verdict::Allow);
    assert!(!conn.rest_rules.is_empty());
    assert_eq!(
        d.check_request(&conn, "DELETE", "/x", None).verdict,
        Verdict::Deny
    );
    ep.tls = Some("skip".into());
    let d = openshell(vec![ep], &[]);
    assert!(!d.needs_inspection());
    let conn = d.decide(&host("api.test"), 443, None, Channel::Inspectable);
    assert!(conn.verdict == Verdict::Allow && conn.rest_rules.is_empty());
}

#[test]
fn access_presets_map_to_methods() {
    let mut ep = endpoint("api.test", &[]);
    ep.protocol = Some("rest".into());
    ep.access = Some("read-only".into());
    let d = openshell(vec![ep], &[]);
    let conn = d.decide(&host("api.test"), 80, None, Channel::PlainHttp);
    assert_eq!(
        d.check_request(&conn, "GET", "/a/b", None).verdict,
        Verdict::Allow
    );
    assert_eq!(
        d.check_request(&conn, "POST", "/a", None).verdict,
        Verdict::Deny
    );
}

#[test]
fn denied_domain_beats_an_allow_and_names_the_organization() {
    let policy = NetworkPolicy {
        allowed_domains: vec![Sourced::new("*.github.com".into(), Source::CommandLine)],
        denied_domains: vec![Sourced::new(
            "gist.github.com".into(),
            Source::Org("/etc/sandbox-launch/settings.json".into()),
        )],
        ..Default::default()
    };
    let d = Decider::from_policy(&policy).unwrap();
    assert_eq!(
        d.decide(&host("api.github.com"), 443, None, Channel::Tunnel)
            .verdict,
        Verdict::Allow
    );
    let denied = d.decide(&host("gist.github.com"), 443, None, Channel::Tunnel);
    assert_eq!(denied.verdict, Verdict::Deny);
    assert!(
        denied.reason.contains("(organization policy)"),
        "{}",
        denied.reason
    );
}

#[test]
fn split_host_port_handles_ipv6() {
    assert_eq!(split_host_port("a.test:80").unwrap(), ("a.test", Some(80)));
    assert_eq!(split_host_port("[::1]:80").unwrap(), ("[::1]", Some(80)));
    assert_eq!(split_host_port("[::1]").unwrap(), ("[::1]", None));
    assert_eq!(split_host_port("::1").unwrap(), ("::1", None));
    assert_eq!(split_host_port("a.test").unwrap(), ("a.test", None));
}

#[test]
fn a_deny_rule_beats_the_allow_of_every_rule() {
    let mut ep = rest(
        "api.test",
        vec![],
        vec![
            rule("POST", "/repos/*/pulls/*/reviews"),
            rule("*", "/repos/*/rulesets"),
        ],
    );
    ep.access = Some("read-write".into());
    let d = openshell(
        vec![ep, rest("api.test", vec![rule("*", "**")], vec![])],
        &[],
    );
    assert_eq!(
        request(&d, "api.test", "POST", "/repos/o/pulls/1/reviews").verdict,
        Verdict::Deny
    );
    assert_eq!(
        request(&d, "api.test", "GET", "/repos/o/rulesets").verdict,
        Verdict::Deny
    );
    assert_eq!(
        request(&d, "api.test", "POST", "/repos/o/issues").verdict,
        Verdict::Allow
    );
    let denied = request(&d, "api.test", "POST", "/repos/o/pulls/1/reviews");
    assert!(denied.reason.contains("deny rule"), "{}", denied.reason);
}

#[test]
fn a_deny_rule_with_a_query_fires_when_any_value_matches() {
    let mut deny = rule("POST", "/admin/**");
    deny.query.insert("force".into(), vec!["true".into()]);
    let mut ep = rest("api.test", vec![], vec![deny]);
    ep.access = Some("full".into());
    let d = openshell(vec![ep], &[]);
    let v = |t| request(&d, "api.test", "POST", t).verdict;
    assert_eq!(v("/admin/settings?force=true"), Verdict::Deny);
    assert_eq!(v("/admin/settings?force=false&force=true"), Verdict::Deny);
    assert_eq!(v("/admin/settings?force=false"), Verdict::Allow);
    assert_eq!(v("/admin/settings"), Verdict::Allow);
}

#[test]
fn head_is_allowed_where_get_is_and_denied_where_get_is() {
    let d = openshell(
        vec![rest(
            "api.test",
            vec![rule("GET", "/r/**")],
            vec![rule("GET", "/r/secret")],
        )],
        &[],
    );
    let v = |m, t| request(&d, "api.test", m, t).verdict;
    assert_eq!(v("HEAD", "/r/x"), Verdict::Allow);
    assert_eq!(v("HEAD", "/r/secret"), Verdict::Deny);
    assert_eq!(v("OPTIONS", "/r/x"), Verdict::Deny);
    assert_eq!(v("get", "/r/x"), Verdict::Allow);
}

#[test]
fn paths_are_decided_in_canonical_form_and_sent_so() {
    let d = openshell(
        vec![rest("api.test", vec![rule("GET", "/public/**")], vec![])],
        &[],
    );
    for sneaky in [
        "/public/../secret",
        "/public/%2e%2e/secret",
        "/public/..;/secret",
        "/public/a%2fb",
        "/public/%00",
        "/public/x#y",
    ] {
        let r = request(&d, "api.test", "GET", sneaky);
        assert_eq!(r.verdict, Verdict::Deny, "{sneaky}: {}", r.reason);
    }
    let r = request(&d, "api.test", "GET", "/public//a/./b");
    assert_eq!(r.verdict, Verdict::Allow, "{}", r.reason);
    assert_eq!(r.canonical_path.as_deref(), Some("/public/a/b"));
    let r = request(&d, "api.test", "GET", "/public/a");
    assert_eq!(
        r.canonical_path, None,
        "an already canonical path is sent as written"
    );
}

#[test]
fn encoded_slashes_pass_only_where_the_endpoint_allows_them() {
    let mut ep = rest("api.test", vec![rule("GET", "/repos/*/issues")], vec![]);
    ep.allow_encoded_slash = true;
    let d = openshell(vec![ep], &[]);
    let r = request(&d, "api.test", "GET", "/repos/group%2fproject/issues");
    assert_eq!(r.verdict, Verdict::Allow, "{}", r.reason);
    assert_eq!(
        r.canonical_path.as_deref(),
        Some("/repos/group%2Fproject/issues")
    );
}

#[test]
fn an_endpoint_path_scopes_its_rules() {
    let mut ep = rest("api.test", vec![rule("*", "/**")], vec![]);
    ep.path = Some("/repos/**".into());
    let d = openshell(vec![ep], &[]);
    assert_eq!(
        request(&d, "api.test", "POST", "/repos/o/r").verdict,
        Verdict::Allow
    );
    assert_eq!(
        request(&d, "api.test", "POST", "/graphql").verdict,
        Verdict::Deny
    );
}

#[test]
fn a_rule_without_request_rules_does_not_wave_requests_past_one_with_them() {
    let d = openshell(
        vec![
            endpoint("api.test", &[80]),
            rest("api.test", vec![rule("GET", "/ok")], vec![]),
        ],
        &[],
    );
    assert_eq!(
        request(&d, "api.test", "GET", "/ok").verdict,
        Verdict::Allow
    );
    assert_eq!(
        request(&d, "api.test", "GET", "/other").verdict,
        Verdict::Deny
    );
    // Where requests cannot be seen, such a rule refuses the connection.
    assert_eq!(
        d.decide(&host("api.test"), 80, None, Channel::Tunnel)
            .verdict,
        Verdict::Deny
    );
}

#[test]
fn a_binary_star_stays_within_one_directory() {
    let d = openshell(vec![endpoint("api.test", &[443])], &["/sandbox/*"]);
    let v = |exe| {
        d.decide(
            &host("api.test"),
            443,
            Some(&program(exe, &[])),
            Channel::Tunnel,
        )
        .verdict
    };
    assert_eq!(v("/sandbox/tool"), Verdict::Allow);
    assert_eq!(v("/sandbox/a/b/x"), Verdict::Deny);
    let d = openshell(vec![endpoint("api.test", &[443])], &["/sandbox/**"]);
    let v = |exe| {
        d.decide(
            &host("api.test"),
            443,
            Some(&program(exe, &[])),
            Channel::Tunnel,
        )
        .verdict
    };
    assert_eq!(v("/sandbox/a/b/x"), Verdict::Allow);
}

#[test]
fn endpoint_hosts_match_one_label_per_star() {
    let d = openshell(vec![endpoint("*.example.com", &[443])], &[]);
    let v = |h| d.decide(&host(h), 443, None, Channel::Tunnel).verdict;
    assert_eq!(v("api.example.com"), Verdict::Allow);
    assert_eq!(v("deep.api.example.com"), Verdict::Deny);
    assert_eq!(v("example.com"), Verdict::Deny);
}

#[test]
fn a_denied_star_with_a_port_refuses_that_port_everywhere() {
    let policy = NetworkPolicy {
        allowed_domains: vec![Sourced::new("github.com".into(), Source::CommandLine)],
        denied_domains: vec![Sourced::new("*:22".into(), Source::CommandLine)],
        ..Default::default()
    };
    let d = Decider::from_policy(&policy).unwrap();
    assert_eq!(
        d.decide(&host("github.com"), 22, None, Channel::Tunnel)
            .verdict,
        Verdict::Deny
    );
    assert_eq!(
        d.decide(&host("github.com"), 443, None, Channel::Tunnel)
            .verdict,
        Verdict::Allow
    );
}

#[test]
fn a_request_is_decided_as_every_method_it_asks_to_be_taken_for() {
    use hyper::header::{HeaderMap, HeaderValue};
    let check = |enforcement: Enforcement, header: Option<&str>, target: &str| {
        let mut ep = rest(
            "api.test",
            vec![rule("POST", "/items/**"), rule("GET", "/**")],
            vec![rule("DELETE", "/items/**")],
        );
        ep.enforcement = enforcement;
        let d = openshell(vec![ep], &[]);
        let conn = d.decide(&host("api.test"), 80, None, Channel::PlainHttp);
        let mut headers = HeaderMap::new();
        if let Some(h) = header {
            headers.insert("x-http-method-override", HeaderValue::from_str(h).unwrap());
        }
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        d.check_http(&conn, "POST", &headers, path, Some(query))
    };
    let refused = check(Enforcement::Enforce, Some("DELETE"), "/items/1?");
    assert_eq!(refused.verdict, Verdict::Deny);
    assert!(
        refused
            .reason
            .starts_with("taken as DELETE (the x-http-method-override header)"),
        "{}",
        refused.reason
    );
    let by_query = check(Enforcement::Enforce, None, "/items/1?_method=delete");
    assert_eq!(by_query.verdict, Verdict::Deny, "{}", by_query.reason);
    assert_eq!(
        check(Enforcement::Enforce, Some("GET"), "/items/1?").verdict,
        Verdict::Allow
    );
    assert_eq!(
        check(Enforcement::Enforce, None, "/items/1?").verdict,
        Verdict::Allow
    );
    assert_eq!(
        check(Enforcement::Enforce, Some("not a method"), "/items/1?").verdict,
        Verdict::Deny
    );
    // Audit: let through, and the reason says what would have been refused.
    let audited = check(Enforcement::Audit, Some("DELETE"), "/items/1?");
    assert_eq!(audited.verdict, Verdict::Audit);
    assert!(
        audited.reason.contains("taken as DELETE"),
        "{}",
        audited.reason
    );
}

#[test]
fn a_binary_path_that_is_a_symlink_also_allows_the_program_it_leads_to() {
    // The kernel names `/usr/bin/python3.11` when `/usr/bin/python3` (a symlink) runs.
    let dir = std::env::temp_dir().join(format!("sl-binlink-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("real")).unwrap();
    std::fs::write(dir.join("real/tool-1.0"), "").unwrap();
    std::fs::write(dir.join("real/other"), "").unwrap();
    std::os::unix::fs::symlink("tool-1.0", dir.join("real/tool")).unwrap();
    std::os::unix::fs::symlink("real", dir.join("bin")).unwrap();
    let real = std::fs::canonicalize(dir.join("real")).unwrap();
    let verdict = |written: &str, exe: &std::path::Path| {
        let d = openshell(vec![endpoint("api.test", &[443])], &[written]);
        let exe = program(exe.to_str().unwrap(), &[]);
        d.decide(&host("api.test"), 443, Some(&exe), Channel::Tunnel)
            .verdict
    };
    let tool = dir.join("real/tool");
    let via_dir = dir.join("bin/tool-1.0");
    for written in [&tool, &via_dir] {
        let written = written.to_str().unwrap();
        assert_eq!(verdict(written, &real.join("tool-1.0")), Verdict::Allow);
        // The path as written still counts (another view may not resolve it the same way).
        assert_eq!(
            verdict(written, std::path::Path::new(written)),
            Verdict::Allow
        );
        // The twin: another program in the same directory is not let through.
        assert_eq!(verdict(written, &real.join("other")), Verdict::Deny);
    }
    // A glob is matched as written, never resolved.
    let glob = format!("{}/bin/*", dir.display());
    assert_eq!(verdict(&glob, &real.join("tool-1.0")), Verdict::Deny);
    std::fs::remove_dir_all(&dir).unwrap();
}
