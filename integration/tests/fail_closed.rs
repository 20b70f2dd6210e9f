//! Failing closed: each setup step is made to fail for real — the launcher runs under an outer
//! seccomp filter (`fault-inject`, a test-only binary) that makes one kernel interface answer as a
//! kernel without it, or a locked-down container, would — and the target must never run: the
//! marker it would write does not exist, the exit code names the step, one line says why.
//!
//! Each failure has its twin: the same launch without the fault writes the marker.

use std::path::Path;
use std::process::{Command, Output};

use integration::*;

const TARGET: &str = "echo ran > marker";

/// Launch `sh -c TARGET` under `fault-inject FAULTS -- sandbox-launch whole-process OPTS`.
fn launch_under(caller: Caller, work: &Path, faults: &[&str], opts: &[&str]) -> Output {
    let launcher = launcher().to_str().unwrap().to_string();
    let mut args: Vec<&str> = faults.to_vec();
    args.extend_from_slice(&["--", &launcher, "whole-process"]);
    args.extend_from_slice(opts);
    args.extend_from_slice(&["--", "/bin/sh", "-c", TARGET]);
    command_with(fault_inject(), caller, work, &args)
        .output()
        .expect("run fault-inject")
}

/// The launch failed at the step with `code`, said `why` in one line, and the target never ran.
fn assert_refused(caller: Caller, work: &TempDir, out: &Output, code: i32, why: &[&str]) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{caller:?}: {}",
        explain(out)
    );
    assert!(
        !work.join("marker").exists(),
        "{caller:?}: the target ran although setup failed: {}",
        explain(out)
    );
    let err = stderr(out);
    let first = err.lines().next().unwrap_or_default();
    for w in why {
        assert!(
            first.to_lowercase().contains(&w.to_lowercase()),
            "{caller:?}: expected {w:?} in the first line of stderr: {}",
            explain(out)
        );
    }
}

/// The twin: the same launch without the fault runs the target.
fn assert_runs(caller: Caller, work: &TempDir, opts: &[&str]) {
    let out = launch_under(caller, &work.path, &[], opts);
    assert_eq!(out.status.code(), Some(0), "{caller:?}: {}", explain(&out));
    assert!(
        work.join("marker").exists(),
        "{caller:?}: {}",
        explain(&out)
    );
    std::fs::remove_file(work.join("marker")).unwrap();
}

#[test]
fn a_kernel_without_landlock_is_refused() {
    for caller in CALLERS {
        let work = TempDir::new("nolandlock");
        assert_runs(caller, &work, &[]);
        let out = launch_under(
            caller,
            &work.path,
            &["--errno", "landlock_create_ruleset=ENOSYS"],
            &[],
        );
        assert_refused(caller, &work, &out, 116, &["landlock"]);
        assert!(stderr(&out).contains("doctor") || stderr(&out).contains("best_effort"));
    }
}

#[test]
fn best_effort_landlock_starts_without_it_and_says_so() {
    for caller in CALLERS {
        let work = TempDir::new("besteffort");
        let policy = work.write(
            "policy.yaml",
            "version: 1\nlandlock:\n  compatibility: best_effort\n",
        );
        let policy = policy.to_str().unwrap();
        let out = launch_under(
            caller,
            &work.path,
            &["--errno", "landlock_create_ruleset=ENOSYS"],
            &["--policy", policy],
        );
        assert_eq!(out.status.code(), Some(0), "{caller:?}: {}", explain(&out));
        assert!(
            work.join("marker").exists(),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            stderr(&out).to_lowercase().contains("landlock"),
            "{caller:?}: the downgrade must be reported: {}",
            explain(&out)
        );
        std::fs::remove_file(work.join("marker")).unwrap();
    }
}

#[test]
fn a_kernel_that_claims_landlock_but_does_not_enforce_it_is_caught_by_verification() {
    for caller in CALLERS {
        let work = TempDir::new("lyinglandlock");
        // landlock_restrict_self "succeeds" without doing anything.
        let out = launch_under(
            caller,
            &work.path,
            &["--errno", "landlock_restrict_self=0"],
            &[],
        );
        assert_refused(caller, &work, &out, 118, &["verify", "landlock"]);
    }
}

