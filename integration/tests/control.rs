//! The control plane of running sandboxes (issue 12): `ps`, `stop`, `events`, stale sockets of
//! killed launchers, and the control socket's isolation — from inside a sandbox no path, no
//! abstract name and no inherited descriptor leads to it, while the same user outside reaches
//! it. Each test's control sockets live in the harness's private `XDG_RUNTIME_DIR` (or one of
//! the test's own), never the invoker's.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration::live::{control_dir, ctl, listed, ps, wait_for_file, Running};
use integration::{command, explain, is_root, stderr, stdout, Caller, TempDir, CALLERS, NOBODY};
use serde_json::Value;

#[test]
fn ps_lists_a_running_sandbox_and_stop_ends_it_term_first_then_kill() {
    for caller in CALLERS {
        let work = TempDir::new("ctl-stop");
        // A program that ends on SIGTERM, leaving a marker on the host.
        let polite = Running::start(
            caller,
            &work.path,
            "polite",
            &[],
            "trap 'echo got-term > term-marker; exit 3' TERM; touch started; while :; do sleep 0.1; done",
        );
        wait_for_file(&work.join("started"));
        let row = listed(caller, &work.path, "polite");
        assert_eq!(row["pid"], polite.child.id(), "{row}");
        assert_eq!(row["mode"], "whole-process", "{row}");
        assert_eq!(row["network"], "restricted", "{row}");
        assert_eq!(row["program"][0], "/bin/sh", "{row}");
        assert!(row["id"].as_str().unwrap().len() == 8, "{row}");
        let socket = control_dir(caller).join("polite.sock");
        assert!(socket.exists(), "{caller:?}: no {}", socket.display());
        let out = ctl(caller, &work.path, &["stop", "polite", "--grace", "5"]);
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        let ended = polite.finish(Duration::from_secs(10));
        assert_eq!(
            ended.status.code(),
            Some(3),
            "{caller:?}: {}",
            explain(&ended)
        );
        assert!(
            work.join("term-marker").exists(),
            "{caller:?}: no SIGTERM seen"
        );
        assert!(
            !socket.exists(),
            "{caller:?}: the socket outlived its sandbox"
        );

        // A program that ignores SIGTERM is killed after the grace.
        let stubborn = Running::start(
            caller,
            &work.path,
            "stubborn",
            &[],
            "trap '' TERM; touch started2; while :; do sleep 0.1; done",
        );
        wait_for_file(&work.join("started2"));
        let t0 = Instant::now();
        let out = ctl(caller, &work.path, &["stop", "stubborn", "--grace", "1"]);
        let took = t0.elapsed();
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        let ended = stubborn.finish(Duration::from_secs(10));
        assert_eq!(
            ended.status.code(),
            Some(128 + 9),
            "{caller:?}: {}",
            explain(&ended)
        );
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(8),
            "{caller:?}: stop took {took:?}"
        );
        assert!(ps(caller, &work.path)
            .iter()
            .all(|r| r["name"] != "stubborn"));
    }
}

#[test]
fn ps_removes_the_socket_a_killed_launcher_left_and_the_name_is_free_again() {
    for caller in CALLERS {
        let work = TempDir::new("ctl-stale");
        let mut doomed = Running::start(
            caller,
            &work.path,
            "doomed",
            &[],
            "touch started; while :; do sleep 0.1; done",
        );
        wait_for_file(&work.join("started"));
        listed(caller, &work.path, "doomed");
        // SAFETY: kill of our own child (setpriv execs the launcher: same pid).
        unsafe { libc::kill(doomed.child.id() as i32, libc::SIGKILL) };
        doomed.child.wait().unwrap();
        let socket = control_dir(caller).join("doomed.sock");
        assert!(
            socket.exists(),
            "{caller:?}: SIGKILL leaves the socket (stale)"
        );
        assert!(ps(caller, &work.path).iter().all(|r| r["name"] != "doomed"));
        assert!(
            !socket.exists(),
            "{caller:?}: ps did not remove the stale socket"
        );
        // A stale socket does not hold the name either (made stale again, then reused).
        let again = Running::start(caller, &work.path, "doomed", &[], "true");
        let out = again.finish(Duration::from_secs(10));
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
    }
}

#[test]
fn a_name_in_use_is_refused_before_anything_runs() {
    for caller in CALLERS {
        let work = TempDir::new("ctl-dup");
        let first = Running::start(
            caller,
            &work.path,
            "twin",
            &[],
            "touch started; while :; do sleep 0.1; done",
        );
        wait_for_file(&work.join("started"));
        listed(caller, &work.path, "twin");
        let out = ctl(
            caller,
            &work.path,
            &[
                "whole-process",
                "--name",
                "twin",
                "--",
                "/bin/sh",
                "-c",
                "touch ran-twice",
            ],
        );
        assert_eq!(out.status.code(), Some(2), "{caller:?}: {}", explain(&out));
        assert!(
            stderr(&out).contains("already running"),
            "{}",
            explain(&out)
        );
        assert!(!work.join("ran-twice").exists());
        drop(first);
    }
}

