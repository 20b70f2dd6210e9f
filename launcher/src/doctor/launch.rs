//! The launch itself, as `whole-process` makes it with the same options, up to the point where
//! the program would start: every layer built and verified from inside, then the sandbox ends.
//! Whatever the probes before it say, `doctor` says "can run" only when this got there.

use std::sync::Arc;

use crate::cli::SandboxArgs;
use crate::proxy::events::EventSink;
use crate::status::StatusSink;
use crate::{proxy, sandbox, supervisor};

use super::child::in_child;
use super::namespaces::split_failure;
use super::{check, Check, Status};

pub fn launch(args: &SandboxArgs) -> Check {
    let r = in_child(|| {
        let failed = |e: shim::channel::StepError| {
            serde_json::to_string(&e.0).unwrap_or_else(|_| e.to_string())
        };
        let prepared = sandbox::prepare(args, Vec::new(), Arc::new(EventSink::none()), false)
            .map_err(failed)?;
        let mut spec = prepared.spec;
        spec.probe_only = true;
        let mut status = StatusSink::default();
        let limits = &prepared.policy.runtime.limits;
        let birth = crate::limits::make_cgroups(limits, &mut status, 0)
            .map(crate::limits::Birth::new)
            .map_err(failed)?;
        let code = supervisor::drive(supervisor::Launch {
            spec,
            filter: prepared.filter,
            identity: prepared.identity,
            status: &mut status,
            verbose: 0,
            on_listeners: prepared.proxy.map(|p| -> supervisor::OnListeners<'_> {
                Box::new(move |fds, transparent| proxy::launch::start(p, fds, transparent))
            }),
            around_clone: Some(&birth),
            timeout: None,
            on_spawn: None,
            prompts: None,
            deferred: None,
            meanwhile: None,
        });
        if let Some(c) = birth.cgroups {
            crate::limits::finish_cgroups(c, &mut status);
        }
        let code = code.map_err(failed)?;
        match code {
            0 => Ok(()),
            c => Err(format!("the probe launch ended with exit code {c}")),
        }
    });
    match r {
        Ok(()) => check(
            "launch",
            Status::Ok,
            "a sandbox was built with these options and every layer verified from inside",
            None,
        ),
        Err(e) => {
            let (detail, fix) = split_failure(&e);
            check("launch", Status::Fail, detail, fix.as_deref())
        }
    }
}
