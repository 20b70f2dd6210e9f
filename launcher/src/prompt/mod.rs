//! Prompts: with `--prompts` (or `sandbox.prompts` in settings), a network request the rules
//! deny is held — the program's connection waits — until someone answers on the control
//! socket (`sandbox-launch prompt`, or any client of the protocol) or `--prompt-timeout`
//! passes, which denies. Requests for one host while its prompt is open join it: one prompt
//! per host. What each answer does is said in the prompt itself ([`offer`]):
//!
//! * *allow once*: the connections waiting on this prompt go through; the next one asks again;
//! * *allow always*: the rule is written to the user's settings at once ([`persist`]), the
//!   running sandbox's rules are reloaded with it, and the waiting connections go through;
//! * *remove from deny list*: the entry leaves the user's settings' `deniedDomains`, likewise;
//! * *deny*: the waiting connections are refused; the next one asks again.
//!
//! An organisation's deny is never held: it is refused at once, and shown as a prompt that
//! offers nothing but `deny` — "(organization policy)".

pub mod commands;
pub mod filesystem;
pub mod gate;
pub mod jsonc_edit;
pub mod offer;
pub mod persist;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::{broadcast, oneshot};

use crate::policy::model::Sourced;
use crate::proxy::decide::Decision;
use crate::proxy::events::EventSink;
use crate::proxy::identify::Program;
use crate::proxy::matcher::Host;
use crate::reload::{Change, Reloader};
use offer::{Answer, Offer};

/// How long a prompt waits for an answer unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The rule of a decision a prompt answer let through starts with this.
const ANSWERED: &str = "prompt #";

/// Whether a person let this connection through in a prompt.
pub fn allowed_by_answer(d: &Decision) -> bool {
    d.rule.as_deref().is_some_and(|r| r.starts_with(ANSWERED))
}

/// How a held request ends.
#[derive(Debug, Clone)]
enum Outcome {
    Allowed {
        prompt: u64,
        answer: Answer,
    },
    Denied {
        why: String,
    },
    /// The rules were reloaded: decide again.
    Reloaded,
}

struct Pending {
    id: u64,
    host: Host,
    ports: BTreeSet<u16>,
    protocols: BTreeSet<&'static str>,
    /// The first program that asked: executable and host pid.
    program: Option<(String, Option<i32>)>,
    reason: String,
    rule: Option<String>,
    offer: Offer,
    waiters: Vec<oneshot::Sender<Outcome>>,
    /// How many requests asked (the organisation's are refused at once, none waits).
    asked: usize,
    deadline: Instant,
}

#[derive(Default)]
struct State {
    next_id: u64,
    pending: Vec<Pending>,
    /// Filesystem prompts (see [`filesystem`]).
    fs: Vec<filesystem::FsPending>,
}

pub struct Prompts {
    timeout: Duration,
    /// The user's settings file, which the lasting answers edit.
    user_settings: PathBuf,
    cwd: PathBuf,
    home: PathBuf,
    state: Mutex<State>,
    /// `{"prompt": …}` when one opens or more requests join it, `{"closed": …}` when it ends.
    updates: broadcast::Sender<Value>,
    events: Arc<EventSink>,
    reloader: Arc<Reloader>,
    /// The launch's `denyWrite` entries: a filesystem prompt never offers to write below one.
    deny_write: Vec<Sourced<PathBuf>>,
}

impl Prompts {
    pub fn new(
        timeout: Duration,
        user_settings: PathBuf,
        cwd: PathBuf,
        home: PathBuf,
        events: Arc<EventSink>,
        reloader: Arc<Reloader>,
    ) -> Prompts {
        Prompts {
            timeout,
            user_settings,
            cwd,
            home,
            state: Mutex::default(),
            updates: broadcast::channel(256).0,
            events,
            reloader,
            deny_write: Vec::new(),
        }
    }

    /// The launch's `denyWrite` entries (for the filesystem prompts' offers).
    pub fn with_deny_write(mut self, deny_write: Vec<Sourced<PathBuf>>) -> Prompts {
        self.deny_write = deny_write;
        self
    }

