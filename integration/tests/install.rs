//! The installed binary and what it says when a command line cannot work: the static release
//! build (scripts/build.sh, and the same from `cargo install --path launcher`) resolves users
//! without NSS, and the errors a new user meets name what to do instead of a bare errno.

use std::path::Path;
use std::process::{Command, Stdio};

use integration::*;

/// An OpenShell policy naming `user`/`group`, written into `work`.
fn policy_with_identity(work: &TempDir, user: &str, group: &str) -> String {
    let p = work.write(
        "policy.yaml",
        &format!("version: 1\nprocess:\n  run_as_user: \"{user}\"\n  run_as_group: \"{group}\"\n"),
    );
    p.to_str().unwrap().to_string()
}

fn static_launch(cwd: &Path, args: &[&str]) -> std::process::Output {
    launch_with(static_launcher(), cwd, args)
}

fn launch_with(bin: &Path, cwd: &Path, args: &[&str]) -> std::process::Output {
    Command::new(bin)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("run the static sandbox-launch")
}

#[test]
fn the_static_builds_name_an_unknown_user_instead_of_crashing() {
    for bin in [static_launcher(), installed_launcher()] {
        unknown_user_is_named(bin);
    }
}

fn unknown_user_is_named(bin: &Path) {
    let work = TempDir::new_in("/var/tmp", "static-user");
    let policy = policy_with_identity(&work, "no-such-agent-user", "no-such-agent-group");
    let out = launch_with(
        bin,
        &work.path,
        &[
            "whole-process",
            "--policy",
            &policy,
            "--network",
            "none",
            "--",
            "/bin/true",
        ],
    );
    if is_root() {
        // Looked up only when started as root (it is whom the sandbox drops to).
        assert_eq!(out.status.code(), Some(111), "{}", explain(&out));
        let err = stderr(&out);
        assert!(
            err.contains("no-such-agent-user") && err.contains("numeric uid"),
            "{}",
            explain(&out)
        );
    } else {
        assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    }
}

#[test]
fn the_static_build_runs_as_numeric_ids_that_no_file_names() {
    if !is_root() {
        return; // run_as_user applies only when started as root
    }
    let work = TempDir::new_in("/var/tmp", "static-numeric");
    let policy = policy_with_identity(&work, "4321", "4322");
    std::os::unix::fs::chown(&work.path, Some(4321), Some(4322)).unwrap();
    let out = static_launch(
        &work.path,
        &[
            "whole-process",
            "--policy",
            &policy,
            "--network",
            "none",
            "--",
            "/bin/sh",
            "-c",
            "id -u; id -g; echo made > made",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert_eq!(stdout(&out), "4321\n4322\n", "{}", explain(&out));
    let meta = std::fs::metadata(work.join("made")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.gid()), (4321, 4322));
}

#[test]
fn a_misspelt_option_is_an_unknown_option_not_a_program() {
    let work = TempDir::new("polcy");
    let out = command(
        Caller::Invoker,
        &work.path,
        &["whole-process", "--polcy", "x", "--", "id"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    let err = stderr(&out);
    assert!(
        err.contains("unexpected argument '--polcy'") && err.contains("--policy"),
        "{}",
        explain(&out)
    );
    assert!(!err.contains("not found in PATH"), "{}", explain(&out));
    // The twin: options after the program are the program's.
    let out = sh(
        Caller::Invoker,
        &work.path,
        &["--network", "none"],
        "echo ran",
    );
    assert_eq!(stdout(&out), "ran\n", "{}", explain(&out));
}

#[test]
fn deny_read_of_the_hosts_tmp_is_explained_and_one_in_the_sandbox_is_masked() {
    for caller in CALLERS {
        // The host's /tmp is not in the sandbox (it has a private one): nothing to deny there.
        let host_tmp = TempDir::new("host-tmp-secret");
        let secret = host_tmp.write("secret", "s3cr3t");
        let work = TempDir::new_in("/var/tmp", "deny-host-tmp");
        let out = sh(
            caller,
            &work.path,
            &["--network", "none", "--deny-read", secret.to_str().unwrap()],
            &format!("cat {} 2>&1; echo ran", secret.display()),
        );
        assert_eq!(out.status.code(), Some(0), "{caller:?}: {}", explain(&out));
        assert!(
            stdout(&out).contains("No such file"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            stderr(&out).contains("nothing to deny") && stderr(&out).contains("private /tmp"),
            "{caller:?}: {}",
            explain(&out)
        );
        // The twin: the same path in a working directory under /tmp is in the sandbox, masked.
        let out = sh(
            caller,
            &host_tmp.path,
            &["--network", "none", "--deny-read", secret.to_str().unwrap()],
            "cat secret; echo rc=$?",
        );
        assert!(
            stdout(&out).contains("rc=1"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            !stdout(&out).contains("s3cr3t"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            !stderr(&out).contains("nothing to deny"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}
