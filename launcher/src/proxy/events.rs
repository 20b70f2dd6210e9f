//! `--events FILE|fd:N`: every network decision as one JSON object per line (time, host, port,
//! binary, decision, reason, and the rule in charge).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::FromRawFd;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::decide::{Decision, Verdict};
use super::identify::Program;
use crate::control::feed::Feed;

/// Where events go. Cheap to share; writes are whole lines. Besides the `--events` target, the
/// control socket's feed keeps recent lines for `sandbox-launch events ID` and counts denials.
#[derive(Debug, Default)]
pub struct EventSink {
    out: Option<Mutex<File>>,
    feed: Feed,
}

impl EventSink {
    /// `FILE` (appended to, created if missing) or `fd:N` (an open descriptor above 2).
    pub fn open(target: &str) -> Result<Self> {
        let file = match target.strip_prefix("fd:") {
            Some(n) => {
                let fd: i32 = n
                    .parse()
                    .with_context(|| format!("--events {target}: `{n}` is not a number"))?;
                if fd < 3 {
                    bail!(
                        "--events {target}: use a descriptor above 2 (0-2 belong to the program)"
                    );
                }
                // SAFETY: fcntl(F_GETFD) only checks that the descriptor is open.
                if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
                    bail!("--events {target}: descriptor {fd} is not open");
                }
                // Never let it cross into the sandbox.
                // SAFETY: setting FD_CLOEXEC on an open descriptor.
                unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
                // SAFETY: the caller handed us this descriptor to write to; we own it from here.
                unsafe { File::from_raw_fd(fd) }
            }
            None => OpenOptions::new()
                .create(true)
                .append(true)
                .open(Path::new(target))
                .with_context(|| format!("--events {target}: cannot open for writing"))?,
        };
        Ok(EventSink {
            out: Some(Mutex::new(file)),
            feed: Feed::default(),
        })
    }

    /// Whether every event is recorded (an `--events` target, or a client following them).
    /// Denials and the lifecycle are recorded regardless.
    pub fn is_active(&self) -> bool {
        self.out.is_some() || self.feed.has_followers()
    }

    /// Recent events, followers, and the denial tally (the control socket's view).
    pub fn feed(&self) -> &Feed {
        &self.feed
    }

    /// A sink that drops everything.
    pub fn none() -> Self {
        Self::default()
    }

    pub fn emit(&self, mut value: Value) {
        if let Value::Object(map) = &mut value {
            map.insert("time".into(), Value::String(now_rfc3339()));
        }
        let mut line = value.to_string();
        self.feed.push(&line);
        let Some(out) = &self.out else { return };
        line.push('\n');
        if let Ok(mut f) = out.lock() {
            // A reader that went away must not stop the proxy.
            let _ = f.write_all(line.as_bytes());
        }
    }

    /// One network decision. `protocol` is `connect`, `http` or `socks5`.
    pub fn decision(
        &self,
        protocol: &str,
        d: &Decision,
        binary: Option<&Program>,
        request: Option<(&str, &str)>,
    ) {
        let denied = d.verdict == Verdict::Deny;
        if denied {
            self.feed.count_denial(&d.host.to_string());
        }
        if !denied && !self.is_active() {
            return;
        }
        let mut v = json!({
            "event": "network",
            "protocol": protocol,
            "host": d.host.to_string(),
            "port": (d.port != 0).then_some(d.port),
            "binary": binary.map(|b| b.exe.display().to_string()),
            "ancestors": binary.map(|b| b.ancestors.iter().map(|a| a.display().to_string()).collect::<Vec<_>>()),
            "decision": d.verdict,
            "reason": d.reason,
            "rule": d.rule,
        });
        if let Some((method, path)) = request {
            v["method"] = json!(method);
            v["path"] = json!(path);
        }
        self.emit(v);
    }
}

impl EventSink {
    /// An allowed connection whose server could not be reached (no address, refused, timed
    /// out): the decision as it was made, then a `network_error` saying what failed. Not a denial.
    pub fn dial_error(&self, protocol: &str, d: &Decision, binary: Option<&Program>, error: &str) {
        self.decision(protocol, d, binary, None);
        if !self.is_active() {
            return;
        }
        self.emit(json!({
            "event": "network_error",
            "protocol": protocol,
            "host": d.host.to_string(),
            "port": (d.port != 0).then_some(d.port),
            "binary": binary.map(|b| b.exe.display().to_string()),
            "error": error,
        }));
    }

    /// A client whose request could not be read as one (a malformed SOCKS5 name, say).
    pub fn malformed(&self, protocol: &str, what: &str, binary: Option<&Program>) {
        if !self.is_active() {
            return;
        }
        self.emit(json!({
            "event": "network",
            "protocol": protocol,
            "host": null,
            "port": null,
            "binary": binary.map(|b| b.exe.display().to_string()),
            "decision": "deny",
            "reason": what,
            "rule": null,
        }));
    }
}

/// UTC now as `2024-05-01T12:34:56.789Z`, without a date crate.
pub fn now_rfc3339() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format_utc(now.as_secs() as i64, now.subsec_millis())
}

fn format_utc(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_is_rfc3339_utc() {
        assert_eq!(format_utc(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(format_utc(1_700_000_000, 123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn events_are_json_lines_in_a_file() {
        let path = std::env::temp_dir().join(format!("sl-events-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let sink = EventSink::open(path.to_str().unwrap()).unwrap();
        sink.emit(json!({"event": "a"}));
        sink.emit(json!({"event": "b"}));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["event"], "b");
        assert!(lines[0]["time"].as_str().unwrap().ends_with('Z'));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn low_descriptors_are_refused() {
        assert!(EventSink::open("fd:1").is_err());
        assert!(EventSink::open("fd:x").is_err());
    }
}
