//! Nesting narrows: `sandbox-launch` started inside a sandbox stacks the inner policy's layers
//! on the outer sandbox's, so an inner allow of what the outer denies stays denied and an inner
//! deny of what the outer allows holds. Judged on the host (what is on disk afterwards, what the
//! server received), each denial with its allowed twin, as root and as uid 65534.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use integration::net::HostServer;
use integration::{command, explain, fault_inject, launcher, stdout, Caller, TempDir, CALLERS};

/// A binary as the outer sandbox sees it: where it was built, unless that is under a
/// directory the sandbox has a private one of (then a link in the test's own directory).
fn visible(dir: &TempDir, bin: &Path) -> PathBuf {
    if !(bin.starts_with("/tmp") || bin.starts_with("/var/tmp")) {
        return bin.to_path_buf();
    }
    let dst = dir.join(bin.file_name().unwrap().to_str().unwrap());
    if std::fs::hard_link(bin, &dst).is_err() {
        std::fs::copy(bin, &dst).expect("copy the binary");
    }
    dst
}

fn inner_launcher(dir: &TempDir) -> PathBuf {
    visible(dir, launcher())
}

/// `whole-process OUTER -- sandbox-launch whole-process INNER -- sh -c SCRIPT` in `cwd`.
fn nested_command(
    caller: Caller,
    dir: &TempDir,
    cwd: &Path,
    outer: &[&str],
    inner: &[&str],
    script: &str,
) -> std::process::Command {
    let bin = inner_launcher(dir);
    let mut args = vec!["whole-process"];
    args.extend_from_slice(outer);
    args.extend_from_slice(&["--", bin.to_str().unwrap(), "whole-process"]);
    args.extend_from_slice(inner);
    args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
    command(caller, cwd, &args)
}

fn nested(
    caller: Caller,
    dir: &TempDir,
    cwd: &Path,
    outer: &[&str],
    inner: &[&str],
    script: &str,
) -> Output {
    nested_command(caller, dir, cwd, outer, inner, script)
        .output()
        .expect("run sandbox-launch")
}

/// The outer sandbox alone (the twins: what the outer allows).
fn outer_only(caller: Caller, cwd: &Path, outer: &[&str], script: &str) -> Output {
    integration::sh(caller, cwd, outer, script)
}

fn has_line(out: &Output, line: &str) -> bool {
    stdout(out).lines().any(|l| l == line)
}

