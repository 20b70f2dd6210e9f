//! `doctor` never says yes where the launch fails: it launches for real, with the options it is
//! given, and its probes name each missing piece. Faults come from `fault-inject` (an outer
//! seccomp filter, as a container's would be); the containers' own confinements are tried in
//! containers.rs.

use std::process::Output;

use integration::*;

fn launch_under(caller: Caller, work: &TempDir, faults: &[&str], opts: &[&str]) -> Output {
    let launcher = launcher().to_str().unwrap().to_string();
    let mut args: Vec<&str> = faults.to_vec();
    args.extend_from_slice(&["--", &launcher, "whole-process"]);
    args.extend_from_slice(opts);
    args.extend_from_slice(&["--", "/bin/sh", "-c", "echo target-ran"]);
    command_with(fault_inject(), caller, &work.path, &args)
        .output()
        .unwrap()
}

fn doctor_with(caller: Caller, work: &TempDir, faults: &[&str], opts: &[&str]) -> Output {
    let launcher = launcher().to_str().unwrap().to_string();
    let mut args: Vec<&str> = faults.to_vec();
    args.extend_from_slice(&["--", &launcher, "doctor", "--json"]);
    args.extend_from_slice(opts);
    command_with(fault_inject(), caller, &work.path, &args)
        .output()
        .unwrap()
}

#[test]
fn a_refused_sethostname_fails_the_launch_and_doctor_alike_naming_the_container_flags() {
    for caller in CALLERS {
        let work = TempDir::new("doctor-hostname");
        let fault = ["--errno", "sethostname=EPERM"];
        let out = launch_under(caller, &work, &fault, &["--network", "none"]);
        assert_eq!(
            out.status.code(),
            Some(112),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!stdout(&out).contains("target-ran"));
        assert!(
            stderr(&out).contains("seccomp=unconfined"),
            "{caller:?}: {}",
            explain(&out)
        );
        let doc = doctor_with(caller, &work, &fault, &["--network", "none"]);
        assert_eq!(doc.status.code(), Some(1), "{caller:?}: {}", explain(&doc));
        for name in ["hostname", "launch"] {
            let check = doctor_check(&doc, name);
            assert_eq!(check["status"], "fail", "{caller:?}: {check}");
            assert!(
                check["fix"]
                    .as_str()
                    .unwrap()
                    .contains("seccomp=unconfined"),
                "{caller:?}: {check}"
            );
        }
        // The twin: no fault, both go through.
        let out = launch_under(caller, &work, &[], &["--network", "none"]);
        assert_eq!(
            stdout(&out),
            "target-ran\n",
            "{caller:?}: {}",
            explain(&out)
        );
        let doc = doctor_with(caller, &work, &[], &["--network", "none"]);
        assert_eq!(doc.status.code(), Some(0), "{caller:?}: {}", explain(&doc));
        assert_eq!(doctor_check(&doc, "hostname")["status"], "ok");
        assert_eq!(doctor_check(&doc, "launch")["status"], "ok");
    }
}

#[test]
fn doctor_launches_with_the_options_it_is_given() {
    for caller in CALLERS {
        let work = TempDir::new("doctor-options");
        let bad = work.write(
            "policy.yaml",
            "version: 1\nfilesystem_policy:\n  read_only: [relative]\n",
        );
        let doc = doctor_with(caller, &work, &[], &["--policy", bad.to_str().unwrap()]);
        assert_eq!(doc.status.code(), Some(1), "{caller:?}: {}", explain(&doc));
        let check = doctor_check(&doc, "launch");
        assert_eq!(check["status"], "fail", "{caller:?}: {check}");
        assert!(
            check["detail"]
                .as_str()
                .unwrap()
                .contains("load the policy"),
            "{caller:?}: {check}"
        );
        // The kernel's probes do not depend on the options.
        assert_eq!(doctor_check(&doc, "namespaces")["status"], "ok");
    }
}

#[test]
fn a_refused_proc_mount_fails_the_launch_and_doctor_alike() {
    // mount(2) of "proc" cannot be told apart by seccomp (a string argument); failing every
    // mount with flags 0xe (MS_NOSUID|MS_NODEV|MS_NOEXEC, the /proc mount's) comes closest.
    for caller in CALLERS {
        let work = TempDir::new("doctor-proc");
        let fault = ["--errno-if-arg3", "mount:14=EPERM"];
        let out = launch_under(caller, &work, &fault, &["--network", "none"]);
        if out.status.code() == Some(125) {
            panic!("fault-inject lacks --errno-if-arg3: {}", explain(&out));
        }
        assert_eq!(
            out.status.code(),
            Some(113),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            stderr(&out).contains("systempaths=unconfined"),
            "{}",
            explain(&out)
        );
        let doc = doctor_with(caller, &work, &fault, &["--network", "none"]);
        assert_eq!(doc.status.code(), Some(1), "{caller:?}: {}", explain(&doc));
        for name in ["filesystem", "launch"] {
            let check = doctor_check(&doc, name);
            assert_eq!(check["status"], "fail", "{caller:?}: {check}");
            assert!(
                check["fix"]
                    .as_str()
                    .unwrap()
                    .contains("systempaths=unconfined"),
                "{caller:?}: {check}"
            );
        }
    }
}

/// `prefix` (a program and its arguments, e.g. setpriv's) runs the launcher with `args`, as the
/// test's root, in `work`.
fn as_root_under(prefix: &[&str], work: &TempDir, args: &[&str]) -> Output {
    assert!(is_root(), "dropping root's capabilities needs root");
    let launcher = launcher().to_str().unwrap().to_string();
    let mut all: Vec<&str> = prefix[1..].to_vec();
    all.push(&launcher);
    all.extend_from_slice(args);
    command_with(
        std::path::Path::new(prefix[0]),
        Caller::Invoker,
        &work.path,
        &all,
    )
    .output()
    .unwrap()
}

