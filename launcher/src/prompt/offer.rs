//! What a prompt offers for one denial, and exactly what each answer does.
//!
//! * A host no rule allows (or whose rule refuses this port or program): *allow once*, *allow
//!   always* (written to the user's settings; a name of three or more labels as `*.<rest>`),
//!   *deny*.
//! * A host on a deny list of the user's own settings: *allow once*, *remove from deny list*,
//!   *deny*. On another level's deny list (a project, `--settings`, the command line): *allow
//!   once*, *deny* — that list is edited where it is.
//! * A host on the organisation's deny list: *deny* only, and the prompt says "(organization
//!   policy)"; no answer can allow it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::policy::model::{NetworkPolicy, Source, Sourced};
use crate::proxy::decide::{split_host_port, Decision};
use crate::proxy::matcher::{Host, HostPattern};

/// An answer a prompt may get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Answer {
    AllowOnce,
    AllowAlways,
    RemoveFromDenyList,
    Deny,
}

impl Answer {
    pub fn name(self) -> &'static str {
        match self {
            Answer::AllowOnce => "allow-once",
            Answer::AllowAlways => "allow-always",
            Answer::RemoveFromDenyList => "remove-from-deny-list",
            Answer::Deny => "deny",
        }
    }

    pub fn parse(s: &str) -> Option<Answer> {
        [
            Answer::AllowOnce,
            Answer::AllowAlways,
            Answer::RemoveFromDenyList,
            Answer::Deny,
        ]
        .into_iter()
        .find(|a| a.name() == s)
    }

    pub fn allows(self) -> bool {
        self != Answer::Deny
    }
}

/// What one denial's prompt offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The organisation's deny list names the host: nothing but `deny`.
    pub organization: bool,
    pub answers: Vec<Answer>,
    /// The `allowedDomains` entry *allow always* writes.
    pub always_rule: Option<String>,
    /// The `deniedDomains` entries (of the user's settings) *remove from deny list* deletes.
    pub deny_entries: Vec<String>,
    /// The deny-list entries that matched, with where they are written (for the prompt).
    pub denied_by: Vec<String>,
    /// The user's settings file, which the lasting answers edit.
    pub file: PathBuf,
}

/// Classify a denial against the policy its rules were compiled from.
pub fn classify(d: &Decision, network: &NetworkPolicy, user_settings: &Path) -> Offer {
    let denies: Vec<&Sourced<String>> = network
        .denied_domains
        .iter()
        .filter(|e| deny_matches(&e.value, &d.host, d.port))
        .collect();
    let mut offer = Offer {
        organization: denies.iter().any(|e| matches!(e.source, Source::Org(_))),
        answers: Vec::new(),
        always_rule: None,
        deny_entries: Vec::new(),
        denied_by: denies
            .iter()
            .map(|e| format!("`{}` in {}", e.value, where_written(&e.source)))
            .collect(),
        file: user_settings.to_path_buf(),
    };
    if offer.organization {
        offer.answers = vec![Answer::Deny];
    } else if denies.is_empty() {
        offer.always_rule = Some(always_rule(&d.host));
        offer.answers = vec![Answer::AllowOnce, Answer::AllowAlways, Answer::Deny];
    } else if denies
        .iter()
        .all(|e| matches!(&e.source, Source::User(p) if p == user_settings))
    {
        offer.deny_entries = denies.iter().map(|e| e.value.clone()).collect();
        offer.answers = vec![Answer::AllowOnce, Answer::RemoveFromDenyList, Answer::Deny];
    } else {
        offer.answers = vec![Answer::AllowOnce, Answer::Deny];
    }
    offer
}

fn where_written(source: &Source) -> String {
    match source {
        Source::Org(p) => format!("{} (organization policy)", p.display()),
        Source::Project(p) | Source::User(p) | Source::PolicyFile(p) | Source::SettingsFile(p) => {
            p.display().to_string()
        }
        Source::CommandLine => "the command line".into(),
        Source::Control => "this sandbox's `sandbox-launch deny`".into(),
        Source::Default => "the built-in defaults".into(),
    }
}

/// Whether the `deniedDomains` entry `entry` refuses `host` on `port` (0: a DNS lookup, which
/// only an entry without a port refuses).
fn deny_matches(entry: &str, host: &Host, port: u16) -> bool {
    let Ok((h, p)) = split_host_port(entry.trim()) else {
        return false;
    };
    let Ok(pattern) = HostPattern::parse_deny(h) else {
        return false;
    };
    pattern.matches(host) && p.is_none_or(|p| p == port && port != 0)
}

/// Second-level labels under which registries hand out names (`example.co.uk`): a wildcard one
/// label below them would allow every site of the country, so such names stay exact.
const SHARED_SECOND_LEVEL: &[&str] = &[
    "ac", "co", "com", "edu", "gob", "go", "gov", "ltd", "mil", "ne", "net", "nic", "or", "org",
    "plc", "sch",
];