    /// Whether the DNS stub should give a denied name its stand-in, so that the connection to
    /// it carries the prompt: yes unless the organisation's deny list names it.
    pub fn defers_lookup(&self, d: &Decision) -> bool {
        !offer::classify(d, &self.reloader.cell().source(), &self.user_settings).organization
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hold a denied request until its prompt is answered or times out; what it gets then.
    async fn hold(
        &self,
        d: &Decision,
        binary: Option<&Program>,
        protocol: &'static str,
    ) -> Outcome {
        let offer = offer::classify(d, &self.reloader.cell().source(), &self.user_settings);
        let (id, rx, deadline) = self.enqueue(d, binary, protocol, offer);
        let Some(rx) = rx else {
            return Outcome::Denied {
                why: format!("{} (organization policy: no answer can allow it)", d.reason),
            };
        };
        match tokio::time::timeout_at(deadline.into(), rx).await {
            Ok(Ok(outcome)) => outcome,
            _ => self.expire(id),
        }
    }

    /// Join the open prompt for this host, or open one. The organisation's denials get no
    /// receiver: they are refused at once.
    fn enqueue(
        &self,
        d: &Decision,
        binary: Option<&Program>,
        protocol: &'static str,
        offer: Offer,
    ) -> (u64, Option<oneshot::Receiver<Outcome>>, Instant) {
        let mut st = self.lock();
        self.sweep(&mut st);
        let organization = offer.organization;
        let (tx, rx) = oneshot::channel();
        let rx = (!organization).then_some(rx);
        let opened = match st.pending.iter_mut().find(|p| p.host == d.host) {
            Some(p) => {
                p.ports.insert(d.port);
                p.protocols.insert(protocol);
                p.asked += 1;
                if rx.is_some() {
                    p.waiters.push(tx);
                }
                false
            }
            None => {
                st.next_id += 1;
                let id = st.next_id;
                st.pending.push(Pending {
                    id,
                    host: d.host.clone(),
                    ports: [d.port].into_iter().collect(),
                    protocols: [protocol].into_iter().collect(),
                    program: binary.map(|b| (b.exe.display().to_string(), b.pid)),
                    reason: d.reason.clone(),
                    rule: d.rule.clone(),
                    offer,
                    waiters: if rx.is_some() { vec![tx] } else { Vec::new() },
                    asked: 1,
                    deadline: Instant::now() + self.timeout,
                });
                true
            }
        };
        let Some(p) = st.pending.iter().find(|p| p.host == d.host) else {
            return (0, None, Instant::now());
        };
        let shown = self.describe(p);
        let (id, deadline) = (p.id, p.deadline);
        drop(st);
        if opened {
            self.events
                .emit(json!({"event": "prompt", "prompt": shown}));
        }
        let _ = self.updates.send(json!({"prompt": shown}));
        (id, rx, deadline)
    }

    /// A prompt's time is up: it is closed and everything waiting on it denied.
    fn expire(&self, id: u64) -> Outcome {
        let why = format!(
            "no answer to prompt #{id} within {} s (--prompt-timeout): denied",
            self.timeout.as_secs_f64()
        );
        let closed = {
            let mut st = self.lock();
            let at = st.pending.iter().position(|p| p.id == id);
            at.map(|i| st.pending.remove(i))
        };
        if let Some(p) = closed {
            self.close(
                p,
                "timeout",
                "the timeout",
                Outcome::Denied { why: why.clone() },
            );
        }
        Outcome::Denied { why }
    }

    /// Close the prompts whose time is up that no waiter closed (the organisation's, on which
    /// nothing waits, and those whose requests were given up).
    fn sweep(&self, st: &mut State) {
        let now = Instant::now();
        let (gone, kept): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut st.pending)
            .into_iter()
            .partition(|p| p.deadline <= now);
        st.pending = kept;
        for p in gone {
            let why = format!("no answer to prompt #{} in time: denied", p.id);
            self.close(p, "timeout", "the timeout", Outcome::Denied { why });
        }
        self.sweep_fs(st);
    }

    /// End a prompt: tell its waiters, its followers and the events stream.
    fn close(&self, p: Pending, outcome: &str, by: &str, to_waiters: Outcome) {
        for w in p.waiters {
            let _ = w.send(to_waiters.clone());
        }
        let _ = self
            .updates
            .send(json!({"closed": {"id": p.id, "outcome": outcome}}));
        self.events.emit(json!({
            "event": "prompt_closed",
            "id": p.id,
            "host": p.host.to_string(),
            "outcome": outcome,
            "by": by,
            "requests": p.asked,
        }));
    }

