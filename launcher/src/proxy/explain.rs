//! The words of a decision: why a connection or a request was refused, and how a person can
//! allow it. Agents read a bare 403 as a broken proxy; these texts say that the sandbox's policy
//! decided, which rule, and what to change.

use super::decide::Channel;
use super::identify::Program;
use super::matcher::Host;
use super::rules::Rule;
use crate::policy::model::Source;

/// Where a rule was written, for messages.
pub fn describe_source(source: &Source) -> String {
    match source {
        Source::Org(p)
        | Source::Project(p)
        | Source::User(p)
        | Source::PolicyFile(p)
        | Source::SettingsFile(p) => p.display().to_string(),
        Source::CommandLine => "the command line".into(),
        Source::Control => {
            "this sandbox's control socket (`sandbox-launch allow`/`deny`, a prompt answer)".into()
        }
        Source::Default => "the built-in defaults".into(),
    }
}

/// How to allow `host` (on `port`, when only the port was wrong).
pub fn allow_hint(host: &Host, port: Option<u16>) -> String {
    let target = match port {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    format!("run sandbox-launch with `--allow-domain {target}`, or add {target} to the allowed domains of the sandbox policy")
}

/// Why no rule names `host`.
pub fn unnamed(host: &Host) -> String {
    match host {
        Host::Ip(_) => format!(
            "no rule names the address {host}; IP addresses are reachable only when a rule names them"
        ),
        Host::Name(_) => format!("no rule allows {host}"),
    }
}

/// Why a deny-list entry refuses the host, and how to lift it.
pub fn denied_domain(deny: &Rule) -> (String, String) {
    (
        format!("{} refuses it (a deny beats every allow)", deny.label),
        format!(
            "remove {} from the denied domains where it is declared",
            deny.pattern
        ),
    )
}

pub fn port_refused(rule: &Rule, port: u16) -> bool {
    !rule.ports.is_empty() && !rule.ports.contains(&port)
}

/// Why `rule`, which names the host, does not allow this connection (`None`: it does).
pub fn refusal(
    rule: &Rule,
    port: u16,
    binary: Option<&Program>,
    channel: Channel,
) -> Option<String> {
    if port_refused(rule, port) {
        return Some(format!(
            "{} allows this host only on port{} {}",
            rule.label,
            if rule.ports.len() == 1 { "" } else { "s" },
            rule.ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(bins) = &rule.binaries {
        let globs = &bins.written;
        match binary {
            None => {
                return Some(format!(
                    "{} allows only the programs {globs:?}, and the program that connected could not be identified",
                    rule.label
                ))
            }
            // The program or one of its ancestors (`gh` running `git`).
            Some(p) if !p.chain().any(|b| b.to_str().is_some_and(|s| bins.allows(s))) => {
                return Some(format!(
                    "{} allows only the programs {globs:?}, not {}",
                    rule.label,
                    p.exe.display()
                ))
            }
            Some(_) => {}
        }
    }
    if channel == Channel::Tunnel && rule.rest.is_some() && !rule.tls_skip {
        return Some(format!(
            "{} allows only some HTTP requests, which cannot be checked inside an encrypted tunnel (`tls: skip` tunnels without checking)",
            rule.label
        ));
    }
    None
}

/// The request as a message shows it.
pub fn request(method: &str, path: &str, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("{method} {path}?{q}"),
        None => format!("{method} {path}"),
    }
}

/// How to allow a refused request.
pub fn request_hint(method: &str, path: &str, host: &Host) -> String {
    format!("add a rule for {method} {path} to the network policy that names {host}")
}
