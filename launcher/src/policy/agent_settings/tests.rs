//! Both settings formats: what they map to, what is refused, and every error naming its key.

use std::path::PathBuf;

use super::*;
use crate::policy::model::NetworkMode;

fn parse_ok(text: &str) -> Fragment {
    parse(
        text,
        Path::new("settings.json"),
        Source::SettingsFile("settings.json".into()),
        Path::new("/work/proj"),
        Path::new("/home/u"),
    )
    .unwrap()
}

fn parse_err(text: &str) -> String {
    let e = parse(
        text,
        Path::new("settings.json"),
        Source::SettingsFile("settings.json".into()),
        Path::new("/work/proj"),
        Path::new("/home/u"),
    )
    .unwrap_err();
    format!("{e:#}")
}

#[test]
fn the_documented_example_parses_with_comments_and_tilde() {
    let f = parse_ok(
        r#"{
  "model": "whatever the agent keeps here",
  "sandbox": {
    "enabled": true,
    // Isolation scope: "per-command" (default) or "whole-process" (Linux only)
    "mode": "per-command",
    "filesystem": {
      // Additional writable paths beyond CWD (which is always writable)
      "allowWrite": ["/tmp/build-output", "~/.config"],
      "denyWrite": ["/tmp/build-output/cache/locks", "~/.config/secrets"],
      "denyRead": ["~/.aws/credentials", "~/.ssh/id_rsa"],
    },
    "network": {
      "allowedDomains": ["github.com", "*.npmjs.org"],
    },
  },
}"#,
    );
    assert_eq!(
        f.fs_mode, None,
        "agent settings leave the mode to the default"
    );
    assert_eq!(
        f.read_write,
        vec![PathBuf::from("/tmp/build-output"), "/home/u/.config".into()]
    );
    assert_eq!(
        f.deny_write,
        vec![
            PathBuf::from("/tmp/build-output/cache/locks"),
            "/home/u/.config/secrets".into()
        ]
    );
    assert_eq!(
        f.deny_read,
        vec![
            PathBuf::from("/home/u/.aws/credentials"),
            "/home/u/.ssh/id_rsa".into()
        ]
    );
    assert_eq!(f.allowed_domains, vec!["github.com", "*.npmjs.org"]);
    assert_eq!(f.network_mode, None);
    assert!(f.warnings.is_empty(), "{:?}", f.warnings);
}

#[test]
fn network_extras_are_read() {
    let f = parse_ok(
        r#"{"sandbox": {"network": {
            "deniedDomains": ["Gist.GitHub.com"],
            "allowUnixSockets": ["~/.ssh/agent.sock"],
            "mode": "none"}}}"#,
    );
    assert_eq!(f.denied_domains, vec!["gist.github.com"]);
    assert_eq!(
        f.unix_sockets,
        vec![PathBuf::from("/home/u/.ssh/agent.sock")]
    );
    assert_eq!(f.network_mode, Some(NetworkMode::None));
}

