//! Started as root (a container's entrypoint), the sandbox runs as `nobody` (or
//! `process.run_as_user`): the writable trees it does not own are idmapped to it, so it can
//! write them while every file keeps its owner on the host; HOME is the caller's when that is
//! writable, else the sandbox user's; what cannot be done is refused with the cause and the fix.
//! Judged on the host: owners of the files written inside, `git log`/`git status` afterwards.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use integration::*;

/// A directory under /var/tmp owned by root (TempDir hands its directories to the sandbox's
/// user; these must stay root's, like a container's /work or the caller's /root).
fn root_owned(tag: &str) -> TempDir {
    let d = TempDir::new_in("/var/tmp", tag);
    chown_tree(&d.path, 0);
    d
}

fn chown_tree(p: &Path, id: u32) {
    let s = Command::new("chown")
        .arg("-R")
        .arg(format!("{id}:{id}"))
        .arg(p)
        .status()
        .unwrap();
    assert!(s.success());
}

/// Every path below `root` whose owner is not `uid`.
fn not_owned_by(root: &Path, uid: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.uid() != uid || meta.gid() != uid {
            out.push(p.clone());
        }
        if meta.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
    out
}

fn git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .unwrap()
}

fn repo_with_a_commit(dir: &Path) {
    for args in [
        &["init", "-q"][..],
        &["config", "user.email", "t@example.test"],
        &["config", "user.name", "t"],
    ] {
        assert!(git(dir, args).status.success());
    }
    std::fs::write(dir.join("f"), "one\n").unwrap();
    assert!(git(dir, &["add", "f"]).status.success());
    let out = git(dir, &["commit", "-q", "-m", "on the host"]);
    assert!(out.status.success(), "{}", explain(&out));
}

const COMMIT_INSIDE: &str =
    "echo two >> f && git add f && git commit -q -m inside && echo committed; \
     echo planted > .git/hooks/pre-commit 2>/dev/null && echo HOOK-WRITTEN; true";

#[test]
fn git_commit_works_in_a_root_owned_repository_and_every_file_stays_roots() {
    assert!(is_root(), "started-as-root tests need root");
    let work = root_owned("root-repo");
    repo_with_a_commit(&work.path);
    let out = sh(
        Caller::Invoker,
        &work.path,
        &["--network", "none"],
        COMMIT_INSIDE,
    );
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert!(stdout(&out).contains("committed"), "{}", explain(&out));
    assert!(!stdout(&out).contains("HOOK-WRITTEN"), "{}", explain(&out));
    // On the host: the commit is there, the tree is clean, and nothing belongs to nobody.
    let log = git(&work.path, &["log", "--format=%s"]);
    assert_eq!(stdout(&log), "inside\non the host\n", "{}", explain(&log));
    assert_eq!(stdout(&git(&work.path, &["status", "--porcelain"])), "");
    let strays = not_owned_by(&work.path, 0);
    assert!(strays.is_empty(), "not root's on the host: {strays:?}");
    assert!(!work.join(".git/hooks/pre-commit").exists());
}

#[test]
fn an_idmapped_tree_leaves_the_program_every_cpu_its_caller_may_use() {
    // The launcher holds itself to one CPU while it makes the id mapping's namespace (speed,
    // `idmap::with_mapping`) and must take back exactly the CPUs it had: the program sees the
    // caller's set, whole and narrowed by taskset. The write proves the tree was idmapped.
    assert!(is_root(), "started-as-root tests need root");
    let own = cpus_allowed(&std::fs::read_to_string("/proc/self/status").unwrap()).unwrap();
    let first = own.split([',', '-']).next().unwrap().to_string();
    let work = root_owned("root-cpus");
    let script = "touch written && grep Cpus_allowed_list /proc/self/status";
    let launcher = launcher().to_str().unwrap().to_string();
    let whole = sh(Caller::Invoker, &work.path, &["--network", "none"], script);
    let narrowed = Command::new("taskset")
        .args([
            "-c",
            &first,
            &launcher,
            "whole-process",
            "--network",
            "none",
        ])
        .args(["--", "/bin/sh", "-c", script])
        .current_dir(&work.path)
        .output()
        .unwrap();
    for (out, expected) in [(whole, &own), (narrowed, &first)] {
        assert!(out.status.success(), "{}", explain(&out));
        assert_eq!(
            cpus_allowed(&stdout(&out)).as_ref(),
            Some(expected),
            "{}",
            explain(&out)
        );
    }
    assert_eq!(std::fs::metadata(work.join("written")).unwrap().uid(), 0);
}