#[test]
fn the_inner_program_runs_nested_under_both_layers() {
    for caller in CALLERS {
        let dir = TempDir::new("nest-layers");
        let out = nested(
            caller,
            &dir,
            &dir.path,
            &[],
            &["-v"],
            "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status",
        );
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(has_line(&out, "Seccomp:\t2"), "{}", explain(&out));
        assert!(
            integration::stderr(&out).contains("verified (nested)"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn an_inner_allow_write_of_what_the_outer_keeps_read_only_stays_read_only() {
    for caller in CALLERS {
        let dir = TempDir::new("nest-ro");
        let work = dir.mkdir("work");
        let locked = dir.mkdir("work/locked");
        dir.write("work/locked/file", "original\n");
        let usr_probe = format!("/usr/sl-nest-probe-{}", std::process::id());
        let locked_s = locked.to_str().unwrap();
        let script = format!(
            "echo new > {locked_s}/new; echo new=$?
echo changed > {locked_s}/file; echo file=$?
mv {locked_s}/file {locked_s}/moved; echo mv=$?
touch {usr_probe}; echo usr=$?
echo twin > twin.txt; echo twin=$?"
        );
        let out = nested(
            caller,
            &dir,
            &work,
            &["--deny-write", locked_s],
            &["--allow-write", locked_s, "--allow-write", "/usr"],
            &script,
        );
        let s = stdout(&out);
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        for refused in ["new", "file", "mv", "usr"] {
            assert!(
                !has_line(&out, &format!("{refused}=0")),
                "{caller:?} {refused}: {s}"
            );
        }
        assert!(has_line(&out, "twin=0"), "{caller:?}: {}", explain(&out));
        // On the host: the read-only tree is as it was; the writable one got the twin.
        assert!(!locked.join("new").exists() && !locked.join("moved").exists());
        assert_eq!(
            std::fs::read_to_string(locked.join("file")).unwrap(),
            "original\n"
        );
        assert!(!Path::new(&usr_probe).exists());
        assert_eq!(
            std::fs::read_to_string(work.join("twin.txt")).unwrap(),
            "twin\n"
        );
    }
}

/// The outer program's open descriptors do not cross into the nested program (as they do not
/// into a sandbox of its own): one open on a file the inner policy denies reading cannot be read
/// through. `--preserve-fd` hands one over (the twin).
#[test]
fn a_nested_program_gets_no_descriptor_but_those_it_is_given() {
    for caller in CALLERS {
        let dir = TempDir::new("nest-fd");
        let work = dir.mkdir("work");
        let secret = dir.write("work/secret", "TOPSECRET\n");
        let given = dir.write("work/given", "GIVEN\n");
        let bin = inner_launcher(&dir);
        let script = format!(
            "exec 3<{s} 4<{g}; exec {b} whole-process --deny-read {s} --preserve-fd 4 -- \
             /bin/sh -c 'cat {s} 2>/dev/null; cat <&3 2>/dev/null; cat <&4; echo inner-ran'",
            s = secret.display(),
            g = given.display(),
            b = bin.display()
        );
        let out = integration::sh(caller, &work, &[], &script);
        let text = stdout(&out);
        assert!(text.contains("inner-ran"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("GIVEN"), "{caller:?}: {}", explain(&out));
        assert!(!text.contains("TOPSECRET"), "{caller:?}: {}", explain(&out));
    }
}

/// A file the nested program reads on its stdin stays read-only for it when the inner policy
/// makes it so; a file it writes on its stdout is written (the twins: what the outer allows).
#[test]
fn a_read_only_stdin_file_is_not_writable_nested() {
    for caller in CALLERS {
        let dir = TempDir::new("nest-stdin");
        let work = dir.mkdir("work");
        dir.mkdir("work/rw");
        let input = dir.write("work/ro/input", "original\n");
        let output = dir.write("work/ro/output", "");
        let bin = inner_launcher(&dir);
        let script = format!(
            "exec {b} whole-process --cwd {rw} -- /bin/sh -c \
             'echo OVERWRITTEN > {i}; echo stdin=$?; echo out; echo stdout-ok >&2' \
             < {i} > {o}",
            b = bin.display(),
            rw = work.join("rw").display(),
            i = input.display(),
            o = output.display()
        );
        let out = integration::sh(caller, &work, &[], &script);
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert_eq!(
            std::fs::read_to_string(&input).unwrap(),
            "original\n",
            "{caller:?}: {}",
            explain(&out)
        );
        let written = std::fs::read_to_string(&output).unwrap();
        assert!(
            written.contains("out"),
            "{caller:?}: {written} {}",
            explain(&out)
        );
        assert!(!written.contains("stdin=0"), "{caller:?}: {written}");
        // The outer sandbox alone writes the same file: the inner layer is what refused.
        let twin = outer_only(
            caller,
            &work,
            &[],
            &format!("echo twin > {}", input.display()),
        );
        assert!(twin.status.success(), "{caller:?}: {}", explain(&twin));
        assert_eq!(std::fs::read_to_string(&input).unwrap(), "twin\n");
    }
}

#[test]
fn an_inner_deny_read_of_what_the_outer_allows_is_unreadable() {
    for caller in CALLERS {
        let dir = TempDir::new("nest-deny-read");
        let work = dir.mkdir("work");
        dir.write("work/.env", "TOKEN=env-secret\n");
        dir.write("work/secret/key", "key-secret\n");
        dir.write("work/open.txt", "open-text\n");
        let env = work.join(".env");
        let secret = work.join("secret");
        let inner = [
            "--deny-read",
            env.to_str().unwrap(),
            "--deny-read",
            secret.to_str().unwrap(),
        ];
        let script = "cat .env secret/key open.txt
(exec 3<>.env && cat <&3)
cp .env copied; mv .env moved; mv secret/key stolen; ln secret/key linked; mv secret gone
cat copied moved stolen linked gone/key
true";
        let out = nested(caller, &dir, &work, &[], &inner, script);
        let s = stdout(&out);
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(!s.contains("secret"), "{caller:?}: {}", explain(&out));
        assert!(has_line(&out, "open-text"), "{caller:?}: {}", explain(&out));
        // What the split costs is said.
        assert!(
            integration::stderr(&out).contains("Landlock cannot take it out of the writable tree"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            std::fs::read_to_string(&env).unwrap(),
            "TOKEN=env-secret\n",
            "still in place on the host"
        );
        assert!(secret.join("key").exists());
        // The twin: the outer sandbox alone reads both.
        let out = outer_only(caller, &work, &[], "cat .env secret/key");
        assert!(
            has_line(&out, "TOKEN=env-secret") && has_line(&out, "key-secret"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

/// `restricted`, each name pinned to the host's 127.0.0.1, each of `allow` allowed.
fn network_opts<'a>(allow: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["--network", "restricted"];
    for name in ["allowed.test", "other.test", "denied.test"] {
        v.extend_from_slice(&["--resolve", resolve(name)]);
    }
    for a in allow {
        v.extend_from_slice(&["--allow-domain", a]);
    }
    v
}

/// The outer sandbox's HTTP proxy port (its proxy variables name it).
const OUTER_PROXY_PORT: u16 = 3128;

fn resolve(name: &str) -> &'static str {
    match name {
        "allowed.test" => "allowed.test:127.0.0.1",
        "other.test" => "other.test:127.0.0.1",
        _ => "denied.test:127.0.0.1",
    }
}

fn curl_lines(port: u16, names: &[(&str, &str)]) -> String {
    names
        .iter()
        .map(|(name, path)| {
            format!(
                "curl -s -o /dev/null --max-time 20 -w '{path} %{{http_code}}\\n' http://{name}:{port}/{path}"
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn an_inner_deny_of_an_outer_allowed_domain_holds_and_its_twin_passes() {
    for caller in CALLERS {
        let server = HostServer::start();
        let dir = TempDir::new("nest-net-deny");
        let outer = network_opts(&["allowed.test", "other.test"]);
        let inner = network_opts(&["allowed.test"]);
        let script = curl_lines(
            server.port,
            &[
                ("allowed.test", "inner-allowed"),
                ("other.test", "inner-denied"),
            ],
        );
        let out = nested(caller, &dir, &dir.path, &outer, &inner, &script);
        assert!(
            has_line(&out, "inner-allowed 200"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            has_line(&out, "inner-denied 403"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(server.saw("/inner-allowed"));
        assert!(!server.saw("/inner-denied"), "the server was reached");
        // The twin: the outer sandbox alone reaches other.test.
        let script = curl_lines(server.port, &[("other.test", "outer-other")]);
        let out = outer_only(caller, &dir.path, &outer, &script);
        assert!(
            has_line(&out, "outer-other 200"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(server.saw("/outer-other"));
    }
}

/// TCP Fast Open connects inside `sendto`, where Landlock's TCP rule is not checked: a nested
/// program that sends that way to the outer proxy (to reach a domain only the outer allows) is
/// refused; the server never sees the request, and its twin through the inner proxy passes.
#[test]
fn a_nested_tcp_fast_open_send_cannot_reach_the_outer_proxy() {
    for caller in CALLERS {
        let server = HostServer::start();
        let dir = TempDir::new("nest-tfo");
        let outer = network_opts(&["allowed.test", "other.test"]);
        let inner = network_opts(&["allowed.test"]);
        let probe = dir.write(
            "tfo.py",
            &format!(
                "import socket, time\n\
                 req = b'GET http://other.test:{p}/tfo HTTP/1.1\\r\\nHost: other.test:{p}\\r\\n\\r\\n'\n\
                 s = socket.socket()\n\
                 try:\n    \
                     s.sendto(req, socket.MSG_FASTOPEN, ('127.0.0.1', {outer}))\n\
                 except BlockingIOError:\n    \
                     pass\n\
                 except OSError as e:\n    \
                     print('tfo-refused', e.errno)\n    \
                     raise SystemExit\n\
                 time.sleep(1)\n\
                 s.send(req)\n\
                 print('tfo-sent', s.recv(100))\n",
                p = server.port,
                outer = OUTER_PROXY_PORT
            ),
        );
        let script = format!(
            "python3 {}\n{}",
            probe.display(),
            curl_lines(server.port, &[("allowed.test", "inner-allowed")])
        );
        let out = nested(caller, &dir, &dir.path, &outer, &inner, &script);
        assert!(
            has_line(&out, &format!("tfo-refused {}", libc::EOPNOTSUPP)),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            has_line(&out, "inner-allowed 200"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(server.saw("/inner-allowed"));
        assert!(!server.saw("/tfo"), "{caller:?}: the server was reached");
    }
}

#[test]
fn an_inner_allow_of_an_outer_denied_domain_stays_denied() {
    for caller in CALLERS {
        let server = HostServer::start();
        let dir = TempDir::new("nest-net-allow");
        let outer = network_opts(&["allowed.test"]);
        let inner = network_opts(&["allowed.test", "denied.test"]);
        let script = format!(
            "{}
curl -s -o /dev/null --max-time 20 -w 'socks %{{http_code}}\\n' --socks5-hostname \"${{ALL_PROXY#socks5h://}}\" http://denied.test:{}/inner-socks
curl -s -o /dev/null --max-time 5 -w 'direct %{{http_code}}\\n' --noproxy '*' http://127.0.0.1:{}/inner-direct
true",
            curl_lines(
                server.port,
                &[("allowed.test", "twin"), ("denied.test", "inner-widened")]
            ),
            server.port,
            server.port
        );
        let out = nested(caller, &dir, &dir.path, &outer, &inner, &script);
        assert!(has_line(&out, "twin 200"), "{caller:?}: {}", explain(&out));
        assert!(
            has_line(&out, "inner-widened 403"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            !has_line(&out, "socks 200"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            !has_line(&out, "direct 200"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(server.saw("/twin"));
        for path in ["/inner-widened", "/inner-socks", "/inner-direct"] {
            assert!(!server.saw(path), "{caller:?}: the server got {path}");
        }
    }
}

#[test]
fn the_inner_programs_persistence_protections_still_hold() {
    for caller in CALLERS {
        let dir = TempDir::new("nest-persist");
        let work = dir.mkdir("work");
        dir.mkdir("work/.git/hooks");
        let kept = dir.mkdir("work/kept");
        let script = "echo 'touch PWNED' > .envrc; echo envrc=$?
printf '#!/bin/sh\\ntouch PWNED\\n' > .git/hooks/pre-commit; echo hook=$?
mkdir -p .vscode && echo '{}' > .vscode/tasks.json; echo tasks=$?
touch kept/new; echo kept=$?
echo twin > notes.txt; echo twin=$?";
        let out = nested(
            caller,
            &dir,
            &work,
            &[],
            &["--deny-write", kept.to_str().unwrap()],
            script,
        );
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        for refused in ["envrc", "hook", "tasks", "kept"] {
            assert!(
                !has_line(&out, &format!("{refused}=0")),
                "{caller:?} {refused}: {}",
                explain(&out)
            );
        }
        assert!(has_line(&out, "twin=0"), "{caller:?}: {}", explain(&out));
        for planted in [
            ".envrc",
            ".git/hooks/pre-commit",
            ".vscode/tasks.json",
            "kept/new",
        ] {
            assert!(
                !work.join(planted).exists(),
                "{caller:?}: {planted} on the host"
            );
        }
        assert_eq!(
            std::fs::read_to_string(work.join("notes.txt")).unwrap(),
            "twin\n"
        );
        // The twin of `kept`: the outer sandbox alone writes there.
        let out = outer_only(caller, &work, &[], "touch kept/outer && echo ok");
        assert!(has_line(&out, "ok"), "{caller:?}: {}", explain(&out));
    }
}

#[test]
fn exit_codes_and_signals_pass_through_both_launchers() {
    for caller in CALLERS {
        let dir = TempDir::new("nest-exit");
        let out = nested(caller, &dir, &dir.path, &[], &[], "exit 7");
        assert_eq!(out.status.code(), Some(7), "{caller:?}: {}", explain(&out));
        let out = nested(caller, &dir, &dir.path, &[], &[], "kill -KILL $$");
        assert_eq!(
            out.status.code(),
            Some(137),
            "{caller:?}: {}",
            explain(&out)
        );
        // The inner --timeout ends the program and what it left behind.
        let out = nested(
            caller,
            &dir,
            &dir.path,
            &[],
            &["--timeout", "1s"],
            "sleep 60 & sleep 60",
        );
        assert_eq!(
            out.status.code(),
            Some(124),
            "{caller:?}: {}",
            explain(&out)
        );

        // SIGTERM to the outer launcher reaches the inner program, which says so and exits 42.
        let mut child = nested_command(
            caller,
            &dir,
            &dir.path,
            &[],
            &[],
            "trap 'echo got-term; exit 42' TERM; echo ready; while :; do sleep 0.1; done",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sandbox-launch");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
        // SAFETY: signalling the child we started.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(lines.next().unwrap().unwrap(), "got-term");
        assert_eq!(status.code(), Some(42), "{caller:?}");
    }
}

#[test]
fn a_nested_launch_whose_layers_or_registration_do_not_take_effect_runs_nothing() {
    // Under fault-inject inside the outer sandbox: the kernel says the Landlock layer or the
    // seccomp filters were applied when they were not, or the outer guard cannot be reached.
    let faults = [
        ("landlock_restrict_self=0".to_string(), 118),
        ("seccomp=0".to_string(), 118),
        // connect(2): the registration socket.
        (format!("{}=EACCES", libc::SYS_connect), 117),
    ];
    for caller in CALLERS {
        for (fault, code) in &faults {
            let (fault, code) = (fault.as_str(), *code);
            let dir = TempDir::new("nest-fail-closed");
            let inject = visible(&dir, fault_inject());
            let bin = inner_launcher(&dir);
            let out = command(
                caller,
                &dir.path,
                &[
                    "whole-process",
                    "--",
                    inject.to_str().unwrap(),
                    "--errno",
                    fault,
                    "--",
                    bin.to_str().unwrap(),
                    "whole-process",
                    "--",
                    "/bin/sh",
                    "-c",
                    "touch RAN",
                ],
            )
            .output()
            .expect("run sandbox-launch");
            assert_eq!(
                out.status.code(),
                Some(code),
                "{caller:?} {fault}: {}",
                explain(&out)
            );
            assert!(
                !dir.join("RAN").exists(),
                "{caller:?} {fault}: the program ran"
            );
        }
        // The twin: without a fault the same program runs.
        let dir = TempDir::new("nest-fail-closed");
        let out = nested(caller, &dir, &dir.path, &[], &[], "touch RAN");
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(dir.join("RAN").exists());
    }
}

#[test]
fn a_nested_launch_narrows_only_its_own_subtree() {
    for caller in CALLERS {
        let dir = TempDir::new("nest-siblings");
        let work = dir.mkdir("work");
        let inner_dir = dir.mkdir("work/inner");
        let bin = inner_launcher(&dir);
        // The outer program starts a nested launch confined to `inner/`, and while it runs
        // writes beside it: the registration holds for the nested program only.
        let script = format!(
            "{bin} whole-process --cwd {inner} -- /bin/sh -c 'touch ../from-inner; echo inner=$?; sleep 1' &
sleep 0.3; touch from-outer; echo outer=$?; wait",
            bin = bin.display(),
            inner = inner_dir.display()
        );
        let out = integration::sh(caller, &work, &[], &script);
        assert!(has_line(&out, "outer=0"), "{caller:?}: {}", explain(&out));
        assert!(!has_line(&out, "inner=0"), "{caller:?}: {}", explain(&out));
        assert!(work.join("from-outer").exists());
        assert!(!work.join("from-inner").exists());
    }
}

#[test]
fn a_deep_chain_of_processes_stays_in_its_nested_sandbox() {
    for caller in CALLERS {
        let dir = TempDir::new("nest-deep");
        let work = dir.mkdir("work");
        let inner_dir = dir.mkdir("work/inner");
        // Each level is a shell waiting for the next (`; true` keeps it from exec'ing it):
        // the write at the bottom comes from a process 300 parents below the registrant.
        dir.write(
            "work/inner/deep.sh",
            "if [ \"$1\" -gt 0 ]; then sh ./deep.sh $(($1-1)) \"$2\"; true
else echo deep > \"$2\"; echo \"$2=$?\"; fi\n",
        );
        let bin = inner_launcher(&dir);
        let script = format!(
            "{bin} whole-process --cwd {inner} -- /bin/sh -c 'sh ./deep.sh 300 ../escaped; sh ./deep.sh 300 inside'",
            bin = bin.display(),
            inner = inner_dir.display()
        );
        let out = integration::sh(caller, &work, &[], &script);
        // The twin: at that depth the inner writable tree is written.
        assert!(has_line(&out, "inside=0"), "{caller:?}: {}", explain(&out));
        assert!(inner_dir.join("inside").exists());
        assert!(
            !has_line(&out, "../escaped=0"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            !work.join("escaped").exists(),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn an_inner_network_none_reaches_nothing_the_outer_allows() {
    for caller in CALLERS {
        let server = HostServer::start();
        let dir = TempDir::new("nest-net-none");
        let outer = network_opts(&["allowed.test"]);
        let script = format!(
            "{}
curl -s -o /dev/null --max-time 5 -w 'outer-proxy %{{http_code}}\\n' -x http://127.0.0.1:3128 http://allowed.test:{}/inner-outer-proxy
true",
            curl_lines(server.port, &[("allowed.test", "inner-none")]),
            server.port
        );
        let out = nested(
            caller,
            &dir,
            &dir.path,
            &outer,
            &["--network", "none"],
            &script,
        );
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(
            !stdout(&out).contains(" 200"),
            "{caller:?}: {}",
            explain(&out)
        );
        for path in ["/inner-none", "/inner-outer-proxy"] {
            assert!(!server.saw(path), "{caller:?}: the server got {path}");
        }
        // The twin: the outer sandbox alone reaches it.
        let script = curl_lines(server.port, &[("allowed.test", "outer-twin")]);
        let out = outer_only(caller, &dir.path, &outer, &script);
        assert!(
            has_line(&out, "outer-twin 200"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn the_inner_tmp_never_reaches_host_trees_the_outer_mounted_below_its_tmp() {
    let script = "touch /tmp/direct; echo direct=$?
f=$(mktemp) && echo in-tmpdir > \"$f\" && cat \"$f\"
case \"$TMPDIR\" in /tmp/.sandbox-launch-nested-*) echo own-tmpdir;; esac";
    for caller in CALLERS {
        // The outer sandbox's working directory is under /tmp: the inner /tmp is a directory
        // of its own there, and /tmp itself (where that tree is mounted) is read-only.
        let dir = TempDir::new("nest-tmp");
        let out = nested(caller, &dir, &dir.path, &[], &[], script);
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(has_line(&out, "in-tmpdir"), "{caller:?}: {}", explain(&out));
        assert!(
            has_line(&out, "own-tmpdir"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!has_line(&out, "direct=0"), "{caller:?}: {}", explain(&out));
        // The twin: with nothing of the host below the outer /tmp, it is writable as it is.
        let base = "/var/cache/sandbox-launch-tests";
        std::fs::create_dir_all(base).unwrap();
        let dir = TempDir::new_in(base, "nest-tmp");
        let out = nested(caller, &dir, &dir.path, &[], &[], script);
        assert!(has_line(&out, "direct=0"), "{caller:?}: {}", explain(&out));
        assert!(has_line(&out, "in-tmpdir"), "{caller:?}: {}", explain(&out));
        assert!(
            !has_line(&out, "own-tmpdir"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn a_nested_worktree_or_mount_is_refused_and_the_checkout_untouched() {
    for caller in CALLERS {
        let dir = TempDir::new("nest-worktree");
        let work = dir.mkdir("work");
        let bin = inner_launcher(&dir);
        let w = work.display();
        for (opts, hint) in [
            (
                "--worktree".to_string(),
                "give --worktree to the outer sandbox",
            ),
            (
                format!("--overlay {w}"),
                "give the mounts to the outer sandbox",
            ),
            (
                format!("--tmpfs {w}"),
                "give the mounts to the outer sandbox",
            ),
        ] {
            let script = format!(
                "{} whole-process {opts} -- /bin/sh -c 'echo changed > file.txt'; echo inner=$?",
                bin.display()
            );
            let out = integration::sh(caller, &work, &[], &script);
            assert!(
                has_line(&out, "inner=113"),
                "{caller:?} {opts}: {}",
                explain(&out)
            );
            assert!(
                integration::stderr(&out).contains(hint),
                "{caller:?} {opts}: {}",
                explain(&out)
            );
            assert!(
                !work.join("file.txt").exists(),
                "{caller:?} {opts}: the checkout was written"
            );
        }
    }
}
