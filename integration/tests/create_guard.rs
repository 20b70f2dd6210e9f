//! The create guard's mechanics, tried from inside with real programs: what it performs for the
//! program (creations, writes, binds) works as without the sandbox — for processes that made
//! themselves non-dumpable too, under signal storms, with the creator's CPU mask kept — and
//! what it refuses stays refused whatever route is taken (bind, /proc/self/fd, init's threads).
//! Each judged on the host.

use std::os::unix::fs::PermissionsExt;

use integration::{
    command_with, explain, fault_inject, inside_uid, launcher, sh, stdout, TempDir, CALLERS,
};

#[test]
fn programs_that_make_themselves_non_dumpable_create_files_as_usual() {
    // sftp-server, ssh-agent and gpg-agent make themselves non-dumpable: the guard cannot read
    // their memory or take their descriptors without CAP_SYS_PTRACE, which its thread raises for
    // exactly that. `sftp put`, `scp` (SFTP mode, the sftp-server started by a stand-in for ssh),
    // an ssh-agent socket and gpg-agent's sockets all appear on the host; a non-dumpable process
    // is still refused a protected name. (The agents are left running: the sandbox ends them,
    // and their sockets stay behind for the check on the host.)
    for caller in CALLERS {
        let work = TempDir::new_in("/var/tmp", "nondump");
        work.write("up/src.txt", "payload\n");
        let fake_ssh = work.write("fakessh", "#!/bin/sh\nexec /usr/lib/openssh/sftp-server\n");
        std::fs::set_permissions(&fake_ssh, std::fs::Permissions::from_mode(0o755)).unwrap();
        work.mkdir("gnupg");
        std::fs::set_permissions(work.join("gnupg"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        // A repository and a hook to plant in it: what sftp and scp put at protected names
        // would run in the host's next `git commit` or `cd`.
        host_git(&work.path, &["init", "-q"]);
        let hook = work.write(
            "up/hook",
            &format!("#!/bin/sh\ntouch {}/PWNED-hook\n", work.path.display()),
        );
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        work.give_to_sandbox_user(&work.path);
        let script = format!(
            r#"cd {w}
printf 'put up/src.txt sftp-put.txt\n' | sftp -q -b - -D /usr/lib/openssh/sftp-server >/dev/null; echo sftp-rc=$?
scp -S ./fakessh up/src.txt x:{w}/scp-put.txt; echo scp-rc=$?
printf 'put up/hook .git/hooks/pre-commit\n' | sftp -q -b - -D /usr/lib/openssh/sftp-server >/dev/null 2>&1; echo sftp-hook-rc=$?
scp -S ./fakessh up/hook x:{w}/.envrc 2>/dev/null; echo scp-envrc-rc=$?
ssh-agent -a {w}/agent.sock >/dev/null; echo agent-rc=$?
SSH_AUTH_SOCK={w}/agent.sock ssh-add -l; echo ssh-add-rc=$?
gpg-agent --daemon --homedir {w}/gnupg >/dev/null 2>&1; echo gpg-agent-rc=$?
python3 -c '
import ctypes
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
open("nondumpable.txt", "w").write("made\n")
try: open(".envrc", "w"); print("ENVRC-CREATED")
except OSError as e: print("envrc-refused", e.errno)
'
"#,
            w = work.path.display()
        );
        let out = sh(caller, &work.path, &[], &script);
        let text = stdout(&out);
        for want in [
            "sftp-rc=0",
            "scp-rc=0",
            "agent-rc=0",
            // An empty agent answers 1 ("no identities"): it was reached.
            "ssh-add-rc=1",
            "gpg-agent-rc=0",
            "envrc-refused 1",
            "sftp-hook-rc=1",
            "scp-envrc-rc=1",
        ] {
            assert!(text.contains(want), "{caller:?}: {want}: {}", explain(&out));
        }
        for (file, content) in [
            ("sftp-put.txt", "payload\n"),
            ("scp-put.txt", "payload\n"),
            ("nondumpable.txt", "made\n"),
        ] {
            assert_eq!(
                std::fs::read_to_string(work.join(file)).ok().as_deref(),
                Some(content),
                "{caller:?}: {file}: {}",
                explain(&out)
            );
        }
        use std::os::unix::fs::FileTypeExt;
        let sockets = std::fs::read_dir(work.join("gnupg"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_socket())
            .count();
        assert!(
            sockets >= 1,
            "{caller:?}: no gpg-agent socket: {}",
            explain(&out)
        );
        assert!(!work.join(".envrc").exists());
        assert!(!work.join(".git/hooks/pre-commit").exists());
        // On the host: what git runs on a commit, and direnv's sourcing.
        host_git(&work.path, &["commit", "-q", "--allow-empty", "-m", "host"]);
        assert!(
            !work.join("PWNED-hook").exists(),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

/// git on the host as a user would run it afterwards, with no configuration of its own.
fn host_git(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=h",
            "-c",
            "user.email=h@e",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git")
}

#[test]
fn bind_cannot_put_a_socket_at_a_protected_name_and_binds_elsewhere_as_asked() {
    // A pathname unix socket is a new name: bind goes through the guard like a creation. Binds
    // elsewhere — relative, abstract, unnamed, inet — work and keep the address as given.
    for caller in CALLERS {
        let work = TempDir::new("bind");
        work.mkdir("sub");
        let out = sh(
            caller,
            &work.path,
            &[],
            r#"python3 - <<'PY'
import os, socket
for name in [".envrc", ".mcp.json", ".vscode", ".sandbox-launch", "sub/../.envrc"]:
    s = socket.socket(socket.AF_UNIX)
    try: s.bind(name); print("BOUND", name)
    except OSError as e: print("refused", name, e.errno)
os.chdir("sub")
s = socket.socket(socket.AF_UNIX); s.bind("rel.sock"); s.listen(); print("name", s.getsockname())
c = socket.socket(socket.AF_UNIX); c.connect("rel.sock"); print("connected", c.getpeername())
a = socket.socket(socket.AF_UNIX); a.bind("\0sl-abstract"); print("abstract", a.getsockname())
u = socket.socket(socket.AF_UNIX); u.bind(""); print("autobind", len(u.getsockname()) > 0)
i = socket.socket(); i.bind(("127.0.0.1", 0)); print("inet", i.getsockname()[0])
try: socket.socket(socket.AF_UNIX).bind("/etc/sl-probe.sock"); print("BOUND-ETC")
except OSError as e: print("etc", e.errno)
try: socket.socket(socket.AF_UNIX).bind("rel.sock"); print("BOUND-TWICE")
except OSError as e: print("twice", e.errno)
PY"#,
        );
        let text = stdout(&out);
        for want in [
            "refused .envrc 1",
            "refused .mcp.json 1",
            "refused .vscode 1",
            "refused .sandbox-launch 1",
            "refused sub/../.envrc 1",
            "name rel.sock",
            "connected rel.sock",
            "abstract b'\\x00sl-abstract'",
            "autobind True",
            "inet 127.0.0.1",
            "etc 30",
            "twice 98",
        ] {
            assert!(text.contains(want), "{caller:?}: {want}: {}", explain(&out));
        }
        assert!(!text.contains("BOUND"), "{caller:?}: {}", explain(&out));
        for p in [".envrc", ".mcp.json", ".vscode", ".sandbox-launch"] {
            assert!(
                std::fs::symlink_metadata(work.join(p)).is_err(),
                "{caller:?}: {p} exists on the host"
            );
        }
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::symlink_metadata(work.join("sub/rel.sock"))
            .unwrap()
            .file_type()
            .is_socket());
        assert!(!std::path::Path::new("/etc/sl-probe.sock").exists());
    }
}

#[test]
fn no_thread_of_init_can_be_reached_through_proc() {
    // The guard performs opens for the program; through /proc/TID of one of init's threads (the
    // guard's own, not only /proc/1) it would hand out init's descriptors. Every such route is
    // refused — directly, through a symlink, through /proc/1/task — while the program's own
    // /proc/self/fd/N is reopened for writing as without the sandbox.
    for caller in CALLERS {
        let work = TempDir::new("inittids");
        host_git(&work.path, &["init", "-q"]);
        work.give_to_sandbox_user(&work.path);
        let prelude = format!(
            "work = {:?}\nhook = \"#!/bin/sh\\ntouch {}/PWNED-hook\\n\"\n",
            work.path.display().to_string(),
            work.path.display()
        );
        let out = sh(
            caller,
            &work.path,
            &[],
            &(r#"python3 - <<'PY'
import os
"#
            .to_string()
                + &prelude
                + r#"
tids = os.listdir("/proc/1/task")
names = sorted(open(f"/proc/1/task/{t}/comm").read().strip() for t in tids)
print("threads", len(tids), "guard" if any("guard" in n for n in names) else names)
got = []
for t in tids:
    for n in range(64):
        for p in (f"/proc/{t}/fd/{n}", f"/proc/1/task/{t}/fd/{n}", f"/proc/{t}/task/{t}/fd/{n}"):
            for flags in (os.O_RDWR, os.O_WRONLY | os.O_CREAT, os.O_RDONLY | os.O_TRUNC):
                try: os.open(p, flags); got.append(p)
                except OSError: pass
    for p in (f"/proc/{t}/mem", f"/proc/{t}/cwd/x", f"/proc/{t}/root/tmp/x", f"/proc/{t}/environ"):
        try: os.open(p, os.O_RDWR | os.O_CREAT); got.append(p)
        except OSError: pass
    for p in (f"/proc/{t}/root{work}/.git/hooks/pre-commit", f"/proc/{t}/root{work}/.envrc",
              f"/proc/{t}/cwd{work}/.git/hooks/post-checkout"):
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o755)
            os.write(fd, hook.encode()); os.close(fd); got.append(p)
        except OSError: pass
    os.symlink(f"/proc/{t}/fd/0", f"link{t}")
    try: os.open(f"link{t}", os.O_RDWR); got.append(f"link{t}")
    except OSError: pass
print("reached", got)
fd = os.open(f"/proc/self/root{work}/via-own-root.txt", os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"own root\n"); print("own root written")
fd = os.open("mine.txt", os.O_RDONLY | os.O_CREAT, 0o600)
w = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_APPEND)
os.write(w, b"through proc\n"); print("own fd reopened")
PY"#),
        );
        let text = stdout(&out);
        // init, its guard, and the thread that takes nested sandboxes' registrations.
        assert!(
            text.contains("threads 3 guard"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("reached []"), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("own fd reopened"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            std::fs::read_to_string(work.join("mine.txt")).unwrap(),
            "through proc\n"
        );
        assert_eq!(
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(work.join("mine.txt")).unwrap()),
            inside_uid(caller)
        );
        // Through its own root the program writes as anywhere else; through init's, nothing
        // reached the host that git or direnv would run.
        assert!(
            text.contains("own root written"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(work.join("via-own-root.txt").exists());
        for p in [
            ".git/hooks/pre-commit",
            ".git/hooks/post-checkout",
            ".envrc",
        ] {
            assert!(
                std::fs::symlink_metadata(work.join(p)).is_err(),
                "{caller:?}: {p} exists on the host"
            );
        }
        host_git(&work.path, &["commit", "-q", "--allow-empty", "-m", "host"]);
        host_git(&work.path, &["checkout", "-q", "-b", "host"]);
        assert!(!work.join("PWNED-hook").exists(), "{caller:?}");
    }
}

#[test]
fn a_create_through_the_guard_leaves_the_creators_cpu_mask_as_it_was() {
    // The guard keeps the creating thread on the guard's CPU while it hands the new file over;
    // the thread's own mask must be back afterwards, a narrowed one (taskset) included, and the
    // file must be there.
    for caller in CALLERS {
        let work = TempDir::new("affinity");
        let out = sh(
            caller,
            &work.path,
            &[],
            r#"python3 - <<'PY'
import os
full = os.sched_getaffinity(0)
for i, mask in enumerate([full, {max(full)}]):
    os.sched_setaffinity(0, mask)
    for j in range(50):
        os.close(os.open(f"f{i}-{j}", os.O_CREAT | os.O_WRONLY, 0o600))
    print("mask", "kept" if os.sched_getaffinity(0) == mask else f"CHANGED {os.sched_getaffinity(0)} != {mask}")
print("files", len([n for n in os.listdir(".") if n.startswith("f")]))
PY"#,
        );
        let text = stdout(&out);
        assert_eq!(
            text.matches("mask kept").count(),
            2,
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("files 100"), "{caller:?}: {}", explain(&out));
    }
}

/// Creations through the guard under a storm of signals (an interval timer every 50 µs, a
/// handler without SA_RESTART, as Python installs them). Prints the errors seen by kind; then
/// an allowed creation, and a protected one the guard must still refuse.
const SIGNAL_STORM: &str = r#"python3 - <<'PY'
import os, signal
signal.signal(signal.SIGALRM, lambda *a: None)
signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
errs = {}
for i in range(1500):
    try:
        os.mkdir("d"); os.rmdir("d")
        os.close(os.open("f", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)); os.unlink("f")
    except OSError as e:
        errs[e.errno] = errs.get(e.errno, 0) + 1
        for undo in (lambda: os.rmdir("d"), lambda: os.unlink("f")):
            try: undo()
            except OSError: pass
signal.setitimer(signal.ITIMER_REAL, 0, 0)
os.mkdir("after"); print("after-ok")
try: os.mkdir(".vscode"); print("VSCODE-CREATED")
except OSError: print("guard-still-refuses")
print("ENOSYS", errs.get(38, 0), "EEXIST", errs.get(17, 0), "EINTR", errs.get(4, 0))
PY"#;

#[test]
fn creations_survive_a_signal_storm() {
    // A notification withdrawn by a signal before init took it once ended the guard's thread,
    // and every later creation failed with ENOSYS; a signal while init performed the creation
    // made it fail (EINTR) or restart into EEXIST although it was done. Now a taken notification
    // waits out non-fatal signals (WAIT_KILLABLE_RECV); a signal before init takes it may still
    // surface as EINTR to a handler without SA_RESTART, with nothing done.
    for caller in CALLERS {
        let work = TempDir::new("storm");
        let out = sh(caller, &work.path, &[], SIGNAL_STORM);
        let text = stdout(&out);
        assert!(text.contains("after-ok"), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("guard-still-refuses"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("ENOSYS 0 EEXIST 0"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(work.join("after").is_dir());
    }
}

#[test]
fn on_a_kernel_without_killable_waits_the_guard_still_survives_signals() {
    // Before Linux 5.19 seccomp refuses WAIT_KILLABLE_RECV (simulated: EINVAL for exactly those
    // flags); the guard installs without it and its thread survives withdrawn notifications.
    let flags =
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
    let fault = format!("seccomp:{flags}=EINVAL");
    for caller in CALLERS {
        let work = TempDir::new("storm-old");
        let launcher = launcher().to_str().unwrap();
        let args = [
            "--errno-if-arg1",
            &fault,
            "--",
            launcher,
            "whole-process",
            "--",
            "/bin/sh",
            "-c",
            SIGNAL_STORM,
        ];
        let out = command_with(fault_inject(), caller, &work.path, &args)
            .output()
            .unwrap();
        let text = stdout(&out);
        assert!(text.contains("after-ok"), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("guard-still-refuses"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("ENOSYS 0 "), "{caller:?}: {}", explain(&out));
    }
}

/// Writers of a FIFO nobody reads, each waiting in its open, up to the process limit: the guard
/// opens each on a thread of init's, and those count against the limit too. Then a creation,
/// the FIFO's reader, which lets the waiting writers through, and another creation.
const FIFO_FLOOD: &str = r#"
import os, time
os.mkfifo("f")
kids = []
for i in range(40):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            open("f", "w").close()
        except OSError:
            os._exit(1)
        os._exit(0)
    kids.append(pid)
time.sleep(2)
def made(name):
    try:
        os.mkdir(name)
        return 0
    except OSError as e:
        return e.errno
print("after=%d" % made("after"), flush=True)
fd = os.open("f", os.O_RDONLY | os.O_NONBLOCK)
for pid in kids:
    os.waitpid(pid, 0)
os.close(fd)
print("last=%d" % made("last"), flush=True)
"#;

#[test]
fn waiting_fifo_opens_at_the_process_limit_neither_stop_nor_end_the_guard() {
    // Once the limit was reached, init could not start the thread for the next FIFO open:
    // `std::thread::spawn` panicked, ending the guard's thread (every later creation waited
    // forever) or, with panic=abort, init and the sandbox. Now that open fails (EAGAIN).
    for caller in CALLERS {
        let work = TempDir::new("fifo-flood");
        let mut cmd = integration::command(
            caller,
            &work.path,
            &[
                "whole-process",
                "--network",
                "none",
                "--pids",
                "40",
                "--",
                "python3",
                "-c",
                FIFO_FLOOD,
            ],
        );
        let _delegated = (caller == integration::Caller::Unprivileged && integration::is_root())
            .then(|| {
                let d = integration::cgroups::Delegated::new(&["pids"]);
                d.start_in(&mut cmd);
                d
            });
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let text = stdout(&out);
        assert!(
            !integration::stderr(&out).contains("panicked"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("after=0"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("last=0"), "{caller:?}: {}", explain(&out));
        assert!(work.join("after").is_dir() && work.join("last").is_dir());
    }
}

/// A script the program writes and then runs at once: init's copy of the descriptor it opened
/// for the program must be closed before the program goes on, or exec finds the file open for
/// writing ("Text file busy": bash overwriting its script and running it as its last command
/// failed 19 launches of 20 as root when init answered first and closed its copy after).
/// Twenty launches each, as each caller.
#[test]
fn a_script_written_and_run_at_once_is_not_busy() {
    let script = "printf '#!/bin/sh\\necho ran\\n' > run.sh; ./run.sh";
    for caller in CALLERS {
        let work = TempDir::new("txtbsy");
        let run = work.write("run.sh", "#!/bin/sh\necho old\n");
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        for i in 0..20 {
            let out = integration::command(
                caller,
                &work.path,
                &[
                    "whole-process",
                    "--network",
                    "none",
                    "--",
                    "bash",
                    "-c",
                    script,
                ],
            )
            .output()
            .unwrap();
            assert_eq!(
                stdout(&out),
                "ran\n",
                "{caller:?}, launch {i}: {}",
                explain(&out)
            );
        }
    }
}