#[test]
fn the_unprivileged_twin_commits_in_its_own_repository() {
    // Made by the invoker (git on the host refuses a repository of another owner), then given
    // to the sandbox's user.
    let work = TempDir::new_in("/var/tmp", "own-repo");
    if is_root() {
        chown_tree(&work.path, 0);
    }
    repo_with_a_commit(&work.path);
    work.give_to_sandbox_user(&work.path);
    let out = sh(
        Caller::Unprivileged,
        &work.path,
        &["--network", "none"],
        COMMIT_INSIDE,
    );
    assert!(stdout(&out).contains("committed"), "{}", explain(&out));
    assert!(!stdout(&out).contains("HOOK-WRITTEN"), "{}", explain(&out));
    let owner = inside_uid(Caller::Unprivileged);
    assert!(not_owned_by(&work.path, owner).is_empty());
}

#[test]
fn home_is_the_callers_when_writable_and_else_the_sandbox_users() {
    // (A home that holds writable trees: `a_root_home_holding_agent_state_is_home_inside...`.)
    assert!(is_root(), "started-as-root tests need root");
    let work = root_owned("root-home");
    // The harness sets HOME to the working directory: writable, so it stays.
    let out = sh(
        Caller::Invoker,
        &work.path,
        &["-v", "--network", "none"],
        "echo \"home=$HOME\"; echo hi > \"$HOME/note\"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert!(
        stdout(&out).contains(&format!("home={}", work.path.display())),
        "{}",
        explain(&out)
    );
    assert!(stderr(&out).contains("HOME inside: ") && stderr(&out).contains("the caller's"));
    assert_eq!(std::fs::metadata(work.join("note")).unwrap().uid(), 0);
    // A HOME with no writable tree in it (no agent's state, the working directory elsewhere):
    // the sandbox user's own (nobody's, from /etc/passwd).
    let bare = root_owned("root-bare-home");
    let out = command(
        Caller::Invoker,
        &work.path,
        &[
            "whole-process",
            "-v",
            "--network",
            "none",
            "--",
            "/bin/sh",
            "-c",
            "echo \"home=$HOME\"",
        ],
    )
    .env("HOME", &bare.path)
    .output()
    .unwrap();
    let nobody_home = std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("nobody:")
                .map(|r| r.split(':').nth(4).unwrap().to_string())
        })
        .unwrap();
    assert!(
        stdout(&out).contains(&format!("home={nobody_home}")),
        "{}",
        explain(&out)
    );
    assert!(
        stderr(&out).contains("the sandbox user's"),
        "{}",
        explain(&out)
    );
}