#[test]
fn a_host_root_left_mounted_is_caught_by_verification() {
    for caller in CALLERS {
        let work = TempDir::new("oldroot");
        // The detach of the old root after pivot_root "succeeds" without doing anything: the
        // host's root stays stacked on the sandbox's `/`.
        let out = launch_under(caller, &work.path, &["--errno", "umount2=0"], &[]);
        assert_refused(caller, &work, &out, 118, &["verify", "host's root"]);
        assert_runs(caller, &work, &[]);
    }
}

#[test]
fn a_container_that_forbids_user_namespaces_is_refused_unless_root_can_do_without() {
    for caller in CALLERS {
        let work = TempDir::new("nouserns");
        let out = launch_under(
            caller,
            &work.path,
            &[
                "--deny-clone-flags",
                "0x10000000=EPERM",
                "--errno",
                "clone3=ENOSYS",
            ],
            &[],
        );
        if caller == Caller::Invoker && is_root() {
            // Real root with CAP_SYS_ADMIN makes the namespaces without one and says so
            // (root_start.rs checks every layer and the refusal without CAP_SYS_ADMIN).
            assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
            assert!(work.join("marker").exists(), "{}", explain(&out));
            assert!(
                stderr(&out).contains("no user namespace can be created here"),
                "{}",
                explain(&out)
            );
            continue;
        }
        assert_refused(caller, &work, &out, 112, &["namespace"]);
        assert!(stderr(&out).contains("doctor"), "{}", explain(&out));
    }
}

#[test]
fn a_program_process_that_cannot_be_cloned_is_refused() {
    // The program's process is a clone sharing init's memory (CLONE_VM), the first such clone
    // of the launch here (the guard's thread comes after it; no id mapping is needed in a test
    // directory). clone3 answers ENOSYS so that libc falls back to clone.
    for caller in CALLERS {
        let work = TempDir::new("noclonevm");
        assert_runs(caller, &work, &[]);
        let out = launch_under(
            caller,
            &work.path,
            &[
                "--deny-clone-flags",
                "0x100=EAGAIN",
                "--errno",
                "clone3=ENOSYS",
            ],
            &[],
        );
        assert_refused(caller, &work, &out, 127, &["program's process", "clone"]);
        assert!(stderr(&out).contains("pids"), "{}", explain(&out));
    }
}

#[test]
fn a_failing_id_mapping_is_refused() {
    // Unprivileged, the cloned child writes its own uid/gid maps (open with O_WRONLY|O_CLOEXEC
    // exactly, which nothing else in the launch uses); make those opens fail.
    let caller = Caller::Unprivileged;
    let work = TempDir::new("nomaps");
    let flags = (libc::O_WRONLY | libc::O_CLOEXEC).to_string();
    let fault = format!("openat:{flags}=EACCES");
    let out = launch_under(caller, &work.path, &["--errno-if-arg2", &fault], &[]);
    assert_refused(caller, &work, &out, 112, &["namespace"]);
    assert_runs(caller, &work, &[]);
    // doctor maps ids the same way, so it sees the same failure (and passes without it).
    let sick = doctor(caller, &work.path, &["--errno-if-arg2", &fault]);
    assert_eq!(doctor_check(&sick, "user namespaces")["status"], "fail");
    assert_eq!(sick.status.code(), Some(1), "{}", explain(&sick));
    let well = doctor(caller, &work.path, &[]);
    assert_eq!(doctor_check(&well, "user namespaces")["status"], "ok");
}

#[test]
fn a_failing_mount_is_refused() {
    for caller in CALLERS {
        let work = TempDir::new("nomount");
        let out = launch_under(caller, &work.path, &["--errno", "mount=EPERM"], &[]);
        assert_refused(caller, &work, &out, 113, &["filesystem"]);
        let out = launch_under(caller, &work.path, &["--errno", "pivot_root=EINVAL"], &[]);
        assert_refused(caller, &work, &out, 113, &["filesystem"]);
    }
}

#[test]
fn a_failing_network_setup_is_refused() {
    for caller in CALLERS {
        let work = TempDir::new("nonet");
        let out = launch_under(caller, &work.path, &["--errno", "ioctl=EPERM"], &[]);
        assert_refused(caller, &work, &out, 114, &["network"]);
    }
}

