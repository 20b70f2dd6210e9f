//! What `--network restricted` adds to a launch: the proxy built from the policy before the
//! clone (so a bad rule stops the launch early), the environment that points programs at it,
//! the in-sandbox ports, and the callback that starts serving once the shim hands over the
//! listening sockets.

use std::os::fd::OwnedFd;

use anyhow::{bail, Context, Result};

use super::decide::Decider;
use super::events::EventSink;
use super::resolve::{parse_override, Resolver};
use super::{proxy_env, Protocol, Proxy, LISTENERS};
use crate::policy::model::{NetworkPolicy, Source, Sourced};

/// The proxy of one sandbox, ready to serve.
pub struct Restricted {
    pub proxy: Proxy,
    /// Ports the shim listens on inside, in the order it hands the sockets over.
    pub listen_ports: Vec<u16>,
}

/// Compile the policy's rules, the `--resolve` pins and the events sink.
pub fn prepare(
    network: &NetworkPolicy,
    allow_domain: &[String],
    resolve: &[String],
    events: Option<&str>,
) -> Result<Restricted> {
    let decider = Decider::from_policy(&with_command_line_domains(network, allow_domain))?;
    let overrides = resolve
        .iter()
        .map(|r| parse_override(r))
        .collect::<Result<Vec<_>>>()?;
    let events = match events {
        Some(target) => EventSink::open(target)?,
        None => EventSink::none(),
    };
    Ok(Restricted {
        proxy: Proxy::new(decider, Resolver::system(overrides), events),
        listen_ports: LISTENERS.iter().map(|(_, port)| *port).collect(),
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

/// Replace whatever proxy settings the caller had with the sandbox's own.
pub fn set_env(env: &mut Vec<(String, String)>) {
    let ours = proxy_env();
    env.retain(|(k, _)| !ours.iter().any(|(o, _)| o.eq_ignore_ascii_case(k)));
    env.extend(ours);
}

/// Start serving on the sockets the shim created inside (called after the clone).
pub fn start(proxy: Proxy, fds: Vec<OwnedFd>) -> Result<()> {
    if fds.len() != LISTENERS.len() {
        bail!(
            "the sandbox handed over {} proxy sockets, expected {}",
            fds.len(),
            LISTENERS.len()
        );
    }
    let listeners: Vec<(Protocol, std::net::TcpListener)> = LISTENERS
        .iter()
        .zip(fds)
        .map(|((protocol, _), fd)| (*protocol, std::net::TcpListener::from(fd)))
        .collect();
    super::spawn(listeners, proxy).context("start the proxy")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_bad_rule_or_pin_stops_the_launch() {
        let net = NetworkPolicy::default();
        assert!(prepare(&net, &["*.com".into()], &[], None).is_err());
        assert!(prepare(&net, &[], &["nohost".into()], None).is_err());
        let ok = prepare(&net, &["a.test".into()], &["a.test:127.0.0.1".into()], None).unwrap();
        assert_eq!(ok.listen_ports, [3128, 1080]);
    }
}
