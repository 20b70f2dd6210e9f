//! The program's environment. Nothing of the launcher's environment crosses into the sandbox
//! unless it is on a short, documented allowlist or was asked for (`--env NAME`,
//! `--env NAME=VALUE`, `environment` in the policy files): API keys and tokens sitting in the
//! caller's shell (`AWS_SECRET_ACCESS_KEY`, `GITHUB_TOKEN`, an agent's own key) would otherwise
//! be one allowed request away from leaving. `--env-all` restores the whole environment, with
//! a warning.
//!
//! The identity (`HOME`, `USER`, `LOGNAME` when started as root), the proxy's variables and
//! the TLS trust variables are set after this, over whatever is here.

use crate::policy::model::NetworkMode;
use crate::policy::runtime::{check_name, EnvPolicy, RuntimeFragment};

/// Passed when the launcher has them.
pub const ALLOWED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "COLORTERM",
    "LANG",
    "TZ",
    "TMPDIR",
];

/// Every variable starting with one of these is passed: the locale, and the launcher's own.
pub const ALLOWED_PREFIXES: &[&str] = &["LC_", "SANDBOX_LAUNCH"];

/// The proxy variables (either case). The launcher's pass only with `--network full`: in
/// `restricted` the sandbox's proxy replaces them, and with `none` they lead nowhere.
const PROXY: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "FTP_PROXY",
];

/// Set inside, so a program can tell that it runs in the sandbox.
pub const MARKER: (&str, &str) = ("SANDBOX_LAUNCH", "1");

