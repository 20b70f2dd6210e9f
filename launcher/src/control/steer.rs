//! What makes a sandbox steerable while it runs, set up before it is cloned: the reloadable
//! network rules (restricted network only), the prompts (`--prompts` or `sandbox.prompts`,
//! unless `--non-interactive` or the organisation says `prompts: false`), and the watch on the
//! policy files named on the command line.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::{EgressArg, SandboxArgs};
use crate::policy::hierarchy::SETTINGS_FILE;
use crate::policy::LoadRequest;
use crate::prompt::{Prompts, DEFAULT_TIMEOUT};
use crate::proxy::events::EventSink;
use crate::reload::watch::Watcher;
use crate::reload::Reloader;
use crate::sandbox::Prepared;

#[derive(Default)]
pub struct Steering {
    pub reloader: Option<Arc<Reloader>>,
    pub prompts: Option<Arc<Prompts>>,
    pub watcher: Option<Watcher>,
    /// Said on stderr before the program starts.
    pub notes: Vec<String>,
}

/// Whether denied requests wait for an answer, and why not when asked for.
fn prompts_wanted(args: &SandboxArgs, policy_says: Option<bool>) -> (bool, Option<String>) {
    let asked = args.prompts || policy_says == Some(true);
    if !asked {
        return (false, None);
    }
    if args.non_interactive {
        return (false, None);
    }
    if policy_says == Some(false) {
        return (
            false,
            Some("--prompts: the organization's settings say `prompts: false`; denials are refused at once".into()),
        );
    }
    (true, None)
}

pub fn attach(args: &SandboxArgs, prepared: &mut Prepared, events: &Arc<EventSink>) -> Steering {
    let mut s = Steering::default();
    let (want_prompts, refused) = prompts_wanted(args, prepared.policy.prompts);
    s.notes.extend(refused);
    let Some(proxy) = prepared.proxy.as_mut() else {
        if want_prompts {
            s.notes.push(
                "--prompts applies only to --network restricted (the proxy is what asks); ignored"
                    .into(),
            );
        }
        return s;
    };
    let landlock_ports = (args.egress == EgressArg::Transparent)
        .then(|| prepared.spec.landlock.tcp_connect.clone())
        .flatten();
    let reloader = match Reloader::new(
        args,
        proxy.decider.clone(),
        events.clone(),
        proxy.inspector.is_some(),
        landlock_ports,
    ) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            s.notes.push(format!(
                "warning: the network rules cannot be reloaded: {e:#}"
            ));
            return s;
        }
    };
    match Watcher::new(&reloader.watched_files()) {
        Ok(w) => s.watcher = w,
        Err(e) => s.notes.push(format!(
            "warning: edits of the policy files will not be picked up: {e:#}"
        )),
    }
    if want_prompts {
        let cwd = prepared.spec.cwd.clone();
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
        let user_settings = LoadRequest::from_env(cwd.clone())
            .map(|r| r.user_dir.join(SETTINGS_FILE))
            .unwrap_or_else(|_| home.join(".config/sandbox-launch").join(SETTINGS_FILE));
        let timeout = args
            .prompt_timeout
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64);
        let prompts = Arc::new(
            Prompts::new(
                timeout,
                user_settings,
                cwd,
                home,
                events.clone(),
                reloader.clone(),
            )
            .with_deny_write(prepared.policy.filesystem.deny_write.clone()),
        );
        proxy.prompts = Some(prompts.clone());
        let who = args.name.as_deref().unwrap_or("ID");
        s.notes.push(format!(
            "prompts on: denied requests wait up to {} s for `sandbox-launch prompt {who}` (in another terminal)",
            timeout.as_secs_f64()
        ));
        s.prompts = Some(prompts);
    }
    s.reloader = Some(reloader);
    s
}
