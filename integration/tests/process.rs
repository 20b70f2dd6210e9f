//! Privileges, seccomp, the PID/UTS/network namespaces and init, tried from inside.

use std::time::{Duration, Instant};

use integration::{
    command, cpus_allowed, explain, feed_stdin, inside_uid, sh, stderr, stdout, TempDir, CALLERS,
};

#[test]
fn status_shows_seccomp_filter_no_new_privs_and_no_capabilities() {
    for caller in CALLERS {
        let work = TempDir::new("status");
        let out = sh(caller, &work.path, &[], "cat /proc/self/status; id -u");
        let text = stdout(&out);
        assert!(out.status.success(), "{}", explain(&out));
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_else(|| panic!("{name} missing: {}", explain(&out)))
        };
        assert_eq!(field("Seccomp:"), "2");
        assert_eq!(field("NoNewPrivs:"), "1");
        for cap in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
            assert_eq!(field(cap), "0000000000000000", "{cap} {caller:?}");
        }
        assert_eq!(
            text.lines().last().unwrap().trim(),
            inside_uid(caller).to_string()
        );
    }
}

#[test]
fn only_loopback_exists_and_it_works() {
    // `none`: no route out at all. `restricted` (transparent egress): the only route leads into
    // `lo`, where the redirect hands connections to the proxy.
    for (mode, expected) in [
        ("none", "external: Network is unreachable"),
        ("restricted", "EXTERNAL-ROUTE from 127.0.0.1"),
    ] {
        for caller in CALLERS {
            let work = TempDir::new("net");
            let out = sh(
                caller,
                &work.path,
                // Landlock refuses TCP connects to loopback ports the policy does not open.
                &["--network", mode, "--allow-loopback-port", "47123"],
                r#"tail -n +3 /proc/self/net/dev | cut -d: -f1 | tr -d ' '
python3 - <<'PY'
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 47123)); s.listen(1)
port = s.getsockname()[1]
def serve():
    c, _ = s.accept(); c.sendall(b"loopback-ok"); c.close()
threading.Thread(target=serve).start()
c = socket.create_connection(("127.0.0.1", port)); print(c.recv(100).decode())
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(("192.0.2.1", 9))
    print("EXTERNAL-ROUTE from", u.getsockname()[0])
except OSError as e:
    print("external:", e.strerror)
PY"#,
            );
            let text = stdout(&out);
            let ifaces: Vec<&str> = text
                .lines()
                .take_while(|l| !l.contains("loopback-ok"))
                .collect();
            let ctx = || format!("{mode} {caller:?}: {}", explain(&out));
            assert_eq!(ifaces, ["lo"], "{}", ctx());
            assert!(text.contains("loopback-ok"), "{}", ctx());
            assert!(text.contains(expected), "{}", ctx());
        }
    }
}

#[test]
fn network_full_shares_the_host_network_and_says_so() {
    let work = TempDir::new("netfull");
    let out = sh(
        integration::Caller::Invoker,
        &work.path,
        &["--network", "full"],
        "tail -n +3 /proc/self/net/dev | wc -l",
    );
    assert!(out.status.success(), "{}", explain(&out));
    assert!(
        stderr(&out).contains("warning: network: full"),
        "{}",
        explain(&out)
    );
}