/// The network namespace is made by init's network thread (unshare), not in the clone: a
/// refused one (here: the limit of network namespaces reached) stops the launch at the
/// namespaces' step, with the limit to raise, in both network modes that have one.
#[test]
fn a_network_namespace_that_cannot_be_made_is_refused() {
    for caller in CALLERS {
        let work = TempDir::new("nonetns");
        for mode in ["none", "restricted"] {
            let opts = ["--network", mode];
            let out = launch_under(
                caller,
                &work.path,
                &["--deny-clone-flags", "0x40000000=ENOSPC"],
                &opts,
            );
            assert_refused(caller, &work, &out, 112, &["network namespace"]);
            assert!(
                stderr(&out).contains("user.max_net_namespaces"),
                "{caller:?} {mode}: {}",
                explain(&out)
            );
            assert_runs(caller, &work, &opts);
        }
    }
}

/// The persistence protections are planned while the sandbox sets up its network and sent to
/// it; when they cannot be sent (the launcher's send on the sync socket fails), nothing is
/// mounted and the program never runs.
#[test]
fn persistence_protections_that_never_arrive_stop_the_launch() {
    // sendmsg (46) with MSG_NOSIGNAL alone: the blocking sends on the sync socket (the
    // launcher's plan, and the shim's report of its failure, which then ends with its exit
    // code instead). Without a network there is nothing else to send before the mounts.
    let fault = &["--errno-if-arg2", "46:16384=EIO"][..];
    for caller in CALLERS {
        let work = TempDir::new("nopersist");
        assert_runs(caller, &work, &["--network", "none"]);
        let out = launch_under(caller, &work.path, fault, &["--network", "none"]);
        assert_refused(caller, &work, &out, 113, &["persistence protections"]);
    }
}

#[test]
fn a_failing_privilege_drop_is_refused() {
    for caller in CALLERS {
        let work = TempDir::new("nodrop");
        let out = launch_under(caller, &work.path, &["--errno", "capset=EPERM"], &[]);
        assert_refused(caller, &work, &out, 115, &["privileges"]);
    }
}

#[test]
fn a_failing_seccomp_install_is_refused() {
    for caller in CALLERS {
        let work = TempDir::new("noseccomp");
        let out = launch_under(caller, &work.path, &["--errno", "seccomp=EINVAL"], &[]);
        assert_refused(caller, &work, &out, 117, &["seccomp"]);
    }
}

#[test]
fn an_invalid_policy_is_refused() {
    for caller in CALLERS {
        let work = TempDir::new("badpolicy");
        let policy = work.write(
            "policy.yaml",
            "version: 1\nlandlock:\n  compatibility: whatever\n",
        );
        let out = launch_under(
            caller,
            &work.path,
            &[],
            &["--policy", policy.to_str().unwrap()],
        );
        assert_refused(caller, &work, &out, 111, &["policy.yaml", "compatibility"]);
    }
}

#[test]
fn doctor_says_whether_the_create_guard_waits_out_signals() {
    for caller in CALLERS {
        let work = TempDir::new("doctor-guard");
        let here = doctor(caller, &work.path, &[]);
        let check = doctor_check(&here, "create guard waits");
        assert_eq!(check["status"], "ok", "{caller:?}: {}", explain(&here));
        // A kernel before 5.19, simulated: a warning, and whole-process still runs.
        let flags =
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
        let fault = format!("seccomp:{flags}=EINVAL");
        let old = doctor(caller, &work.path, &["--errno-if-arg1", &fault]);
        let check = doctor_check(&old, "create guard waits");
        assert_eq!(check["status"], "warn", "{caller:?}: {}", explain(&old));
        assert!(check["detail"].as_str().unwrap().contains("EINTR"));
        assert_eq!(old.status.code(), Some(0), "{caller:?}: {}", explain(&old));
    }
}