/// Domains under which hosting and storage services hand out names to anyone
/// (`<name>.github.io`, `<bucket>.s3.amazonaws.com`; from the Public Suffix List's private
/// section): each name at or below them is another customer's, so a wildcard there — asked
/// for one site or bucket — would allow every other one, an attacker's included, in every
/// later sandbox. Names below them stay exact.
const SHARED_HOSTING: &[&str] = &[
    "amazonaws.com",
    "appspot.com",
    "azureedge.net",
    "azurewebsites.net",
    "blogspot.com",
    "cloudapp.net",
    "cloudflare-ipfs.com",
    "cloudfront.net",
    "cloudfunctions.net",
    "deno.dev",
    "firebaseapp.com",
    "fly.dev",
    "github.io",
    "gitlab.io",
    "glitch.me",
    "googleapis.com",
    "herokuapp.com",
    "netlify.app",
    "ngrok-free.app",
    "ngrok.app",
    "ngrok.io",
    "onrender.com",
    "pages.dev",
    "r2.dev",
    "readthedocs.io",
    "repl.co",
    "replit.dev",
    "run.app",
    "supabase.co",
    "surge.sh",
    "trycloudflare.com",
    "vercel.app",
    "web.app",
    "windows.net",
    "workers.dev",
];

/// The rule *allow always* writes for `host`: `registry.npmjs.org` -> `*.npmjs.org`; names of
/// one or two labels, addresses, names whose rest is a shared registry suffix (`a.co.uk`) and
/// names at a shared hosting service (`me.github.io`) stay as they are.
pub fn always_rule(host: &Host) -> String {
    let Host::Name(name) = host else {
        return host.to_string();
    };
    let labels: Vec<&str> = name.split('.').collect();
    if labels.len() < 3 {
        return name.clone();
    }
    let rest = &labels[1..];
    let shared = rest.len() == 2 && rest[1].len() == 2 && SHARED_SECOND_LEVEL.contains(&rest[0]);
    let suffix = rest.join(".");
    let hosted = SHARED_HOSTING
        .iter()
        .any(|s| suffix == *s || suffix.ends_with(&format!(".{s}")));
    if shared || hosted {
        name.clone()
    } else {
        format!("*.{}", rest.join("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(host: &str, port: u16) -> Decision {
        crate::proxy::decide::Decider::default().decide(
            &Host::parse(host).unwrap(),
            port,
            None,
            crate::proxy::decide::Channel::Tunnel,
        )
    }

    fn policy(denied: &[(&str, Source)]) -> NetworkPolicy {
        NetworkPolicy {
            denied_domains: denied
                .iter()
                .map(|(d, s)| Sourced::new(d.to_string(), s.clone()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn three_labels_and_more_become_a_wildcard_of_the_rest() {
        let rule = |h: &str| always_rule(&Host::parse(h).unwrap());
        assert_eq!(rule("registry.npmjs.org"), "*.npmjs.org");
        assert_eq!(rule("a.b.files.example.com"), "*.b.files.example.com");
        assert_eq!(rule("github.com"), "github.com");
        assert_eq!(rule("localhost"), "localhost");
        assert_eq!(rule("shop.co.uk"), "shop.co.uk");
        assert_eq!(rule("www.shop.co.uk"), "*.shop.co.uk");
        // Shared hosting: one customer's name, never every customer's.
        assert_eq!(rule("me.github.io"), "me.github.io");
        assert_eq!(rule("bucket.s3.amazonaws.com"), "bucket.s3.amazonaws.com");
        assert_eq!(
            rule("bucket.s3.eu-west-1.amazonaws.com"),
            "bucket.s3.eu-west-1.amazonaws.com"
        );
        assert_eq!(rule("app.herokuapp.com"), "app.herokuapp.com");
        assert_eq!(rule("x.notgithub.io"), "*.notgithub.io");
        assert_eq!(rule("10.0.0.1"), "10.0.0.1");
    }

    #[test]
    fn an_unlisted_host_is_offered_allow_always_with_its_rule() {
        let user = Path::new("/home/u/.config/sandbox-launch/settings.json");
        let o = classify(&denial("registry.npmjs.org", 443), &policy(&[]), user);
        assert_eq!(
            o.answers,
            [Answer::AllowOnce, Answer::AllowAlways, Answer::Deny]
        );
        assert_eq!(o.always_rule.as_deref(), Some("*.npmjs.org"));
        assert!(!o.organization);
    }

    #[test]
    fn an_org_deny_offers_nothing_but_deny() {
        let user = Path::new("/u/settings.json");
        let org = Source::Org("/etc/sandbox-launch/settings.json".into());
        let o = classify(
            &denial("pastebin.com", 443),
            &policy(&[
                ("pastebin.com", org),
                ("pastebin.com", Source::User(user.into())),
            ]),
            user,
        );
        assert!(o.organization);
        assert_eq!(o.answers, [Answer::Deny]);
        assert!(o.denied_by[0].contains("(organization policy)"), "{o:?}");
    }

    #[test]
    fn a_users_own_deny_offers_its_removal_and_another_levels_does_not() {
        let user = Path::new("/u/settings.json");
        let mine = policy(&[("*.example.com", Source::User(user.into()))]);
        let o = classify(&denial("a.example.com", 443), &mine, user);
        assert_eq!(
            o.answers,
            [Answer::AllowOnce, Answer::RemoveFromDenyList, Answer::Deny]
        );
        assert_eq!(o.deny_entries, ["*.example.com"]);
        let project = policy(&[(
            "a.example.com",
            Source::Project("/p/.sandbox-launch/settings.json".into()),
        )]);
        let o = classify(&denial("a.example.com", 443), &project, user);
        assert_eq!(o.answers, [Answer::AllowOnce, Answer::Deny]);
    }

    #[test]
    fn a_deny_on_another_port_does_not_count() {
        let user = Path::new("/u/settings.json");
        let p = policy(&[("a.test:22", Source::Org("/etc/x".into()))]);
        assert!(!classify(&denial("a.test", 443), &p, user).organization);
        assert!(classify(&denial("a.test", 22), &p, user).organization);
    }
}