#[test]
fn relative_paths_are_relative_to_the_working_directory() {
    let f = parse_ok(r#"{"sandbox": {"filesystem": {"denyWrite": ["./.env", "secrets"]}}}"#);
    assert_eq!(
        f.deny_write,
        vec![
            PathBuf::from("/work/proj/.env"),
            "/work/proj/secrets".into()
        ]
    );
}

#[test]
fn a_file_in_neither_format_is_refused_naming_a_misspelling() {
    let e = parse_err(r#"{"model": "x"}"#);
    assert!(e.contains("no `sandbox` object"), "{e}");
    assert!(e.contains("refused"), "{e}");
    let e = parse_err(r#"{"sandbx": {"filesystem": {"denyRead": ["~/.ssh"]}}}"#);
    assert!(
        e.contains("`sandbx` looks like a misspelt `sandbox`"),
        "{e}"
    );
    let e = parse_err(r#"{"sandbox": {}, "network": {}}"#);
    assert!(e.contains("keep one format per file"), "{e}");
}

#[test]
fn a_misspelt_format_key_next_to_the_right_one_is_refused() {
    let e = parse_err(
        r#"{"sandbox": {}, "Sandbox": {"filesystem": {"denyRead": ["~/.ssh"]}}, "model": "x"}"#,
    );
    assert!(
        e.contains("`Sandbox` looks like a misspelt `sandbox`"),
        "{e}"
    );
    let e =
        parse_err(r#"{"network": {"allowedDomains": [], "deniedDomains": []}, "filesytem": {}}"#);
    assert!(
        e.contains("`filesytem` looks like a misspelt `filesystem`"),
        "{e}"
    );
    // The agent's own keys stay its business.
    parse_ok(r#"{"sandbox": {}, "model": "x", "permissions": {}, "sandboxed": 1}"#);
}

#[test]
fn sandbox_runtime_settings_are_read_as_such() {
    let f = parse_ok(
        r#"{
  "network": {
    "allowedDomains": ["example.com", "*.github.com", "localhost", "api.test:8443"],
    "deniedDomains": ["evil.com", "*:22"],
    "allowUnixSockets": ["/var/run/agent.sock"],
    "allowLocalBinding": true,
    "allowAllUnixSockets": false
  },
  "filesystem": {"denyRead": ["~/.aws"], "allowWrite": ["/tmp/out"], "denyWrite": ["/tmp/out/lock"]},
  "credentials": {"files": [{"path": "~/.netrc", "mode": "deny"}]},
  "ignoreViolations": {"*": ["/usr/bin"], "git push": ["/usr/bin/nc"]},
  "enableWeakerNestedSandbox": false,
  "ripgrep": {"command": "rg"}
}"#,
    );
    assert_eq!(
        f.allowed_domains,
        vec!["example.com", "*.github.com", "localhost", "api.test:8443"]
    );
    assert_eq!(f.denied_domains, vec!["evil.com", "*:22"]);
    assert_eq!(f.unix_sockets, vec![PathBuf::from("/var/run/agent.sock")]);
    assert_eq!(
        f.deny_read,
        vec![PathBuf::from("/home/u/.aws"), "/home/u/.netrc".into()]
    );
    assert_eq!(f.read_write, vec![PathBuf::from("/tmp/out")]);
    assert_eq!(f.deny_write, vec![PathBuf::from("/tmp/out/lock")]);
}

#[test]
fn sandbox_runtime_settings_need_their_lists_and_known_keys() {
    let e = parse_err(r#"{"network": {"allowedDomains": []}, "filesystem": {"denyRead": []}}"#);
    assert!(
        e.contains("network.deniedDomains: required by the sandbox-runtime format"),
        "{e}"
    );
    let e = parse_err(
        r#"{"network": {"allowedDomains": [], "deniedDomains": []},
 "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []},
 "sandboxFlavour": 1}"#,
    );
    assert!(e.contains("sandboxFlavour: unknown key"), "{e}");
    assert!(e.contains("line 3"), "{e}");
}

#[test]
fn settings_that_would_widen_the_sandbox_are_refused() {
    let base = |extra_net: &str, extra_fs: &str, top: &str| {
        format!(
            r#"{{"network": {{"allowedDomains": [], "deniedDomains": []{extra_net}}},
 "filesystem": {{"denyRead": [], "allowWrite": [], "denyWrite": []{extra_fs}}}{top}}}"#
        )
    };
    for (text, key) in [
        (
            base(r#", "allowAllUnixSockets": true"#, "", ""),
            "network.allowAllUnixSockets",
        ),
        (
            base(r#", "httpProxyPort": 8080"#, "", ""),
            "network.httpProxyPort",
        ),
        (
            base(r#", "allowAllDomains": true"#, "", ""),
            "network.allowAllDomains",
        ),
        (
            base("", r#", "allowRead": ["/x"]"#, ""),
            "filesystem.allowRead",
        ),
        (
            base("", r#", "allowGitConfig": true"#, ""),
            "filesystem.allowGitConfig",
        ),
        (
            base("", "", r#", "enableWeakerNestedSandbox": true"#),
            "enableWeakerNestedSandbox",
        ),
        (
            base(
                "",
                "",
                r#", "credentials": {"files": [{"path": "~/.t", "mode": "mask"}]}"#,
            ),
            "credentials.files[0].mode",
        ),
    ] {
        let e = parse_err(&text);
        assert!(e.contains(&format!("{key}: not supported")), "{key}: {e}");
    }
}

#[test]
fn errors_name_the_file_and_key() {
    let e = parse_err(r#"{"sandbox": {"filesystem": {"denyRead": "~/.ssh"}}}"#);
    assert!(
        e.contains("settings.json: sandbox.filesystem.denyRead: expected a list, found a string"),
        "{e}"
    );
    let e = parse_err(r#"{"sandbox": {"filesystem": {"denyRead": ["~/.ssh", 3]}}}"#);
    assert!(
        e.contains("sandbox.filesystem.denyRead[1]: expected a string"),
        "{e}"
    );
    let e = parse_err(r#"{"sandbox": {"network": {"allowedDomains": ["*"]}}}"#);
    assert!(
        e.contains("sandbox.network.allowedDomains[0]") && e.contains("is not a domain"),
        "{e}"
    );
    let e = parse_err(r#"{"sandbox": {"mode": "sometimes"}}"#);
    assert!(e.contains("(allowed: per-command, whole-process)"), "{e}");
    let e = parse_err(r#"{"sandbox": {"filesystem": {"allowWrite": ["/"]}}}"#);
    assert!(e.contains("allowWrite[0]: `/` cannot be writable"), "{e}");
    let e = parse_err(r#"{"sandbox": {"filesystem": {"denyread": ["/x"]}}}"#);
    assert!(e.contains("did you mean `denyRead`?"), "{e}");
    let e = parse_err(r#"{"sandbox": {"enabled": "yes"}}"#);
    assert!(e.contains("sandbox.enabled: expected true or false"), "{e}");
}

#[test]
fn json_syntax_errors_keep_their_line_numbers() {
    let e = parse_err("{\n // c\n \"sandbox\": {\"a\" 1}\n}");
    assert!(e.contains("settings.json: not valid settings JSON"), "{e}");
    assert!(e.contains("line 3"), "{e}");
}

#[test]
fn unknown_sandbox_keys_are_errors_and_disabled_sandboxes_warn() {
    let e = parse_err(r#"{"sandbox": {"enabeld": true}}"#);
    assert!(
        e.contains("sandbox.enabeld: unknown key (did you mean `enabled`?"),
        "{e}"
    );
    let f = parse_ok(r#"{"sandbox": {"enabled": false, "excludedCommands": ["docker"]}}"#);
    assert!(f.warnings.iter().any(|w| w.contains("sandbox.enabled")));
    assert!(f
        .warnings
        .iter()
        .any(|w| w.contains("sandbox.excludedCommands: has no effect")));
}
