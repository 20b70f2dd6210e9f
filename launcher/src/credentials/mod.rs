//! Credentials the program can use but never holds (`--credential NAME=HOST[,HOST…]`,
//! `credentials` in the policy files). Inside the sandbox, NAME holds a random placeholder; the
//! real value — NAME in the launcher's environment — stays in the supervisor's memory (never in
//! a file, a message to the shim, an event or a log line; the supervisor is made non-dumpable so
//! not even a core file can hold it) and is put in place of the placeholder only in requests
//! to the named hosts, as they pass the proxy: in header values (the user:password of
//! `Authorization: Basic`, which git sends, included), the path and the query string. HTTPS to
//! a named host is opened with the sandbox's TLS inspection so that this can be done. A
//! placeholder in a request to any other host refuses the request, with a `credential` event.
//!
//! What it does not see: request bodies, and bytes the proxy does not read as HTTP (SOCKS5 and
//! transparently redirected connections, tunnels to hosts not inspected) — those carry the
//! placeholder, which is worth nothing outside the sandbox.

pub mod basic;
pub mod rewrite;
pub mod secret;

use std::ffi::OsString;

use crate::policy::credentials::CredentialSpec;
use crate::policy::model::{NetworkMode, Source, Sourced};
use crate::proxy::matcher::{Host, HostPattern};
use secret::Secret;

/// A host a credential may be sent to.
#[derive(Debug)]
struct Target {
    pattern: HostPattern,
    /// `None`: any port.
    port: Option<u16>,
}

#[derive(Debug)]
pub struct Credential {
    pub name: String,
    pub placeholder: String,
    secret: Secret,
    targets: Vec<Target>,
    /// The hosts as written, for messages.
    pub hosts: Vec<String>,
}

impl Credential {
    /// Whether the real value may go to `host:port`.
    pub fn allows(&self, host: &Host, port: u16) -> bool {
        self.targets
            .iter()
            .any(|t| t.pattern.matches(host) && t.port.is_none_or(|p| p == port))
    }
}

/// Every credential of a sandbox.
#[derive(Debug)]
pub struct Credentials {
    pub list: Vec<Credential>,
}

/// A fresh placeholder: random, long enough never to occur by chance, recognisable in a log.
fn placeholder() -> Result<String, String> {
    let mut bytes = [0u8; 20];
    // SAFETY: getrandom fills the buffer it is given, of that length.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        return Err(format!("getrandom: {}", std::io::Error::last_os_error()));
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sandbox-placeholder-{hex}"))
}

