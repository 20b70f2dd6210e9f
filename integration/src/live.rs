//! Helpers of the tests of running sandboxes (control socket, prompts, reloads): a launcher in
//! the background, the control commands, and waiting for what they show.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{command, explain, runtime_dir, Caller};

/// A launcher started in the background.
pub struct Running {
    pub child: Child,
    pub name: String,
}

impl Running {
    /// `whole-process --name NAME OPTS -- sh -c SCRIPT` as `caller` in `work`, with the
    /// harness's runtime directory.
    pub fn start(caller: Caller, work: &Path, name: &str, opts: &[&str], script: &str) -> Running {
        Self::start_with(caller, work, name, opts, script, None)
    }

    pub fn start_with(
        caller: Caller,
        work: &Path,
        name: &str,
        opts: &[&str],
        script: &str,
        xdg: Option<&Path>,
    ) -> Running {
        Self::start_env(
            caller,
            work,
            name,
            opts,
            script,
            &[("XDG_RUNTIME_DIR", xdg)],
        )
    }

    /// With these environment variables set (a `None` value: the harness's own).
    pub fn start_env(
        caller: Caller,
        work: &Path,
        name: &str,
        opts: &[&str],
        script: &str,
        env: &[(&str, Option<&Path>)],
    ) -> Running {
        let mut args = vec!["whole-process", "--name", name];
        args.extend_from_slice(opts);
        args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
        let mut cmd = command(caller, work, &args);
        for (k, v) in env {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sandbox-launch");
        Running {
            child,
            name: name.to_string(),
        }
    }

    /// Wait for the launcher to end (at most `limit`); its output.
    pub fn finish(mut self, limit: Duration) -> Output {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut out = String::new();
                let mut err = String::new();
                self.child
                    .stdout
                    .take()
                    .unwrap()
                    .read_to_string(&mut out)
                    .unwrap();
                self.child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                return Output {
                    status,
                    stdout: out.into_bytes(),
                    stderr: err.into_bytes(),
                };
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{} did not end within {limit:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `sandbox-launch ARGS` (a control command) as `caller`.
pub fn ctl(caller: Caller, work: &Path, args: &[&str]) -> Output {
    command(caller, work, args)
        .output()
        .expect("run sandbox-launch")
}

pub fn ps(caller: Caller, work: &Path) -> Vec<Value> {
    let out = ctl(caller, work, &["ps", "--json"]);
    assert!(out.status.success(), "ps: {}", explain(&out));
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap_or_else(|_| panic!("ps --json: {}", explain(&out)))
        .as_array()
        .unwrap()
        .clone()
}

/// The `ps --json` row of the sandbox named `name`, once it is listed (10 s at most).
pub fn listed(caller: Caller, work: &Path, name: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(row) = ps(caller, work).into_iter().find(|r| r["name"] == name) {
            return row;
        }
        assert!(Instant::now() < deadline, "{name} never showed up in ps");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn wait_for_file(p: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn control_dir(caller: Caller) -> PathBuf {
    runtime_dir(caller).join("sandbox-launch")
}
