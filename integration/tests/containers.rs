//! The container recipe (README: Containers), run for real with podman: an image built from
//! scratch (the static launcher, busybox, no /etc/passwd, /etc/group or /etc/resolv.conf).
//! Podman's default confinement refuses, naming the flags to add; the recipe's flags run the
//! sandbox with every layer, rootful and rootless; `doctor` agrees with the launch each time.

use std::os::unix::fs::MetadataExt;
use std::process::Output;

use integration::container::{self, podman, RootlessUser, RECIPE};
use integration::*;

/// Who runs inside the container: its root (the launcher then drops to nobody), and an
/// unprivileged user with no capabilities and no_new_privs (what the README's Pod spec asks).
const CONTAINER_USERS: [&[&str]; 2] = [
    &[],
    &[
        "--user",
        "1000:1000",
        "--cap-drop",
        "all",
        "--security-opt",
        "no-new-privileges",
    ],
];

const TARGET: &[&str] = &["whole-process", "-v", "--", "sh", "-c", "echo target-ran"];

fn with(a: &[&str], b: &[&str]) -> Vec<String> {
    a.iter().chain(b).map(|s| s.to_string()).collect()
}

fn with_str<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<&'a str> {
    a.iter().chain(b).copied().collect()
}

fn run(opts: &[String], args: &[&str]) -> Output {
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    container::run(podman(), &opts, args)
}

/// The launch was refused at `code`, its one line names every flag in `flags`, nothing ran;
/// and `doctor` under the same confinement says it cannot run.
fn assert_refused_and_doctor_agrees(
    podman_run: impl Fn(&[&str]) -> Output,
    code: i32,
    flags: &[&str],
) {
    let out = podman_run(TARGET);
    assert_eq!(out.status.code(), Some(code), "{}", explain(&out));
    assert!(!stdout(&out).contains("target-ran"), "{}", explain(&out));
    let line = stderr(&out);
    for flag in flags {
        assert!(line.contains(flag), "{flag} not named: {}", explain(&out));
    }
    let doc = podman_run(&["doctor", "--json"]);
    assert_eq!(doc.status.code(), Some(1), "doctor: {}", explain(&doc));
    let report = doctor_report(&doc);
    assert_eq!(report["ok"], false);
    let launch = doctor_check(&doc, "launch");
    assert_eq!(launch["status"], "fail", "{launch}");
    for flag in flags {
        assert!(
            launch["fix"].as_str().unwrap_or("").contains(flag),
            "{launch}"
        );
    }
}

/// Every layer, from the facts the shim verified (`-v`).
fn assert_every_layer(out: &Output) {
    assert_eq!(out.status.code(), Some(0), "{}", explain(out));
    assert!(stdout(out).contains("target-ran"), "{}", explain(out));
    let err = stderr(out);
    let facts: serde_json::Value = err
        .lines()
        .find_map(|l| l.strip_prefix("sandbox-launch: verified: "))
        .map(|j| serde_json::from_str(j).unwrap())
        .unwrap_or_else(|| panic!("no verified facts: {}", explain(out)));
    assert_eq!(facts["seccomp_mode"], 2, "{facts}");
    assert_eq!(facts["no_new_privs"], true, "{facts}");
    for set in [
        "ambient",
        "bounding",
        "effective",
        "inheritable",
        "permitted",
    ] {
        assert_eq!(facts["capabilities"][set], 0, "{facts}");
    }
    assert_eq!(facts["landlock"]["enforced"], true, "{facts}");
    assert_eq!(
        facts["network_interfaces"],
        serde_json::json!(["lo"]),
        "{facts}"
    );
    assert_eq!(facts["old_root_reachable"], false, "{facts}");
    assert_eq!(facts["hostname"], "sandbox", "{facts}");
    assert_ne!(facts["uid"], 0, "{facts}");
}

fn assert_doctor_says_yes(podman_run: impl Fn(&[&str]) -> Output) {
    let doc = podman_run(&["doctor", "--json"]);
    assert_eq!(doc.status.code(), Some(0), "doctor: {}", explain(&doc));
    assert_eq!(doctor_check(&doc, "launch")["status"], "ok");
}

