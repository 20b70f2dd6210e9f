//! The network of a nested sandbox, narrower than the outer one's, without a network namespace:
//!
//! * `none`: no IPv4 or IPv6 socket at all (seccomp), and no TCP connect (Landlock);
//! * `restricted`: a proxy of its own, with its own rules, in the launcher (which dials
//!   through whatever the outer sandbox allows: its transparent egress or its host network);
//!   the program may connect only to that proxy (Landlock TCP ports) and has no other IP socket
//!   than TCP (seccomp: no UDP, so no DNS of its own either — the proxy resolves);
//! * `full`: the outer sandbox's network as it is.
//!
//! The proxy listens on two of `PROXY_PORTS`, which every sandbox lets its programs connect to
//! on its own loopback (so that a nested proxy is reachable under the outer Landlock layer).

use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use anyhow::{bail, Result};
use seccompiler::BpfProgram;
use shim::channel::{Step, StepError};
use shim::spec::SeccompSpec;

use crate::cli::SandboxArgs;
use crate::policy::model::{NetworkMode, Policy};
use crate::proxy::events::EventSink;
use crate::proxy::{self, Proxy, LISTENERS};

/// The loopback ports a nested sandbox's proxy may listen on (two each).
pub const PROXY_PORTS: std::ops::RangeInclusive<u16> = 3130..=3137;

/// What the nested network needs.
pub struct Network {
    /// Extra seccomp filter of the program (none for `full`).
    pub filter: Option<BpfProgram>,
    /// Landlock TCP connect ports (`None`: not limited).
    pub tcp_connect: Option<Vec<u16>>,
    /// The proxy and its listeners (`restricted`).
    pub proxy: Option<(Proxy, Vec<OwnedFd>)>,
    /// Whether no IP socket at all can be made (verified in the program's process).
    pub no_ip: bool,
}

/// A seccomp policy denying (EACCES) `socket` for the families and types given.
fn socket_filter(deny_all_ip: bool) -> Result<BpfProgram> {
    let mut rules = Vec::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        if deny_all_ip {
            rules.push(format!(
                r#"{{"syscall": "socket", "args": [{{"index": 0, "type": "dword", "op": "eq", "val": {family}}}]}}"#
            ));
        } else {
            // Every type but SOCK_STREAM (1): DGRAM, RAW, RDM, SEQPACKET, DCCP, PACKET.
            for kind in [2, 3, 4, 5, 6, 10] {
                rules.push(format!(
                    r#"{{"syscall": "socket", "args": [{{"index": 0, "type": "dword", "op": "eq", "val": {family}}}, {{"index": 1, "type": "dword", "op": {{"masked_eq": 15}}, "val": {kind}}}]}}"#
                ));
            }
        }
    }
    // TCP Fast Open connects inside sendto/sendmsg/sendmmsg, where Landlock's TCP connect rule
    // is not checked (Linux 6.18): with it, a program reached the outer proxy's port, which the
    // nested layer denies. Answered as a kernel without Fast Open answers (programs fall back
    // to connect), whichever flag argument carries it.
    let fastopen: Vec<String> = [("sendto", 3), ("sendmsg", 2), ("sendmmsg", 3)]
        .iter()
        .map(|(call, index)| {
            format!(
                r#"{{"syscall": "{call}", "args": [{{"index": {index}, "type": "dword", "op": {{"masked_eq": {f}}}, "val": {f}}}]}}"#,
                f = libc::MSG_FASTOPEN
            )
        })
        .collect();
    let json = format!(
        r#"{{"main": {{"mismatch_action": "allow", "match_action": {{"errno": {}}}, "filter": [{}]}},
            "tcp_fast_open": {{"mismatch_action": "allow", "match_action": {{"errno": {}}}, "filter": [{}]}}}}"#,
        libc::EACCES,
        rules.join(","),
        libc::EOPNOTSUPP,
        fastopen.join(",")
    );
    shim::seccomp::compile(&SeccompSpec {
        name: "nested network".into(),
        json,
    })
}

fn policy_error(e: impl std::fmt::Display) -> StepError {
    StepError::new(Step::Policy, e.to_string(), None)
}

/// The outer sandbox's HTTP proxy, from the variables it gave this process: an `http://`
/// address on the loopback (the outer proxy listens on the sandbox's own). Anything else is not
/// an outer sandbox's proxy, and the nested proxy then dials directly, under the outer network.
/// (A program that points this elsewhere only adds a hop inside the outer sandbox.)
fn parent_proxy(vars: &[(String, String)]) -> Option<SocketAddr> {
    ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"]
        .iter()
        .find_map(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()))
        .and_then(|v| v.strip_prefix("http://"))
        .map(|v| v.trim_end_matches('/'))
        .and_then(|v| v.parse::<SocketAddr>().ok())
        .filter(|a| a.ip().is_loopback())
}

/// Two listeners on free ports of `PROXY_PORTS`.
fn listeners() -> Result<Vec<TcpListener>> {
    let mut found = Vec::new();
    for port in PROXY_PORTS {
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            found.push(l);
            if found.len() == LISTENERS.len() {
                return Ok(found);
            }
        }
    }
    bail!(
        "no two free ports in {}-{} on this sandbox's loopback for the nested sandbox's proxy \
         (too many nested sandboxes at once)",
        PROXY_PORTS.start(),
        PROXY_PORTS.end()
    )
}