    /// The open prompts, and a subscription to what happens to them from now on.
    pub fn subscribe(&self) -> (Vec<Value>, broadcast::Receiver<Value>) {
        let mut st = self.lock();
        self.sweep(&mut st);
        let mut open: Vec<(u64, Value)> = st
            .pending
            .iter()
            .map(|p| (p.id, self.describe(p)))
            .chain(st.fs.iter().map(|p| (p.id, self.describe_fs(p))))
            .collect();
        open.sort_by_key(|(id, _)| *id);
        let open = open.into_iter().map(|(_, v)| v).collect();
        (open, self.updates.subscribe())
    }

    /// The open prompts, and the requests waiting on them.
    pub fn pending(&self) -> (usize, usize) {
        let mut st = self.lock();
        self.sweep(&mut st);
        let waiting = st
            .pending
            .iter()
            .map(|p| p.waiters.iter().filter(|w| !w.is_closed()).count())
            .sum();
        (st.pending.len() + st.fs.len(), waiting)
    }

    /// Answer prompt `id` (or the oldest open one); `by` says who answered (for the events).
    /// The reply says what was done.
    pub fn answer(&self, id: Option<u64>, answer: Answer, by: &str) -> Result<Value, String> {
        let (id, host, offer) = {
            let mut st = self.lock();
            self.sweep(&mut st);
            // The oldest open prompt, of either kind, when none is named.
            let id = id.or_else(|| {
                let net = st.pending.first().map(|p| p.id);
                let fs = st.fs.first().map(|p| p.id);
                net.into_iter().chain(fs).min()
            });
            if let Some(fs) = id.filter(|id| st.fs.iter().any(|p| p.id == *id)) {
                drop(st);
                return self.answer_fs(fs, answer, by);
            }
            let p = match id {
                Some(id) => st.pending.iter().find(|p| p.id == id),
                None => st.pending.first(),
            }
            .ok_or_else(|| match id {
                Some(id) => format!("prompt #{id} is not open (answered, or its time is up)"),
                None => "no prompt is open".to_string(),
            })?;
            (p.id, p.host.clone(), p.offer.clone())
        };
        if !offer.answers.contains(&answer) {
            return Err(refusal(id, &host, &offer, answer));
        }
        let did = self.lasting(id, &host, &offer, answer)?;
        let closed = {
            let mut st = self.lock();
            let at = st.pending.iter().position(|p| p.id == id);
            at.map(|i| st.pending.remove(i))
        };
        let Some(p) = closed else {
            return Err(format!(
                "prompt #{id} closed (its time was up) before the answer took effect{}",
                if did.is_empty() {
                    String::new()
                } else {
                    format!("; done anyway: {did}")
                }
            ));
        };
        let to_waiters = if answer.allows() {
            Outcome::Allowed { prompt: id, answer }
        } else {
            Outcome::Denied {
                why: format!("denied by a person in prompt #{id}"),
            }
        };
        let waiting = p.waiters.len();
        self.close(p, answer.name(), by, to_waiters);
        Ok(json!({
            "prompt": id,
            "host": host.to_string(),
            "answer": answer.name(),
            "requests": waiting,
            "did": did,
        }))
    }

