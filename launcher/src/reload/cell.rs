//! The proxy's rules as a value that can be replaced while connections are being decided: a
//! tokio `watch` holding the compiled rules. A connection takes a snapshot (`current`) and
//! keeps it for everything it decides (a `Decision`'s request rules are indices into the
//! snapshot's rules); a reload publishes a new snapshot, and the tunnels that subscribed
//! re-decide under it (`reload::revoke`).

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::policy::model::NetworkPolicy;
use crate::proxy::decide::Decider;

/// The rules in force, shared by the proxy and the control plane. Cloning shares the cell.
#[derive(Clone)]
pub struct DeciderCell {
    rules: Arc<watch::Sender<Arc<Decider>>>,
    /// The policy the rules were compiled from (where each rule came from: org denies, user
    /// settings), read when a prompt explains a denial.
    source: Arc<Mutex<NetworkPolicy>>,
}

impl std::fmt::Debug for DeciderCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeciderCell")
    }
}

impl DeciderCell {
    pub fn new(decider: Decider) -> Self {
        Self::with_source(decider, NetworkPolicy::default())
    }

    pub fn with_source(decider: Decider, source: NetworkPolicy) -> Self {
        DeciderCell {
            rules: Arc::new(watch::channel(Arc::new(decider)).0),
            source: Arc::new(Mutex::new(source)),
        }
    }

    /// The rules in force now; decide a connection and its requests with one snapshot.
    pub fn current(&self) -> Arc<Decider> {
        self.rules.borrow().clone()
    }

    /// The policy the current rules come from.
    pub fn source(&self) -> NetworkPolicy {
        self.source.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Say which policy the rules in force were compiled from.
    pub fn set_source(&self, source: NetworkPolicy) {
        *self.source.lock().unwrap_or_else(|e| e.into_inner()) = source;
    }

    /// Told of every replacement.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Decider>> {
        self.rules.subscribe()
    }

    /// Put new rules in force (for every new decision at once; open tunnels re-decide).
    pub fn replace(&self, decider: Decider, source: NetworkPolicy) {
        let mut s = self.source.lock().unwrap_or_else(|e| e.into_inner());
        *s = source;
        self.rules.send_replace(Arc::new(decider));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::decide::Channel;
    use crate::proxy::matcher::Host;
    use crate::proxy::testing::allowing;

    #[test]
    fn a_replacement_is_seen_by_new_snapshots_and_subscribers_not_by_old_snapshots() {
        let cell = DeciderCell::new(Decider::from_policy(&allowing(&["a.test"])).unwrap());
        let rx = cell.subscribe();
        let old = cell.current();
        let b = Host::parse("b.test").unwrap();
        assert!(!old
            .decide(&b, 443, None, Channel::Tunnel)
            .verdict
            .lets_through());
        let wider = allowing(&["a.test", "b.test"]);
        cell.replace(Decider::from_policy(&wider).unwrap(), wider.clone());
        assert!(rx.has_changed().unwrap());
        assert!(cell
            .current()
            .decide(&b, 443, None, Channel::Tunnel)
            .verdict
            .lets_through());
        assert!(!old
            .decide(&b, 443, None, Channel::Tunnel)
            .verdict
            .lets_through());
        assert_eq!(cell.source(), wider);
    }
}
