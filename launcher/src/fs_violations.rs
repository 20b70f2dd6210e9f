//! Filesystem violations, as the create guard inside reports them: every write it refused (a
//! persistence surface) and every write outside the writable trees that failed (EROFS, EACCES,
//! EPERM). Each is an `event: filesystem` (path, operation, pid, exe, decision, reason); a
//! refusal is also a `refused` record on `--json-status-fd` and, with `-v`, a line at once. At
//! exit the refusals are counted (without `-v`), and with `-v` the failures are summed up by
//! directory. With prompts, a failure opens (or joins) a prompt that can add its directory to
//! `allowWrite` for the next launch.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use shim::channel::FromShim;

use crate::prompt::filesystem::Violation;
use crate::prompt::Prompts;
use crate::status::StatusSink;

/// Directories named in the exit summary.
const SHOWN: usize = 5;

pub struct FsViolations<'a> {
    status: &'a mut StatusSink,
    verbose: u8,
    prompts: Option<Arc<Prompts>>,
    refused: usize,
    /// Failed writes by directory.
    failed: BTreeMap<PathBuf, u64>,
    failed_total: u64,
}

impl<'a> FsViolations<'a> {
    pub fn new(status: &'a mut StatusSink, verbose: u8, prompts: Option<Arc<Prompts>>) -> Self {
        FsViolations {
            status,
            verbose,
            prompts,
            refused: 0,
            failed: BTreeMap::new(),
            failed_total: 0,
        }
    }

    /// One report of the guard's (other messages are ignored).
    pub fn report(&mut self, msg: FromShim) {
        if let Some(events) = self.status.events() {
            events.feed().count_write();
        }
        match msg {
            FromShim::Refused {
                path,
                op,
                surface,
                pid,
                exe,
            } => self.refused(path, op, surface, pid, exe),
            FromShim::WriteFailed {
                path,
                op,
                errno,
                pid,
                exe,
            } => self.failed(path, op, errno, pid, exe),
            _ => {}
        }
    }

    fn refused(
        &mut self,
        path: String,
        op: String,
        surface: String,
        pid: i32,
        exe: Option<String>,
    ) {
        self.refused += 1;
        if self.verbose > 0 {
            crate::say!("sandbox-launch: refused: {op} {path}: {surface}");
        }
        let reason = format!("{surface}: a persistence surface (the create guard)");
        self.status.emit_split(
            json!({"status": "refused", "path": path, "op": op, "surface": surface}),
            json!({
                "event": "filesystem",
                "path": path,
                "operation": op,
                "pid": pid,
                "exe": exe,
                "decision": "refused",
                "reason": reason,
                "surface": surface,
            }),
        );
    }

    fn failed(&mut self, path: String, op: String, errno: i32, pid: i32, exe: Option<String>) {
        let (name, reason) = explain(errno);
        self.failed_total += 1;
        let dir = Path::new(&path)
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
        let at_most = 1000;
        if self.failed.contains_key(&dir) || self.failed.len() < at_most {
            *self.failed.entry(dir).or_default() += 1;
        }
        self.status.emit_event(json!({
            "event": "filesystem",
            "path": path,
            "operation": op,
            "pid": pid,
            "exe": exe,
            "decision": "failed",
            "errno": name,
            "reason": reason,
        }));
        if let Some(prompts) = &self.prompts {
            prompts.filesystem(Violation {
                path: PathBuf::from(path),
                operation: op,
                pid,
                exe,
                reason: reason.to_string(),
            });
        }
    }

    /// What is said at exit: the refusals counted (without -v, which listed them), the failures
    /// summed up by directory (with -v).
    pub fn finish(self) {
        if self.refused > 0 && self.verbose == 0 {
            crate::say!(
                "sandbox-launch: {} write(s) to paths that would run code outside the sandbox \
                 were refused (-v lists them)",
                self.refused
            );
        }
        if self.verbose > 0 {
            if let Some(line) = summary(self.failed_total, &self.failed) {
                crate::say!("sandbox-launch: {line}");
            }
        }
    }
}

/// The errno's name, and why it happened.
fn explain(errno: i32) -> (&'static str, &'static str) {
    match errno {
        libc::EROFS => (
            "EROFS",
            "read-only in the sandbox: outside the writable trees",
        ),
        libc::EACCES => (
            "EACCES",
            "permission denied: outside the writable trees (Landlock, or the file's own mode)",
        ),
        _ => (
            "EPERM",
            "operation not permitted: outside the writable trees",
        ),
    }
}

/// "4 writes outside the writable trees failed (/usr/lib ×3, /etc): allow with --allow-write …"
fn summary(total: u64, by_dir: &BTreeMap<PathBuf, u64>) -> Option<String> {
    if total == 0 {
        return None;
    }
    let mut dirs: Vec<(&PathBuf, &u64)> = by_dir.iter().collect();
    dirs.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let mut named: Vec<String> = dirs
        .iter()
        .take(SHOWN)
        .map(|(d, n)| {
            if **n > 1 {
                format!("{} ×{n}", d.display())
            } else {
                d.display().to_string()
            }
        })
        .collect();
    if dirs.len() > SHOWN {
        named.push(format!("{} more directories", dirs.len() - SHOWN));
    }
    let flags: Vec<String> = dirs
        .iter()
        .take(SHOWN)
        .map(|(d, _)| format!("--allow-write {}", d.display()))
        .collect();
    let noun = if total == 1 { "write" } else { "writes" };
    Some(format!(
        "{total} {noun} outside the writable trees failed ({}): allow with {}",
        named.join(", "),
        flags.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_summed_up_by_directory_most_first() {
        let mut m = BTreeMap::new();
        m.insert(PathBuf::from("/etc"), 1);
        m.insert(PathBuf::from("/usr/lib"), 3);
        assert_eq!(
            summary(4, &m).unwrap(),
            "4 writes outside the writable trees failed (/usr/lib ×3, /etc): allow with \
             --allow-write /usr/lib --allow-write /etc"
        );
        assert_eq!(summary(0, &BTreeMap::new()), None);
    }
}
