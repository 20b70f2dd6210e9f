//! Prompts for filesystem violations: a write outside the writable trees that failed (a
//! read-only mount, Landlock, the file's mode). Nothing waits on them — the write has failed
//! already, and Landlock cannot widen a running sandbox — so they only offer to change the
//! next launch: *allow always* adds the path's directory to `allowWrite` in the user's
//! settings, *deny* leaves everything as it is. One prompt per directory while it is open;
//! writes in that directory meanwhile join it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Value};

use super::offer::Answer;
use super::{persist, Prompts, State};
use crate::policy::model::{Source, Sourced};

/// At most this many filesystem prompts are open at once; further violations are events only
/// (a program that probes many read-only directories must not bury the network prompts).
const MAX_OPEN: usize = 32;

/// A write that failed, as the create guard reported it.
pub struct Violation {
    pub path: PathBuf,
    pub operation: String,
    /// As the sandbox numbers it.
    pub pid: i32,
    pub exe: Option<String>,
    pub reason: String,
}

pub(super) struct FsPending {
    pub(super) id: u64,
    dir: PathBuf,
    first: Violation,
    writes: usize,
    answers: Vec<Answer>,
    organization: bool,
    denied_by: Vec<String>,
    pub(super) deadline: Instant,
}

impl Prompts {
    /// Open a prompt for the directory of `v`, or join the open one.
    pub fn filesystem(&self, v: Violation) {
        let dir = v
            .path
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
        let shown = {
            let mut st = self.lock();
            self.sweep(&mut st);
            if let Some(p) = st.fs.iter_mut().find(|p| p.dir == dir) {
                p.writes += 1;
                let shown = self.describe_fs(p);
                drop(st);
                let _ = self.updates.send(json!({"prompt": shown}));
                return;
            }
            if st.fs.len() >= MAX_OPEN {
                return;
            }
            let denies: Vec<&Sourced<PathBuf>> = self
                .deny_write
                .iter()
                .filter(|d| dir.starts_with(&d.value) || v.path.starts_with(&d.value))
                .collect();
            let organization = denies.iter().any(|d| matches!(d.source, Source::Org(_)));
            let answers = if denies.is_empty() {
                vec![Answer::AllowAlways, Answer::Deny]
            } else {
                vec![Answer::Deny]
            };
            let denied_by = denies
                .iter()
                .map(|d| format!("denyWrite `{}` ({})", d.value.display(), origin(&d.source)))
                .collect();
            st.next_id += 1;
            let p = FsPending {
                id: st.next_id,
                dir,
                first: v,
                writes: 1,
                answers,
                organization,
                denied_by,
                deadline: Instant::now() + self.timeout,
            };
            let shown = self.describe_fs(&p);
            st.fs.push(p);
            shown
        };
        self.events
            .emit(json!({"event": "prompt", "prompt": shown}));
        let _ = self.updates.send(json!({"prompt": shown}));
    }

    /// Close the filesystem prompts whose time is up (nothing changes).
    pub(super) fn sweep_fs(&self, st: &mut State) {
        let now = Instant::now();
        let (gone, kept): (Vec<FsPending>, Vec<FsPending>) = std::mem::take(&mut st.fs)
            .into_iter()
            .partition(|p| p.deadline <= now);
        st.fs = kept;
        for p in gone {
            self.close_fs(&p, "timeout", "the timeout");
        }
    }

    /// Answer filesystem prompt `id`.
    pub(super) fn answer_fs(&self, id: u64, answer: Answer, by: &str) -> Result<Value, String> {
        let p = {
            let mut st = self.lock();
            let at =
                st.fs.iter().position(|p| p.id == id).ok_or_else(|| {
                    format!("prompt #{id} is not open (answered, or its time is up)")
                })?;
            if !st.fs[at].answers.contains(&answer) {
                let p = &st.fs[at];
                return Err(if p.organization {
                    format!(
                        "prompt #{id}: {} is kept read-only by organization policy ({}); {} is refused",
                        p.dir.display(),
                        p.denied_by.join(", "),
                        answer.name()
                    )
                } else {
                    format!(
                        "prompt #{id} does not offer {} (it offers {})",
                        answer.name(),
                        p.answers
                            .iter()
                            .map(|a| a.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                });
            }
            st.fs.remove(at)
        };
        let did = match answer {
            Answer::AllowAlways => {
                let dir = p.dir.display().to_string();
                if let Err(e) =
                    persist::allow_write(&self.user_settings, &dir, &self.cwd, &self.home)
                {
                    // Not done: the prompt stays open for another answer.
                    let e = format!("{e:#}");
                    self.lock().fs.push(p);
                    return Err(e);
                }
                format!(
                    "added `{dir}` to allowWrite in {}: writable from the next launch on; this sandbox is unchanged",
                    self.user_settings.display()
                )
            }
            _ => String::new(),
        };
        self.close_fs(&p, answer.name(), by);
        Ok(json!({
            "prompt": id,
            "path": p.first.path.display().to_string(),
            "directory": p.dir.display().to_string(),
            "answer": answer.name(),
            "requests": p.writes,
            "did": did,
        }))
    }

    fn close_fs(&self, p: &FsPending, outcome: &str, by: &str) {
        let _ = self
            .updates
            .send(json!({"closed": {"id": p.id, "outcome": outcome}}));
        self.events.emit(json!({
            "event": "prompt_closed",
            "id": p.id,
            "kind": "filesystem",
            "directory": p.dir.display().to_string(),
            "outcome": outcome,
            "by": by,
            "requests": p.writes,
        }));
    }

    /// A filesystem prompt as clients see it.
    pub(super) fn describe_fs(&self, p: &FsPending) -> Value {
        let dir = p.dir.display();
        let file = self.user_settings.display();
        let offers: Vec<Value> = p
            .answers
            .iter()
            .map(|a| {
                let does = match a {
                    Answer::AllowAlways => format!(
                        "add `{dir}` to allowWrite in {file}: writable in every sandbox from the next launch on; not in this one (Landlock cannot widen a running sandbox), where the write stays refused"
                    ),
                    _ if p.organization => format!(
                        "{dir} is kept read-only by organization policy; nothing can make it writable"
                    ),
                    _ if !p.denied_by.is_empty() => format!(
                        "change nothing: {dir} is kept read-only by {}, which beats allowWrite",
                        p.denied_by.join(", ")
                    ),
                    _ => "change nothing: the write stays refused, and so will the next launch's".to_string(),
                };
                json!({"answer": a.name(), "does": does})
            })
            .collect();
        json!({
            "id": p.id,
            "kind": "filesystem",
            "path": p.first.path.display().to_string(),
            "directory": dir.to_string(),
            "operation": p.first.operation,
            "program": {"exe": p.first.exe, "pid": p.first.pid},
            "waiting": 0,
            "requests": p.writes,
            "reason": p.first.reason,
            "organization": p.organization,
            "denied_by": p.denied_by,
            "expires_in": p.deadline.saturating_duration_since(Instant::now()).as_secs_f64(),
            "offers": offers,
        })
    }
}

fn origin(source: &Source) -> String {
    match source {
        Source::Org(p) => format!("{}, organization policy", p.display()),
        Source::Project(p) | Source::User(p) | Source::PolicyFile(p) | Source::SettingsFile(p) => {
            p.display().to_string()
        }
        Source::CommandLine => "the command line".into(),
        Source::Control => "this sandbox".into(),
        Source::Default => "the built-in defaults".into(),
    }
}
