//! Loading through the hierarchy: precedence, trust, ceilings, flags.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::model::{FsMode, LandlockCompat, NetworkMode, Source};
use super::{describe, load, LoadRequest};

/// A scratch tree: `org/`, `user/`, `home/`, `proj/` (the working directory).
struct Tree {
    root: PathBuf,
}

impl Tree {
    fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "sandbox-launch-policy-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["org", "user", "home", "proj"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        Tree { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    fn request(&self) -> LoadRequest {
        let mut r = LoadRequest::from_env(self.path("proj")).unwrap();
        r.home = self.path("home");
        r.org_dir = self.path("org");
        r.user_dir = self.path("user");
        r
    }

    fn trust_project(&self) {
        let proj = self.path("proj");
        self.write(
            "user/trusted-projects",
            &format!("# projects I trust\n\n{}\n", proj.display()),
        );
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn settings(sandbox: &str) -> String {
    format!("{{\"sandbox\": {sandbox}}}")
}

fn err(req: &LoadRequest) -> String {
    format!("{:#}", load(req).unwrap_err())
}

#[test]
fn flags_alone_give_a_host_readable_policy_with_a_writable_workdir() {
    let t = Tree::new();
    let mut req = t.request();
    req.allow_write = vec!["build".into(), "~/.cache".into()];
    req.deny_read = vec!["/etc/shadow".into()];
    req.allow_domain = vec!["GitHub.com".into()];
    let p = load(&req).unwrap();
    assert_eq!(p.filesystem.mode, FsMode::HostReadable);
    assert!(p.filesystem.include_workdir);
    let rw: Vec<_> = p.filesystem.read_write.iter().map(|s| &s.value).collect();
    assert_eq!(rw, vec![&t.path("proj/build"), &t.path("home/.cache")]);
    assert_eq!(p.filesystem.deny_read[0].source, Source::CommandLine);
    assert_eq!(p.network.allowed_domains[0].value, "github.com");
    assert_eq!(
        p.network.mode,
        Some(NetworkMode::Restricted),
        "domains imply restricted"
    );
    assert!(p.loaded.is_empty());
}

#[test]
fn flags_are_validated() {
    let t = Tree::new();
    let mut req = t.request();
    req.allow_write = vec!["/".into()];
    assert!(err(&req).contains("--allow-write /"));
    let mut req = t.request();
    req.allow_domain = vec!["*.com".into()];
    assert!(err(&req).contains("--allow-domain"));
}

#[test]
fn org_denies_survive_every_lower_allow() {
    let t = Tree::new();
    t.write(
        "org/settings.json",
        &settings(r#"{"filesystem": {"denyRead": ["~/.ssh"], "denyWrite": ["~/.bashrc"]}}"#),
    );
    t.write(
        "user/settings.json",
        &settings(r#"{"filesystem": {"allowWrite": ["~/.ssh", "~"]}}"#),
    );
    let mut req = t.request();
    req.allow_write = vec!["~/.bashrc".into()];
    let p = load(&req).unwrap();
    let ssh = t.path("home/.ssh");
    let deny = &p.filesystem.deny_read;
    assert_eq!(deny.len(), 1);
    assert_eq!(deny[0].value, ssh);
    assert_eq!(
        deny[0].source,
        Source::Org(t.path("org/settings.json")),
        "the deny keeps its org origin"
    );
    assert_eq!(p.filesystem.deny_write[0].value, t.path("home/.bashrc"));
    assert!(p.filesystem.read_write.iter().any(|s| s.value == ssh));
}

#[test]
fn a_deny_named_twice_is_kept_once_with_the_highest_source() {
    let t = Tree::new();
    t.write(
        "user/settings.json",
        &settings(r#"{"filesystem": {"denyRead": ["/secret"]}}"#),
    );
    t.write(
        "org/settings.json",
        &settings(r#"{"filesystem": {"denyRead": ["/secret"]}}"#),
    );
    let p = load(&t.request()).unwrap();
    assert_eq!(p.filesystem.deny_read.len(), 1);
    assert!(matches!(p.filesystem.deny_read[0].source, Source::Org(_)));
}

#[test]
fn an_untrusted_project_may_only_narrow() {
    let t = Tree::new();
    t.write(
        "proj/.sandbox-launch/settings.json",
        &settings(
            r#"{"filesystem": {"allowWrite": ["~"], "denyRead": ["/srv/data"]},
                "network": {"allowedDomains": ["evil.example"], "mode": "none"}}"#,
        ),
    );
    t.write(
        "user/settings.json",
        &settings(r#"{"network": {"mode": "restricted"}}"#),
    );
    let p = load(&t.request()).unwrap();
    assert!(
        p.filesystem.read_write.is_empty(),
        "its allowWrite is dropped"
    );
    assert!(p.network.allowed_domains.is_empty());
    assert_eq!(p.filesystem.deny_read[0].value, PathBuf::from("/srv/data"));
    assert_eq!(p.network.mode, Some(NetworkMode::None), "narrowing applies");
    assert!(p.loaded.iter().any(|f| f.narrowing_only));
    let w = p.warnings.join("\n");
    assert!(w.contains("allow rule(s) ignored"), "{w}");
    assert!(
        w.contains("trusted-projects"),
        "the warning says how to trust: {w}"
    );
    assert!(
        w.contains("network mode"),
        "the clamped user value is reported: {w}"
    );
}

#[test]
fn an_untrusted_project_refuses_an_explicit_wider_flag() {
    let t = Tree::new();
    t.write(
        "proj/.sandbox-launch/settings.json",
        &settings(r#"{"network": {"mode": "none"}}"#),
    );
    let mut req = t.request();
    req.network = Some(NetworkMode::Full);
    let e = err(&req);
    assert!(
        e.contains("network mode: command line asks for full"),
        "{e}"
    );
    assert!(e.contains("not trusted"), "{e}");
}

#[test]
fn a_trusted_project_grants_and_flags_still_win_over_it() {
    let t = Tree::new();
    t.trust_project();
    t.write(
        "proj/.sandbox-launch/settings.json",
        &settings(r#"{"filesystem": {"allowWrite": ["~/.npm"]}, "network": {"mode": "none"}}"#),
    );
    let mut req = t.request();
    req.network = Some(NetworkMode::Full);
    let p = load(&req).unwrap();
    assert_eq!(p.filesystem.read_write[0].value, t.path("home/.npm"));
    assert_eq!(p.network.mode, Some(NetworkMode::Full));
    assert_eq!(p.origins.network_mode, Some(Source::CommandLine));
    assert!(!p.loaded.iter().any(|f| f.narrowing_only));
}

#[test]
fn trusted_projects_accept_tilde_and_comments_and_match_exactly() {
    let t = Tree::new();
    t.write("user/trusted-projects", "# mine\n~/other\n");
    t.write(
        "proj/.sandbox-launch/settings.json",
        &settings(r#"{"filesystem": {"allowWrite": ["/opt/x"]}}"#),
    );
    let p = load(&t.request()).unwrap();
    assert!(
        p.filesystem.read_write.is_empty(),
        "another project is not this one"
    );
    t.write("user/trusted-projects", "relative/path\n");
    assert!(err(&t.request()).contains("trusted-projects:1"));
}

#[test]
fn the_project_is_found_at_the_git_root() {
    let t = Tree::new();
    std::fs::create_dir_all(t.path("proj/.git")).unwrap();
    std::fs::create_dir_all(t.path("proj/sub/dir")).unwrap();
    t.write(
        "proj/.sandbox-launch/policy.yaml",
        "version: 1\nlandlock: {compatibility: hard_requirement}\n",
    );
    let mut req = t.request();
    req.cwd = t.path("proj/sub/dir");
    let p = load(&req).unwrap();
    assert_eq!(
        p.loaded[0].source,
        Source::Project(t.path("proj/.sandbox-launch/policy.yaml"))
    );
}

#[test]
fn org_values_cannot_be_widened_on_the_command_line() {
    let t = Tree::new();
    t.write(
        "org/policy.yaml",
        "version: 1\nlandlock: {compatibility: hard_requirement}\nprocess: {run_as_user: agent}\n",
    );
    t.write(
        "org/settings.json",
        &settings(r#"{"network": {"mode": "restricted"}}"#),
    );
    let mut req = t.request();
    req.network = Some(NetworkMode::Full);
    let e = err(&req);
    assert!(
        e.contains("network mode: command line asks for full, but org"),
        "{e}"
    );
    assert!(e.contains("allows at most restricted"), "{e}");

    let policy = t.write(
        "mine.yaml",
        "version: 1\nlandlock: {compatibility: best_effort}\n",
    );
    let mut req = t.request();
    req.policy_file = Some(policy);
    assert!(err(&req).contains("landlock.compatibility"));

    let policy = t.write("who.yaml", "version: 1\nprocess: {run_as_user: someone}\n");
    let mut req = t.request();
    req.policy_file = Some(policy);
    assert!(err(&req).contains("process.run_as_user"));
}

#[test]
fn a_narrower_choice_than_the_org_is_accepted() {
    let t = Tree::new();
    t.write(
        "org/settings.json",
        &settings(r#"{"network": {"mode": "restricted"}}"#),
    );
    let mut req = t.request();
    req.network = Some(NetworkMode::None);
    let p = load(&req).unwrap();
    assert_eq!(p.network.mode, Some(NetworkMode::None));
    let p = load(&t.request()).unwrap();
    assert_eq!(
        p.network.mode,
        Some(NetworkMode::Restricted),
        "the org value fills in"
    );
    assert!(matches!(p.origins.network_mode, Some(Source::Org(_))));
}

#[test]
fn org_values_clamp_user_config_with_a_warning() {
    let t = Tree::new();
    t.write(
        "org/settings.json",
        &settings(r#"{"network": {"mode": "none"}}"#),
    );
    t.write(
        "user/settings.json",
        &settings(r#"{"network": {"mode": "full"}}"#),
    );
    let p = load(&t.request()).unwrap();
    assert_eq!(p.network.mode, Some(NetworkMode::None));
    assert!(
        p.warnings.iter().any(|w| w.contains("using none")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn explicit_files_and_flags_beat_user_config() {
    let t = Tree::new();
    t.write(
        "user/policy.yaml",
        "version: 1\nlandlock: {compatibility: best_effort}\n",
    );
    let p = load(&t.request()).unwrap();
    assert_eq!(p.landlock, LandlockCompat::BestEffort);
    let policy = t.write(
        "strict.yaml",
        "version: 1\nlandlock: {compatibility: hard_requirement}\n",
    );
    let mut req = t.request();
    req.policy_file = Some(policy.clone());
    let p = load(&req).unwrap();
    assert_eq!(p.landlock, LandlockCompat::HardRequirement);
    assert_eq!(p.origins.landlock, Some(Source::PolicyFile(policy)));
}

#[test]
fn an_openshell_allow_list_and_flags_combine() {
    let t = Tree::new();
    let policy = t.write(
        "p.yaml",
        "version: 1\nfilesystem_policy:\n  read_only: [/usr]\n  read_write: [/tmp]\n",
    );
    let mut req = t.request();
    req.policy_file = Some(policy);
    req.allow_write = vec!["out".into()];
    req.deny_write = vec!["out/keep".into()];
    let p = load(&req).unwrap();
    assert_eq!(p.filesystem.mode, FsMode::AllowListOnly);
    assert!(
        !p.filesystem.include_workdir,
        "include_workdir defaults to false"
    );
    let rw: Vec<_> = p
        .filesystem
        .read_write
        .iter()
        .map(|s| s.value.clone())
        .collect();
    assert_eq!(rw, vec![t.path("proj/out"), PathBuf::from("/tmp")]);
    assert_eq!(p.filesystem.deny_write[0].value, t.path("proj/out/keep"));
}

#[test]
fn settings_and_policy_files_given_explicitly_are_both_read() {
    let t = Tree::new();
    let policy = t.write(
        "p.yaml",
        "version: 1\nnetwork_policies:\n  gh:\n    endpoints: [{host: api.github.com, port: 443}]\n    binaries: [{path: /usr/bin/gh}]\n",
    );
    let s = t.write(
        "s.json",
        &settings(
            r#"{"network": {"allowedDomains": ["pypi.org"], "deniedDomains": ["x.pypi.org"]}}"#,
        ),
    );
    let mut req = t.request();
    req.policy_file = Some(policy);
    req.settings_file = Some(s.clone());
    let p = load(&req).unwrap();
    assert!(p.network.rules.contains_key("gh"));
    assert_eq!(p.network.allowed_domains[0].source, Source::SettingsFile(s));
    assert_eq!(p.network.denied_domains[0].value, "x.pypi.org");
    assert_eq!(p.network.mode, Some(NetworkMode::Restricted));
}

#[test]
fn denied_domains_cannot_go_with_full_network() {
    let t = Tree::new();
    t.write(
        "org/settings.json",
        &settings(r#"{"network": {"deniedDomains": ["pastebin.com"]}}"#),
    );
    let mut req = t.request();
    req.network = Some(NetworkMode::Full);
    let e = err(&req);
    assert!(
        e.contains("cannot enforce denied domain pastebin.com"),
        "{e}"
    );
}

#[test]
fn allowed_domains_under_network_none_are_reported_as_having_no_effect() {
    let t = Tree::new();
    let mut req = t.request();
    req.network = Some(NetworkMode::None);
    req.allow_domain = vec!["github.com".into()];
    let p = load(&req).unwrap();
    assert!(p.warnings.iter().any(|w| w.contains("no effect")));
}

#[test]
fn the_higher_network_policy_entry_of_a_key_wins() {
    let t = Tree::new();
    let entry = |host: &str| {
        format!("version: 1\nnetwork_policies:\n  gh:\n    endpoints: [{{host: {host}, port: 443}}]\n    binaries: [{{path: /usr/bin/gh}}]\n")
    };
    t.write("user/policy.yaml", &entry("user.example"));
    let policy = t.write("p.yaml", &entry("cli.example"));
    let mut req = t.request();
    req.policy_file = Some(policy);
    let p = load(&req).unwrap();
    assert_eq!(p.network.rules["gh"].value.endpoints[0].host, "cli.example");
    assert!(p.warnings.iter().any(|w| w.contains("shadowed")));
}

#[test]
fn a_missing_explicit_file_is_an_error_naming_it() {
    let t = Tree::new();
    let mut req = t.request();
    req.settings_file = Some(t.path("nope.json"));
    assert!(err(&req).contains("cannot read settings file"));
    assert!(err(&req).contains("nope.json"));
}

#[test]
fn a_broken_org_file_stops_the_load() {
    let t = Tree::new();
    t.write("org/policy.yaml", "version: 3\n");
    let e = err(&t.request());
    assert!(
        e.contains("org/policy.yaml: version: 3 is not supported"),
        "{e}"
    );
}

#[test]
fn describe_says_where_each_rule_came_from() {
    let t = Tree::new();
    t.write(
        "org/settings.json",
        &settings(r#"{"filesystem": {"denyRead": ["/etc/shadow"]}}"#),
    );
    let policy = t.write(
        "p.yaml",
        "version: 1\nnetwork_policies:\n  gh:\n    name: github\n    endpoints: [{host: api.github.com, port: 443, protocol: rest, access: read-only}]\n    binaries: [{path: /usr/bin/gh}]\n",
    );
    let mut req = t.request();
    req.policy_file = Some(policy);
    req.allow_write = vec![Path::new("/tmp/out").into()];
    let text = describe(&load(&req).unwrap());
    assert!(
        text.contains("policy files (highest precedence first):"),
        "{text}"
    );
    assert!(text.contains("/etc/shadow"), "{text}");
    assert!(text.contains("[org "), "{text}");
    assert!(text.contains("/tmp/out"), "{text}");
    assert!(text.contains("[command line]"), "{text}");
    assert!(text.contains("gh (github)"), "{text}");
    assert!(
        text.contains("api.github.com:443 protocol=rest access=read-only"),
        "{text}"
    );
    assert!(text.contains("network: restricted"), "{text}");
    assert!(!text.contains("Sourced"), "not Debug output: {text}");
}

/// `XDG_CONFIG_HOME` names the user's policy directory only when it is absolute and holds no
/// `..` (which the kernel would resolve through whatever precedes it, a symlink a sandbox may
/// have put there, while the persistence plan protects the directory as written).
#[test]
fn the_user_policy_directory_is_xdg_config_home_only_when_absolute_without_dot_dot() {
    let home = || PathBuf::from("/h");
    let dir = |v: Option<&str>| super::user_dir(v.map(Into::into), home);
    assert_eq!(dir(Some("/x/cfg")), Path::new("/x/cfg/sandbox-launch"));
    for fallback in [
        None,
        Some(""),
        Some("rel/cfg"),
        Some("/x/sub/../cfg"),
        Some("/x/.."),
    ] {
        assert_eq!(
            dir(fallback),
            Path::new("/h/.config/sandbox-launch"),
            "{fallback:?}"
        );
    }
}
