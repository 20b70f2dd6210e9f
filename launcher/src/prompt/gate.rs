//! Where the proxy asks: right after a connection's decision, before it is refused. Without
//! prompts a denial passes through untouched and at once (no await point is reached).

use std::sync::Arc;

use super::{Outcome, ANSWERED};
use crate::proxy::decide::{Channel, Decider, Decision, Verdict};
use crate::proxy::identify::Program;
use crate::proxy::Proxy;

impl Proxy {
    /// Hold a promptable denial until it is answered. `rules` is the snapshot `decision` was
    /// made with; the snapshot returned is the one to go on with (a reload while the request
    /// waited replaces it, and the request is decided again).
    pub async fn admit(
        &self,
        rules: Arc<Decider>,
        decision: Decision,
        binary: Option<&Program>,
        channel: Channel,
        protocol: &'static str,
    ) -> (Arc<Decider>, Decision) {
        let Some(prompts) = &self.prompts else {
            return (rules, decision);
        };
        if decision.verdict.lets_through() {
            return (rules, decision);
        }
        match prompts.hold(&decision, binary, protocol).await {
            Outcome::Allowed { prompt, answer } => {
                let mut d = decision;
                d.verdict = Verdict::Allow;
                d.rule = Some(format!("{ANSWERED}{prompt}: {}", answer.name()));
                d.reason = format!(
                    "allowed by a person in prompt #{prompt} ({})",
                    answer.name()
                );
                d.hint = None;
                // A person named this host, as a rule naming it exactly would.
                d.explicit = true;
                d.rest_rules.clear();
                (rules, d)
            }
            Outcome::Denied { why } => {
                let mut d = decision;
                d.reason = why;
                (rules, d)
            }
            Outcome::Reloaded => {
                let now = self.decider.current();
                let d = now.decide(&decision.host, decision.port, binary, channel);
                (now, d)
            }
        }
    }
}
