//! What `--network restricted` adds to a launch: the proxy built from the policy before the
//! clone (so a bad rule stops the launch early), the environment that points programs at it,
//! the in-sandbox ports, and the callback that starts serving once the shim hands over the
//! listening sockets.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::decide::Decider;
use super::events::EventSink;
use super::identify::SocketOwners;
use super::inspect::Inspector;
use super::resolve::{parse_override, Resolver};
use super::sock_diag::SockDiag;
use super::{proxy_env, Protocol, Proxy, DNS_PORT, LISTENERS, TRANSPARENT_PORT};
use crate::policy::model::{NetworkPolicy, Source, Sourced};
use shim::spec::{Access, LandlockRule, MountOp, MountPlan, Transparent};

/// The proxy of one sandbox, ready to serve.
pub struct Restricted {
    pub proxy: Proxy,
    /// Ports the shim listens on inside, in the order it hands the sockets over.
    pub listen_ports: Vec<u16>,
    /// With TLS inspection: the host's CA bundle plus the sandbox's CA, to be put over the
    /// system bundle inside.
    pub trust_bundle: Option<String>,
    /// Transparent egress: the ports of its listener and DNS stub inside.
    pub transparent: Option<Transparent>,
    /// The TCP ports some rule allows (`None`: a rule allows any port).
    pub rule_ports: Option<Vec<u16>>,
}

impl Restricted {
    /// What Landlock lets programs connect to: the proxy's ports and the loopback ports the
    /// user opened; with transparent egress also the ports the rules allow (Landlock sees the
    /// port a program asks for, before the redirect), so no port limit when a rule allows any.
    pub fn landlock_ports(&self, loopback: &[u16]) -> Option<Vec<u16>> {
        let mut ports: Vec<u16> = self.listen_ports.iter().chain(loopback).copied().collect();
        if self.transparent.is_some() {
            ports.extend(self.rule_ports.as_ref()?);
        }
        ports.sort_unstable();
        ports.dedup();
        Some(ports)
    }
}