#[test]
fn nested_user_namespace_is_refused_but_fork_works() {
    for caller in CALLERS {
        let work = TempDir::new("nested");
        let out = sh(
            caller,
            &work.path,
            &[],
            "unshare -U true; echo unshare=$?; unshare -m true; echo mountns=$?; (echo forked) | cat",
        );
        let text = stdout(&out);
        assert!(text.contains("unshare=1"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("mountns=1"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("forked"), "{caller:?}: {}", explain(&out));
    }
}

#[test]
fn tiocsti_is_refused_on_a_terminal_while_other_ioctls_work() {
    for caller in CALLERS {
        let work = TempDir::new("tiocsti");
        let out = sh(
            caller,
            &work.path,
            &[],
            r#"python3 - <<'PY'
import fcntl, os, pty, struct, termios
master, slave = pty.openpty()
fcntl.ioctl(slave, termios.TIOCGWINSZ, b"\0" * 8); print("winsz-ok")
for cmd in (termios.TIOCSTI, termios.TIOCSTI | (1 << 32)):
    try:
        fcntl.ioctl(slave, cmd, b"x"); print("TIOCSTI-ALLOWED")
    except OSError as e:
        print("tiocsti:", e.errno)
try:
    fcntl.ioctl(slave, 0x541C, b"\x06"); print("TIOCLINUX-ALLOWED")
except OSError as e:
    print("tioclinux:", e.errno)
PY"#,
        );
        let text = stdout(&out);
        assert!(text.contains("winsz-ok"), "{caller:?}: {}", explain(&out));
        assert_eq!(
            text.matches("tiocsti: 1").count(),
            2,
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("tioclinux: 1"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!text.contains("ALLOWED"), "{caller:?}: {}", explain(&out));
    }
}

#[test]
fn exit_status_and_signal_deaths_pass_through() {
    for caller in CALLERS {
        let work = TempDir::new("exit");
        assert_eq!(sh(caller, &work.path, &[], "exit 0").status.code(), Some(0));
        assert_eq!(sh(caller, &work.path, &[], "exit 7").status.code(), Some(7));
        assert_eq!(
            sh(caller, &work.path, &[], "kill -9 $$").status.code(),
            Some(137)
        );
        assert_eq!(
            sh(caller, &work.path, &[], "kill -TERM $$").status.code(),
            Some(143)
        );
    }
}

#[test]
fn runs_as_pid_2_under_init_with_its_own_hostname() {
    for caller in CALLERS {
        let work = TempDir::new("pid");
        let out = sh(
            caller,
            &work.path,
            &[],
            "echo pid=$$; hostname; ls /proc | grep -c '^[0-9]'",
        );
        let text = stdout(&out);
        assert!(text.contains("pid=2"), "{}", explain(&out));
        assert!(text.contains("sandbox"), "{}", explain(&out));
        // init, sh, ls and grep at most: no host process is visible.
        let count: usize = text.lines().last().unwrap().trim().parse().unwrap();
        assert!(count <= 4, "{}", explain(&out));
    }
}

/// The launcher is its own C `main` (no Rust runtime start-up, see `process_start`): started
/// with its standard input and output closed, it puts `/dev/null` there before it opens
/// anything, so that nothing it opens (its policy, its control socket) becomes the program's
/// stdin or stdout.
#[test]
fn closed_standard_descriptors_become_dev_null() {
    use std::os::unix::process::CommandExt;
    for caller in CALLERS {
        let work = TempDir::new("closedfds");
        let mut cmd = command(
            caller,
            &work.path,
            &[
                "whole-process",
                "--",
                "/usr/bin/python3",
                "-c",
                "import os, sys; print(os.readlink('/proc/self/fd/0'), file=sys.stderr); \
                 print(os.readlink('/proc/self/fd/1'), file=sys.stderr); print('unseen')",
            ],
        );
        // SAFETY: only close(2) between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::close(0);
                libc::close(1);
                Ok(())
            });
        }
        let out = cmd.output().expect("run sandbox-launch");
        assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
        let err = stderr(&out);
        let lines: Vec<&str> = err.lines().collect();
        assert!(
            lines.len() >= 2 && lines[0] == "/dev/null" && lines[1] == "/dev/null",
            "{}",
            explain(&out)
        );
    }
}