#[test]
fn doctor_reports_a_kernel_without_landlock() {
    let work = TempDir::new("doctor");
    let ok = doctor(Caller::Invoker, &work.path, &[]);
    assert_eq!(ok.status.code(), Some(0), "{}", explain(&ok));
    assert_eq!(doctor_report(&ok)["ok"], true);
    let bad = doctor(
        Caller::Invoker,
        &work.path,
        &["--errno", "landlock_create_ruleset=ENOSYS"],
    );
    assert_eq!(bad.status.code(), Some(1), "{}", explain(&bad));
    assert_eq!(doctor_report(&bad)["ok"], false);
    let ll = doctor_check(&bad, "landlock");
    assert_eq!(ll["status"], "fail");
    assert!(ll["fix"].as_str().unwrap().contains("best_effort"));
}

#[test]
fn a_failing_create_guard_is_refused() {
    // Only the install of the user-notification filter (flags = NEW_LISTENER) fails; the main
    // seccomp policy (flags = 0) still goes in.
    for caller in CALLERS {
        let work = TempDir::new("noguard");
        // Both forms: with WAIT_KILLABLE_RECV, and without it (the fallback for older kernels).
        let flag = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER;
        let killable = flag | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
        let faults = [
            "--errno-if-arg1".to_string(),
            format!("seccomp:{killable}=EINVAL"),
            "--errno-if-arg1".to_string(),
            format!("seccomp:{flag}=EINVAL"),
        ];
        let faults: Vec<&str> = faults.iter().map(String::as_str).collect();
        let out = launch_under(caller, &work.path, &faults, &[]);
        assert_refused(caller, &work, &out, 117, &["seccomp"]);
        assert!(stderr(&out).contains("create guard"), "{}", explain(&out));
    }
}

#[test]
fn init_whose_filter_cannot_be_shared_with_its_guard_thread_is_refused() {
    // Init installs one program for its main thread and its guard's thread at once (flags =
    // TSYNC); when that fails, nothing runs. The other installs (flags 0, and the guard's
    // listener) still go in.
    let tsync = libc::SECCOMP_FILTER_FLAG_TSYNC;
    for caller in CALLERS {
        let work = TempDir::new("notsync");
        let fault = format!("seccomp:{tsync}=EINVAL");
        let out = launch_under(caller, &work.path, &["--errno-if-arg1", &fault], &[]);
        assert_refused(caller, &work, &out, 117, &["seccomp"]);
        assert!(
            stderr(&out).contains("SECCOMP_SET_MODE_FILTER"),
            "{}",
            explain(&out)
        );
        assert_runs(caller, &work, &[]);
    }
}

#[test]
fn a_create_guard_thread_that_cannot_set_itself_up_is_refused() {
    // The guard's thread of init takes a working directory and umask of its own
    // (unshare(CLONE_FS)) before init installs their filter; when that fails, nothing runs. Only
    // that unshare fails (init's network thread makes its namespace with another).
    let fault = format!("unshare:{}=EPERM", libc::CLONE_FS);
    for caller in CALLERS {
        let work = TempDir::new("guardthread");
        let out = launch_under(caller, &work.path, &["--errno-if-arg0", &fault], &[]);
        assert_refused(caller, &work, &out, 117, &["create guard"]);
        assert!(stderr(&out).contains("unshare"), "{}", explain(&out));
        assert_runs(caller, &work, &[]);
    }
}

/// Started as root with supplementary groups (root's own, `disk`, `shadow`): a setgroups that
/// says it dropped them and did not would leave the sandbox's user reading what those groups
/// may. Caught before the program runs; the twin (no fault) runs it.
#[test]
fn supplementary_groups_left_by_a_lying_setgroups_are_caught() {
    assert!(is_root(), "a root start needs root");
    let work = TempDir::new("groups");
    let launcher = launcher().to_str().unwrap().to_string();
    let fault_inject = fault_inject().to_str().unwrap().to_string();
    let run = |faults: &[&str]| {
        let mut args = vec!["--groups", "0,4", "--", &fault_inject];
        args.extend_from_slice(faults);
        args.extend_from_slice(&[
            "--",
            &launcher,
            "whole-process",
            "--",
            "/bin/sh",
            "-c",
            TARGET,
        ]);
        Command::new("setpriv")
            .args(&args)
            .current_dir(&work.path)
            .env("HOME", &work.path)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["--errno", "setgroups=0"]);
    assert_refused(Caller::Invoker, &work, &out, 115, &["drop privileges"]);
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "the twin: {}", explain(&out));
    assert!(work.join("marker").exists(), "the twin: {}", explain(&out));
}