/// The allowlist in words, for `check` and the README.
pub fn describe_allowlist() -> String {
    format!(
        "{}, {} and the host's proxy variables with --network full",
        ALLOWED.join(", "),
        ALLOWED_PREFIXES
            .iter()
            .map(|p| format!("{p}*"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn allowed(name: &str, network: NetworkMode) -> bool {
    ALLOWED.contains(&name)
        || ALLOWED_PREFIXES.iter().any(|p| name.starts_with(p))
        || (network == NetworkMode::Full && PROXY.iter().any(|p| p.eq_ignore_ascii_case(name)))
}

/// `--env NAME` or `--env NAME=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvFlag {
    Pass(String),
    Set(String, String),
}

/// Read one `--env`.
pub fn parse_flag(text: &str) -> Result<EnvFlag, String> {
    let flag = match text.split_once('=') {
        Some((name, value)) => EnvFlag::Set(name.to_string(), value.to_string()),
        None => EnvFlag::Pass(text.to_string()),
    };
    let (EnvFlag::Pass(name) | EnvFlag::Set(name, _)) = &flag;
    check_name(name)?;
    Ok(flag)
}

/// The `--env` flags and `--env-all` as a policy fragment's.
pub fn flags_fragment(flags: &[EnvFlag], all: bool, frag: &mut RuntimeFragment) {
    for f in flags {
        match f {
            EnvFlag::Pass(n) => frag.env_pass.push(n.clone()),
            EnvFlag::Set(n, v) => frag.env_set.push((n.clone(), v.clone())),
        }
    }
    frag.env_all = all;
}

/// The launcher's environment as text; variables that are not valid UTF-8 cannot be passed
/// (the spec carries text) and are left out.
pub fn host() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// The program's environment from the launcher's `host` one.
pub fn build(
    host: &[(String, String)],
    policy: &EnvPolicy,
    network: NetworkMode,
    warnings: &mut Vec<String>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = match &policy.all {
        Some(src) => {
            warnings.push(format!(
                "the program gets the launcher's whole environment ({} variables, secrets included; asked for by {}); name what it needs with --env instead",
                host.len(),
                crate::policy::merge::describe_source(src)
            ));
            host.to_vec()
        }
        None => host
            .iter()
            .filter(|(k, _)| allowed(k, network))
            .cloned()
            .collect(),
    };
    for name in &policy.pass {
        match host.iter().find(|(k, _)| *k == name.value) {
            Some(kv) => set(&mut env, &kv.0, &kv.1),
            None if std::env::var_os(&name.value).is_some() => warnings.push(format!(
                "--env {}: the value is not valid UTF-8 and is not passed",
                name.value
            )),
            // Files may name optional variables; a flag naming an unset one is likely a slip.
            None if name.source == crate::policy::model::Source::CommandLine => {
                warnings.push(format!(
                    "--env {}: not set in the launcher's environment, so not passed",
                    name.value
                ))
            }
            None => {}
        }
    }
    for s in &policy.set {
        set(&mut env, &s.value.name, &s.value.value);
    }
    set(&mut env, MARKER.0, MARKER.1);
    env
}

/// Set `name` to `value`, replacing an earlier value in place.
pub fn set(env: &mut Vec<(String, String)>, name: &str, value: &str) {
    match env.iter_mut().find(|(k, _)| k == name) {
        Some(kv) => kv.1 = value.to_string(),
        None => env.push((name.to_string(), value.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::model::{Source, Sourced};
    use crate::policy::runtime::EnvSet;

    fn host() -> Vec<(String, String)> {
        [
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("LC_TIME", "C"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("https_proxy", "http://corp:3128"),
            ("SANDBOX_LAUNCH_SHELL", "/bin/sh"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn names(env: &[(String, String)]) -> Vec<&str> {
        env.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn only_the_allowlist_crosses_by_default() {
        let mut w = Vec::new();
        let env = build(
            &host(),
            &EnvPolicy::default(),
            NetworkMode::Restricted,
            &mut w,
        );
        assert_eq!(
            names(&env),
            vec![
                "PATH",
                "HOME",
                "LC_TIME",
                "SANDBOX_LAUNCH_SHELL",
                "SANDBOX_LAUNCH"
            ]
        );
        assert!(w.is_empty());
    }

    #[test]
    fn the_hosts_proxy_variables_pass_only_with_the_hosts_network() {
        let mut w = Vec::new();
        let env = build(&host(), &EnvPolicy::default(), NetworkMode::Full, &mut w);
        assert!(names(&env).contains(&"https_proxy"));
    }

    #[test]
    fn passed_and_set_variables_are_added_and_set_wins() {
        let policy = EnvPolicy {
            pass: vec![
                Sourced::new("GITHUB_TOKEN".into(), Source::CommandLine),
                Sourced::new("UNSET_ONE".into(), Source::CommandLine),
                Sourced::new("UNSET_TWO".into(), Source::User("u".into())),
            ],
            set: vec![Sourced::new(
                EnvSet {
                    name: "PATH".into(),
                    value: "/opt/bin".into(),
                },
                Source::CommandLine,
            )],
            all: None,
        };
        let mut w = Vec::new();
        let env = build(&host(), &policy, NetworkMode::None, &mut w);
        assert!(env.contains(&("GITHUB_TOKEN".into(), "ghp_x".into())));
        assert!(env.contains(&("PATH".into(), "/opt/bin".into())));
        assert!(!names(&env).contains(&"AWS_SECRET_ACCESS_KEY"));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("--env UNSET_ONE"));
    }

    #[test]
    fn flags_pass_or_set() {
        assert_eq!(parse_flag("A"), Ok(EnvFlag::Pass("A".into())));
        assert_eq!(
            parse_flag("A=b=c"),
            Ok(EnvFlag::Set("A".into(), "b=c".into()))
        );
        assert_eq!(parse_flag("A="), Ok(EnvFlag::Set("A".into(), "".into())));
        assert!(parse_flag("=x").is_err());
    }

    #[test]
    fn env_all_passes_everything_and_warns() {
        let policy = EnvPolicy {
            all: Some(Source::CommandLine),
            ..Default::default()
        };
        let mut w = Vec::new();
        let env = build(&host(), &policy, NetworkMode::Restricted, &mut w);
        assert!(names(&env).contains(&"AWS_SECRET_ACCESS_KEY"));
        assert!(w[0].contains("whole environment"), "{w:?}");
    }
}
