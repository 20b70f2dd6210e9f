//! Hot reload of a running sandbox's network rules: `sandbox-launch policy set ID FILE`, the
//! `allow`/`deny` shorthands, lasting prompt answers, and edits of the policy files named on
//! the command line (watched, [`watch`]).
//!
//! A reload redoes the whole merge — org, command line, `--policy`, `--settings` (the one
//! replaced), project, user — so organisation denies and ceilings hold as at launch; takes only
//! its network rules (static sections may not differ from the launch, [`statics`]); compiles
//! them whole (any error leaves the old rules in force); and puts them in force at once
//! ([`cell`]). Open tunnels that the new rules no longer allow are closed ([`revoke`]).

pub mod cell;
pub mod revoke;
pub mod statics;
pub mod watch;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::cli::SandboxArgs;
use crate::policy::model::{NetworkMode, NetworkPolicy, Source, Sourced};
use crate::proxy::decide::Decider;
use crate::proxy::events::EventSink;
use cell::DeciderCell;
use statics::{Kind, Statics};

/// One change to the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Replace the `--policy` (YAML) or `--settings` (JSON) layer with this file.
    Set(PathBuf),
    /// Allow a domain in this sandbox only (`sandbox-launch allow`, a prompt's exact host).
    Allow(String),
    /// Deny a domain in this sandbox only (`sandbox-launch deny`).
    Deny(String),
    /// Read every file again (one changed on disk).
    Refresh,
}

/// What a reload is made of besides the files on disk.
#[derive(Debug, Clone, Default)]
struct Layers {
    policy_file: Option<PathBuf>,
    settings_file: Option<PathBuf>,
    allow: Vec<String>,
    deny: Vec<String>,
}

pub struct Reloader {
    /// The launch's options (the files, the flags), which every reload merges again.
    args: SandboxArgs,
    /// What the static sections of `--policy` and `--settings` said at launch.
    launch_policy: Statics,
    launch_settings: Statics,
    layers: Mutex<Layers>,
    cell: DeciderCell,
    events: Arc<EventSink>,
    /// TLS inspection was set up at launch (request rules over HTTPS need it).
    inspecting: bool,
    /// The TCP ports Landlock lets programs connect to (`None`: any), fixed at launch.
    landlock_ports: Option<Vec<u16>>,
}

impl Reloader {
    pub fn new(
        args: &SandboxArgs,
        cell: DeciderCell,
        events: Arc<EventSink>,
        inspecting: bool,
        landlock_ports: Option<Vec<u16>>,
    ) -> Result<Reloader> {
        let statics_of = |file: &Option<PathBuf>, kind: Kind| -> Result<Statics> {
            match file {
                Some(f) => {
                    let text = std::fs::read_to_string(f)
                        .with_context(|| format!("cannot read {}", f.display()))?;
                    statics::static_part(kind, f, &text)
                }
                None => Ok(Statics::new()),
            }
        };
        Ok(Reloader {
            launch_policy: statics_of(&args.policy, Kind::Policy)?,
            launch_settings: statics_of(&args.settings, Kind::Settings)?,
            layers: Mutex::new(Layers {
                policy_file: args.policy.clone(),
                settings_file: args.settings.clone(),
                ..Default::default()
            }),
            args: args.clone(),
            cell,
            events,
            inspecting,
            landlock_ports,
        })
    }

    pub fn cell(&self) -> &DeciderCell {
        &self.cell
    }

    /// The files named on the command line (watched for edits).
    pub fn watched_files(&self) -> Vec<PathBuf> {
        self.args
            .policy
            .iter()
            .chain(self.args.settings.iter())
            .cloned()
            .collect()
    }