/// Where a standard descriptor is closed and `/dev/null` cannot be opened in its place (a `/dev`
/// without it), the launcher refuses before doing anything, saying why and what to do (Rust's
/// own start-up aborted without a word); its twin, with the descriptor open, runs.
#[test]
fn a_closed_descriptor_without_dev_null_is_refused_with_the_reason() {
    for caller in CALLERS {
        let work = TempDir::new("nodevnull");
        let run = |close: &str| {
            let script = format!(
                "mount -t tmpfs tmpfs /dev && exec {} --version {close}",
                integration::launcher().display()
            );
            integration::command_with(
                std::path::Path::new("/usr/bin/unshare"),
                caller,
                &work.path,
                &["--user", "--map-root-user", "--mount", "sh", "-c", &script],
            )
            .output()
            .expect("run unshare")
        };
        let refused = run("<&-");
        assert_eq!(refused.status.code(), Some(110), "{}", explain(&refused));
        assert!(
            stderr(&refused)
                .contains("descriptor 0 (standard input) is closed and /dev/null cannot be opened"),
            "{}",
            explain(&refused)
        );
        let runs = run("");
        assert_eq!(runs.status.code(), Some(0), "{}", explain(&runs));
        assert!(
            stdout(&runs).starts_with("sandbox-launch "),
            "{}",
            explain(&runs)
        );
    }
}

/// SIGPIPE is ignored, as Rust's own start-up would have set it: a command writing to a pipe
/// nobody reads fails with EPIPE (a panic, exit code 101) instead of being killed by the
/// signal; its allowed twin prints in full to a pipe that is read.
#[test]
fn a_closed_pipe_is_an_error_not_a_signal() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    for caller in CALLERS {
        let work = TempDir::new("sigpipe");
        let read = command(caller, &work.path, &["check"]).output().unwrap();
        assert_eq!(read.status.code(), Some(0), "{}", explain(&read));
        assert!(stdout(&read).contains("policy files"), "{}", explain(&read));

        let mut child = command(caller, &work.path, &["check"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.signal(),
            None,
            "killed by a signal: {}",
            explain(&out)
        );
        assert_eq!(out.status.code(), Some(101), "{}", explain(&out));
        assert!(stderr(&out).contains("Broken pipe"), "{}", explain(&out));
    }
}

#[test]
fn missing_program_is_reported_and_exits_127() {
    for caller in CALLERS {
        let work = TempDir::new("noexec");
        let out = command(
            caller,
            &work.path,
            &["whole-process", "--", "no-such-program-xyz"],
        )
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(127), "{}", explain(&out));
        assert!(
            stderr(&out).contains("no-such-program-xyz: not found"),
            "{}",
            explain(&out)
        );
    }
}

#[test]
fn json_status_reports_the_verified_facts() {
    use std::os::unix::process::CommandExt;
    let work = TempDir::new("jsonstatus");
    let (mut rd, wr) = std::io::pipe().unwrap();
    let wr_fd = std::os::fd::AsRawFd::as_raw_fd(&wr);
    let mut cmd = command(
        integration::Caller::Unprivileged,
        &work.path,
        &["whole-process", "--json-status-fd", "9", "--", "true"],
    );
    // SAFETY: dup2 in the child before exec.
    unsafe {
        cmd.pre_exec(move || integration::place_fd(wr_fd, 9));
    }
    let out = cmd.output().unwrap();
    drop(wr);
    drop(cmd);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut rd, &mut text).unwrap();
    assert!(out.status.success(), "{}", explain(&out));
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let verified = lines
        .iter()
        .find(|v| v["status"] == "verified")
        .expect(&text);
    assert_eq!(verified["facts"]["seccomp_mode"], 2);
    assert_eq!(verified["facts"]["no_new_privs"], true);
    // Init's threads share one program; the main thread has the narrowing filter on top.
    assert_eq!(verified["facts"]["seccomp_filters"], 2, "{text}");
    assert_eq!(
        verified["facts"]["guard_thread"]["seccomp_mode"], 2,
        "{text}"
    );
    assert_eq!(
        verified["facts"]["guard_thread"]["seccomp_filters"], 1,
        "{text}"
    );
    assert_eq!(verified["facts"]["landlock"]["enforced"], true);
    assert_eq!(
        verified["facts"]["network_interfaces"],
        serde_json::json!(["lo"])
    );
    assert!(
        lines
            .iter()
            .any(|v| v["status"] == "exited" && v["exit_code"] == 0),
        "{text}"
    );
}

