//! The OpenShell loader: what it accepts, and every refusal naming its key (and line).

use std::path::{Path, PathBuf};

use super::*;
use crate::policy::model::Enforcement;

fn parse_ok(yaml: &str) -> Fragment {
    parse(
        yaml,
        Path::new("p.yaml"),
        Source::PolicyFile("p.yaml".into()),
    )
    .unwrap()
}

fn parse_err(yaml: &str) -> String {
    format!(
        "{:#}",
        parse(
            yaml,
            Path::new("p.yaml"),
            Source::PolicyFile("p.yaml".into())
        )
        .unwrap_err()
    )
}

const FULL: &str = r#"
version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /etc/]
  read_write: [/sandbox, /tmp]
landlock:
  compatibility: best_effort
process:
  run_as_user: sandbox
  run_as_group: "1000"
network_policies:
  github_rest_api:
    name: github-rest-api
    endpoints:
      - host: API.github.com
        port: 443
        protocol: rest
        enforcement: audit
        access: read-only
    binaries:
      - path: /usr/bin/gh
  git:
    endpoints:
      - host: "*.github.com"
        ports: [22, 443]
        protocol: rest
        tls: skip
        rules:
          - allow:
              method: get
              path: /**/info/refs*
              query:
                service: "git-*"
          - allow:
              method: POST
              path: /**/git-upload-pack
              query:
                tag: {any: ["v1.*", "v2.*"]}
    binaries:
      - path: /usr/lib/git-core/**
"#;

#[test]
fn a_complete_policy_becomes_an_allow_list_fragment() {
    let f = parse_ok(FULL);
    assert_eq!(f.fs_mode, Some(FsMode::AllowListOnly));
    assert_eq!(f.include_workdir, Some(true));
    assert_eq!(
        f.read_only,
        vec![PathBuf::from("/usr"), "/lib".into(), "/etc".into()]
    );
    assert_eq!(f.read_write, vec![PathBuf::from("/sandbox"), "/tmp".into()]);
    assert_eq!(f.landlock, Some(LandlockCompat::BestEffort));
    assert_eq!(f.run_as_user.as_deref(), Some("sandbox"));
    assert_eq!(f.run_as_group.as_deref(), Some("1000"));
    assert!(f.warnings.is_empty(), "{:?}", f.warnings);

    let gh = &f.rules["github_rest_api"];
    assert_eq!(gh.name, "github-rest-api");
    assert_eq!(gh.endpoints[0].host, "api.github.com");
    assert_eq!(gh.endpoints[0].ports, vec![443]);
    assert_eq!(gh.endpoints[0].enforcement, Enforcement::Audit);
    assert_eq!(gh.endpoints[0].access.as_deref(), Some("read-only"));
    assert_eq!(gh.binaries, vec!["/usr/bin/gh".to_string()]);

    let git = &f.rules["git"];
    assert_eq!(git.name, "git", "the name defaults to the key");
    let ep = &git.endpoints[0];
    assert_eq!(ep.host, "*.github.com");
    assert_eq!(ep.ports, vec![22, 443]);
    assert_eq!(ep.tls.as_deref(), Some("skip"));
    assert_eq!(ep.enforcement, Enforcement::Enforce);
    assert_eq!(ep.rules[0].method, "GET");
    assert_eq!(ep.rules[0].query["service"], vec!["git-*".to_string()]);
    assert_eq!(
        ep.rules[1].query["tag"],
        vec!["v1.*".to_string(), "v2.*".to_string()]
    );
}

#[test]
fn a_policy_without_filesystem_policy_keeps_the_mode_unsaid() {
    let f = parse_ok("version: 1\nlandlock: {compatibility: hard_requirement}\n");
    assert_eq!(f.fs_mode, None);
    assert_eq!(f.landlock, Some(LandlockCompat::HardRequirement));
}

#[test]
fn version_is_required_and_must_be_one() {
    assert!(parse_err("filesystem_policy: {}\n").contains("p.yaml: version: required"));
    assert!(parse_err("version: 2\n").contains("version: 2 is not supported (allowed: 1)"));
    assert!(parse_err("").contains("empty"));
}

#[test]
fn yaml_syntax_errors_name_the_file_and_line() {
    let e = parse_err("version: 1\nfilesystem_policy: [\n");
    assert!(e.starts_with("p.yaml: "), "{e}");
    assert!(e.contains("line"), "{e}");
}

#[test]
fn filesystem_paths_are_validated_with_their_key_path() {
    let e = parse_err("version: 1\nfilesystem_policy:\n  read_only: [usr]\n");
    assert!(
        e.contains("filesystem_policy.read_only[0]: \"usr\" is not absolute"),
        "{e}"
    );
    let e = parse_err("version: 1\nfilesystem_policy:\n  read_write: [/tmp, /a/../etc]\n");
    assert!(e.contains("filesystem_policy.read_write[1]"), "{e}");
    assert!(e.contains("`..`"), "{e}");
    let e = parse_err("version: 1\nfilesystem_policy:\n  read_write: [/]\n");
    assert!(e.contains("`/` cannot be read-write"), "{e}");
    let many: Vec<String> = (0..257).map(|i| format!("/p{i}")).collect();
    let e = parse_err(&format!(
        "version: 1\nfilesystem_policy:\n  read_only: [{}]\n",
        many.join(", ")
    ));
    assert!(e.contains("257 paths") && e.contains("256"), "{e}");
    let e = parse_err("version: 1\nfilesystem_policy:\n  include_workdir: yes please\n");
    assert!(e.contains("include_workdir: expected true or false"), "{e}");
}

#[test]
fn landlock_and_process_values_are_checked() {
    let e = parse_err("version: 1\nlandlock: {compatibility: sometimes}\n");
    assert!(
        e.contains("landlock.compatibility: \"sometimes\" is not allowed (allowed: hard_requirement, best_effort)"),
        "{e}"
    );
    let e = parse_err("version: 1\nprocess: {run_as_user: root}\n");
    assert!(
        e.contains("process.run_as_user: the sandbox never runs as root"),
        "{e}"
    );
    let e = parse_err("version: 1\nprocess: {run_as_group: 0}\n");
    assert!(
        e.contains("process.run_as_group: the sandbox never runs as root"),
        "{e}"
    );
    let e = parse_err("version: 1\nprocess: {run_as_user: \"a b\"}\n");
    assert!(e.contains("not a user/group name"), "{e}");
}

fn endpoint_err(endpoint: &str) -> String {
    parse_err(&format!(
        "version: 1\nnetwork_policies:\n  n:\n    endpoints:\n      - {endpoint}\n    binaries: [{{path: /usr/bin/curl}}]\n"
    ))
}

#[test]
fn endpoint_errors_name_the_key_and_the_allowed_values() {
    let e = endpoint_err("{host: example.com, port: 70000}");
    assert!(
        e.contains("network_policies.n.endpoints[0].port: 70000 is not a TCP port (allowed: an integer 1..=65535)"),
        "{e}"
    );
    let e = endpoint_err("{host: example.com}");
    assert!(e.contains("endpoints[0].port: required"), "{e}");
    let e = endpoint_err("{host: example.com, port: 1, ports: [2]}");
    assert!(e.contains("either `port` or `ports`"), "{e}");
    let e = endpoint_err("{host: '*', port: 443}");
    assert!(
        e.contains("endpoints[0].host") && e.contains("every host"),
        "{e}"
    );
    let e = endpoint_err("{host: '*.com', port: 443}");
    assert!(e.contains("top-level"), "{e}");
    let e = endpoint_err("{host: example.com, port: 443, protocol: grpc}");
    assert!(
        e.contains("protocol: \"grpc\" is not allowed (allowed: rest, tcp)"),
        "{e}"
    );
    let e = endpoint_err("{host: example.com, port: 443, enforcement: warn}");
    assert!(e.contains("(allowed: enforce, audit)"), "{e}");
    let e = endpoint_err("{host: example.com, port: 443, access: write}");
    assert!(e.contains("(allowed: read-only, read-write, full)"), "{e}");
    let e = endpoint_err(
        "{host: example.com, port: 443, protocol: rest, access: full, rules: [{allow: {method: GET, path: /}}]}",
    );
    assert!(e.contains("mutually exclusive"), "{e}");
    let e = endpoint_err(
        "{host: example.com, port: 443, protocol: rest, rules: [{allow: {method: GET, path: 'api'}}]}",
    );
    assert!(
        e.contains("rules[0].allow.path: \"api\" must start with `/`"),
        "{e}"
    );
    let e = endpoint_err(
        "{host: example.com, port: 443, protocol: rest, rules: [{allow: {method: 'GET /', path: /}}]}",
    );
    assert!(e.contains("rules[0].allow.method"), "{e}");
    let e = endpoint_err(
        "{host: example.com, port: 443, protocol: rest, rules: [{allow: {method: GET, path: '/a[', query: {}}}]}",
    );
    assert!(e.contains("not a valid glob"), "{e}");
}

#[test]
fn entries_need_endpoints_and_binaries() {
    let e = parse_err("version: 1\nnetwork_policies:\n  n:\n    binaries: [{path: /bin/x}]\n");
    assert!(e.contains("network_policies.n.endpoints: required"), "{e}");
    let e = parse_err(
        "version: 1\nnetwork_policies:\n  n:\n    endpoints: [{host: a.example, port: 1}]\n",
    );
    assert!(e.contains("network_policies.n.binaries: required"), "{e}");
    let e = parse_err(
        "version: 1\nnetwork_policies:\n  n:\n    endpoints: [{host: a.example, port: 1}]\n    binaries: [{path: bin/x}]\n",
    );
    assert!(
        e.contains("binaries[0].path: \"bin/x\" is not absolute"),
        "{e}"
    );
}

#[test]
fn an_unknown_key_anywhere_is_an_error_with_its_line() {
    let e = parse_err("version: 1\nfuture_section: {}\n");
    assert!(e.contains("p.yaml: future_section: unknown key"), "{e}");
    assert!(e.contains("line 2"), "{e}");
    let e = parse_err("version: 1\nfilesystem_policy:\n  readonly: [/usr]\n");
    assert!(
        e.contains("filesystem_policy.readonly: unknown key (did you mean `read_only`?"),
        "{e}"
    );
    assert!(e.contains("line 3"), "{e}");
    let e = parse_err(
        "version: 1\nnetwork_policies:\n  n:\n    endpoints:\n      - host: a.example\n        port: 443\n        protocl: rest\n    binaries: [{path: /bin/x}]\n",
    );
    assert!(
        e.contains(
            "network_policies.n.endpoints[0].protocl: unknown key (did you mean `protocol`?"
        ),
        "{e}"
    );
    assert!(e.contains("line 7"), "{e}");
    let e = parse_err("version: 1\nversion: 1\n");
    assert!(e.contains("version: given twice"), "{e}");
}

#[test]
fn keys_openshell_knows_but_sandbox_launch_does_not_implement_are_refused() {
    let e = endpoint_err("{host: a.example, port: 443, allowed_ips: [10.0.0.1]}");
    assert!(
        e.contains("endpoints[0].allowed_ips: OpenShell's `allowed_ips`"),
        "{e}"
    );
    assert!(e.contains("not supported"), "{e}");
    let e = endpoint_err("{host: a.example, port: 443, protocol: graphql, access: read-only}");
    assert!(
        e.contains("endpoints[0].protocol: `graphql` inspection is not supported"),
        "{e}"
    );
    let e = parse_err("version: 1\nnetwork_middlewares: {m: {}}\n");
    assert!(
        e.contains("network_middlewares: OpenShell's request middlewares are not supported"),
        "{e}"
    );
    // At their defaults they say nothing, and are accepted.
    parse_ok("version: 1\nnetwork_policies:\n  n:\n    endpoints: [{host: a.example, port: 443, allowed_ips: [], websocket_credential_rewrite: false}]\n    binaries: [{path: /bin/x}]\n");
}

#[test]
fn deprecated_tls_modes_warn() {
    let f = parse_ok(
        "version: 1\nnetwork_policies:\n  n:\n    endpoints: [{host: a.example, port: 443, protocol: rest, tls: terminate, access: read-only}]\n    binaries: [{path: /**}]\n",
    );
    assert!(
        f.warnings.iter().any(|w| w.contains("deprecated")),
        "{:?}",
        f.warnings
    );
}

#[test]
fn request_rules_need_protocol_rest_and_a_base_to_deny_from() {
    let e = endpoint_err("{host: a.example, port: 443, access: read-only}");
    assert!(e.contains("access need `protocol: rest`"), "{e}");
    let e = endpoint_err("{host: a.example, port: 443, protocol: rest}");
    assert!(
        e.contains("`protocol: rest` needs `rules` or `access`"),
        "{e}"
    );
    let e = endpoint_err("{host: a.example, port: 443, protocol: rest, rules: []}");
    assert!(
        e.contains("endpoints[0].rules: the list is empty, which would deny every request"),
        "{e}"
    );
    let e =
        endpoint_err("{host: a.example, port: 443, protocol: rest, access: full, deny_rules: []}");
    assert!(
        e.contains("endpoints[0].deny_rules: the list is empty"),
        "{e}"
    );
    let e = endpoint_err(
        "{host: a.example, port: 443, protocol: rest, rules: [{allow: {method: GET}}]}",
    );
    assert!(e.contains("rules[0].allow.path: required"), "{e}");
    let e = endpoint_err(
        "{host: a.example, port: 443, protocol: rest, access: full, deny_rules: [{path: /x}]}",
    );
    assert!(e.contains("deny_rules[0].method: required"), "{e}");
    let e = endpoint_err("{host: a.example, port: 443, protocol: tcp, access: full}");
    assert!(
        e.contains("`protocol: tcp` does not look at requests"),
        "{e}"
    );
    let e = endpoint_err("{host: a.example, port: 443, protocol: rest, rules: [{allow: {method: GET, path: /x, operation_type: query}}]}");
    assert!(
        e.contains("rules[0].allow.operation_type: selects GraphQL"),
        "{e}"
    );
}

#[test]
fn deny_rules_endpoint_paths_and_encoded_slashes_are_read() {
    let f = parse_ok(
        "version: 1\nnetwork_policies:\n  gh:\n    endpoints:\n      - host: api.github.com\n        port: 443\n        protocol: rest\n        access: read-write\n        path: /repos/**\n        allow_encoded_slash: true\n        deny_rules:\n          - {method: POST, path: '/repos/*/pulls/*/reviews'}\n          - method: '*'\n            path: /admin/**\n            query: {force: 'true'}\n    binaries: [{path: /usr/bin/curl}]\n",
    );
    let ep = &f.rules["gh"].endpoints[0];
    assert_eq!(ep.deny_rules.len(), 2);
    assert_eq!(ep.deny_rules[1].method, "*");
    assert_eq!(ep.deny_rules[1].query["force"], vec!["true".to_string()]);
    assert_eq!(ep.path.as_deref(), Some("/repos/**"));
    assert!(ep.allow_encoded_slash);
}

#[test]
fn endpoint_hosts_follow_openshell_wildcards() {
    for ok in [
        "*.example.com",
        "**.example.com",
        "*-api.example.com",
        "*.s3.*.amazonaws.com",
    ] {
        parse_ok(&format!("version: 1\nnetwork_policies:\n  n:\n    endpoints: [{{host: '{ok}', port: 443}}]\n    binaries: [{{path: /bin/x}}]\n"));
    }
    for bad in [
        "**",
        "*.com",
        "**.com",
        "a**.example.com",
        "*.x*.example.com",
    ] {
        let e = endpoint_err(&format!("{{host: '{bad}', port: 443}}"));
        assert!(e.contains("endpoints[0].host"), "{bad}: {e}");
    }
}
