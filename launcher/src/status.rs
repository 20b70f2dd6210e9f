//! `--json-status-fd N`: one JSON object per line about the sandbox's life — verified (with the
//! facts checked from inside), running, exited, or failed (with the step and the reason). The
//! same lines go to the `--events` stream, as `{"event": <status>, "time": …, …}`.

use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::sync::Arc;

use anyhow::{bail, Result};
use serde_json::Value;

use crate::proxy::events::EventSink;

#[derive(Default)]
pub struct StatusSink {
    out: Option<File>,
    events: Option<Arc<EventSink>>,
}

impl StatusSink {
    pub fn from_fd(fd: Option<i32>) -> Result<Self> {
        let Some(fd) = fd else {
            return Ok(Self::default());
        };
        if fd < 3 {
            bail!("--json-status-fd {fd}: use a descriptor above 2 (0-2 belong to the program)");
        }
        // SAFETY: fcntl(F_GETFD) only checks that the descriptor is open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            bail!("--json-status-fd {fd}: descriptor {fd} is not open");
        }
        // Never let it cross into the sandbox.
        // SAFETY: setting FD_CLOEXEC on an open descriptor.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        // SAFETY: the caller handed us this descriptor to write to; we own it from here.
        Ok(Self {
            out: Some(unsafe { File::from_raw_fd(fd) }),
            events: None,
        })
    }

    /// Also write every line to the events stream (and so to the control socket's feed).
    pub fn with_events(mut self, events: Arc<EventSink>) -> Self {
        self.events = Some(events);
        self
    }

    /// `status` to `--json-status-fd`, and `event` (not `status`) to the events stream.
    pub fn emit_split(&mut self, status: Value, event: Value) {
        self.emit_event(event);
        self.write_status(&status);
    }

    /// The events stream, if there is one.
    pub fn events(&self) -> Option<&Arc<EventSink>> {
        self.events.as_ref()
    }

    /// To the events stream only.
    pub fn emit_event(&mut self, event: Value) {
        if let Some(events) = &self.events {
            events.emit(event);
        }
    }

    fn write_status(&mut self, value: &Value) {
        if let Some(out) = &mut self.out {
            let mut line = value.to_string();
            line.push('\n');
            // A reader that went away must not stop the sandbox.
            let _ = out.write_all(line.as_bytes());
        }
    }

    /// Say `text` to the user as a warning: one line on stderr and a `warning` status.
    pub fn warn(&mut self, text: &str) {
        crate::say!("sandbox-launch: warning: {text}");
        self.emit(serde_json::json!({"status": "warning", "warning": text}));
    }

    pub fn emit(&mut self, value: Value) {
        if let (Some(events), Value::Object(map)) = (&self.events, &value) {
            let mut event = map.clone();
            if let Some(status) = event.remove("status") {
                event.insert("event".into(), status);
            }
            events.emit(Value::Object(event));
        }
        if let Some(out) = &mut self.out {
            let mut line = value.to_string();
            line.push('\n');
            // A reader that went away must not stop the sandbox.
            let _ = out.write_all(line.as_bytes());
        }
    }
}