/// Processes whose whole command line is `marker` (not the shell that started them).
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.trim_end() == marker {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > Duration::from_secs(10) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn wait_until(mut cond: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigkill_of_the_launcher_leaves_no_process_and_no_file_behind() {
    for caller in CALLERS {
        let work = TempDir::new("sigkill");
        let marker = format!("{}", 900_000 + std::process::id() % 10_000);
        let script = format!("sleep {marker} & sleep {marker}");
        let mut child = command(
            caller,
            &work.path,
            &["whole-process", "--", "/bin/sh", "-c", &script],
        )
        .spawn()
        .unwrap();
        let started = wait_for(|| processes_with(&format!("sleep {marker}")).len() == 2);
        if !started {
            let _ = child.kill();
            panic!("{caller:?}: the two sleeps never started");
        }
        // The launcher itself (setpriv execs it, so the pid is the same).
        // SAFETY: kill of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        wait_until(
            || processes_with(&format!("sleep {marker}")).is_empty(),
            "the sandbox to die",
        );
        // Files the inside needs (resolv.conf for the DNS stub, a TLS trust bundle) are written
        // by the shim into its own tmpfs, never on the host where a killed launcher would leave
        // them.
        let leftover = std::path::Path::new("/tmp").join(format!("sandbox-launch-{}", child.id()));
        assert!(
            !leftover.exists(),
            "{caller:?}: {} was left behind",
            leftover.display()
        );
    }
}

#[test]
fn stragglers_are_killed_when_the_target_exits() {
    for caller in CALLERS {
        let work = TempDir::new("straggler");
        let marker = format!("{}", 800_000 + std::process::id() % 10_000);
        let out = sh(
            caller,
            &work.path,
            &[],
            &format!("sleep {marker} & echo started"),
        );
        assert!(stdout(&out).contains("started"), "{}", explain(&out));
        // Gone already when the launcher has exited: the shim reports the exit code only once
        // everything inside is reaped.
        let left = processes_with(&format!("sleep {marker}"));
        assert!(left.is_empty(), "{caller:?}: still running: {left:?}");
    }
}

#[test]
fn sigterm_to_the_launcher_reaches_the_target() {
    // Twice: before the proxy has started (it starts on first use) and after a request started it.
    for (caller, prelude) in CALLERS.into_iter().flat_map(|c| {
        [
            (c, ""),
            (c, "curl -s -m 5 http://denied.test/ >/dev/null; "),
        ]
    }) {
        let work = TempDir::new("sigterm");
        let script = format!("{prelude}trap 'echo got-term > term.txt; exit 42' TERM; echo ready > ready.txt; while :; do sleep 0.05; done");
        let script = script.as_str();
        let mut child = command(
            caller,
            &work.path,
            &["whole-process", "--", "/bin/sh", "-c", script],
        )
        .spawn()
        .unwrap();
        wait_until(|| work.join("ready.txt").exists(), "the target to start");
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(42), "{caller:?} {prelude:?}");
        assert_eq!(
            std::fs::read_to_string(work.join("term.txt")).unwrap(),
            "got-term\n"
        );
    }
}

#[test]
fn per_command_runs_a_shell_command_in_the_same_sandbox() {
    for caller in CALLERS {
        let work = TempDir::new("percmd");
        let out = command(
            caller,
            &work.path,
            &[
                "per-command",
                "-c",
                "echo a > f && cat f && grep Seccomp: /proc/self/status",
            ],
        )
        .output()
        .unwrap();
        assert!(out.status.success(), "{}", explain(&out));
        assert!(stdout(&out).contains("a\nSeccomp:\t2"), "{}", explain(&out));
    }
}