    /// Apply `change`; `by` says who asked (for the events). The reply says what is in force.
    pub fn reload(&self, change: Change, by: &str) -> Result<Value> {
        let mut layers = self.layers.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = layers.clone();
        match &change {
            Change::Set(file) => self.replace_layer(&mut next, file)?,
            Change::Allow(d) => {
                let d = domain(d)?;
                next.deny.retain(|x| *x != d);
                if !next.allow.contains(&d) {
                    next.allow.push(d);
                }
            }
            Change::Deny(d) => {
                let d = domain(d)?;
                next.allow.retain(|x| *x != d);
                if !next.deny.contains(&d) {
                    next.deny.push(d);
                }
            }
            Change::Refresh => {
                for f in self.watched_files() {
                    if next.policy_file.as_ref() == Some(&f)
                        || next.settings_file.as_ref() == Some(&f)
                    {
                        self.replace_layer(&mut next, &f)?;
                    }
                }
            }
        }
        let network = self.merge(&next)?;
        let decider = Decider::from_policy(&network).context("the new rules do not compile")?;
        if decider.needs_inspection() && !self.inspecting {
            bail!(
                "the new rules check requests over HTTPS (protocol: rest), which needs TLS \
                 inspection, and this sandbox was started without it (its CA is put in place at \
                 launch); restart the sandbox with this policy"
            );
        }
        let mut warnings = Vec::new();
        if let (Some(fixed), Some(wanted)) = (&self.landlock_ports, decider.connect_ports()) {
            let extra: Vec<String> = wanted
                .iter()
                .filter(|p| !fixed.contains(p))
                .map(u16::to_string)
                .collect();
            if !extra.is_empty() {
                warnings.push(format!(
                    "Landlock keeps the TCP ports of the launch: programs that ignore the proxy \
                     variables still cannot connect to port(s) {} (through the proxy they can)",
                    extra.join(", ")
                ));
            }
        }
        let summary = json!({
            "allowed_domains": network.allowed_domains.iter().map(|s| &s.value).collect::<Vec<_>>(),
            "denied_domains": network.denied_domains.iter().map(|s| &s.value).collect::<Vec<_>>(),
            "network_policies": network.rules.keys().collect::<Vec<_>>(),
            "warnings": warnings,
        });
        self.cell.replace(decider, network);
        *layers = next;
        self.events.emit(json!({
            "event": "reload",
            "by": by,
            "change": describe(&change),
            "rules": summary,
        }));
        Ok(summary)
    }

    /// Put `file` in place of the layer of its kind, once its static sections are checked.
    fn replace_layer(&self, layers: &mut Layers, file: &PathBuf) -> Result<()> {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let kind = statics::kind_of(file, &text);
        let (launch, slot) = match kind {
            Kind::Policy => (&self.launch_policy, &mut layers.policy_file),
            Kind::Settings => (&self.launch_settings, &mut layers.settings_file),
        };
        statics::check_unchanged(file, &statics::static_part(kind, file, &text)?, launch)?;
        *slot = Some(file.clone());
        Ok(())
    }

    /// The network rules of every level merged again, with this sandbox's own additions.
    fn merge(&self, layers: &Layers) -> Result<NetworkPolicy> {
        let mut args = self.args.clone();
        args.policy = layers.policy_file.clone();
        args.settings = layers.settings_file.clone();
        let (policy, _) = crate::sandbox::load_policy(&args).map_err(|e| anyhow!("{e}"))?;
        let mode = policy.network.mode.unwrap_or(NetworkMode::Restricted);
        if mode != NetworkMode::Restricted {
            bail!(
                "the network mode would become {mode:?}; it is fixed when the sandbox is built (restart it to change it)"
            );
        }
        let mut network = policy.network;
        for d in &layers.allow {
            network
                .allowed_domains
                .push(Sourced::new(d.clone(), Source::Control));
        }
        for d in &layers.deny {
            network
                .denied_domains
                .push(Sourced::new(d.clone(), Source::Control));
        }
        Ok(network)
    }
}

/// A domain as the rules take it (checked when they are compiled).
fn domain(d: &str) -> Result<String> {
    let d = d.trim().trim_end_matches('.').to_ascii_lowercase();
    if d.is_empty() || d.contains(char::is_whitespace) {
        bail!("{d:?} is not a domain (example.com, *.example.com, host:port)");
    }
    Ok(d)
}

fn describe(change: &Change) -> Value {
    match change {
        Change::Set(f) => json!({"set": f}),
        Change::Allow(d) => json!({"allow": d}),
        Change::Deny(d) => json!({"deny": d}),
        Change::Refresh => json!({"refresh": true}),
    }
}