#[test]
fn podmans_default_confinement_refuses_naming_the_flags_and_doctor_agrees() {
    assert!(
        is_root(),
        "the container tests need root (rootful podman, useradd)"
    );
    for user in CONTAINER_USERS {
        assert_refused_and_doctor_agrees(
            |args| run(&with(user, &[]), args),
            112,
            &["seccomp=unconfined", "systempaths=unconfined"],
        );
    }
}

#[test]
fn half_the_recipe_refuses_naming_the_rest_and_doctor_agrees() {
    assert!(is_root(), "the container tests need root");
    // /proc unmasked but the default seccomp profile: sethostname is refused (doctor used to
    // say "can run" here).
    assert_refused_and_doctor_agrees(
        |args| run(&with(&RECIPE[2..], &[]), args),
        112,
        &["seccomp=unconfined"],
    );
    // seccomp off but /proc masked: the fresh /proc is refused.
    assert_refused_and_doctor_agrees(
        |args| run(&with(&RECIPE[..2], &[]), args),
        113,
        &["systempaths=unconfined"],
    );
}

#[test]
fn the_recipe_runs_every_layer_writes_as_the_sandbox_user_and_doctor_agrees() {
    assert!(is_root(), "the container tests need root");
    for (user, uid) in CONTAINER_USERS.iter().zip([NOBODY, 1000]) {
        let work = TempDir::new_in("/var/tmp", "podman-work");
        std::os::unix::fs::chown(&work.path, Some(uid), Some(uid)).unwrap();
        let volume = format!("{}:/work", work.path.display());
        let mut opts = with(&RECIPE, user);
        opts.extend(["-v".to_string(), volume]);
        let out = run(
            &opts,
            &[
                "whole-process",
                "-v",
                "--",
                "sh",
                "-c",
                "echo target-ran; echo inside > made",
            ],
        );
        assert_every_layer(&out);
        // Judged on the host: the file is there, owned by the user the sandbox ran as.
        let meta = std::fs::metadata(work.join("made")).expect("the file written inside");
        assert_eq!((meta.uid(), meta.gid()), (uid, uid), "{}", explain(&out));
        assert_doctor_says_yes(|args| run(&opts, args));
    }
}

#[test]
fn a_root_owned_volume_is_idmapped_where_the_container_allows_it_else_refused_with_the_fix() {
    assert!(is_root(), "the container tests need root");
    let work = TempDir::new_in("/var/tmp", "podman-root-owned");
    std::os::unix::fs::chown(&work.path, Some(0), Some(0)).unwrap();
    let volume = format!("{}:/work", work.path.display());
    let write = [
        "whole-process",
        "--",
        "sh",
        "-c",
        "echo target-ran; echo inside > made",
    ];
    // Idmapping needs CAP_SYS_ADMIN over the volume's filesystem, which a container's root
    // lacks: refused, naming the way out (run as the tree's owner).
    let opts = with(&RECIPE, &["-v", &volume]);
    let out = run(&opts, &write);
    assert_eq!(out.status.code(), Some(113), "{}", explain(&out));
    assert!(
        stderr(&out).contains("CAP_SYS_ADMIN") && stderr(&out).contains("--user"),
        "{}",
        explain(&out)
    );
    assert!(!work.join("made").exists());
    let doc = run(&opts, &["doctor", "--json"]);
    assert_eq!(
        doctor_check(&doc, "launch")["status"],
        "fail",
        "{}",
        explain(&doc)
    );
    // Given the capability, the volume is idmapped: written inside as nobody, root's on the host.
    let opts = with(&RECIPE, &["-v", &volume, "--cap-add", "SYS_ADMIN"]);
    let out = run(&opts, &write);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let meta = std::fs::metadata(work.join("made")).expect("the file written inside");
    assert_eq!((meta.uid(), meta.gid()), (0, 0));
}