    /// The lasting part of an answer: the settings file, then the running sandbox's rules.
    fn lasting(
        &self,
        id: u64,
        host: &Host,
        offer: &Offer,
        answer: Answer,
    ) -> Result<String, String> {
        let by = format!("prompt #{id}");
        match answer {
            Answer::AllowAlways => {
                let rule = offer
                    .always_rule
                    .clone()
                    .unwrap_or_else(|| host.to_string());
                persist::allow_domain(&offer.file, &rule, &self.cwd, &self.home)
                    .map_err(|e| format!("{e:#}"))?;
                // The file's rule, and the host itself, named exactly (it may be on a private
                // address, which a wildcard never reaches).
                self.reloader
                    .reload(Change::Allow(host.to_string()), &by)
                    .map_err(|e| {
                        format!(
                            "{} now allows {rule}, but reloading failed: {e:#}",
                            offer.file.display()
                        )
                    })?;
                Ok(format!(
                    "added `{rule}` to allowedDomains in {}",
                    offer.file.display()
                ))
            }
            Answer::RemoveFromDenyList => {
                persist::remove_denied(&offer.file, &offer.deny_entries, &self.cwd, &self.home)
                    .map_err(|e| format!("{e:#}"))?;
                self.reloader.reload(Change::Refresh, &by).map_err(|e| {
                    format!(
                        "removed from {}, but reloading failed: {e:#}",
                        offer.file.display()
                    )
                })?;
                Ok(format!(
                    "removed {} from deniedDomains in {}",
                    offer.deny_entries.join(", "),
                    offer.file.display()
                ))
            }
            Answer::AllowOnce | Answer::Deny => Ok(String::new()),
        }
    }

    /// After a reload: release the requests the new rules allow (they decide again).
    pub fn recheck(&self) {
        let rules = self.reloader.cell().current();
        let released: Vec<Pending> = {
            let mut st = self.lock();
            let (go, stay): (Vec<Pending>, Vec<Pending>) =
                std::mem::take(&mut st.pending).into_iter().partition(|p| {
                    p.ports.iter().any(|&port| {
                        rules
                            .decide(&p.host, port, None, crate::proxy::decide::Channel::Tunnel)
                            .verdict
                            .lets_through()
                    })
                });
            st.pending = stay;
            go
        };
        for p in released {
            self.close(p, "reloaded", "a reload", Outcome::Reloaded);
        }
    }

    /// A prompt as clients see it.
    fn describe(&self, p: &Pending) -> Value {
        let n = p.waiters.iter().filter(|w| !w.is_closed()).count();
        let conns = if n == 1 {
            "the 1 waiting connection".to_string()
        } else {
            format!("the {n} waiting connections")
        };
        let host = &p.host;
        let offers: Vec<Value> = p
            .offer
            .answers
            .iter()
            .map(|a| {
                let does = match a {
                    Answer::AllowOnce => format!(
                        "let {conns} to {host} through, nothing more: the next connection asks again"
                    ),
                    Answer::AllowAlways => format!(
                        "add `{}` to allowedDomains in {}: every sandbox from now on; this one allows it (and {host} itself) at once, and lets {conns} through",
                        p.offer.always_rule.as_deref().unwrap_or(""),
                        p.offer.file.display()
                    ),
                    Answer::RemoveFromDenyList => format!(
                        "remove {} from deniedDomains in {}: every sandbox from now on, this one at once; lets {conns} through, and the next connection is decided by the allowed domains",
                        p.offer.deny_entries.iter().map(|e| format!("`{e}`")).collect::<Vec<_>>().join(", "),
                        p.offer.file.display()
                    ),
                    Answer::Deny if p.offer.organization => format!(
                        "{host} is denied by organization policy; nothing can allow it"
                    ),
                    Answer::Deny => {
                        format!("refuse {conns} to {host}; the next connection asks again")
                    }
                };
                json!({"answer": a.name(), "does": does})
            })
            .collect();
        json!({
            "id": p.id,
            "kind": "network",
            "host": host.to_string(),
            "ports": p.ports.iter().filter(|&&x| x != 0).collect::<Vec<_>>(),
            "protocols": p.protocols,
            "program": p.program.as_ref().map(|(exe, pid)| json!({"exe": exe, "pid": pid})),
            "waiting": n,
            "requests": p.asked,
            "reason": p.reason,
            "rule": p.rule,
            "organization": p.offer.organization,
            "denied_by": p.offer.denied_by,
            "expires_in": p.deadline.saturating_duration_since(Instant::now()).as_secs_f64(),
            "offers": offers,
        })
    }
}

/// Why `answer` is not one of the prompt's.
fn refusal(id: u64, host: &Host, offer: &Offer, answer: Answer) -> String {
    if offer.organization {
        return format!(
            "prompt #{id}: {host} is denied by organization policy ({}); no answer can allow it, {} is refused",
            offer.denied_by.join(", "),
            answer.name()
        );
    }
    format!(
        "prompt #{id} does not offer {} (it offers {})",
        answer.name(),
        offer
            .answers
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests;