#[test]
fn events_follow_streams_until_the_sandbox_ends() {
    for caller in CALLERS {
        let work = TempDir::new("ctl-events");
        let sb = Running::start(
            caller,
            &work.path,
            "chatty",
            &[],
            "touch started; while [ ! -e go ]; do sleep 0.05; done; exit 7",
        );
        wait_for_file(&work.join("started"));
        listed(caller, &work.path, "chatty");
        let follower = command(
            caller,
            &work.path,
            &["events", "chatty", "--follow", "--json"],
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        std::fs::write(work.join("go"), "").unwrap();
        let out = follower.wait_with_output().unwrap();
        sb.finish(Duration::from_secs(10));
        let events: Vec<Value> = stdout(&out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
        assert!(kinds.contains(&"running"), "{caller:?}: {kinds:?}");
        assert!(
            events
                .iter()
                .any(|e| e["event"] == "exited" && e["exit_code"] == 7),
            "{caller:?}: {kinds:?}"
        );
    }
}

/// From inside, every way to the control sockets: the directory, the socket paths, every unix
/// socket the network namespace lists (paths and abstract names), and every descriptor.
const PROBE: &str = r#"
import os, socket, sys
d = sys.argv[1]
def attempt(addr, label):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(addr)
        s.sendall(b'{"op":"status"}\n')
        data = s.recv(4096)
        print("REACHED" if b'"ok":true' in data else "refused-by-peer-check", label, data[:100])
    except OSError as e:
        print("blocked", label, e.errno)
    finally:
        s.close()
try:
    print("LISTED" if os.listdir(d) else "listed-empty", d)
except OSError as e:
    print("blocked-dir", e.errno)
for name in ("outside.sock", "probe.sock"):
    attempt(os.path.join(d, name), name)
# Every unix socket the namespace lists whose name could be the control plane's (others, of
# whatever else runs on the host, are left alone: the daemons other tests start in
# /var/cache/sandbox-launch-tests count who connects).
for line in open("/proc/net/unix").read().splitlines()[1:]:
    parts = line.split()
    if len(parts) >= 8 and "sandbox-launch" in parts[7] and "sandbox-launch-tests" not in parts[7]:
        p = parts[7]
        attempt("\0" + p[1:] if p.startswith("@") else p, p)
for fd in os.listdir("/proc/self/fd"):
    try:
        s = socket.socket(fileno=os.dup(int(fd)))
    except OSError:
        continue
    if s.family == socket.AF_UNIX:
        print("fd", fd, repr(s.getsockname()), repr(s.getpeername() if s.type else ""))
        try:
            s.settimeout(1)
            s.sendall(b'{"op":"status"}\n')
            print("REACHED" if b'"ok":true' in s.recv(4096) else "fd-silent", fd)
        except OSError as e:
            print("fd-blocked", fd, e.errno)
print("probe-done")
"#;

#[test]
fn the_control_socket_cannot_be_reached_from_inside() {
    let allow_list = "version: 1\nlandlock:\n  compatibility: best_effort\nfilesystem_policy:\n  include_workdir: true\n  read_only: [/usr, /lib, /lib64, /bin, /etc]\n";
    for caller in CALLERS {
        let work = TempDir::new("ctl-reach");
        std::fs::write(work.join("probe.py"), PROBE).unwrap();
        std::fs::write(work.join("allow-list.yaml"), allow_list).unwrap();
        work.give_to_sandbox_user(&work.path);
        // The runtime directory inside the working directory, which every sandbox here can see
        // and write: only the launcher's hiding keeps the sockets out of reach.
        let xdg = work.join("run");
        std::fs::create_dir(&xdg).unwrap();
        let uid = if caller == Caller::Unprivileged && is_root() {
            NOBODY
        } else {
            // SAFETY: getuid cannot fail.
            unsafe { libc::getuid() }
        };
        if is_root() {
            let status = Command::new("chown")
                .arg(format!("{uid}:{uid}"))
                .arg(&xdg)
                .status()
                .unwrap();
            assert!(status.success());
        }
        std::fs::set_permissions(&xdg, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let outside = Running::start_with(
            caller,
            &work.path,
            "outside",
            &[],
            "touch started; while :; do sleep 0.1; done",
            Some(&xdg),
        );
        wait_for_file(&work.join("started"));
        let dir = xdg.join("sandbox-launch");
        let dir_arg = dir.to_str().unwrap().to_string();
        let policy_arg = work.join("allow-list.yaml").to_str().unwrap().to_string();
        for opts in [
            vec![],
            vec!["--policy", policy_arg.as_str()],
            vec!["--network", "full"],
        ] {
            let probe = Running::start_with(
                caller,
                &work.path,
                "probe",
                &opts,
                &format!("python3 probe.py {dir_arg}"),
                Some(&xdg),
            );
            let out = probe.finish(Duration::from_secs(60));
            let text = stdout(&out);
            assert!(
                text.contains("probe-done"),
                "{caller:?} {opts:?}: {}",
                explain(&out)
            );
            assert!(
                !text.contains("REACHED") && !text.contains("LISTED"),
                "{caller:?} {opts:?}: the control plane was reachable from inside: {text}"
            );
            assert!(
                text.contains("blocked outside.sock"),
                "{caller:?} {opts:?}: {text}"
            );
        }
        // The allowed twin: outside, the same user reaches the socket the probe could not.
        let mut cmd = command(caller, &work.path, &["ps", "--json"]);
        cmd.env("XDG_RUNTIME_DIR", &xdg);
        let out = cmd.output().unwrap();
        assert!(
            stdout(&out).contains("\"name\":\"outside\""),
            "{caller:?}: {}",
            explain(&out)
        );
        drop(outside);
    }
}

#[test]
fn denials_are_counted_by_ps_and_summed_up_at_exit_with_v_only() {
    let server = integration::net::HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("ctl-denied");
        let p = server.port;
        let script = format!(
            "for h in pypi.test pypi.test files.test; do curl -s --max-time 5 -o /dev/null http://$h:{p}/x; done
touch curled; while [ ! -e go ]; do sleep 0.05; done"
        );
        for verbose in [true, false] {
            let _ = std::fs::remove_file(work.join("curled"));
            let _ = std::fs::remove_file(work.join("go"));
            let mut opts = vec![
                "--resolve",
                "pypi.test:127.0.0.1",
                "--resolve",
                "files.test:127.0.0.1",
            ];
            if verbose {
                opts.push("-v");
            }
            let name = if verbose { "loud" } else { "quiet" };
            let sb = Running::start(caller, &work.path, name, &opts, &script);
            wait_for_file(&work.join("curled"));
            let row = listed(caller, &work.path, name);
            assert_eq!(row["denied"]["total"], 3, "{caller:?}: {row}");
            assert_eq!(row["denied"]["hosts"][0]["host"], "pypi.test", "{row}");
            assert_eq!(row["denied"]["hosts"][0]["count"], 2, "{row}");
            std::fs::write(work.join("go"), "").unwrap();
            let out = sb.finish(Duration::from_secs(20));
            let summary = "3 requests denied (pypi.test ×2, files.test): allow with \
                           --allow-domain pypi.test --allow-domain files.test";
            assert_eq!(
                stderr(&out).contains(summary),
                verbose,
                "{caller:?} -v={verbose}: {}",
                explain(&out)
            );
            if !verbose {
                assert!(!stderr(&out).contains("denied"), "{}", explain(&out));
            }
        }
        assert!(!server.saw("/x"));
    }
}

#[test]
fn without_a_runtime_directory_the_socket_lives_in_memory_and_goes_with_the_sandbox() {
    // No XDG_RUNTIME_DIR and no /run/user/<uid> (the unprivileged user of a root test run): the
    // control directory is the fallback, made for the launch and removed with its last socket.
    // Where /dev/shm is a tmpfs it is there (on a disk-backed /tmp, making and removing it cost
    // about 0.2 ms of every launch); `ps` finds the sandbox in it all the same, and the socket
    // is gone when the sandbox ends.
    let caller = Caller::Unprivileged;
    let uid = NOBODY;
    let fs = Command::new("stat")
        .args(["-f", "-c", "%T", "/dev/shm"])
        .output()
        .unwrap();
    let shm = stdout(&fs).trim() == "tmpfs";
    assert!(
        shm && is_root() && !std::path::Path::new(&format!("/run/user/{uid}")).exists(),
        "this test needs a tmpfs /dev/shm, root and no /run/user/{uid}"
    );
    let work = TempDir::new("ctl-fallback");
    let name = format!("fallback-{}", std::process::id());
    let child = command(
        caller,
        &work.path,
        &[
            "whole-process",
            "--name",
            &name,
            "--",
            "/bin/sh",
            "-c",
            "touch started; while [ ! -e go ]; do sleep 0.05; done",
        ],
    )
    .env_remove("XDG_RUNTIME_DIR")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_for_file(&work.join("started"));
    let dir = std::path::PathBuf::from(format!("/dev/shm/sandbox-launch-{uid}"));
    let socket = dir.join(format!("{name}.sock"));
    let meta = std::fs::symlink_metadata(&socket).expect("the control socket in /dev/shm");
    assert!(meta.file_type().is_socket());
    let dir_meta = std::fs::symlink_metadata(&dir).unwrap();
    assert_eq!((dir_meta.uid(), dir_meta.mode() & 0o777), (uid, 0o700));
    let out = command(caller, &work.path, &["ps", "--json"])
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains(&format!("\"name\":\"{name}\"")),
        "{}",
        explain(&out)
    );
    std::fs::write(work.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", explain(&out));
    assert!(!socket.exists(), "the socket outlived its sandbox");
    assert!(!std::path::Path::new(&format!("/tmp/sandbox-launch-{uid}/{name}.sock")).exists());
}
