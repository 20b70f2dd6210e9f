//! `sandbox-launch doctor`: can this host run a sandbox? Each kernel feature and each step of the
//! launch is probed for real (in forked children, so nothing here changes the caller), and each
//! missing one comes with a fix; then the launch itself is made, with the same options as
//! `whole-process` would be given, up to the point where the program would start. `doctor` says
//! "can run" only when that launch got there.

mod child;
mod kernel;
mod launch;
mod namespaces;

use serde::Serialize;

use crate::cli::SandboxArgs;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// Missing, but whole-process mode still runs.
    Warn,
    /// Missing, and whole-process mode cannot run with its defaults.
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Whether `whole-process` can run here with its defaults.
    pub ok: bool,
    pub checks: Vec<Check>,
}

fn check(
    name: &'static str,
    status: Status,
    detail: impl Into<String>,
    fix: Option<&str>,
) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        fix: fix.map(str::to_string),
    }
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Probe every feature, then launch for real.
pub fn probe(args: &SandboxArgs) -> Report {
    let mut checks = vec![kernel::kernel()];
    checks.extend(namespaces::user_namespaces());
    checks.push(namespaces::namespaces_for_sandbox());
    checks.push(namespaces::hostname());
    checks.push(namespaces::filesystem());
    checks.push(kernel::landlock());
    checks.extend(kernel::seccomp());
    checks.push(namespaces::egress());
    checks.push(namespaces::overlayfs());
    checks.push(kernel::cgroup2());
    checks.extend(crate::limits::doctor::checks());
    checks.push(etc_shells());
    checks.push(launch::launch(args));
    let ok = checks.iter().all(|c| c.status != Status::Fail);
    Report { ok, checks }
}

/// Whether `/etc/shells` lists this program, which lets `su -s`, `-m` and `-p` step around a
/// login shell's sandbox (see `login::shells`).
fn etc_shells() -> Check {
    use crate::login::shells;
    match shells::listing_this_program() {
        Some(line) => check(
            "/etc/shells",
            Status::Warn,
            shells::warning(&line),
            Some(&format!(
                "remove {} from {}",
                line.display(),
                shells::SHELLS
            )),
        ),
        None => check(
            "/etc/shells",
            Status::Ok,
            format!("{} does not list this program", shells::SHELLS),
            None,
        ),
    }
}

/// Print the report; the exit code is 0 only when whole-process mode can run here.
pub fn run(json: bool, args: &SandboxArgs) -> i32 {
    let report = probe(args);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        );
    } else {
        for c in &report.checks {
            let tag = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            println!("{tag}  {:<22} {}", c.name, c.detail);
            if let Some(fix) = &c.fix {
                println!("      {:<22} fix: {fix}", "");
            }
        }
        println!();
        if report.ok {
            println!("whole-process mode can run here.");
        } else {
            println!("whole-process mode cannot run here: fix the FAIL lines above.");
        }
    }
    if report.ok {
        0
    } else {
        1
    }
}
