//! `sandbox-launch` as a login shell (`chsh -s /usr/local/bin/sandbox-launch`, a kiosk's or a
//! devbox's `/etc/passwd` entry). It is started the ways a shell is:
//!
//! * `-sandbox-launch` (a leading dash: a login — `login`, sshd, `su -`): an interactive login
//!   shell inside;
//! * `sandbox-launch -c COMMAND [ARGS…]` (ssh with a command, scp, sftp, rsync, `su -c`): the
//!   command, run by the real shell inside;
//! * `sandbox-launch` with no argument when `$SHELL` names this program (`su user` without
//!   `-l`): an interactive shell inside.
//!
//! Each is turned into an ordinary `whole-process` command line, so the same policy hierarchy
//! and the same sandbox apply, plus what `/etc/sandbox-launch/login.yaml` says (see `config`).
//! Inside, `$SHELL` is the real shell — never this program, which tmux, script and editors
//! would otherwise start for every new shell.
//!
//! A login shell takes nothing else: started as a login (`argv[0]` with a dash) or by a
//! non-root user whose passwd shell is this program, outside any sandbox, any other command
//! line is refused. `su USER -- ARGS…` hands ARGS to the user's shell, and an ordinary launch
//! with them would let the caller of `su` choose every option (`--network full`, binds) instead
//! of `login.yaml`. Inside a sandbox a launch only narrows (nesting), so it stays free there.

pub mod config;
pub mod shells;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub use config::LoginConfig;

/// How the shell was started.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Invocation {
    /// A login: an interactive login shell.
    Login,
    /// `-c COMMAND [ARGS…]`.
    Command(Vec<String>),
    /// No argument, as `su user` starts a user's shell: an interactive shell.
    Interactive,
}