impl Credentials {
    /// The credentials of the policy, with their values from `lookup` (the launcher's
    /// environment). One named on the command line but not set is an error; one from a file
    /// is left out (a file may list what only some sessions have).
    pub fn from_policy(
        specs: &[Sourced<CredentialSpec>],
        network: NetworkMode,
        lookup: impl Fn(&str) -> Option<OsString>,
        warnings: &mut Vec<String>,
    ) -> Result<Option<Credentials>, String> {
        let mut list = Vec::new();
        for s in specs {
            let spec = &s.value;
            let Some(value) = lookup(&spec.name) else {
                if s.source == Source::CommandLine {
                    return Err(format!(
                        "--credential {}: {} is not set in the launcher's environment; export it before launching",
                        spec.name, spec.name
                    ));
                }
                continue;
            };
            if value.is_empty() {
                return Err(format!("credential {}: the value is empty", spec.name));
            }
            let targets = spec
                .hosts
                .iter()
                .map(|h| target(h).map_err(|e| format!("credential {}: {e}", spec.name)))
                .collect::<Result<Vec<_>, _>>()?;
            list.push(Credential {
                name: spec.name.clone(),
                placeholder: placeholder()?,
                secret: Secret::new(std::os::unix::ffi::OsStringExt::into_vec(value)),
                targets,
                hosts: spec.hosts.clone(),
            });
        }
        if list.is_empty() {
            return Ok(None);
        }
        if network != NetworkMode::Restricted {
            warnings.push(format!(
                "credentials ({}) are put in only by the proxy of --network restricted: the program gets their placeholders, which no server accepts",
                list.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
        Ok(Some(Credentials { list }))
    }

    /// NAME=placeholder for each credential, over whatever the environment had.
    pub fn set_env(&self, env: &mut Vec<(String, String)>) {
        for c in &self.list {
            crate::environment::set(env, &c.name, &c.placeholder);
        }
    }

    /// Whether some credential may go to `host:port` (its HTTPS must then be opened).
    pub fn wanted_by(&self, host: &Host, port: u16) -> bool {
        self.list.iter().any(|c| c.allows(host, port))
    }
}

/// `host`, `*.suffix`, `host:port`, `[v6]`, `[v6]:port` (normalised by the policy loader).
fn target(h: &str) -> Result<Target, String> {
    let (host, port) = match h.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && (!host.contains(':') || host.ends_with(']')) => {
            let port = port
                .parse::<u16>()
                .map_err(|_| format!("{h}: {port:?} is not a port"))?;
            (host, Some(port))
        }
        _ => (h, None),
    };
    let pattern = HostPattern::parse(host).map_err(|e| format!("{h}: {e:#}"))?;
    Ok(Target { pattern, port })
}

/// No core file of the launcher while it holds real values: its soft core limit goes to 0 (the
/// hard limit stays, so the program may still have the core limit it asks for).
pub fn keep_out_of_core_files() -> Result<(), String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    let ok = unsafe {
        libc::getrlimit(libc::RLIMIT_CORE, &mut lim) == 0 && {
            lim.rlim_cur = 0;
            libc::setrlimit(libc::RLIMIT_CORE, &lim) == 0
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "setrlimit(RLIMIT_CORE, 0): {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// Keep the real values out of reach of anything that reads this process: a non-dumpable
/// process writes no core file and cannot be traced or read through /proc by the user's other
/// processes. Called once the sandbox's init is cloned (see `limits::Birth`).
pub fn protect_supervisor() -> Result<(), String> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(format!(
            "prctl(PR_SET_DUMPABLE, 0): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, hosts: &[&str], source: Source) -> Sourced<CredentialSpec> {
        Sourced::new(
            CredentialSpec {
                name: name.into(),
                hosts: hosts.iter().map(|h| h.to_string()).collect(),
            },
            source,
        )
    }

    #[test]
    fn placeholders_are_random_and_values_come_from_the_environment() {
        let mut w = Vec::new();
        let c = Credentials::from_policy(
            &[
                spec(
                    "TOKEN",
                    &["api.example.com", "*.example.org:8443"],
                    Source::CommandLine,
                ),
                spec("FROM_FILE", &["x.example"], Source::User("u".into())),
            ],
            NetworkMode::Restricted,
            |n| (n == "TOKEN").then(|| "s3cr3t".into()),
            &mut w,
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.list.len(), 1, "an unset one from a file is left out");
        let t = &c.list[0];
        assert!(t.placeholder.starts_with("sandbox-placeholder-"));
        assert_ne!(t.placeholder, placeholder().unwrap());
        assert_eq!(t.secret.bytes(), b"s3cr3t");
        let name = |n: &str| Host::parse(n).unwrap();
        assert!(t.allows(&name("api.example.com"), 443));
        assert!(t.allows(&name("a.example.org"), 8443));
        assert!(!t.allows(&name("a.example.org"), 443));
        assert!(!t.allows(&name("example.org"), 8443));
        assert!(!t.allows(&name("evil.example"), 443));
        assert!(w.is_empty());
        let mut env = vec![("TOKEN".to_string(), "s3cr3t".to_string())];
        c.set_env(&mut env);
        assert_eq!(env, vec![("TOKEN".to_string(), t.placeholder.clone())]);
    }

    #[test]
    fn a_flag_naming_an_unset_variable_is_an_error() {
        let e = Credentials::from_policy(
            &[spec("NOPE", &["a.example"], Source::CommandLine)],
            NetworkMode::Restricted,
            |_| None,
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(e.contains("NOPE is not set"), "{e}");
    }

    #[test]
    fn without_the_proxy_the_placeholder_is_all_there_is_and_that_is_said() {
        let mut w = Vec::new();
        let c = Credentials::from_policy(
            &[spec("TOKEN", &["a.example"], Source::CommandLine)],
            NetworkMode::Full,
            |_| Some("v".into()),
            &mut w,
        )
        .unwrap();
        assert!(c.is_some());
        assert!(w[0].contains("only by the proxy"), "{w:?}");
    }
}