#[test]
fn as_a_login_shell_it_sandboxes_the_session_and_remote_commands() {
    use std::os::unix::process::CommandExt;
    // `login` starts the shell as `-sandbox-launch`: an interactive login shell inside.
    let work = TempDir::new("login");
    let mut child = std::process::Command::new(integration::launcher())
        .arg0("-sandbox-launch")
        .current_dir(&work.path)
        .env("HOME", &work.path)
        .env("SANDBOX_LAUNCH_SHELL", "/bin/sh")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    feed_stdin(
        &mut child,
        b"echo session: $(hostname) $$; grep Seccomp: /proc/self/status\n",
    );
    let out = child.wait_with_output().unwrap();
    let text = stdout(&out);
    assert!(text.contains("session: sandbox 2"), "{}", explain(&out));
    assert!(text.contains("Seccomp:\t2"), "{}", explain(&out));
    // sshd runs a remote command as `shell -c COMMAND`.
    for caller in CALLERS {
        let out = command(
            caller,
            &work.path,
            &["-c", "echo remote: $(hostname); exit 3"],
        )
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(3), "{caller:?}: {}", explain(&out));
        assert!(
            stdout(&out).contains("remote: sandbox"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn the_events_stream_records_the_sandbox_lifecycle() {
    // Besides network decisions, `--events` gets the sandbox's life: launch, verified (with the
    // facts), running, exited with the program's status — or failed with the step.
    for caller in CALLERS {
        let work = TempDir::new("events-life");
        let file = work.join("events.jsonl");
        let path = file.to_str().unwrap();
        let out = sh(
            caller,
            &work.path,
            &["--network", "none", "--events", path],
            "exit 3",
        );
        assert_eq!(out.status.code(), Some(3), "{caller:?}: {}", explain(&out));
        let read = || -> Vec<serde_json::Value> {
            std::fs::read_to_string(&file)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let evs = read();
        let kinds: Vec<&str> = evs.iter().map(|e| e["event"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["launch", "verified", "running", "exited"],
            "{evs:?}"
        );
        assert_eq!(evs[0]["argv"][2], "exit 3");
        assert_eq!(evs[1]["facts"]["seccomp_mode"], 2);
        assert_eq!(evs[3]["exit_code"], 3);
        assert!(evs
            .iter()
            .all(|e| e["time"].as_str().unwrap().ends_with('Z')));

        std::fs::remove_file(&file).unwrap();
        let out = sh(
            caller,
            &work.path,
            &["--seccomp-policy", "no-such-policy", "--events", path],
            "echo ran > marker",
        );
        assert_eq!(
            out.status.code(),
            Some(111),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!work.join("marker").exists());
        let evs = read();
        let failed = evs.last().unwrap();
        assert_eq!(failed["event"], "failed", "{evs:?}");
        assert_eq!(failed["step"], "policy", "{evs:?}");
    }
}

#[test]
fn the_program_may_run_on_every_cpu_its_caller_may() {
    // The supervisor moves the sandbox's first process to another CPU right after the clone
    // (speed) and gives it back its CPUs: the program must see exactly the caller's set, both
    // the whole one and one narrowed by the caller.
    let own = cpus_allowed(&std::fs::read_to_string("/proc/self/status").unwrap()).unwrap();
    for caller in CALLERS {
        let work = TempDir::new("cpus");
        let out = sh(caller, &work.path, &[], "cat /proc/self/status");
        assert!(out.status.success(), "{}", explain(&out));
        assert_eq!(
            cpus_allowed(&stdout(&out)).as_deref(),
            Some(own.as_str()),
            "{caller:?}"
        );

        let first = own.split([',', '-']).next().unwrap().to_string();
        let launcher = integration::launcher().to_str().unwrap().to_string();
        let out = integration::command_with(
            std::path::Path::new("taskset"),
            caller,
            &work.path,
            &[
                "-c",
                &first,
                &launcher,
                "whole-process",
                "--",
                "cat",
                "/proc/self/status",
            ],
        )
        .output()
        .unwrap();
        assert!(out.status.success(), "{}", explain(&out));
        assert_eq!(
            cpus_allowed(&stdout(&out)).as_deref(),
            Some(first.as_str()),
            "{caller:?}"
        );
    }
}