/// The proxy variables, pointing at the nested proxy's listeners.
fn proxy_env(ports: &[u16], env: &mut Vec<(String, String)>) {
    proxy::launch::set_env(env);
    for (k, v) in env.iter_mut() {
        if !proxy::proxy_env().iter().any(|(n, _)| n == k) {
            continue;
        }
        for ((_, default), mine) in LISTENERS.iter().zip(ports) {
            *v = v.replace(
                &format!("127.0.0.1:{default}"),
                &format!("127.0.0.1:{mine}"),
            );
        }
    }
}

pub fn plan(
    mode: NetworkMode,
    policy: &Policy,
    args: &SandboxArgs,
    events: Arc<EventSink>,
    env: &mut Vec<(String, String)>,
    warnings: &mut Vec<String>,
) -> Result<Network, StepError> {
    if !args.allow_loopback_port.is_empty() {
        return Err(policy_error(
            "--allow-loopback-port: a nested sandbox shares the outer one's loopback, so a port \
             there cannot be told from the same port elsewhere; not available when nested",
        ));
    }
    let seccomp_error = |e: anyhow::Error| StepError::new(Step::Seccomp, format!("{e:#}"), None);
    match mode {
        NetworkMode::Full => {
            warnings.push(
                "network: full — a nested sandbox then has the outer sandbox's network as it is"
                    .into(),
            );
            Ok(Network {
                filter: None,
                tcp_connect: None,
                proxy: None,
                no_ip: false,
            })
        }
        NetworkMode::None => Ok(Network {
            filter: Some(socket_filter(true).map_err(seccomp_error)?),
            tcp_connect: Some(Vec::new()),
            proxy: None,
            no_ip: true,
        }),
        NetworkMode::Restricted => {
            if !policy.runtime.credentials.is_empty() {
                return Err(policy_error(
                    "credentials need TLS inspection, which a nested sandbox cannot give its \
                     program (its CA would have to be bound over the trust store); pass them to \
                     the outer sandbox",
                ));
            }
            let r = proxy::launch::prepare(
                &policy.network,
                &args.allow_domain,
                &args.resolve,
                events,
                false,
                None,
            )
            .map_err(|e| policy_error(format!("{e:#}")))?;
            if r.trust_bundle.is_some() {
                return Err(policy_error(
                    "rules with `protocol: rest` need TLS inspection, which a nested sandbox \
                     cannot give its program; put them in the outer sandbox's policy",
                ));
            }
            let mut proxy = r.proxy;
            match parent_proxy(&std::env::vars().collect::<Vec<_>>()) {
                Some(parent) => proxy.resolver = proxy.resolver.clone().through(parent),
                None => warnings.push(
                    "network: no proxy of the outer sandbox in HTTPS_PROXY: the nested proxy \
                     dials directly (the outer sandbox's network still applies)"
                        .into(),
                ),
            }
            let listeners =
                listeners().map_err(|e| StepError::new(Step::Network, e.to_string(), None))?;
            let ports: Vec<u16> = listeners
                .iter()
                .filter_map(|l| l.local_addr().ok().map(|a| a.port()))
                .collect();
            proxy_env(&ports, env);
            Ok(Network {
                filter: Some(socket_filter(false).map_err(seccomp_error)?),
                tcp_connect: Some(ports),
                proxy: Some((proxy, listeners.into_iter().map(OwnedFd::from).collect())),
                no_ip: false,
            })
        }
    }
}

/// Start serving the proxy (after the fork: it starts threads).
pub fn start(proxy: Proxy, fds: Vec<OwnedFd>) -> Result<()> {
    let on_demand = proxy::launch::start(proxy, fds, false)?;
    (on_demand.start)()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_variables_name_the_nested_proxys_ports() {
        let mut env = vec![("HTTP_PROXY".to_string(), "http://elsewhere:1".to_string())];
        proxy_env(&[3130, 3131], &mut env);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("HTTP_PROXY").unwrap(), "http://127.0.0.1:3130");
        assert_eq!(get("ALL_PROXY").unwrap(), "socks5h://127.0.0.1:3131");
        assert_eq!(get("https_proxy").unwrap(), "http://127.0.0.1:3130");
    }

    #[test]
    fn the_parent_is_the_outer_sandboxs_loopback_proxy_only() {
        let v = |k: &str, val: &str| vec![(k.to_string(), val.to_string())];
        assert_eq!(
            parent_proxy(&v("HTTPS_PROXY", "http://127.0.0.1:3128")),
            Some("127.0.0.1:3128".parse().unwrap())
        );
        assert_eq!(
            parent_proxy(&v("http_proxy", "http://127.0.0.1:3128/")),
            Some("127.0.0.1:3128".parse().unwrap())
        );
        assert_eq!(
            parent_proxy(&v("HTTPS_PROXY", "http://10.0.0.1:3128")),
            None
        );
        assert_eq!(
            parent_proxy(&v("HTTPS_PROXY", "socks5h://127.0.0.1:1080")),
            None
        );
        assert_eq!(parent_proxy(&[]), None);
    }

    #[test]
    fn the_socket_filters_compile() {
        assert!(socket_filter(true).unwrap().len() > 4);
        assert!(socket_filter(false).unwrap().len() > 4);
    }
}
