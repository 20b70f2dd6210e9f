//! The program's environment: only the allowlist and what was asked for cross into the sandbox.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use integration::{command, explain, is_root, sh, stderr, stdout, TempDir, CALLERS};

const SECRET: &str = "sl-secret-not-listed-4711";
const PASSED: &str = "sl-passed-value-0815";

/// Every readable `/proc/*/environ` inside, one variable a line, while a second process runs.
const ALL_ENVIRONS: &str = r#"sleep 30 &
for f in /proc/[0-9]*/environ; do tr '\0' '\n' 2>/dev/null < "$f"; done > /tmp/all
echo "secret: $(grep -c sl-secret-not-listed /tmp/all)"
echo "passed: $(grep -c "^PASSED_ONE=sl-passed-value" /tmp/all)"
echo "set: $(grep -c '^SET_ONE=from-the-flag$' /tmp/all)"
echo "file: $(grep -c '^FROM_FILE=from-the-settings$' /tmp/all)"
echo "marker: $(grep -c '^SANDBOX_LAUNCH=1$' /tmp/all)"
echo ready
read line
kill $!
"#;

#[test]
fn an_unlisted_variable_is_absent_from_every_environ_inside_and_a_passed_one_present() {
    for caller in CALLERS {
        let work = TempDir::new("env");
        let settings = work.write(
            "settings.json",
            r#"{"sandbox": {"environment": {"set": {"FROM_FILE": "from-the-settings"}}}}"#,
        );
        let mut child = command(
            caller,
            &work.path,
            &[
                "whole-process",
                "--network",
                "none",
                "--settings",
                settings.to_str().unwrap(),
                "--env",
                "PASSED_ONE",
                "--env",
                "SET_ONE=from-the-flag",
                "--",
                "/bin/sh",
                "-c",
                ALL_ENVIRONS,
            ],
        )
        .env("SECRET_UNLISTED", SECRET)
        .env("PASSED_ONE", PASSED)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            if line == "ready" {
                break;
            }
            seen.push(line);
        }
        // Judged on the host too: init (the launcher's clone) inherited the launcher's
        // environment and wiped it; its /proc/<pid>/environ holds nothing of it.
        if is_root() {
            let launcher = child.id();
            let children =
                std::fs::read_to_string(format!("/proc/{launcher}/task/{launcher}/children"))
                    .unwrap();
            let init: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
            let environ = std::fs::read(format!("/proc/{init}/environ")).unwrap();
            let text = String::from_utf8_lossy(&environ);
            assert!(
                !text.contains(SECRET) && !text.contains(PASSED),
                "{caller:?}: init's environ on the host: {text:?}"
            );
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        let report = seen.join("\n");
        // The shell has them (and its `sleep`, unless caught in its exec).
        let count = |key: &str| -> u32 {
            seen.iter()
                .find_map(|l| l.strip_prefix(&format!("{key}: ")))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{caller:?}: no {key:?} in\n{report}\n{}", explain(&out)))
        };
        assert_eq!(count("secret"), 0, "{caller:?}: {report}");
        for key in ["passed", "set", "file", "marker"] {
            assert!(count(key) >= 1, "{caller:?}: {key}: {report}");
        }
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(!stderr(&out).contains("warning"), "{}", explain(&out));
    }
}

#[test]
fn env_all_hands_over_everything_with_a_warning() {
    for caller in CALLERS {
        let work = TempDir::new("env-all");
        let out = command(
            caller,
            &work.path,
            &[
                "whole-process",
                "--network",
                "none",
                "--env-all",
                "--",
                "/bin/sh",
                "-c",
                "echo \"got: $SECRET_UNLISTED\"",
            ],
        )
        .env("SECRET_UNLISTED", SECRET)
        .output()
        .unwrap();
        assert!(
            stdout(&out).contains(&format!("got: {SECRET}")),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            stderr(&out).contains("warning: the program gets the launcher's whole environment"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn the_default_environment_keeps_path_home_and_the_locale() {
    for caller in CALLERS {
        let work = TempDir::new("env-default");
        let mut cmd = command(
            caller,
            &work.path,
            &[
                "whole-process",
                "--network",
                "none",
                "--",
                "/bin/sh",
                "-c",
                "echo \"path=$PATH lc=$LC_TIME term=$TERM other=${SECRET_UNLISTED:-unset}\"",
            ],
        );
        cmd.env("PATH", "/usr/bin:/bin")
            .env("LC_TIME", "C.UTF-8")
            .env("TERM", "dumb")
            .env("SECRET_UNLISTED", SECRET);
        let out = cmd.output().unwrap();
        assert!(
            stdout(&out).contains("path=/usr/bin:/bin lc=C.UTF-8 term=dumb other=unset"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn check_names_set_variables_but_never_shows_their_values() {
    let work = TempDir::new("env-check");
    let out = command(
        integration::Caller::Invoker,
        &work.path,
        &[
            "check",
            "--env",
            "TOKEN_X=sl-do-not-print",
            "--env",
            "CARGO_HOME",
        ],
    )
    .output()
    .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{}", explain(&out));
    assert!(
        text.contains("set TOKEN_X=(value not shown)  [command line]")
            && text.contains("pass CARGO_HOME  [command line]")
            && !text.contains("sl-do-not-print"),
        "{}",
        explain(&out)
    );
}

#[test]
fn a_bad_variable_name_is_a_usage_error() {
    let work = TempDir::new("env-bad");
    let out = sh(
        integration::Caller::Invoker,
        &work.path,
        &["--env", "=oops"],
        "true",
    );
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    assert!(
        stderr(&out).contains("not a variable name"),
        "{}",
        explain(&out)
    );
}
