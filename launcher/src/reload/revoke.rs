//! Open connections under new rules: a tunnel (CONNECT, SOCKS5, transparent, inspected HTTPS)
//! is decided once, when it opens; when the rules are replaced, it is decided again with the
//! new ones, and closed (both sockets) when they no longer let it through. A connection whose
//! requests were being checked by the old rules is closed too, so that the client reconnects
//! under the new ones. One a person let through in a prompt stays open unless a deny list now
//! names its host.
//!
//! Plain HTTP through the proxy needs none of this: every request is decided when it comes.

use std::future::Future;

use crate::prompt::offer;
use crate::proxy::decide::{Channel, Decision, Verdict};
use crate::proxy::identify::Program;
use crate::proxy::Proxy;

/// Run `relay` until it ends (`Some` of its output), or until a reload revokes the connection
/// decided by `decision` (`None`; the relay is dropped, which closes its sockets).
pub async fn until_revoked<F: Future>(
    proxy: &Proxy,
    decision: &Decision,
    binary: Option<&Program>,
    channel: Channel,
    protocol: &str,
    relay: F,
) -> Option<F::Output> {
    let mut rules = proxy.decider.subscribe();
    rules.mark_unchanged();
    tokio::pin!(relay);
    loop {
        tokio::select! {
            out = &mut relay => return Some(out),
            changed = rules.changed() => {
                if changed.is_err() {
                    return Some(relay.await);
                }
                if let Some(why) = revoked(proxy, decision, binary, channel) {
                    let mut closed = decision.clone();
                    closed.verdict = Verdict::Deny;
                    closed.reason = why;
                    proxy.events.decision(protocol, &closed, binary, None);
                    return None;
                }
            }
        }
    }
}

/// Why the current rules no longer allow the connection `was` decided, if they do not.
fn revoked(
    proxy: &Proxy,
    was: &Decision,
    binary: Option<&Program>,
    channel: Channel,
) -> Option<String> {
    let now = proxy
        .decider
        .current()
        .decide(&was.host, was.port, binary, channel);
    let target = format!("{}:{}", was.host, was.port);
    if crate::prompt::allowed_by_answer(was) {
        let source = proxy.decider.source();
        let listed = offer::classify(&now, &source, std::path::Path::new("")).denied_by;
        return (!now.verdict.lets_through() && !listed.is_empty()).then(|| {
            format!(
                "closed: the reloaded policy denies {target} ({})",
                listed.join(", ")
            )
        });
    }
    if !now.verdict.lets_through() {
        return Some(format!(
            "closed: the reloaded policy no longer allows {target}: {}",
            now.reason
        ));
    }
    if !was.rest_rules.is_empty() {
        return Some(format!(
            "closed: the policy was reloaded and the requests on this connection to {target} \
             were checked by the old rules; a new connection is checked by the new ones"
        ));
    }
    None
}