/// Where programs inside find their trusted CAs (Debian's path; bound over with the bundle).
pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
const HOST_BUNDLES: [&str; 3] = [
    SYSTEM_BUNDLE,
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// The variables that make common runtimes trust the bundle.
pub fn trust_env(env: &mut Vec<(String, String)>) {
    let vars = [
        "SSL_CERT_FILE",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
    ];
    env.retain(|(k, _)| !vars.contains(&k.as_str()));
    env.extend(
        vars.iter()
            .map(|v| (v.to_string(), SYSTEM_BUNDLE.to_string())),
    );
}

/// Bind the bundle over the system bundle inside, when that path exists inside; otherwise say
/// why HTTPS to inspected hosts will not be trusted.
pub fn bind_trust_bundle(plan: &mut MountPlan, bundle: String) -> Option<String> {
    let target = Path::new(SYSTEM_BUNDLE);
    let visible = plan.host_root
        || plan.ops.iter().any(|op| match op {
            MountOp::ReadOnly { target: t, .. } | MountOp::ReadWrite { target: t, .. } => {
                target.starts_with(t)
            }
            _ => false,
        });
    if !visible || !target.exists() {
        return Some(format!(
            "TLS inspection: {SYSTEM_BUNDLE} is not in the sandbox, so programs will not trust the sandbox CA; add /etc/ssl to the readable paths"
        ));
    }
    plan.ops.push(MountOp::File {
        target: target.to_path_buf(),
        contents: bundle,
    });
    None
}

/// The resolver configuration of the inside: the DNS stub only.
const RESOLV_CONF: &str =
    "# sandbox-launch: the sandbox's DNS stub; it answers only names the policy allows\n\
                           nameserver 127.0.0.1\noptions attempts:1 timeout:2\n";

/// Put the stub's resolver configuration over /etc/resolv.conf inside (or over the file it
/// links to, such as systemd-resolved's stub file under /run, which is a fresh tmpfs inside),
/// readable even when the policy lists what may be read and /etc is not among it.
pub fn bind_resolv_conf(plan: &mut MountPlan, landlock: &mut Vec<LandlockRule>) {
    let link = Path::new("/etc/resolv.conf");
    if std::fs::symlink_metadata(link).is_err() {
        // Nothing to cover (an image without one): resolvers then ask 127.0.0.1:53, which is
        // the stub; creating the file would write into the read-only host /etc.
        return;
    }
    let target = match std::fs::read_link(link) {
        Ok(to) => std::fs::canonicalize(link).unwrap_or_else(|_| {
            let to = Path::new("/etc").join(to);
            lexical_normalize(&to)
        }),
        Err(_) => link.to_path_buf(),
    };
    landlock.push(LandlockRule {
        path: target.clone(),
        access: Access::Read,
    });
    plan.ops.push(MountOp::File {
        target,
        contents: RESOLV_CONF.to_string(),
    });
}

/// `/etc/../run/x` -> `/run/x`, without touching the filesystem.
fn lexical_normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// The host's bundle followed by the sandbox CA (public data only: the CA's key never leaves the
/// supervisor's memory).
fn trust_bundle_with(ca_pem: &str) -> String {
    let host = HOST_BUNDLES
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    format!("{host}\n{ca_pem}")
}

/// Compile the policy's rules, the `--resolve` pins and the events sink.
pub fn prepare(
    network: &NetworkPolicy,
    allow_domain: &[String],
    resolve: &[String],
    events: Arc<EventSink>,
    transparent: bool,
    credentials: Option<Arc<crate::credentials::Credentials>>,
) -> Result<Restricted> {
    let network = with_command_line_domains(network, allow_domain);
    let decider = Decider::from_policy(&network)?;
    let overrides = resolve
        .iter()
        .map(|r| parse_override(r))
        .collect::<Result<Vec<_>>>()?;
    // Credentials are put into HTTPS requests by opening them as inspection does.
    let inspect = decider.needs_inspection() || credentials.is_some();
    let rule_ports = decider.connect_ports();
    let mut proxy = Proxy::new(decider, Resolver::system(overrides), events);
    proxy.decider.set_source(network);
    let mut trust_bundle = None;
    if inspect {
        let inspector = Inspector::new(&[]).context("TLS inspection")?;
        trust_bundle = Some(trust_bundle_with(&inspector.ca_pem()));
        proxy.inspector = Some(Arc::new(inspector));
    }
    proxy.credentials = credentials;
    Ok(Restricted {
        proxy,
        listen_ports: LISTENERS.iter().map(|(_, port)| *port).collect(),
        trust_bundle,
        transparent: transparent.then_some(Transparent {
            tcp_port: TRANSPARENT_PORT,
            dns_port: DNS_PORT,
        }),
        rule_ports,
    })
}

/// `--allow-domain` values the policy loader did not carry over yet (an interim loader ignores
/// them); a value already present is not added twice.
fn with_command_line_domains(network: &NetworkPolicy, allow_domain: &[String]) -> NetworkPolicy {
    let mut network = network.clone();
    for d in allow_domain {
        if !network.allowed_domains.iter().any(|s| &s.value == d) {
            network
                .allowed_domains
                .push(Sourced::new(d.clone(), Source::CommandLine));
        }
    }
    network
}

/// The network flags that only the proxy uses, when the mode has no proxy.
pub fn ignored_flags(allow_domain: &[String], resolve: &[String]) -> Option<String> {
    let mut flags = Vec::new();
    if !allow_domain.is_empty() {
        flags.push("--allow-domain");
    }
    if !resolve.is_empty() {
        flags.push("--resolve");
    }
    let verb = if flags.len() == 1 { "applies" } else { "apply" };
    (!flags.is_empty()).then(|| {
        format!(
            "{} {verb} only to --network restricted; ignored",
            flags.join(", ")
        )
    })
}

/// Replace whatever proxy settings the caller had with the sandbox's own.
pub fn set_env(env: &mut Vec<(String, String)>) {
    let ours = proxy_env();
    env.retain(|(k, _)| !ours.iter().any(|(o, _)| o.eq_ignore_ascii_case(k)));
    env.extend(ours);
}

/// Prepare to serve on the sockets the shim created inside (called after the clone): the proxy's
/// listeners, then, with transparent egress, its listener and the DNS stub's socket. The runtime
/// and its thread start on first use (see `supervisor::OnDemand`).
pub fn start(
    mut proxy: Proxy,
    mut fds: Vec<OwnedFd>,
    transparent: bool,
) -> Result<crate::supervisor::OnDemand> {
    let expected = LISTENERS.len() + if transparent { 2 } else { 0 };
    // The shim's sock_diag socket follows, when it could make one.
    let diag = match fds.len() {
        n if n == expected + 1 => fds.pop().map(SockDiag::new),
        n if n == expected => None,
        n => bail!("the sandbox handed over {n} proxy sockets, expected {expected}"),
    };
    let raw: Vec<std::os::fd::RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let extra = fds.split_off(LISTENERS.len());
    let mut listeners: Vec<(Protocol, std::net::TcpListener)> = LISTENERS
        .iter()
        .zip(fds)
        .map(|((protocol, _), fd)| (*protocol, std::net::TcpListener::from(fd)))
        .collect();
    let mut dns = None;
    let mut extra = extra.into_iter();
    if let (Some(tcp), Some(udp)) = (extra.next(), extra.next()) {
        listeners.push((Protocol::Transparent, std::net::TcpListener::from(tcp)));
        dns = Some(std::net::UdpSocket::from(udp));
    }
    // Rules with `binaries` need to know which program connected; the sandbox's init is our
    // only child. Without it, such rules match nothing (fail closed).
    if let Some(owners) = SocketOwners::of_only_child(diag) {
        proxy.identify = Some(Arc::new(owners));
    }
    Ok(crate::supervisor::OnDemand {
        fds: raw,
        start: Box::new(move || {
            super::spawn(listeners, dns, proxy).context("start the proxy")?;
            Ok(())
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resolv_conf_symlink_is_followed_lexically() {
        assert_eq!(
            lexical_normalize(Path::new("/etc/../run/systemd/resolve/stub-resolv.conf")),
            Path::new("/run/systemd/resolve/stub-resolv.conf")
        );
        assert_eq!(
            lexical_normalize(Path::new("/etc/./resolv.conf")),
            Path::new("/etc/resolv.conf")
        );
    }

    #[test]
    fn caller_proxy_variables_are_replaced() {
        let mut env = vec![
            ("PATH".to_string(), "/bin".to_string()),
            ("https_proxy".to_string(), "http://corp:8080".to_string()),
            ("No_Proxy".to_string(), "*".to_string()),
        ];
        set_env(&mut env);
        assert!(env.iter().all(|(_, v)| v != "http://corp:8080" && v != "*"));
        assert_eq!(env.iter().filter(|(k, _)| k == "https_proxy").count(), 1);
        assert!(env.contains(&("PATH".into(), "/bin".into())));
    }

    #[test]
    fn command_line_domains_are_added_once() {
        let mut net = NetworkPolicy::default();
        net.allowed_domains
            .push(Sourced::new("a.test".into(), Source::CommandLine));
        let merged = with_command_line_domains(&net, &["a.test".into(), "b.test".into()]);
        let values: Vec<&str> = merged
            .allowed_domains
            .iter()
            .map(|s| s.value.as_str())
            .collect();
        assert_eq!(values, ["a.test", "b.test"]);
    }

    #[test]
    fn proxy_flags_without_a_proxy_are_reported() {
        assert_eq!(ignored_flags(&[], &[]), None);
        assert_eq!(
            ignored_flags(&["a.test".into()], &["a.test:127.0.0.1".into()]).unwrap(),
            "--allow-domain, --resolve apply only to --network restricted; ignored"
        );
    }

    #[test]
    fn a_bad_rule_or_pin_stops_the_launch() {
        let net = NetworkPolicy::default();
        assert!(prepare(&net, &["*.com".into()], &[], Arc::default(), true, None).is_err());
        assert!(prepare(&net, &[], &["nohost".into()], Arc::default(), true, None).is_err());
        let ok = prepare(
            &net,
            &["a.test".into()],
            &["a.test:127.0.0.1".into()],
            Arc::default(),
            true,
            None,
        )
        .unwrap();
        assert_eq!(ok.listen_ports, [3128, 1080]);
    }
}