#[test]
fn an_image_without_passwd_group_or_resolv_conf_resolves_through_the_stub() {
    assert!(is_root(), "the container tests need root");
    let out = run(
        &with(&RECIPE, &[]),
        &[
            "whole-process",
            "--allow-domain",
            "allowed.test",
            "--",
            "sh",
            "-c",
            "for f in passwd group resolv.conf; do test -e /etc/$f && echo has-$f; done; \
             getent ahosts allowed.test; echo allowed-rc=$?; \
             getent ahosts denied.test; echo denied-rc=$?; id -u",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let text = stdout(&out);
    assert!(!text.contains("has-"), "{}", explain(&out));
    // glibc asks 127.0.0.1 without /etc/resolv.conf: the stub answers allowed names with a
    // stand-in address and denied ones with NXDOMAIN.
    assert!(
        text.contains("198.18.") && text.contains("allowed-rc=0"),
        "{}",
        explain(&out)
    );
    assert!(text.contains("denied-rc=2"), "{}", explain(&out));
    assert!(text.trim_end().ends_with("65534"), "{}", explain(&out));
}

#[test]
fn rootless_podman_refuses_by_default_and_runs_the_recipe_with_every_layer() {
    assert!(is_root(), "making the rootless user needs root");
    let user = RootlessUser::new();
    let as_user = |opts: &[&str], args: &[&str]| container::run(user.podman(), opts, args);
    assert_refused_and_doctor_agrees(
        |args| as_user(&[], args),
        112,
        &["seccomp=unconfined", "systempaths=unconfined"],
    );
    assert_every_layer(&as_user(&RECIPE, TARGET));
    assert_doctor_says_yes(|args| as_user(&RECIPE, args));
    // The project from the host: the container's root is the user, so the sandbox's nobody
    // would need the tree idmapped, which a rootless container may not do: refused, naming
    // --userns=keep-id, with which the sandbox runs as the user and writes as the user.
    let project = user.home.join("project");
    std::fs::create_dir(&project).unwrap();
    std::os::unix::fs::chown(&project, Some(user.uid), Some(user.uid)).unwrap();
    let volume = format!("{}:/work", project.display());
    let write = [
        "whole-process",
        "--",
        "sh",
        "-c",
        "echo target-ran; echo inside > made",
    ];
    let out = as_user(&with_str(&RECIPE, &["-v", &volume]), &write);
    assert_eq!(out.status.code(), Some(113), "{}", explain(&out));
    assert!(
        stderr(&out).contains("--userns=keep-id"),
        "{}",
        explain(&out)
    );
    let out = as_user(
        &with_str(&RECIPE, &["-v", &volume, "--userns=keep-id"]),
        &write,
    );
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let meta = std::fs::metadata(project.join("made")).expect("the file written inside");
    assert_eq!(meta.uid(), user.uid, "{}", explain(&out));
    drop(user);
}

#[test]
fn without_user_namespaces_root_with_the_capabilities_builds_every_other_layer() {
    assert!(is_root(), "the container tests need root");
    // No user namespace can be made (here: fault-inject inside the container, as a node with
    // them disabled would); podman's default seccomp profile and masked /proc stay. With
    // CAP_SYS_ADMIN (namespaces, mounts), CAP_NET_ADMIN (the sandbox's `lo` and egress) and
    // CAP_SYS_PTRACE (init's create guard), the launcher builds the rest as root.
    let launch = |caps: &[&str]| {
        let mut opts = vec!["--entrypoint", "/usr/local/bin/fault-inject"];
        for cap in caps {
            opts.extend(["--cap-add", cap]);
        }
        container::run(
            podman(),
            &opts,
            &[
                "--deny-clone-flags",
                "0x10000000=EPERM",
                "--errno",
                "clone3=ENOSYS",
                "--",
                "/usr/local/bin/sandbox-launch",
                "whole-process",
                "-v",
                "--",
                "sh",
                "-c",
                "echo target-ran",
            ],
        )
    };
    let out = launch(&["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE"]);
    assert_every_layer(&out);
    assert!(
        stderr(&out).contains("no user namespace can be created here"),
        "{}",
        explain(&out)
    );
    // Short of one of them, refused (the step that needs it fails closed).
    for caps in [
        &["SYS_ADMIN", "NET_ADMIN"][..],
        &["SYS_ADMIN", "SYS_PTRACE"],
        &["NET_ADMIN", "SYS_PTRACE"],
    ] {
        let out = launch(caps);
        assert!(
            matches!(out.status.code(), Some(112..=115)),
            "{caps:?}: {}",
            explain(&out)
        );
        assert!(
            !stdout(&out).contains("target-ran"),
            "{caps:?}: {}",
            explain(&out)
        );
    }
}
