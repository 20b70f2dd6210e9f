//! sandbox-launch as a login shell: `$SHELL` inside is the real shell (so tmux, script and
//! editors start shells that work), `su user` without `-l`, `/etc/sandbox-launch/login.yaml`
//! naming the shell and the policy, and sshd: an interactive session, scp, sftp and rsync, each
//! inside the sandbox, and the recipe's settings that keep sshd itself from dialling out.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use integration::login::{PrivateEtc, Sshd, TestUser};
use integration::{
    doctor_check, explain, feed_stdin, is_root, launcher, stdout, Caller, TempDir, CALLERS, NOBODY,
};

/// The launcher started as a login does (`argv[0]` is `-sandbox-launch`, then `args`) with
/// `$SHELL` naming it.
fn login_command(caller: Caller, home: &Path, args: &[&str]) -> Command {
    let me = launcher().to_str().unwrap().to_string();
    let exec_a = "exec -a -sandbox-launch \"$0\" \"$@\"";
    let mut cmd = if caller == Caller::Unprivileged && is_root() {
        let mut c = Command::new("setpriv");
        let id = NOBODY.to_string();
        c.args(["--reuid", &id, "--regid", &id, "--clear-groups", "--"]);
        c.args(["bash", "-c", exec_a, &me]);
        c
    } else {
        let mut c = Command::new("bash");
        c.args(["-c", exec_a, &me]);
        c
    };
    cmd.args(args)
        .current_dir(home)
        .env("HOME", home)
        .env("SHELL", &me)
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A login session: feed `script` to the shell it starts and collect the output.
fn login_session(caller: Caller, home: &Path, script: &str) -> Output {
    session(login_command(caller, home, &[]), script)
}

/// Run `cmd` with `script` on its stdin.
fn session(mut cmd: Command, script: &str) -> Output {
    let mut child = cmd.spawn().expect("start the login shell");
    feed_stdin(&mut child, script.as_bytes());
    child.wait_with_output().unwrap()
}

/// What `script` and tmux start is `$SHELL`: it must be a shell that works inside.
const SHELL_USERS: &str = r#"
echo "SHELL=$SHELL"
script -qc 'echo script-ran; grep Seccomp: /proc/self/status' /dev/null </dev/null
tmux -S "$HOME/tmux.sock" new-session -d 'echo "tmux-ran:$SHELL:$(hostname)" > "$HOME/tmux.out"'
for i in $(seq 100); do [ -s "$HOME/tmux.out" ] && break; sleep 0.05; done
cat "$HOME/tmux.out"
tmux -S "$HOME/tmux.sock" kill-server 2>/dev/null
exit 0
"#;

#[test]
fn inside_a_login_shell_is_the_real_shell_so_script_and_tmux_work() {
    for caller in CALLERS {
        let home = TempDir::new("login-shell");
        let out = login_session(caller, &home.path, SHELL_USERS);
        let text = stdout(&out);
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("SHELL=/bin/bash\n"),
            "{caller:?}: {}",
            explain(&out)
        );
        // Through script's pty: lines end in \r\n.
        assert!(
            text.contains("script-ran\r\nSeccomp:\t2"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("tmux-ran:/bin/bash:sandbox"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn without_an_argument_it_is_a_shell_only_where_shell_names_it() {
    // `su user` starts the user's shell with no argument and `$SHELL` set to it.
    let home = TempDir::new("noarg");
    let run = |shell_var: &Path| {
        let mut child = Command::new(launcher())
            .current_dir(&home.path)
            .env("HOME", &home.path)
            .env("SHELL", shell_var)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        feed_stdin(&mut child, b"grep Seccomp: /proc/self/status\n");
        child.wait_with_output().unwrap()
    };
    let out = run(launcher());
    assert!(out.status.success(), "{}", explain(&out));
    assert!(stdout(&out).contains("Seccomp:\t2"), "{}", explain(&out));
    // Anyone else typing `sandbox-launch` alone gets the usage.
    let out = run(Path::new("/bin/bash"));
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    assert!(!stdout(&out).contains("Seccomp"), "{}", explain(&out));
}

/// `su [ARGS…] USER` in the private /etc, stdin from `input`.
fn su(etc: &PrivateEtc, user: &TestUser, args: &[&str], input: &str) -> Output {
    let mut all: Vec<&str> = args.to_vec();
    all.push(&user.name);
    session(su_command(etc, user, &all), input)
}

/// `su ARGS…` (the user named in them) in the private /etc.
fn su_command(etc: &PrivateEtc, user: &TestUser, args: &[&str]) -> Command {
    let mut c = etc.command(Path::new("/bin/su"), args);
    c.current_dir(&user.home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// `su [-] USER -- ARGS…` hands ARGS to the user's login shell, which must not take them as a
/// command line of its own: the caller of `su` would choose every option (`--network full`, no
/// `login.yaml`). Nothing runs; what a shell is given still works, and so does a launch inside
/// the session (nesting narrows).
#[test]
fn su_cannot_hand_the_login_shell_a_command_line_of_its_own() {
    assert!(is_root(), "making a user needs root");
    let etc = PrivateEtc::new();
    let user = TestUser::new(launcher());
    etc.write(
        "sandbox-launch/login.yaml",
        "options: [--network, none]\n",
        0o644,
    );
    let marker = user.home.join("widened");
    let touch = format!("touch {}", marker.display());
    for dash in [&[][..], &["-"][..]] {
        let mut args: Vec<&str> = dash.to_vec();
        args.extend([
            user.name.as_str(),
            "--",
            "whole-process",
            "--network",
            "full",
        ]);
        args.extend(["--", "/bin/sh", "-c", &touch]);
        let out = session(su_command(&etc, &user, &args), "");
        assert_eq!(out.status.code(), Some(2), "su {args:?}: {}", explain(&out));
        let err = integration::stderr(&out);
        assert!(
            err.contains("login shell") && err.contains("login.yaml"),
            "su {args:?}: {}",
            explain(&out)
        );
        assert!(
            !marker.exists(),
            "su {args:?} ran the caller's command line"
        );
    }
    // Its allowed twins: `su USER -c`, `su - USER`, and inside the session a launch of the
    // user's own, which narrows (its --network none on top of login.yaml's).
    let probe = "echo in:$(hostname); grep Seccomp: /proc/self/status\n";
    for args in [&["-c", probe][..], &["-"][..]] {
        let out = su(&etc, &user, args, probe);
        assert!(out.status.success(), "su {args:?}: {}", explain(&out));
        assert!(
            stdout(&out).contains("in:sandbox\nSeccomp:\t2"),
            "su {args:?}: {}",
            explain(&out)
        );
    }
    let nested = format!(
        "{} whole-process --network none -- /bin/sh -c 'echo nested:$(hostname); {touch}'",
        launcher().display()
    );
    let out = su(&etc, &user, &["-", "-c", &nested], "");
    assert!(out.status.success(), "{}", explain(&out));
    assert!(stdout(&out).contains("nested:sandbox"), "{}", explain(&out));
    assert!(marker.exists(), "the nested launch did not run");
}

/// A user-level policy that would widen what a login gets (a grant: a variable set inside).
const WIDENING: &str = "version: 1\nenvironment:\n  set: {CALLERS: widened}\n";

/// `su USER` without `-` keeps the caller's environment: the login must take no configuration
/// from it (`XDG_CONFIG_HOME` naming the caller's policy directory, `SANDBOX_LAUNCH_SHELL`),
/// and read the user's own, in the passwd home's `.config`.
#[test]
fn su_keeps_the_callers_environment_but_the_login_reads_none_of_its_configuration() {
    assert!(is_root(), "making a user needs root");
    let etc = PrivateEtc::new();
    let user = TestUser::new(launcher());
    let callers = TempDir::new("su-xdg");
    callers.write("sandbox-launch/policy.yaml", WIDENING);
    let own = user.home.join(".config/sandbox-launch");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(
        own.join("policy.yaml"),
        "version: 1\nenvironment:\n  set: {OWN: read}\n",
    )
    .unwrap();
    user.own(&user.home.join(".config"));
    let probe = "echo SHELL=$SHELL CALLERS=${CALLERS-none} OWN=${OWN-none}";
    let mut c = su_command(&etc, &user, &[&user.name, "-c", probe]);
    c.env("XDG_CONFIG_HOME", &callers.path)
        .env("SANDBOX_LAUNCH_SHELL", "/bin/sh");
    let out = session(c, "");
    assert!(out.status.success(), "{}", explain(&out));
    assert!(
        stdout(&out).contains("SHELL=/bin/bash CALLERS=none OWN=read\n"),
        "{}",
        explain(&out)
    );
}

/// `su` without `-`, or with `-m`, keeps the caller's environment and working directory: none
/// of it chooses anything of the session. An agent's state variable (`CODEX_HOME`: a writable
/// tree wherever the caller says), the caller's working directory (a launch makes its own
/// writable), the caller's `HOME` (what `~` names in the login's policy, a `denyRead` of
/// `~/secret` among it): the session writes neither directory and reads no denied file. The
/// twin: the user's own home is written.
#[test]
fn su_without_a_dash_or_with_m_chooses_nothing_of_the_session() {
    use std::os::unix::fs::PermissionsExt;
    assert!(is_root(), "making a user needs root");
    let etc = PrivateEtc::new();
    let user = TestUser::new(launcher());
    let settings = etc.write(
        "sandbox-launch/login-settings.json",
        r#"{"sandbox": {"filesystem": {"denyRead": ["~/secret"]}}}"#,
        0o644,
    );
    etc.write(
        "sandbox-launch/login.yaml",
        &format!(
            "settings: {}\noptions: [--network, none]\n",
            settings.display()
        ),
        0o644,
    );
    std::fs::create_dir_all(user.home.join("secret")).unwrap();
    std::fs::write(user.home.join("secret/key"), "TOPSECRET").unwrap();
    user.own(&user.home.join("secret"));
    std::fs::set_permissions(
        user.home.join("secret/key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let shared = TempDir::new("su-shared");
    std::fs::create_dir_all(shared.join("codex")).unwrap();
    for d in [shared.path.clone(), shared.join("codex")] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    }
    let callers_home = TempDir::new("su-callers-home");
    // Without `-`: the caller's directory and an agent's state variable.
    let probe = format!(
        "touch {0}/codex/by-variable {0}/by-cwd; touch ./here; touch ~/twin; pwd",
        shared.path.display()
    );
    let mut c = su_command(&etc, &user, &[&user.name, "-c", &probe]);
    c.current_dir(&shared.path)
        .env("CODEX_HOME", shared.join("codex"));
    let out = session(c, "");
    for planted in ["codex/by-variable", "by-cwd", "here"] {
        assert!(
            !shared.join(planted).exists(),
            "{planted}: {}",
            explain(&out)
        );
    }
    assert!(
        user.home.join("twin").exists(),
        "the twin: {}",
        explain(&out)
    );
    assert!(
        stdout(&out).contains(&format!("{}\n", user.home.display())),
        "the session starts in the home: {}",
        explain(&out)
    );
    assert!(
        integration::stderr(&out).contains("login: starting in"),
        "and says so: {}",
        explain(&out)
    );
    // A directory of the user's own, which no one else can write, stays where the session runs.
    let mine = TempDir::new("su-own-dir");
    user.own(&mine.path);
    std::fs::set_permissions(&mine.path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = su_command(&etc, &user, &[&user.name, "-c", "pwd; touch made-here"]);
    c.current_dir(&mine.path);
    let out = session(c, "");
    assert!(mine.join("made-here").exists(), "{}", explain(&out));
    // With `-m`: the caller's HOME. (A caller other than root gets the user's shell whatever
    // it asks, the launcher not being in /etc/shells; root's `su -m` runs `$SHELL`, so it is
    // set to the launcher here.)
    let probe = format!("cat {}/secret/key; cat ~/secret/key", user.home.display());
    let mut c = su_command(&etc, &user, &["-m", &user.name, "-c", &probe]);
    c.env("HOME", &callers_home.path).env("SHELL", launcher());
    let out = session(c, "");
    assert!(!stdout(&out).contains("TOPSECRET"), "{}", explain(&out));
    assert!(
        integration::stderr(&out).contains("Permission denied"),
        "{}",
        explain(&out)
    );
}

#[test]
fn a_login_takes_no_configuration_directory_from_its_environment() {
    for caller in CALLERS {
        let home = TempDir::new("login-xdg");
        let callers = TempDir::new("login-xdg-config");
        callers.write("sandbox-launch/policy.yaml", WIDENING);
        let mut c = login_command(caller, &home.path, &[]);
        c.env("XDG_CONFIG_HOME", &callers.path);
        let out = session(c, "echo CALLERS=${CALLERS-none}\n");
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(
            stdout(&out).contains("CALLERS=none\n"),
            "{caller:?}: {}",
            explain(&out)
        );
        // Its twin: an ordinary launch takes the same directory as the user's.
        let out = integration::command(
            caller,
            &home.path,
            &[
                "whole-process",
                "--",
                "/bin/sh",
                "-c",
                "echo CALLERS=${CALLERS-none}",
            ],
        )
        .env("XDG_CONFIG_HOME", &callers.path)
        .output()
        .unwrap();
        assert!(
            stdout(&out).contains("CALLERS=widened\n"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn a_login_shell_started_with_a_launchers_command_line_refuses_it() {
    for caller in CALLERS {
        let home = TempDir::new("login-args");
        let marker = home.join("ran");
        let touch = format!("touch {}", marker.display());
        let args = [
            "whole-process",
            "--network",
            "full",
            "--",
            "/bin/sh",
            "-c",
            &touch,
        ];
        let out = session(login_command(caller, &home.path, &args), "");
        assert_eq!(out.status.code(), Some(2), "{caller:?}: {}", explain(&out));
        assert!(
            integration::stderr(&out).contains("started as a login shell"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!marker.exists(), "{caller:?}: the command line ran");
        // Its twin: a login's own `-c COMMAND` runs, inside.
        let out = session(login_command(caller, &home.path, &["-c", &touch]), "");
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(marker.exists(), "{caller:?}: -c did not run");
    }
}

#[test]
fn su_with_and_without_dash_l_runs_the_users_shell_inside() {
    assert!(is_root(), "making a user needs root");
    let etc = PrivateEtc::new();
    let user = TestUser::new(launcher());
    let probe = "echo in:$(hostname):$SHELL; grep Seccomp: /proc/self/status\n";
    for args in [
        &[][..],
        &["-l"][..],
        &["-c", probe][..],
        &["-", "-c", probe][..],
    ] {
        let out = su(&etc, &user, args, probe);
        assert!(out.status.success(), "su {args:?}: {}", explain(&out));
        let text = stdout(&out);
        assert!(
            text.contains("in:sandbox:/bin/bash\nSeccomp:\t2"),
            "su {args:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn login_yaml_names_the_shell_and_the_policy_and_a_loose_one_stops_the_login() {
    assert!(is_root(), "making a user needs root");
    let etc = PrivateEtc::new();
    let user = TestUser::new(launcher());
    std::fs::write(user.home.join("secret"), "s3cret").unwrap();
    std::fs::write(user.home.join("plain"), "plain-text").unwrap();
    user.own(&user.home);
    let settings = etc.write(
        "sandbox-launch/login-settings.json",
        r#"{"sandbox": {"filesystem": {"denyRead": ["~/secret"]}}}"#,
        0o644,
    );
    let config = format!(
        "shell: /bin/sh\nsettings: {}\noptions: [--network, none]\n",
        settings.display()
    );
    etc.write("sandbox-launch/login.yaml", &config, 0o644);
    let probe = "echo SHELL=$SHELL; cat ~/plain; echo; cat ~/secret; env | grep -ci _proxy; true";
    let out = su(&etc, &user, &["-", "-c", probe], "");
    let text = stdout(&out);
    assert!(out.status.success(), "{}", explain(&out));
    assert!(
        text.contains("SHELL=/bin/sh\nplain-text\n"),
        "{}",
        explain(&out)
    );
    assert!(!text.contains("s3cret"), "{}", explain(&out));
    // --network none: no proxy variables at all.
    assert!(text.ends_with("\n0\n"), "{}", explain(&out));

    // A login.yaml others may write is refused: no shell at all.
    etc.write("sandbox-launch/login.yaml", &config, 0o666);
    let out = su(&etc, &user, &["-", "-c", "touch ~/ran"], "");
    assert_eq!(out.status.code(), Some(111), "{}", explain(&out));
    assert!(
        integration::stderr(&out).contains("login.yaml must belong to root"),
        "{}",
        explain(&out)
    );
    assert!(!user.home.join("ran").exists());
}

/// `doctor --json` as `caller`, in the private /etc.
fn doctor_in(etc: &PrivateEtc, caller: Caller, cwd: &Path) -> Output {
    let me = launcher().to_str().unwrap();
    let mut c = if caller == Caller::Unprivileged {
        let id = NOBODY.to_string();
        etc.command(
            Path::new("/usr/bin/setpriv"),
            &[
                "--reuid",
                &id,
                "--regid",
                &id,
                "--clear-groups",
                "--",
                me,
                "doctor",
                "--json",
            ],
        )
    } else {
        etc.command(launcher(), &["doctor", "--json"])
    };
    c.current_dir(cwd).output().unwrap()
}

/// util-linux `su` honours `-s SHELL`, `-m` and `-p` when the target's shell is in
/// `/etc/shells`, running a shell of the caller's choosing with no sandbox: the launcher cannot
/// stop that, so a login warns when `/etc/shells` lists it, and so does `doctor`.
#[test]
fn a_login_and_doctor_warn_when_etc_shells_lists_the_launcher() {
    assert!(is_root(), "making a user needs root");
    let etc = PrivateEtc::new();
    let user = TestUser::new(launcher());
    let work = TempDir::new("shells-doctor");
    let warning = "/etc/shells lists this program";
    // Unlisted: no warning.
    let out = su(&etc, &user, &["-", "-c", "echo ran"], "");
    assert!(out.status.success(), "{}", explain(&out));
    assert!(
        !integration::stderr(&out).contains(warning),
        "{}",
        explain(&out)
    );
    for caller in CALLERS {
        let doc = doctor_in(&etc, caller, &work.path);
        assert_eq!(
            doctor_check(&doc, "/etc/shells")["status"],
            "ok",
            "{caller:?}"
        );
    }
    // Listed: the login runs, and says what the listing opens.
    let hosts = std::fs::read_to_string("/etc/shells").unwrap_or_default();
    let listed = format!("{hosts}\n{}\n", launcher().display());
    etc.write("shells", &listed, 0o644);
    let out = su(&etc, &user, &["-", "-c", "echo ran"], "");
    assert!(out.status.success(), "{}", explain(&out));
    assert!(stdout(&out).contains("ran"), "{}", explain(&out));
    let err = integration::stderr(&out);
    assert!(
        err.contains(warning) && err.contains("su -s"),
        "{}",
        explain(&out)
    );
    for caller in CALLERS {
        let doc = doctor_in(&etc, caller, &work.path);
        let check = doctor_check(&doc, "/etc/shells");
        assert_eq!(check["status"], "warn", "{caller:?}: {check}");
        assert!(
            check["fix"].as_str().unwrap().contains("remove"),
            "{caller:?}: {check}"
        );
    }
}

/// Run a client command to completion (at most a minute), stdin from `input`.
fn run(mut cmd: Command, input: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    feed_stdin(&mut child, input.as_bytes());
    let pid = child.id() as i32;
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if finished.recv_timeout(Duration::from_secs(60)).is_err() {
            // SAFETY: signalling our own child, which has not been reaped yet.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = done.send(());
    let _ = watchdog.join();
    assert!(out.status.code().is_some(), "timed out: {}", explain(&out));
    out
}

#[test]
fn over_ssh_sessions_scp_sftp_and_rsync_run_inside_the_sandbox() {
    assert!(
        is_root(),
        "the sshd tests need root (sshd, a user of their own)"
    );
    let etc = PrivateEtc::new();
    let user = TestUser::new(launcher());
    let sshd = Sshd::start(&etc, &user, &[]);
    let local = TempDir::new("ssh-local");
    let dest = |p: &str| format!("{}@127.0.0.1:{p}", user.name);
    let home = |p: &str| user.home.join(p);

    // A remote command: `shell -c COMMAND`, inside.
    let mut c = sshd.client("ssh", "-p");
    c.arg(format!("{}@127.0.0.1", user.name))
        .arg("echo in:$(hostname):$SHELL; grep Seccomp: /proc/self/status");
    let out = run(c, "");
    assert!(out.status.success(), "{}", explain(&out));
    assert!(
        stdout(&out).contains("in:sandbox:/bin/bash\nSeccomp:\t2"),
        "{}",
        explain(&out)
    );

    // An interactive session on a pty: a login shell inside, whose $SHELL tmux can start.
    let mut c = sshd.client("ssh", "-p");
    c.arg("-tt").arg(format!("{}@127.0.0.1", user.name));
    let session = format!("{SHELL_USERS}\n");
    let out = run(c, &session);
    let text = stdout(&out);
    assert!(text.contains("SHELL=/bin/bash"), "{}", explain(&out));
    assert!(text.contains("Seccomp:\t2"), "{}", explain(&out));
    assert!(
        text.contains("tmux-ran:/bin/bash:sandbox"),
        "{}",
        explain(&out)
    );

    // scp up and down, with the SFTP protocol (the default) and the old one (`scp -t` run by
    // the shell).
    std::fs::write(local.join("up.txt"), "uploaded by scp").unwrap();
    for (flag, name) in [("-s", "scp-sftp.txt"), ("-O", "scp-legacy.txt")] {
        let mut c = sshd.client("scp", "-P");
        c.arg(flag).arg(local.join("up.txt")).arg(dest(name));
        let out = run(c, "");
        assert!(out.status.success(), "scp {flag}: {}", explain(&out));
        assert_eq!(
            std::fs::read_to_string(home(name)).unwrap(),
            "uploaded by scp"
        );
        let mut c = sshd.client("scp", "-P");
        c.arg(flag).arg(dest(name)).arg(local.join(name));
        let out = run(c, "");
        assert!(out.status.success(), "scp {flag} down: {}", explain(&out));
        assert_eq!(
            std::fs::read_to_string(local.join(name)).unwrap(),
            "uploaded by scp"
        );
    }
    // Its denied twin: a shell start-up file (a persistence surface) is not written, and
    // outside the writable home nothing lands on the host.
    let bashrc_before = std::fs::read(home(".bashrc")).unwrap();
    for target in [".bashrc", "/var/tmp/sl-scp-escape"] {
        let mut c = sshd.client("scp", "-P");
        c.arg(local.join("up.txt")).arg(dest(target));
        let out = run(c, "");
        assert!(!out.status.success(), "scp to {target}: {}", explain(&out));
    }
    assert_eq!(std::fs::read(home(".bashrc")).unwrap(), bashrc_before);
    assert!(!Path::new("/var/tmp/sl-scp-escape").exists());

    // sftp: put, get, mkdir, rename.
    let batch = format!(
        "put {0}/up.txt sftp.txt\nmkdir d\nrename sftp.txt d/moved.txt\nget d/moved.txt {0}/got.txt\n",
        local.path.display()
    );
    let mut c = sshd.client("sftp", "-P");
    c.args(["-b", "-"]).arg(format!("{}@127.0.0.1", user.name));
    let out = run(c, &batch);
    assert!(out.status.success(), "sftp: {}", explain(&out));
    assert_eq!(
        std::fs::read_to_string(home("d/moved.txt")).unwrap(),
        "uploaded by scp"
    );
    assert_eq!(
        std::fs::read_to_string(local.join("got.txt")).unwrap(),
        "uploaded by scp"
    );

    // rsync: the remote end (`rsync --server`) runs inside, started by the shell.
    local.write("tree/a.txt", "A");
    local.write("tree/sub/b.txt", "B");
    let mut c = Command::new("rsync");
    c.args(["-a", "-e", &sshd.rsync_shell()])
        .arg(format!("{}/tree/", local.path.display()))
        .arg(dest("synced/"));
    let out = run(c, "");
    assert!(out.status.success(), "rsync: {}", explain(&out));
    assert_eq!(
        std::fs::read_to_string(home("synced/sub/b.txt")).unwrap(),
        "B"
    );
    // On the host, the files are the user's.
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(home("synced/a.txt")).unwrap().uid(),
        user.uid
    );
}

/// Whether a connection to `ssh -L` on `local_port` reaches `server` (host's 127.0.0.1).
fn forward_reaches(sshd: &Sshd, user: &TestUser, server: &TcpListener) -> bool {
    let server_port = server.local_addr().unwrap().port();
    let local_port = integration::login::free_port();
    let mut c = sshd.client("ssh", "-p");
    c.args(["-N", "-L", &format!("{local_port}:127.0.0.1:{server_port}")])
        .arg(format!("{}@127.0.0.1", user.name))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut client = c.spawn().unwrap();
    let mut stream = None;
    for _ in 0..200 {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", local_port)) {
            stream = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let mut stream = stream.expect("ssh -L listens");
    let _ = stream.write_all(b"through the tunnel");
    server.set_nonblocking(false).unwrap();
    let accepted = std::sync::mpsc::channel();
    let listener = server.try_clone().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).unwrap_or(0);
            let _ = accepted.0.send(buf[..n].to_vec());
        }
    });
    let got = accepted.1.recv_timeout(Duration::from_secs(3)).ok();
    let _ = client.kill();
    let _ = client.wait();
    if got.is_none() {
        // Unblock the accepting thread.
        let _ = TcpStream::connect(("127.0.0.1", server_port));
    }
    got.is_some_and(|b| b == b"through the tunnel")
}

#[test]
fn the_recipe_keeps_sshd_from_forwarding_past_the_sandbox_and_its_twin_shows_why() {
    assert!(
        is_root(),
        "the sshd tests need root (sshd, a user of their own)"
    );
    let etc = PrivateEtc::new();
    let user = TestUser::new(launcher());
    // A server on the host's loopback, which the sandbox's own network cannot reach.
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let recipe = Sshd::start(&etc, &user, &[]);
    assert!(
        !forward_reaches(&recipe, &user, &server),
        "AllowTcpForwarding no let ssh -L through"
    );
    drop(recipe);
    // Without the setting (the recipe less its line), sshd itself dials the host's loopback for the client: outside the
    // sandbox's network, whatever the sandbox allows.
    let open = Sshd::start(&etc, &user, &["AllowTcpForwarding"]);
    assert!(forward_reaches(&open, &user, &server));
}

/// The README's sshd drop-in, pasted as written where Debian's `sshd_config` includes its
/// drop-ins (first), is accepted by this sshd (`sshd -t`), and gives the sandboxed user, and
/// only them, every setting it says is required, with the external sftp server.
#[test]
fn the_readmes_sshd_recipe_is_accepted_as_a_drop_in_and_applies_to_its_user() {
    assert!(
        is_root(),
        "sshd -t needs root (its privilege-separation directory)"
    );
    let etc = PrivateEtc::new();
    let dir = TempDir::new("sshd-recipe");
    let dropin = dir.join("sandbox-launch.conf");
    std::fs::write(&dropin, integration::login::readme_recipe()).unwrap();
    integration::login::keygen(&dir.join("host"));
    // Debian 12's default sshd_config, less its comments, with a host key of the test's.
    let config = format!(
        "Include {}\nHostKey {}\nKbdInteractiveAuthentication no\nUsePAM yes\n\
         X11Forwarding yes\nPrintMotd no\nAcceptEnv LANG LC_*\n{}\n",
        dropin.display(),
        dir.join("host").display(),
        integration::login::SFTP
    );
    let cfg = dir.join("sshd_config");
    std::fs::write(&cfg, config).unwrap();
    let sshd = |args: &[&str]| {
        let mut all = vec!["-f", cfg.to_str().unwrap()];
        all.extend_from_slice(args);
        etc.command(Path::new("/usr/sbin/sshd"), &all)
            .output()
            .unwrap()
    };
    let out = sshd(&["-t"]);
    assert!(out.status.success(), "sshd -t: {}", explain(&out));
    let effective = |user: &str| {
        let out = sshd(&[
            "-T",
            "-C",
            &format!("user={user},host=localhost,addr=127.0.0.1"),
        ]);
        assert!(out.status.success(), "sshd -T: {}", explain(&out));
        stdout(&out)
    };
    let agent = effective("agent");
    for line in [
        "allowtcpforwarding no",
        "allowstreamlocalforwarding no",
        "x11forwarding no",
        "permittunnel no",
        "allowagentforwarding no",
        "permituserenvironment no",
        "subsystem sftp /usr/lib/openssh/sftp-server",
    ] {
        assert!(agent.lines().any(|l| l == line), "{line}: {agent}");
    }
    // Another user keeps the server's own settings: the Match block ends with the drop-in.
    let other = effective("someone-else");
    assert!(other.lines().any(|l| l == "x11forwarding yes"), "{other}");
}
