//! Resource limits, tried for real from inside: `--timeout` ends the whole tree, a fork bomb
//! under `--pids` and a memory hog under `--memory` are contained and reported while the
//! launcher carries on, `/tmp` stops at its size, `--rlimit` is what the program sees, and the
//! sandbox (not the supervisor) is the OOM killer's first choice. As root the launcher makes
//! its groups below its own; as uid 65534 it runs in groups delegated to that user, as an
//! administrator would delegate them. Judged on the host where it can be: no process left,
//! no group left, the supervisor's own OOM score untouched.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use integration::cgroups::{own_groups, Delegated};
use integration::*;

/// The launcher as `caller`, in delegated groups when the caller is the unprivileged user
/// started by root (who has no group of its own to make the sandbox's below).
fn launch(caller: Caller, work: &Path, args: &[&str], controllers: &[&str]) -> Output {
    let (mut cmd, _delegated) = prepared(caller, work, args, controllers);
    cmd.output().unwrap()
}

fn prepared(
    caller: Caller,
    work: &Path,
    args: &[&str],
    controllers: &[&str],
) -> (Command, Option<Delegated>) {
    let mut cmd = command(caller, work, args);
    let delegated = (caller == Caller::Unprivileged && is_root() && !controllers.is_empty())
        .then(|| Delegated::new(controllers));
    if let Some(d) = &delegated {
        d.start_in(&mut cmd);
    }
    (cmd, delegated)
}

/// Processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// What is left of the processes with `marker` once they are gone, or after a generous
/// deadline (a loaded machine can take seconds to tear a namespace down): empty when gone.
fn left_after_polling(marker: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = processes_with(marker);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A number no other test uses in a command line.
fn marker(base: u32) -> String {
    format!("{}.{}", base, std::process::id() % 100_000)
}

/// No `sandbox-launch-<pid>` group of the launcher `pid` is left anywhere.
fn assert_no_group_left(pid: u32, delegated: Option<&Delegated>) {
    let name = format!("sandbox-launch-{pid}");
    let mut parents: Vec<PathBuf> = own_groups(&["memory", "pids", "cpu"]);
    if let Some(d) = delegated {
        parents.extend(d.dirs.iter().cloned());
    }
    for p in parents {
        assert!(
            !p.join(&name).exists(),
            "{} was left behind",
            p.join(&name).display()
        );
    }
}

#[test]
fn timeout_ends_the_whole_tree_with_exit_124() {
    for caller in CALLERS {
        let work = TempDir::new("timeout");
        // Sleeps that would outlast the polling below by far.
        let (bg, fg) = (marker(90), marker(60));
        let start = Instant::now();
        let out = sh(
            caller,
            &work.path,
            &["--network", "none", "--timeout", "1"],
            &format!("sleep {bg} & sleep {fg}"),
        );
        let took = start.elapsed();
        assert_eq!(
            out.status.code(),
            Some(124),
            "{caller:?}: {}",
            explain(&out)
        );
        // Cut short after 1 s, with room for a loaded machine.
        assert!(took < Duration::from_secs(8), "{caller:?}: took {took:?}");
        assert!(
            stderr(&out).contains("ran out of time (--timeout 1s)"),
            "{}",
            explain(&out)
        );
        // Nothing left on the host once the launcher has returned (the launcher waits for
        // init, whose namespace takes the sleeps down).
        assert_eq!(left_after_polling(&bg), Vec::<String>::new(), "{caller:?}");
        assert_eq!(left_after_polling(&fg), Vec::<String>::new(), "{caller:?}");
    }
}

#[test]
fn timeout_kills_a_program_that_ignores_sigterm_after_the_grace_period() {
    for caller in CALLERS {
        let work = TempDir::new("timeout-trap");
        let fg = marker(61);
        let start = Instant::now();
        let out = sh(
            caller,
            &work.path,
            &["--network", "none", "--timeout", "500ms"],
            &format!("trap '' TERM; sleep {fg}; echo survived"),
        );
        let took = start.elapsed();
        assert_eq!(
            out.status.code(),
            Some(124),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            took >= Duration::from_millis(2400) && took < Duration::from_secs(6),
            "{caller:?}: took {took:?} (0.5 s, then a 2 s grace)"
        );
        assert!(!stdout(&out).contains("survived"), "{}", explain(&out));
        assert_eq!(left_after_polling(&fg), Vec::<String>::new(), "{caller:?}");
    }
}

#[test]
fn a_program_within_its_timeout_keeps_its_own_exit_status() {
    for caller in CALLERS {
        let work = TempDir::new("timeout-fast");
        let out = sh(caller, &work.path, &["--timeout", "30s"], "exit 7");
        assert_eq!(out.status.code(), Some(7), "{caller:?}: {}", explain(&out));
    }
}

/// Python that forks up to 400 children (each sleeps 3 s) and says how many it got.
const FORK_BOMB: &str = r#"
import os, time
made = refused = 0
for i in range(400):
    try:
        pid = os.fork()
    except BlockingIOError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    made += 1
print("made", made, "refused", refused, flush=True)
"#;

#[test]
fn a_fork_bomb_under_pids_is_contained_and_the_launcher_carries_on() {
    for caller in CALLERS {
        let work = TempDir::new("pids");
        let events = work.join("events.jsonl");
        let args = [
            "whole-process",
            "--network",
            "none",
            "--pids",
            "200",
            "--events",
            events.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            FORK_BOMB,
        ];
        let (mut cmd, delegated) = prepared(caller, &work.path, &args, &["pids"]);
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let launcher_pid = child.id();
        let out = child.wait_with_output().unwrap();
        let text = stdout(&out);
        let made: u32 = text
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{caller:?}: {}", explain(&out)));
        assert!(
            (150..200).contains(&made) && text.contains("refused") && !text.contains("refused 0"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(out.status.code(), Some(0), "{caller:?}: {}", explain(&out));
        assert!(
            stderr(&out).contains("the process limit (200) was reached"),
            "{caller:?}: {}",
            explain(&out)
        );
        let log = std::fs::read_to_string(&events).unwrap();
        assert!(
            log.lines()
                .any(|l| l.contains("\"event\":\"limit_reached\"") && l.contains("\"pids\"")),
            "{caller:?}: {log}"
        );
        assert_no_group_left(launcher_pid, delegated.as_ref());
        // The host still forks (the bomb's processes were charged to the sandbox alone).
        assert!(Command::new("true").status().unwrap().success());
    }
}

#[test]
fn a_memory_hog_under_memory_is_killed_and_reported() {
    for caller in CALLERS {
        let work = TempDir::new("memory");
        let args = [
            "whole-process",
            "--network",
            "none",
            "--memory",
            "200M",
            "--",
            "python3",
            "-c",
            "b = b'x' * (600 << 20); print('survived', len(b))",
        ];
        let (mut cmd, delegated) = prepared(caller, &work.path, &args, &["memory"]);
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let launcher_pid = child.id();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(137),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!stdout(&out).contains("survived"), "{}", explain(&out));
        assert!(
            stderr(&out)
                .contains("the memory limit (200M) was reached: the kernel killed 1 process"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_no_group_left(launcher_pid, delegated.as_ref());
    }
}

#[test]
fn within_its_limits_a_program_runs_and_nothing_is_reported() {
    for caller in CALLERS {
        let work = TempDir::new("limits-quiet");
        let out = launch(
            caller,
            &work.path,
            &[
                "whole-process",
                "--memory",
                "300M",
                "--pids",
                "100",
                "--cpus",
                "0.5",
                "--",
                "python3",
                "-c",
                "b = b'x' * (20 << 20); print('fine', len(b) >> 20)",
            ],
            &["memory", "pids", "cpu"],
        );
        assert_eq!(out.status.code(), Some(0), "{caller:?}: {}", explain(&out));
        assert!(stdout(&out).contains("fine 20"), "{}", explain(&out));
        assert!(!stderr(&out).contains("limit"), "{}", explain(&out));
    }
}

#[test]
fn cpus_throttle_the_sandbox() {
    // Two busy loops for 1 s of wall time under --cpus 0.25: at most ~0.25 s of CPU between
    // them (the kernel enforces it per 100 ms period), where unthrottled they would take ~2 s.
    for caller in CALLERS {
        let work = TempDir::new("cpus");
        let out = launch(
            caller,
            &work.path,
            &[
                "whole-process",
                "--network",
                "none",
                "--cpus",
                "0.25",
                "--",
                "python3",
                "-c",
                r#"
import os, time
def spin():
    end = time.time() + 1
    while time.time() < end: pass
pid = os.fork()
spin()
if pid == 0: os._exit(0)
os.waitpid(pid, 0)
t = os.times()
print("cpu", round(t.user + t.system + t.children_user + t.children_system, 2))
"#,
            ],
            &["cpu"],
        );
        let cpu: f64 = stdout(&out)
            .strip_prefix("cpu ")
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{caller:?}: {}", explain(&out)));
        assert!(cpu < 0.6, "{caller:?}: {cpu} s of CPU under --cpus 0.25");
    }
}

#[test]
fn filling_tmp_stops_at_its_size() {
    for caller in CALLERS {
        let work = TempDir::new("tmp-size");
        let out = sh(
            caller,
            &work.path,
            &["--network", "none", "--tmp-size", "8M"],
            "dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>&1 | grep -o 'No space left'; \
             echo tmp=$(du -k /tmp/fill | cut -f1); \
             dd if=/dev/zero of=/dev/shm/fill bs=1M count=32 2>/dev/null; \
             echo shm=$(du -k /dev/shm/fill | cut -f1)",
        );
        let text = stdout(&out);
        assert!(
            text.contains("No space left"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("tmp=8192"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("shm=8192"), "{caller:?}: {}", explain(&out));
    }
}

#[test]
fn tmp_defaults_to_a_quarter_of_the_ram_and_half_the_memory_limit() {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    for caller in CALLERS {
        let work = TempDir::new("tmp-default");
        let size_kib = |opts: &[&str], controllers: &[&str]| -> u64 {
            let mut args = vec!["whole-process", "--network", "none"];
            args.extend_from_slice(opts);
            args.extend_from_slice(&["--", "/bin/sh", "-c", "df -k /tmp | tail -1"]);
            let out = launch(caller, &work.path, &args, controllers);
            stdout(&out)
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{caller:?}: {}", explain(&out)))
        };
        let quarter = size_kib(&[], &[]);
        assert!(
            quarter.abs_diff(total_kib / 4) < total_kib / 100,
            "{caller:?}: /tmp is {quarter} KiB of {total_kib} KiB RAM"
        );
        assert_eq!(
            size_kib(&["--memory", "64M"], &["memory"]),
            32 * 1024,
            "{caller:?}"
        );
    }
}

#[test]
fn rlimits_are_what_the_program_sees_and_core_is_off_unless_asked() {
    for caller in CALLERS {
        let work = TempDir::new("rlimit");
        let out = sh(
            caller,
            &work.path,
            &["--rlimit", "nofile=64:128", "--rlimit", "fsize=1M"],
            "echo n=$(ulimit -Sn):$(ulimit -Hn) c=$(ulimit -Sc):$(ulimit -Hc) f=$(ulimit -f)",
        );
        assert!(
            stdout(&out).contains("n=64:128 c=0:0 f=2048"),
            "{caller:?}: {}",
            explain(&out)
        );
        let out = sh(
            caller,
            &work.path,
            &["--rlimit", "core=unlimited"],
            "echo c=$(ulimit -Sc):$(ulimit -Hc)",
        );
        assert!(
            stdout(&out).contains("c=unlimited:unlimited"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn a_hard_limit_above_the_users_own_is_refused_unprivileged() {
    let work = TempDir::new("rlimit-raise");
    let out = sh(
        Caller::Unprivileged,
        &work.path,
        &["--rlimit", "nofile=64:unlimited"],
        "echo ran > marker",
    );
    assert_eq!(out.status.code(), Some(119), "{}", explain(&out));
    assert!(
        stderr(&out).contains("only root can raise it"),
        "{}",
        explain(&out)
    );
    assert!(!work.join("marker").exists());
}

#[test]
fn the_sandbox_is_the_oom_killers_first_choice_and_the_launcher_is_not() {
    for caller in CALLERS {
        let work = TempDir::new("oom-score");
        let mut child = command(
            caller,
            &work.path,
            &[
                "whole-process",
                "--network",
                "none",
                "--",
                "/bin/sh",
                "-c",
                "cat /proc/self/oom_score_adj; read x; true",
            ],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
        let mut line = String::new();
        let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        assert_eq!(line.trim(), "1000", "{caller:?}");
        let launcher =
            std::fs::read_to_string(format!("/proc/{}/oom_score_adj", child.id())).unwrap();
        let own = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap();
        assert_eq!(
            launcher, own,
            "{caller:?}: the supervisor's own score changed"
        );
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success());
    }
}

#[test]
fn without_a_delegated_group_a_limit_is_refused_or_with_best_effort_reported() {
    let work = TempDir::new("limits-refused");
    let out = sh(
        Caller::Unprivileged,
        &work.path,
        &["--pids", "100"],
        "echo ran > marker",
    );
    if is_root() {
        assert_eq!(out.status.code(), Some(119), "{}", explain(&out));
        assert!(
            stderr(&out).contains("the process limit (100) cannot be applied")
                && stderr(&out).contains("delegated"),
            "{}",
            explain(&out)
        );
        assert!(!work.join("marker").exists());
        let out = sh(
            Caller::Unprivileged,
            &work.path,
            &["--pids", "100", "--limits-compatibility", "best_effort"],
            "echo ran > marker",
        );
        assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
        assert!(
            stderr(&out).contains("warning: the process limit (100) is not applied"),
            "{}",
            explain(&out)
        );
        assert!(work.join("marker").exists());
    }
}

#[test]
fn limits_from_a_settings_file_apply_and_the_smallest_wins() {
    for caller in CALLERS {
        let work = TempDir::new("limits-settings");
        let settings = work.write(
            "settings.json",
            r#"{"sandbox": {"limits": {"tmpSize": "4M", "rlimits": {"nofile": 100}}}}"#,
        );
        let out = sh(
            caller,
            &work.path,
            &[
                "--settings",
                settings.to_str().unwrap(),
                "--tmp-size",
                "16M",
                "--rlimit",
                "nofile=50",
            ],
            "echo n=$(ulimit -n) tmp=$(df -k /tmp | tail -1 | awk '{print $2}')",
        );
        assert!(
            stdout(&out).contains("n=50 tmp=4096"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn doctor_says_which_limits_this_user_can_apply() {
    for caller in CALLERS {
        let work = TempDir::new("limits-doctor");
        let out = doctor(caller, &work.path, &[]);
        for name in ["limits: memory", "limits: pids", "limits: cpu"] {
            let check = doctor_check(&out, name);
            let expected = if caller == Caller::Invoker && is_root() {
                "ok"
            } else {
                "warn"
            };
            assert_eq!(check["status"], expected, "{caller:?} {name}: {check}");
        }
    }
    // Its twin: the same unprivileged user, started in groups delegated to it, can.
    if is_root() {
        let work = TempDir::new("limits-doctor-delegated");
        let controllers = ["memory", "pids", "cpu"];
        let (mut cmd, _delegated) = prepared(
            Caller::Unprivileged,
            &work.path,
            &["doctor", "--json"],
            &controllers,
        );
        let out = cmd.output().unwrap();
        for name in ["limits: memory", "limits: pids", "limits: cpu"] {
            let check = doctor_check(&out, name);
            assert_eq!(check["status"], "ok", "delegated {name}: {check}");
        }
    }
}

/// `sh -c 'echo ran > marker'` under `fault-inject FAULTS -- sandbox-launch whole-process OPTS`.
fn launch_under(caller: Caller, work: &TempDir, faults: &[String], opts: &[&str]) -> Output {
    let launcher = launcher().to_str().unwrap().to_string();
    let mut args: Vec<&str> = faults.iter().map(String::as_str).collect();
    args.extend_from_slice(&["--", &launcher, "whole-process"]);
    args.extend_from_slice(opts);
    args.extend_from_slice(&["--", "/bin/sh", "-c", "echo ran > marker"]);
    let mut cmd = command_with(fault_inject(), caller, &work.path, &args);
    let delegated =
        (caller == Caller::Unprivileged && is_root()).then(|| Delegated::new(&["pids"]));
    if let Some(d) = &delegated {
        d.start_in(&mut cmd);
    }
    cmd.output().unwrap()
}

fn assert_refused_119(caller: Caller, work: &TempDir, out: &Output, why: &str) {
    assert_eq!(out.status.code(), Some(119), "{caller:?}: {}", explain(out));
    let first = stderr(out).lines().next().unwrap_or_default().to_string();
    assert!(
        first.contains("cannot apply the resource limits") && first.contains(why),
        "{caller:?}: {}",
        explain(out)
    );
    assert!(!work.join("marker").exists(), "{caller:?}: the program ran");
}

#[test]
fn a_sandbox_group_that_cannot_be_made_is_refused() {
    for caller in CALLERS {
        if caller == Caller::Unprivileged && !is_root() {
            continue; // no delegated group to make it in: refused anyway (test above)
        }
        let work = TempDir::new("fault-cgroup");
        let faults = [
            "--errno".to_string(),
            format!("{}=EACCES", libc::SYS_mkdir),
            "--errno".to_string(),
            format!("{}=EACCES", libc::SYS_mkdirat),
        ];
        let out = launch_under(caller, &work, &faults, &["--pids", "100"]);
        assert_refused_119(
            caller,
            &work,
            &out,
            "the process limit (100) cannot be applied",
        );
        // The twin: the same launch without the fault runs.
        let out = launch_under(caller, &work, &[], &["--pids", "100"]);
        assert_eq!(out.status.code(), Some(0), "{caller:?}: {}", explain(&out));
        assert!(work.join("marker").exists());
        std::fs::remove_file(work.join("marker")).unwrap();
    }
}

#[test]
fn an_oom_score_that_cannot_be_raised_is_refused() {
    // std::fs::write opens with O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC: the launcher's first such
    // open is its own /proc/self/oom_score_adj, just before the clone.
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC;
    for caller in CALLERS {
        let work = TempDir::new("fault-oom");
        let faults = [
            "--errno-if-arg2".to_string(),
            format!("openat:{flags}=EACCES"),
        ];
        let out = launch_under(caller, &work, &faults, &["--network", "none"]);
        assert_refused_119(caller, &work, &out, "oom_score_adj");
        let out = launch_under(caller, &work, &[], &["--network", "none"]);
        assert_eq!(out.status.code(), Some(0), "{caller:?}: {}", explain(&out));
        assert!(work.join("marker").exists());
        std::fs::remove_file(work.join("marker")).unwrap();
    }
}