const TARGET: &[&str] = &["whole-process", "--", "/bin/sh", "-c", "echo target-ran"];
const DOCTOR: &[&str] = &["doctor", "--json"];

#[test]
fn root_without_cap_setfcap_is_mapped_by_doctor_as_by_the_launch() {
    // Mapping uid 0 takes CAP_SETFCAP (Linux >= 5.12); the launch maps the sandbox's user and
    // does without it (a container's root with `--cap-drop ALL --cap-add SETUID --cap-add
    // SETGID`). doctor's probes used to map root and fail every one of them.
    let work = TempDir::new("doctor-setfcap");
    let no_setfcap = ["setpriv", "--bounding-set", "-setfcap", "--"];
    let out = as_root_under(&no_setfcap, &work, TARGET);
    assert_eq!(stdout(&out), "target-ran\n", "{}", explain(&out));
    let doc = as_root_under(&no_setfcap, &work, DOCTOR);
    assert_eq!(doc.status.code(), Some(0), "{}", explain(&doc));
    for name in [
        "user namespaces",
        "namespaces",
        "hostname",
        "filesystem",
        "launch",
    ] {
        assert_eq!(doctor_check(&doc, name)["status"], "ok", "{name}");
    }
}

#[test]
fn root_without_cap_setuid_and_setgid_is_refused_naming_them_and_doctor_agrees() {
    let work = TempDir::new("doctor-setuid");
    let no_setid = ["setpriv", "--bounding-set", "-setuid,-setgid", "--"];
    let out = as_root_under(&no_setid, &work, TARGET);
    assert_eq!(out.status.code(), Some(112), "{}", explain(&out));
    assert!(!stdout(&out).contains("target-ran"));
    for fix in ["--cap-add SETUID --cap-add SETGID", "--user UID:GID"] {
        assert!(stderr(&out).contains(fix), "{fix}: {}", explain(&out));
    }
    let doc = as_root_under(&no_setid, &work, DOCTOR);
    assert_eq!(doc.status.code(), Some(1), "{}", explain(&doc));
    for name in ["user namespaces", "namespaces", "launch"] {
        let check = doctor_check(&doc, name);
        assert_eq!(check["status"], "fail", "{check}");
        let fix = check["fix"].as_str().unwrap_or("");
        assert!(fix.contains("--cap-add SETUID --cap-add SETGID"), "{check}");
        assert!(!fix.contains("AppArmor"), "{check}");
    }
    // The twin: with them, both go through.
    let keep = ["setpriv", "--bounding-set", "-setfcap", "--"];
    let out = as_root_under(&keep, &work, TARGET);
    assert_eq!(stdout(&out), "target-ran\n", "{}", explain(&out));
}

#[test]
fn root_without_user_namespaces_or_cap_sys_ptrace_is_refused_naming_it() {
    // The fallback of root without user namespaces keeps CAP_SYS_PTRACE for the create guard.
    let work = TempDir::new("doctor-ptrace");
    let fault_inject = fault_inject().to_str().unwrap();
    let no_userns = |drop| {
        [
            "setpriv",
            "--bounding-set",
            drop,
            "--",
            fault_inject,
            "--deny-clone-flags",
            "0x10000000=EPERM",
            "--errno",
            "clone3=ENOSYS",
            "--",
        ]
    };
    let out = as_root_under(&no_userns("-sys_ptrace"), &work, TARGET);
    assert_eq!(out.status.code(), Some(115), "{}", explain(&out));
    assert!(!stdout(&out).contains("target-ran"));
    assert!(
        stderr(&out).contains("--cap-add SYS_PTRACE"),
        "{}",
        explain(&out)
    );
    // The twin: with it, the sandbox runs (and says it has no user namespace).
    let out = as_root_under(&no_userns("-setfcap"), &work, TARGET);
    assert_eq!(stdout(&out), "target-ran\n", "{}", explain(&out));
}

#[test]
fn a_pids_limit_too_low_for_the_create_guard_is_named_and_doctor_agrees() {
    assert!(is_root(), "making a pids group needs root");
    let work = TempDir::new("doctor-pids");
    let in_group = |max: &str, args: &[&str]| {
        let group = integration::cgroups::Delegated::new(&["pids"]);
        for dir in &group.dirs {
            std::fs::write(dir.join("pids.max"), max).unwrap();
        }
        let launcher = launcher().to_str().unwrap().to_string();
        let mut cmd = command_with(
            std::path::Path::new(&launcher),
            Caller::Invoker,
            &work.path,
            args,
        );
        group.start_in(&mut cmd);
        cmd.output().unwrap()
    };
    // 4 tasks (shim and supervisor among them): the launch gets as far as the create guard.
    let out = in_group("4", TARGET);
    assert_eq!(out.status.code(), Some(117), "{}", explain(&out));
    assert!(!stdout(&out).contains("target-ran"));
    assert!(stderr(&out).contains("pids limit"), "{}", explain(&out));
    assert!(!stderr(&out).contains("Linux >= 5.5"), "{}", explain(&out));
    let doc = in_group("4", DOCTOR);
    assert_eq!(doc.status.code(), Some(1), "{}", explain(&doc));
    let check = doctor_check(&doc, "launch");
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["fix"].as_str().unwrap_or("").contains("pids limit"),
        "{check}"
    );
    // The twin: room for every task, both go through.
    let out = in_group("64", TARGET);
    assert_eq!(stdout(&out), "target-ran\n", "{}", explain(&out));
    let doc = in_group("64", DOCTOR);
    assert_eq!(doc.status.code(), Some(0), "{}", explain(&doc));
}
