//! The control plane of a running sandbox: its identity, its control socket (outside the
//! sandbox, in the user's private control directory), and the commands that talk to it — `ps`,
//! `stop`, `events`. The socket speaks JSON Lines ([`protocol`]); only the launcher's own uid in
//! the launcher's own user namespace may connect ([`peer`]); the sandbox cannot see the
//! directory ([`hide`]).
//!
//! The server runs on a thread of its own with a single-threaded tokio runtime, started the
//! first time a client connects (like the proxy: a sandbox that nobody looks at pays nothing
//! but the socket).

pub mod client;
pub mod commands;
pub mod dir;
pub mod feed;
pub mod hide;
mod peer;
pub mod protocol;
pub mod registration;
mod server;
pub mod steer;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::cli::SandboxArgs;
use crate::proxy::events::EventSink;
use registration::Registration;
pub use server::on_demand;

/// The control socket of a new sandbox. Without `--name` a socket that cannot be made is a
/// warning (the sandbox runs, unreachable by `ps` and the other commands); with one, an error.
pub fn register(args: &SandboxArgs) -> anyhow::Result<Option<Registration>> {
    let made =
        Registration::create(dir::ControlDir::locate(), args.name.clone()).and_then(|mut r| {
            r.keep_clear_of(&args.preserve_fd)?;
            Ok(r)
        });
    match made {
        Ok(r) => Ok(Some(r)),
        Err(e) if args.name.is_some() => Err(e),
        Err(e) => {
            crate::say!(
                "sandbox-launch: warning: no control socket for this sandbox (`ps`, `stop` and `prompt` will not see it): {e:#}"
            );
            Ok(None)
        }
    }
}

/// What the control socket knows about its sandbox.
pub struct Live {
    pub id: String,
    pub name: Option<String>,
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// `whole-process` or `per-command`.
    pub kind: &'static str,
    /// `none`, `restricted` or `full`.
    pub network: &'static str,
    pub started: SystemTime,
    pub events: Arc<EventSink>,
    /// The sandbox's init (the shim), once it exists.
    shim: OnceLock<Shim>,
    /// Its network rules, replaceable (restricted network only).
    pub reloader: Option<Arc<crate::reload::Reloader>>,
    /// Its prompts (with `--prompts`).
    pub prompts: Option<Arc<crate::prompt::Prompts>>,
    /// Answers and rule changes being made and replied to (see [`Live::settle`]).
    in_flight: AtomicUsize,
}

/// One answer or rule change between its request and its reply (see [`Live::settle`]).
pub(crate) struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Shim {
    pid: libc::pid_t,
    /// Signals go through a pidfd: the pid cannot be reused under us.
    pidfd: Option<OwnedFd>,
}

impl Live {
    pub fn new(
        id: String,
        name: Option<String>,
        argv: Vec<String>,
        kind: &'static str,
        network: &'static str,
        events: Arc<EventSink>,
    ) -> Live {
        Live {
            id,
            name,
            argv,
            kind,
            network,
            started: SystemTime::now(),
            events,
            shim: OnceLock::new(),
            reloader: None,
            prompts: None,
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Count an answer or a rule change from its request to its reply.
    pub(crate) fn in_flight(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(&self.in_flight)
    }

    /// At the sandbox's end, before the launcher exits: wait (at most `limit`) for the answers
    /// and rule changes being made to be replied to. An answer that lets the program's last
    /// request through can end the sandbox before its own reply is sent; without this wait the
    /// client saw the connection close and reported a failure for an answer that was applied.
    pub fn settle(&self, limit: Duration) {
        let until = std::time::Instant::now() + limit;
        while self.in_flight.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Apply a change to the network rules; open prompts the new rules settle are released.
    pub fn reload(&self, change: crate::reload::Change, by: &str) -> anyhow::Result<Value> {
        let Some(r) = &self.reloader else {
            anyhow::bail!(
                "this sandbox has no network rules to change (network {}; only `restricted` has the proxy)",
                self.network
            );
        };
        let done = r.reload(change, by);
        match &done {
            Ok(_) => {
                if let Some(p) = &self.prompts {
                    p.recheck();
                }
            }
            Err(e) => self.events.emit(json!({
                "event": "reload_failed",
                "by": by,
                "error": format!("{e:#}"),
            })),
        }
        done
    }

    /// The sandbox's init exists (called right after the clone).
    pub fn set_shim(&self, pid: libc::pid_t) {
        // SAFETY: pidfd_open on our own child; the result is checked.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
        // SAFETY: a fresh descriptor we own (when the call succeeded).
        let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        let _ = self.shim.set(Shim { pid, pidfd });
    }

    /// Send `sig` to the sandbox's init (which passes SIGTERM and the like on to the program;
    /// SIGKILL ends the whole sandbox).
    pub fn signal(&self, sig: libc::c_int) -> std::io::Result<()> {
        let Some(shim) = self.shim.get() else {
            return Err(std::io::Error::other("the sandbox has not started yet"));
        };
        // SAFETY: signalling our own child, through its pidfd when there is one.
        let r = unsafe {
            match &shim.pidfd {
                Some(fd) => libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    sig,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                ) as i32,
                None => libc::kill(shim.pid, sig),
            }
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// `ps`'s row, and the reply to `status`.
    pub fn status(&self) -> Value {
        let tally = self.events.feed().tally();
        let started = self
            .started
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        json!({
            "id": self.id,
            "name": self.name,
            "pid": std::process::id(),
            "sandbox_pid": self.shim.get().map(|s| s.pid),
            "program": self.argv,
            "mode": self.kind,
            "network": self.network,
            "started": started,
            "uptime": self.started.elapsed().unwrap_or(Duration::ZERO).as_secs(),
            "prompts": {
                "enabled": self.prompts.is_some(),
                "pending": self.prompts.as_ref().map_or(0, |p| p.pending().0),
                "waiting": self.prompts.as_ref().map_or(0, |p| p.pending().1),
            },
            "denied": {
                "total": tally.total,
                "hosts": tally.hosts.iter().map(|(h, n)| json!({"host": h, "count": n})).collect::<Vec<_>>(),
                "writes": tally.writes,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn live() -> Arc<Live> {
        Arc::new(Live::new(
            "t".into(),
            None,
            vec!["true".into()],
            "whole-process",
            "none",
            Arc::new(EventSink::none()),
        ))
    }

    #[test]
    fn the_end_waits_for_an_answer_being_replied_to_and_not_longer() {
        let l = live();
        // Nothing in flight: no wait.
        let t = Instant::now();
        l.settle(Duration::from_secs(2));
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
        // An answer whose reply goes out 200 ms from now: the end waits for it.
        let (tx, rx) = std::sync::mpsc::channel();
        let l2 = l.clone();
        let replier = std::thread::spawn(move || {
            let _replying = l2.in_flight();
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        rx.recv().unwrap();
        let t = Instant::now();
        l.settle(Duration::from_secs(5));
        assert!(
            t.elapsed() >= Duration::from_millis(150),
            "{:?}",
            t.elapsed()
        );
        replier.join().unwrap();
        // One that never replies holds the end for the limit only.
        let _stuck = l.in_flight();
        let t = Instant::now();
        l.settle(Duration::from_millis(100));
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(100) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
    }
}