#[test]
fn a_working_directory_the_sandbox_user_cannot_reach_is_refused_with_the_fix() {
    assert!(is_root(), "started-as-root tests need root");
    // Like /root (0700) with a project below it.
    let home = root_owned("root-0700");
    std::fs::set_permissions(
        &home.path,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let proj = home.join("proj");
    std::fs::create_dir(&proj).unwrap();
    let out = sh(
        Caller::Invoker,
        &proj,
        &["--network", "none"],
        "echo ran > marker",
    );
    assert_eq!(out.status.code(), Some(113), "{}", explain(&out));
    let err = stderr(&out);
    assert!(
        err.contains("cannot reach") && err.contains("0700") && err.contains("--allow-write"),
        "{}",
        explain(&out)
    );
    assert!(!proj.join("marker").exists());
    // The fix it names: the parent writable too (idmapped), and the project is reachable.
    let out = sh(
        Caller::Invoker,
        &proj,
        &[
            "--network",
            "none",
            "--allow-write",
            home.path.to_str().unwrap(),
        ],
        "echo ran > marker",
    );
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert_eq!(std::fs::metadata(proj.join("marker")).unwrap().uid(), 0);
}

#[test]
fn each_step_of_an_idmapped_tree_fails_closed() {
    assert!(is_root(), "started-as-root tests need root");
    let work = root_owned("idmap-faults");
    // AT_EMPTY_PATH|AT_RECURSIVE: only the idmapping call (the shim's own use AT_RECURSIVE|
    // AT_SYMLINK_NOFOLLOW).
    let idmap_flags = (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE).to_string();
    let einval = format!("mount_setattr:{idmap_flags}=EINVAL");
    let eperm = format!("mount_setattr:{idmap_flags}=EPERM");
    let cases: [(&[&str], &str); 5] = [
        (&["--errno-if-arg2", &einval], "cannot be idmapped"),
        (&["--errno-if-arg2", &eperm], "CAP_SYS_ADMIN"),
        (&["--errno", "open_tree=EPERM"], "open_tree"),
        (&["--errno", "move_mount=EPERM"], "move_mount"),
        // The mapping's user namespace is the first one made; the sandbox's own comes after.
        (
            &[
                "--deny-clone-flags",
                "0x10000000=EPERM",
                "--errno",
                "clone3=ENOSYS",
            ],
            "clone",
        ),
    ];
    let launcher = launcher().to_str().unwrap().to_string();
    for (faults, why) in cases {
        let mut args: Vec<&str> = faults.to_vec();
        args.extend_from_slice(&[
            "--",
            &launcher,
            "whole-process",
            "--network",
            "none",
            "--",
            "/bin/sh",
            "-c",
            "echo ran > marker",
        ]);
        let out = command_with(fault_inject(), Caller::Invoker, &work.path, &args)
            .output()
            .unwrap();
        assert!(
            matches!(out.status.code(), Some(112) | Some(113)),
            "{faults:?}: {}",
            explain(&out)
        );
        assert!(stderr(&out).contains(why), "{faults:?}: {}", explain(&out));
        assert!(!work.join("marker").exists(), "{faults:?}: the target ran");
    }
    // The twin: no fault, it runs.
    let out = sh(
        Caller::Invoker,
        &work.path,
        &["--network", "none"],
        "echo ran > marker",
    );
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert_eq!(std::fs::metadata(work.join("marker")).unwrap().uid(), 0);
}

/// `fault-inject` denying CLONE_NEWUSER (and clone3, so libc falls back to clone), then
/// `sandbox-launch whole-process -v OPTS -- sh -c SCRIPT`, under `prefix` (e.g. setpriv).
fn without_user_namespaces(prefix: &[&str], work: &Path, opts: &[&str], script: &str) -> Output {
    let fault_inject = fault_inject().to_str().unwrap().to_string();
    let launcher = launcher().to_str().unwrap().to_string();
    let mut args: Vec<&str> = prefix[1..].to_vec();
    args.extend_from_slice(&[
        &fault_inject,
        "--deny-clone-flags",
        "0x10000000=EPERM",
        "--errno",
        "clone3=ENOSYS",
        "--",
        &launcher,
        "whole-process",
        "-v",
    ]);
    args.extend_from_slice(opts);
    args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
    Command::new(prefix[0])
        .args(&args)
        .current_dir(work)
        .env("HOME", work)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn root_with_cap_sys_admin_but_no_user_namespaces_builds_every_other_layer() {
    assert!(is_root(), "started-as-root tests need root");
    let work = TempDir::new_in("/var/tmp", "no-userns");
    let out = without_user_namespaces(
        &["env"],
        &work.path,
        &[],
        "id -u; echo inside > made; echo escaped > /etc/sl-no-userns-probe 2>/dev/null; true",
    );
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert_eq!(stdout(&out), "65534\n", "{}", explain(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no user namespace can be created here"),
        "{}",
        explain(&out)
    );
    let facts: serde_json::Value = err
        .lines()
        .find_map(|l| l.strip_prefix("sandbox-launch: verified: "))
        .map(|j| serde_json::from_str(j).unwrap())
        .unwrap_or_else(|| panic!("no verified facts: {}", explain(&out)));
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
    assert_eq!(std::fs::metadata(work.join("made")).unwrap().uid(), NOBODY);
    assert!(!Path::new("/etc/sl-no-userns-probe").exists());
    // A tree that would need an idmapping (which a user namespace defines) is refused.
    let theirs = root_owned("no-userns-root-owned");
    let out = without_user_namespaces(&["env"], &theirs.path, &[], "echo ran > marker");
    assert_eq!(out.status.code(), Some(113), "{}", explain(&out));
    assert!(
        stderr(&out).contains("no user namespace can be made here"),
        "{}",
        explain(&out)
    );
    assert!(!theirs.join("marker").exists());
    // doctor agrees: the missing user namespaces are a warning, the launch goes through.
    let fault_inject = fault_inject().to_str().unwrap().to_string();
    let doc = Command::new(&fault_inject)
        .args([
            "--deny-clone-flags",
            "0x10000000=EPERM",
            "--errno",
            "clone3=ENOSYS",
            "--",
        ])
        .arg(launcher())
        .args(["doctor", "--json"])
        .current_dir(&work.path)
        .output()
        .unwrap();
    assert_eq!(doc.status.code(), Some(0), "{}", explain(&doc));
    assert_eq!(doctor_check(&doc, "user namespaces")["status"], "warn");
    assert_eq!(doctor_check(&doc, "launch")["status"], "ok");
    // Without CAP_SYS_ADMIN, nothing to fall back on: refused.
    let out = without_user_namespaces(
        &["setpriv", "--bounding-set", "-sys_admin", "--"],
        &work.path,
        &[],
        "echo ran > marker",
    );
    assert_eq!(out.status.code(), Some(112), "{}", explain(&out));
    assert!(!work.join("marker").exists(), "{}", explain(&out));
}

/// Like root's `/root`: mode 0700, owned by root, with an agent's state directory, a key, a
/// readable file and one passed to `--deny-read`; a project below it, root's too.
fn root_home(tag: &str) -> TempDir {
    let home = root_owned(tag);
    for d in [".factory", ".ssh", "proj"] {
        std::fs::create_dir(home.join(d)).unwrap();
    }
    std::fs::write(home.join(".ssh/id_ed25519"), "KEY-c41d\n").unwrap();
    std::fs::write(home.join("public"), "PUBLIC-9e0a\n").unwrap();
    std::fs::write(home.join("denied"), "DENIED-77b3\n").unwrap();
    std::fs::set_permissions(
        &home.path,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    home
}

const IN_HOME: &str = r#"echo "home=$HOME"; cat "$HOME/public"; cat "$HOME/denied";
mkdir -p "$HOME/.factory/sessions" && echo s > "$HOME/.factory/sessions/s.jsonl" && echo state=written
echo x > "$HOME/planted" 2>/dev/null && echo HOME-WRITTEN
echo '{}' > "$HOME/.factory/settings.json" 2>/dev/null && echo SETTINGS-WRITTEN
echo p > made-in-proj && echo proj=written
echo c > "$HOME/.codex/history.jsonl" && echo codex=written"#;

#[test]
fn a_root_home_holding_agent_state_is_home_inside_read_only_and_its_files_stay_roots() {
    // HOME=/root-like (0700) holds ~/.factory (an agent's state: writable by default): it is
    // HOME inside, readable through a read-only view mapped to nobody, the state directory and
    // the project are writable, and everything written there stays root's on the host.
    assert!(is_root(), "started-as-root tests need root");
    let home = root_home("root-0700-home");
    // A second state directory that is the sandbox user's already (no idmapping for it, but
    // reachable only through the home).
    std::fs::create_dir(home.join(".codex")).unwrap();
    chown_tree(&home.join(".codex"), NOBODY);
    let proj = home.join("proj");
    let denied = home.join("denied");
    let out = command(
        Caller::Invoker,
        &proj,
        &[
            "whole-process",
            "-v",
            "--network",
            "none",
            "--deny-read",
            denied.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            IN_HOME,
        ],
    )
    .env("HOME", &home.path)
    .output()
    .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert!(
        text.contains(&format!("home={}\n", home.path.display())),
        "{}",
        explain(&out)
    );
    assert!(
        stderr(&out).contains("the caller's") && stderr(&out).contains("read-only"),
        "{}",
        explain(&out)
    );
    assert!(text.contains("PUBLIC-9e0a"), "{}", explain(&out));
    assert!(
        !text.contains("DENIED-77b3"),
        "--deny-read was read: {}",
        explain(&out)
    );
    assert!(
        text.contains("state=written")
            && text.contains("proj=written")
            && text.contains("codex=written"),
        "{}",
        explain(&out)
    );
    assert!(!text.contains("HOME-WRITTEN"), "{}", explain(&out));
    assert!(!text.contains("SETTINGS-WRITTEN"), "{}", explain(&out));
    // On the host: written where it may be, owned by root; nothing else.
    assert!(home.join(".factory/sessions/s.jsonl").exists());
    assert!(proj.join("made-in-proj").exists());
    assert!(!home.join("planted").exists());
    assert!(!home.join(".factory/settings.json").exists());
    assert_eq!(
        std::fs::metadata(home.join(".codex/history.jsonl"))
            .unwrap()
            .uid(),
        NOBODY
    );
    std::fs::remove_dir_all(home.join(".codex")).unwrap();
    let strays = not_owned_by(&home.path, 0);
    assert!(strays.is_empty(), "not root's on the host: {strays:?}");
    assert_eq!(
        std::fs::metadata(&home.path).unwrap().mode() & 0o7777,
        0o700
    );
    // `check` says the same.
    let out = command(Caller::Invoker, &proj, &["check"])
        .env("HOME", &home.path)
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains(&format!(
            "HOME inside: {} (the caller's",
            home.path.display()
        )),
        "{}",
        explain(&out)
    );
}

#[test]
fn a_home_that_cannot_be_mapped_is_left_out_with_a_warning_or_refused_for_an_agent_needing_it() {
    // The kernel refuses to idmap (a filesystem that cannot be, no user namespace): a shell
    // runs with the sandbox user's HOME and is told why; droid (which dies without its state
    // directory) is refused with the cause and the fix; without the fault, HOME is the caller's.
    assert!(is_root(), "started-as-root tests need root");
    let home = root_home("root-home-nomap");
    let work = TempDir::new_in("/var/tmp", "nomap-work");
    let droid = work.write(
        "droid",
        "#!/bin/sh\necho \"home=$HOME\"; echo ran > \"$HOME/.factory/marker\"\n",
    );
    std::fs::set_permissions(&droid, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let flags = (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE).to_string();
    let einval = format!("mount_setattr:{flags}=EINVAL");
    let launcher = launcher().to_str().unwrap().to_string();
    let run = |faults: &[&str], program: &[&str]| {
        let mut args: Vec<&str> = faults.to_vec();
        args.extend_from_slice(&[&launcher, "whole-process", "-v", "--network", "none", "--"]);
        args.extend_from_slice(program);
        command_with(fault_inject(), Caller::Invoker, &work.path, &args)
            .env("HOME", &home.path)
            .output()
            .unwrap()
    };
    let shell: &[&str] = &["/bin/sh", "-c", "echo \"home=$HOME\""];
    let out = run(&["--errno-if-arg2", &einval, "--"], shell);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert!(
        !stdout(&out).contains(home.path.to_str().unwrap()),
        "{}",
        explain(&out)
    );
    assert!(
        stderr(&out).contains("cannot be mapped") && stderr(&out).contains("cannot be idmapped"),
        "{}",
        explain(&out)
    );
    let droid = droid.to_str().unwrap();
    let out = run(&["--errno-if-arg2", &einval, "--"], &[droid]);
    assert_eq!(out.status.code(), Some(113), "{}", explain(&out));
    assert!(
        stderr(&out).contains("droid keeps its state") && stderr(&out).contains("--user"),
        "{}",
        explain(&out)
    );
    assert!(!home.join(".factory/marker").exists());
    // The twin: no fault, droid's HOME is the caller's and its state directory is written,
    // root's on the host.
    let out = run(&["--"], &[droid]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    assert!(
        stdout(&out).contains(&format!("home={}", home.path.display())),
        "{}",
        explain(&out)
    );
    assert_eq!(
        std::fs::metadata(home.join(".factory/marker"))
            .unwrap()
            .uid(),
        0
    );
}

/// Every mode below `root` holding the set-user-ID or set-group-ID bit.
fn set_id_modes(root: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.mode() & 0o6000 != 0 {
            out.push((p.clone(), meta.mode()));
        }
        if meta.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
    out
}

/// What a program inside tries to leave set-ID in its working directory, each attempt saying
/// when it is refused; then ordinary modes, which must work.
const SET_ID_INSIDE: &str = r#"cp /bin/true prog
chmod 4755 prog 2>/dev/null || echo REFUSED-chmod-u
install -m 6755 /bin/true installed 2>/dev/null || echo REFUSED-install
perl -MFcntl -e 'sysopen(F, "opened", O_CREAT|O_WRONLY, 04755) or exit 1' || echo REFUSED-open
perl -MFcntl -e 'sysopen(F, "grouped", O_CREAT|O_WRONLY, 02755) or exit 1' || echo REFUSED-open-g
chmod 755 prog && echo ORDINARY-OK
mkdir shared && chmod 2775 shared && echo SETGID-DIR-OK
cd repo && echo x > f && git add f && git -c user.email=a@b.c -c user.name=n commit -qm m && echo SHARED-GIT-OK
"#;

/// Started as root, the working directory of root's is idmapped to the sandbox's user, and a
/// file made there is root's on the host: a set-user-ID one would be a root program any local
/// user could run. Every way to make one is refused, and to make a file set-group-ID; ordinary
/// modes are not, nor a set-group-ID directory (git's shared repository works inside). Judged
/// on the host: no set-user-ID mode in the tree, set-group-ID only on directories. (The
/// unprivileged twin: the same in a tree of its own.)
#[test]
fn no_set_id_file_is_left_in_a_writable_tree() {
    for caller in CALLERS {
        let work = if caller == Caller::Invoker && is_root() {
            root_owned("setid")
        } else {
            let d = TempDir::new_in("/var/tmp", "setid-own");
            d.give_to_sandbox_user(&d.path);
            d
        };
        let init = Command::new("git")
            .args(["init", "-q", "--shared=group", "repo"])
            .current_dir(&work.path)
            .output()
            .unwrap();
        assert!(init.status.success(), "{}", explain(&init));
        if !(caller == Caller::Invoker && is_root()) {
            work.give_to_sandbox_user(&work.path);
        }
        let out = sh(caller, &work.path, &["--network", "none"], SET_ID_INSIDE);
        let said = stdout(&out);
        for refused in [
            "REFUSED-chmod-u",
            "REFUSED-install",
            "REFUSED-open",
            "REFUSED-open-g",
        ] {
            assert!(
                said.contains(refused),
                "{caller:?}: {refused}: {}",
                explain(&out)
            );
        }
        for twin in ["ORDINARY-OK", "SETGID-DIR-OK", "SHARED-GIT-OK"] {
            assert!(said.contains(twin), "{caller:?}: {twin}: {}", explain(&out));
        }
        let files: Vec<_> = set_id_modes(&work.path)
            .into_iter()
            .filter(|(p, mode)| mode & 0o4000 != 0 || !p.is_dir())
            .collect();
        assert!(
            files.is_empty(),
            "{caller:?}: set-ID files on the host: {files:?}"
        );
        assert!(work.join("prog").exists(), "{caller:?}: {}", explain(&out));
    }
}

/// Each user's login shell on the host (`su - USER -c true`: its start-up files, and its
/// logout's), then what anything they ran left in `marks`.
fn marks_after_login(users: &[&str], marks: &Path) -> Vec<std::ffi::OsString> {
    for user in users {
        let login = Command::new("su")
            .args(["-", user, "-c", "true"])
            .output()
            .unwrap();
        assert!(login.status.success(), "su {user}: {}", explain(&login));
    }
    std::fs::read_dir(marks)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect()
}

/// Started as root in another user's home (`cd /home/alice` and a launch, or a `run_as_user`
/// working in its own home), that user's start-up files are protected as the caller's are: the
/// home is writable there (idmapped to the sandbox's user), but what that user's next login
/// shell runs is not. Judged on the host by that login shell (`su -`); the twin: an ordinary
/// file written in the home, the user's own on the host.
#[test]
fn another_users_home_keeps_its_protections_when_root_starts_there() {
    assert!(is_root(), "started-as-root tests need root");
    let user = integration::login::TestUser::new(Path::new("/bin/bash"));
    let caller_home = root_owned("caller-home");
    let marks = TempDir::new_in("/var/tmp", "home-marks");
    std::fs::set_permissions(
        &marks.path,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let policy = caller_home.join("as-user.yaml");
    std::fs::write(
        &policy,
        format!(
            "version: 1\nprocess: {{run_as_user: {0}, run_as_group: {0}}}\n",
            user.name
        ),
    )
    .unwrap();
    let script = r#"for f in .profile .bashrc .bash_login .bash_logout; do
  echo "touch $MARKS/$f-ran" >> "$f" 2>/dev/null || echo "REFUSED-$f"
done
mkdir -p .ssh 2>/dev/null && { echo key >> .ssh/authorized_keys 2>/dev/null || echo REFUSED-ssh; } || echo REFUSED-ssh
echo notes > notes.txt && echo TWIN-OK
"#;
    for opts in [vec![], vec!["--policy", policy.to_str().unwrap()]] {
        let mut args = vec!["whole-process", "--network", "none"];
        args.extend_from_slice(&opts);
        args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
        let out = Command::new(launcher())
            .args(&args)
            .current_dir(&user.home)
            .env("HOME", &caller_home.path)
            .env("MARKS", &marks.path)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let said = stdout(&out);
        for refused in [
            "REFUSED-.profile",
            "REFUSED-.bashrc",
            "REFUSED-.bash_login",
            "REFUSED-.bash_logout",
            "REFUSED-ssh",
        ] {
            assert!(
                said.contains(refused),
                "{opts:?}: {refused}: {}",
                explain(&out)
            );
        }
        assert!(said.contains("TWIN-OK"), "{opts:?}: {}", explain(&out));
        let notes = std::fs::metadata(user.home.join("notes.txt")).unwrap();
        assert_eq!(
            notes.uid(),
            user.uid,
            "{opts:?}: the twin is the user's on the host"
        );
        // The user's next login shell, and its logout, on the host.
        let ran = marks_after_login(&[&user.name], &marks.path);
        assert!(
            ran.is_empty(),
            "{opts:?}: planted and run on the host: {ran:?}"
        );
        assert!(!user.home.join(".ssh/authorized_keys").exists(), "{opts:?}");
    }
}

/// A program with privileges of its own already in a root-owned tree (a set-user-ID or
/// set-group-ID one, one with file capabilities: a chroot or an image being built) is not
/// written from inside: content stored through a shared mapping of it keeps the bits, where a
/// `write` would clear them. Every way to open it for writing is refused; the twin, an
/// ordinary program next to it, is written. Judged on the host: the programs are as they were.
#[test]
fn a_privileged_program_already_in_a_writable_tree_is_not_written() {
    assert!(is_root(), "started-as-root tests need root");
    let work = root_owned("privileged");
    let original = std::fs::read("/bin/true").unwrap();
    for (name, mode) in [
        ("suid", 0o4755),
        ("sgid", 0o2755),
        ("capped", 0o755),
        ("plain", 0o755),
    ] {
        let p = work.join(name);
        std::fs::write(&p, &original).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    }
    let setcap = Command::new("setcap")
        .args(["cap_net_raw+ep"])
        .arg(work.join("capped"))
        .output()
        .unwrap();
    assert!(setcap.status.success(), "setcap: {}", explain(&setcap));
    let script = r#"for f in suid sgid capped plain; do
  (: > "$f") 2>/dev/null && echo "TRUNCATED-$f"
  (printf x >> "$f") 2>/dev/null && echo "APPENDED-$f"
  perl -e 'open(F, "+<", $ARGV[0]) or exit 1' "$f" && echo "OPENED-$f"
done
"#;
    let out = sh(Caller::Invoker, &work.path, &["--network", "none"], script);
    let said = stdout(&out);
    for f in ["suid", "sgid", "capped"] {
        for how in ["TRUNCATED", "APPENDED", "OPENED"] {
            assert!(
                !said.contains(&format!("{how}-{f}")),
                "{how} {f}: {}",
                explain(&out)
            );
        }
        assert_eq!(
            std::fs::read(work.join(f)).unwrap(),
            original,
            "{f} on the host"
        );
    }
    for how in ["TRUNCATED", "APPENDED", "OPENED"] {
        assert!(
            said.contains(&format!("{how}-plain")),
            "the twin: {}",
            explain(&out)
        );
    }
    assert_eq!(std::fs::read(work.join("plain")).unwrap(), b"x");
    let modes = set_id_modes(&work.path);
    assert_eq!(
        modes.len(),
        2,
        "the set-ID programs keep their modes: {modes:?}"
    );
}

/// The homes of users with an empty shell field (`/bin/sh` to login and su) and of users whose
/// home does not exist yet (`useradd` without `-m`; made at the first login, which keeps a home
/// that exists) are protected as other users' homes are. Judged by their login shells.
#[test]
fn homes_with_an_empty_shell_or_not_made_yet_keep_their_protections() {
    assert!(is_root(), "started-as-root tests need root");
    let marks = TempDir::new_in("/var/tmp", "home-marks2");
    std::fs::set_permissions(
        &marks.path,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let caller_home = root_owned("caller-home2");
    let run = |cwd: &Path, script: &str| {
        Command::new(launcher())
            .args([
                "whole-process",
                "--network",
                "none",
                "--",
                "/bin/sh",
                "-c",
                script,
            ])
            .current_dir(cwd)
            .env("HOME", &caller_home.path)
            .env("MARKS", &marks.path)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    // An empty shell.
    let plain = integration::login::TestUser::new(Path::new("/bin/bash"));
    let usermod = Command::new("usermod")
        .args(["-s", "", &plain.name])
        .output()
        .unwrap();
    assert!(usermod.status.success(), "usermod: {}", explain(&usermod));
    let out = run(
        &plain.home,
        r#"echo 'touch "$MARKS/empty-shell-ran"' >> .profile 2>/dev/null || echo REFUSED-profile
echo notes > notes.txt && echo TWIN-OK"#,
    );
    assert!(
        stdout(&out).contains("REFUSED-profile"),
        "{}",
        explain(&out)
    );
    assert!(stdout(&out).contains("TWIN-OK"), "{}", explain(&out));
    // A home not made yet, in the working directory.
    let tree = root_owned("homes-tree");
    let name = format!("sl{}h", std::process::id());
    let home = tree.join(&name);
    let useradd = Command::new("useradd")
        .args(["-p", "*", "-s", "/bin/bash", "-d"])
        .arg(&home)
        .arg(&name)
        .output()
        .unwrap();
    assert!(useradd.status.success(), "useradd: {}", explain(&useradd));
    let uid = Command::new("id").args(["-u", &name]).output().unwrap();
    let later = integration::login::TestUser {
        name: name.clone(),
        home: home.clone(),
        uid: stdout(&uid).trim().parse().unwrap(),
    };
    let script = format!(
        r#"mkdir {name} && echo MADE
echo 'touch "$MARKS/new-home-ran"' > {name}/.profile 2>/dev/null || echo REFUSED-profile
echo 'touch "$MARKS/new-home-ran"' > {name}/.bash_profile 2>/dev/null || echo REFUSED-bash_profile
echo notes > {name}/notes.txt && echo TWIN-OK"#
    );
    let out = run(&tree.path, &script);
    for said in ["MADE", "REFUSED-profile", "REFUSED-bash_profile", "TWIN-OK"] {
        assert!(stdout(&out).contains(said), "{said}: {}", explain(&out));
    }
    let ran = marks_after_login(&[&plain.name, &later.name], &marks.path);
    assert!(ran.is_empty(), "planted and run on the host: {ran:?}");
}