/// What this process is, when it was started as a shell. `shell_var` is `$SHELL`; `me`, this
/// executable.
fn invocation(args: &[String], shell_var: Option<&Path>, me: Option<&Path>) -> Option<Invocation> {
    let argv0 = args.first()?;
    match args.get(1..).unwrap_or_default() {
        [c, rest @ ..] if c == "-c" && !rest.is_empty() => Some(Invocation::Command(rest.to_vec())),
        [] if argv0.starts_with('-') => Some(Invocation::Login),
        [] => {
            let same = |a: &Path, b: &Path| {
                let canon = |p: &Path| std::fs::canonicalize(p).ok();
                canon(a).is_some() && canon(a) == canon(b)
            };
            match (shell_var, me) {
                (Some(s), Some(m)) if same(s, m) => Some(Invocation::Interactive),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The real shell: login.yaml's `shell`, else bash, else sh. Never from the environment, which
/// is the caller's under `su` (see `forget_the_callers_configuration`).
fn real_shell(config: &LoginConfig) -> PathBuf {
    if let Some(s) = &config.shell {
        return s.clone();
    }
    if Path::new("/bin/bash").exists() {
        "/bin/bash".into()
    } else {
        "/bin/sh".into()
    }
}

/// The `whole-process` command line for `inv` under `config`.
fn command_line(inv: &Invocation, config: &LoginConfig) -> Vec<String> {
    let shell = real_shell(config).to_string_lossy().into_owned();
    let mut v: Vec<String> = vec!["sandbox-launch".into(), "whole-process".into()];
    if let Some(p) = &config.policy {
        v.extend(["--policy".into(), p.to_string_lossy().into_owned()]);
    }
    if let Some(s) = &config.settings {
        v.extend(["--settings".into(), s.to_string_lossy().into_owned()]);
    }
    v.extend(config.options.iter().cloned());
    v.extend(["--env".into(), format!("SHELL={shell}"), "--".into(), shell]);
    match inv {
        Invocation::Login => v.push("-l".into()),
        Invocation::Command(c) => {
            v.push("-c".into());
            v.extend(c.iter().cloned());
        }
        Invocation::Interactive => {}
    }
    v
}

/// Why a shell's start is refused; nothing runs.
#[derive(Debug)]
pub enum Refused {
    /// A login shell given a command line that is not a shell's.
    Arguments(String),
    /// `login.yaml` exists but cannot be used.
    Config(anyhow::Error),
}

impl Refused {
    /// A command line is refused as a bad one (2); a configuration as a policy (111).
    pub fn exit_code(&self) -> i32 {
        match self {
            Refused::Arguments(_) => 2,
            Refused::Config(_) => shim::channel::Step::Policy.exit_code(),
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Arguments(why) => f.write_str(why),
            Refused::Config(e) => write!(f, "{e:#}"),
        }
    }
}

/// Whether `path` is this executable: the same file as `/proc/self/exe` (device and inode, so
/// a symlink or a hard link to it counts).
pub fn is_this_program(path: &Path) -> bool {
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    match (id(path), id(Path::new("/proc/self/exe"))) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// Why this process is a login shell outside any sandbox, if it is: started as a login, or
/// run by a non-root user whose passwd shell is this program. Inside a sandbox, whatever
/// starts the launcher only narrows the sandbox it is in.
fn bound_to_login(argv0: &str) -> Option<String> {
    let why = if argv0.starts_with('-') {
        format!("it was started as a login shell (argv[0] {argv0:?})")
    } else {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        if uid == 0 {
            return None;
        }
        let (_, shell) = crate::users::home_and_shell(uid)?;
        if !is_this_program(Path::new(&shell)) {
            return None;
        }
        format!("the login shell of this user (uid {uid}) is sandbox-launch ({shell})")
    };
    (!crate::nest::detect()).then_some(why)
}

/// A login shell's command line that is not a shell's: what it is refused with.
fn refusal(why: &str, args: &[String]) -> Refused {
    Refused::Arguments(format!(
        "refused {:?}: {why}, so its policy is {}'s, and arguments cannot choose another; a \
         login shell takes no argument or `-c COMMAND [ARGS…]` (`su USER -c COMMAND`, not \
         `su USER -- ARGS…`)",
        args.get(1..).unwrap_or_default(),
        config::PATH
    ))
}

/// The command line to parse instead of `args` when started as a shell; `None` otherwise.
/// Refused: a login shell's command line that is not a shell's, or a `login.yaml` that exists
/// but cannot be used.
pub fn rewrite(args: &[String]) -> Result<Option<Vec<String>>, Refused> {
    let shell_var = std::env::var_os("SHELL").map(PathBuf::from);
    let me = std::fs::read_link("/proc/self/exe").ok();
    let inv = match invocation(args, shell_var.as_deref(), me.as_deref()) {
        Some(inv) => inv,
        None => {
            let argv0 = args.first().map(String::as_str).unwrap_or_default();
            let Some(why) = bound_to_login(argv0) else {
                return Ok(None);
            };
            if args.len() > 1 {
                return Err(refusal(&why, args));
            }
            // No argument, whatever `$SHELL` says: this user's shell, interactive.
            Invocation::Interactive
        }
    };
    forget_the_callers_configuration();
    if let Some(line) = shells::listing_this_program() {
        crate::say!("sandbox-launch: warning: {}", shells::warning(&line));
    }
    let config = LoginConfig::load(Path::new(config::PATH)).map_err(Refused::Config)?;
    Ok(Some(command_line(&inv, &config)))
}

/// A login takes no configuration from its environment, which `su` without `-` (or with `-m`)
/// keeps from its caller, and nothing from the directory it was started in:
/// * `SANDBOX_LAUNCH_*` (the launcher's own settings) and the variables that move the agents'
///   state directories (`CODEX_HOME=/somewhere` would be a writable tree of the caller's
///   choosing) are dropped, as is `XDG_STATE_HOME` (where worktrees are kept);
/// * `HOME` is kept only when it is the user's own directory that nobody else can write (what
///   login, sshd and `su` give), else it is the passwd home (under `su -m` it is the caller's:
///   `~` in the login's policy, a `denyRead` of `~/secret` among them, named the caller's
///   directory); `XDG_CONFIG_HOME` is its `.config` (the caller's would pick the user-level
///   policy);
/// * `XDG_RUNTIME_DIR` is kept only when it is the user's own and private;
/// * a working directory that is not the user's own (in the home, or the user's and writable
///   by no one else) — the caller's, under `su USER -c` — which a launch makes writable, is
///   left for the home, as `su -` does, and said.
///
/// Root's login keeps its HOME and working directory.
///
/// Before anything reads the environment (nothing of it crosses into the sandbox either).
/// Called first thing, while the process has one thread.
fn forget_the_callers_configuration() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    for (name, _) in std::env::vars_os() {
        if name.as_bytes().starts_with(b"SANDBOX_LAUNCH") {
            std::env::remove_var(&name);
        }
    }
    for name in crate::persistence::agents::state_variables().chain(["XDG_STATE_HOME"]) {
        std::env::remove_var(name);
    }
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let owned = |p: &std::ffi::OsStr, private: u32| {
        std::fs::symlink_metadata(p)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & private == 0)
    };
    if std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| !owned(&d, 0o077)) {
        std::env::remove_var("XDG_RUNTIME_DIR");
    }
    // HOME as given when it is the user's own directory, which nobody else can write (what
    // login, sshd and `su` give), or the user is root (whose password opens everything
    // anyway); else the passwd home.
    let given = std::env::var_os("HOME").filter(|h| uid == 0 || owned(h, 0o022));
    let home = given.map(PathBuf::from).or_else(|| {
        crate::users::home_and_shell(uid)
            .map(|(h, _)| PathBuf::from(h))
            .filter(|h| h.is_absolute())
    });
    let Some(home) = home else {
        std::env::set_var("HOME", "/");
        std::env::remove_var("XDG_CONFIG_HOME");
        let _ = std::env::set_current_dir("/");
        return;
    };
    std::env::set_var("HOME", &home);
    std::env::set_var("XDG_CONFIG_HOME", home.join(".config"));
    let canonical = std::fs::canonicalize(&home).unwrap_or_else(|_| home.clone());
    let cwd = std::env::current_dir()
        .ok()
        .and_then(|d| std::fs::canonicalize(d).ok());
    // The user's own: in the home, or a directory of the user's that no one else can write.
    let own = cwd
        .as_ref()
        .is_some_and(|d| d.starts_with(&canonical) || owned(d.as_os_str(), 0o022));
    if !own && uid != 0 {
        if let Some(d) = &cwd {
            crate::say!(
                "sandbox-launch: login: starting in {} ({} is not the user's own directory, and a                  launch makes its directory writable)",
                home.display(),
                d.display()
            );
        }
        // A home that cannot be entered: `/`, which a launch refuses to make writable.
        if std::env::set_current_dir(&home).is_err() {
            let _ = std::env::set_current_dir("/");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn shell(s: &str) -> LoginConfig {
        LoginConfig {
            shell: Some(s.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_login_runs_the_real_shell_as_a_login_shell_with_shell_set_to_it() {
        let inv = invocation(&v(&["-sandbox-launch"]), None, None).unwrap();
        assert_eq!(
            command_line(&inv, &shell("/bin/zsh")),
            v(&[
                "sandbox-launch",
                "whole-process",
                "--env",
                "SHELL=/bin/zsh",
                "--",
                "/bin/zsh",
                "-l"
            ])
        );
    }

    #[test]
    fn dash_c_runs_the_command_with_the_real_shell() {
        let inv = invocation(&v(&["sandbox-launch", "-c", "ls -l", "a"]), None, None).unwrap();
        let line = command_line(&inv, &shell("/bin/sh"));
        assert_eq!(
            &line[line.len() - 4..],
            &v(&["/bin/sh", "-c", "ls -l", "a"])[..]
        );
    }

    #[test]
    fn login_yaml_names_the_policy_and_more_options() {
        let config = LoginConfig {
            shell: Some("/bin/sh".into()),
            policy: Some("/etc/p.yaml".into()),
            settings: Some("/etc/s.json".into()),
            options: v(&["--network", "none"]),
        };
        let line = command_line(&Invocation::Interactive, &config);
        assert_eq!(
            line,
            v(&[
                "sandbox-launch",
                "whole-process",
                "--policy",
                "/etc/p.yaml",
                "--settings",
                "/etc/s.json",
                "--network",
                "none",
                "--env",
                "SHELL=/bin/sh",
                "--",
                "/bin/sh"
            ])
        );
        // What the CLI makes of it: options before the program, the shell as the program.
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(&line).unwrap();
        match cli.command {
            crate::cli::Command::WholeProcess(crate::cli::WholeProcessArgs {
                sandbox,
                command,
            }) => {
                assert_eq!(command, ["/bin/sh"]);
                assert_eq!(sandbox.policy.as_deref(), Some(Path::new("/etc/p.yaml")));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_argument_is_a_shell_only_when_shell_names_this_program() {
        let me = std::env::current_exe().unwrap();
        let args = v(&["sandbox-launch"]);
        assert_eq!(
            invocation(&args, Some(&me), Some(&me)),
            Some(Invocation::Interactive)
        );
        assert_eq!(
            invocation(&args, Some(Path::new("/bin/sh")), Some(&me)),
            None
        );
        assert_eq!(invocation(&args, None, Some(&me)), None);
    }

    #[test]
    fn a_login_shells_other_command_lines_are_refused_as_bad_ones_naming_login_yaml() {
        let r = refusal(
            "it was started as a login shell",
            &v(&["-sandbox-launch", "whole-process", "--network", "full"]),
        );
        assert_eq!(r.exit_code(), 2);
        let text = r.to_string();
        assert!(
            text.contains("--network") && text.contains(config::PATH),
            "{text}"
        );
        assert_eq!(Refused::Config(anyhow::anyhow!("x")).exit_code(), 111);
    }

    #[test]
    fn ordinary_command_lines_are_left_alone() {
        assert_eq!(
            invocation(&v(&["sandbox-launch", "doctor"]), None, None),
            None
        );
        assert_eq!(
            invocation(&v(&["sandbox-launch", "whole-process", "-c"]), None, None),
            None
        );
        assert_eq!(invocation(&v(&["sandbox-launch", "-c"]), None, None), None);
    }
}
