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

pub mod config;

use std::path::{Path, PathBuf};

use anyhow::Result;

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

/// The real shell: login.yaml's `shell`, else `$SANDBOX_LAUNCH_SHELL`, else bash, else sh.
fn real_shell(config: &LoginConfig) -> PathBuf {
    if let Some(s) = &config.shell {
        return s.clone();
    }
    if let Some(s) = std::env::var_os("SANDBOX_LAUNCH_SHELL") {
        return s.into();
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

/// The command line to parse instead of `args` when started as a shell; `None` otherwise.
/// Errors: `login.yaml` exists but cannot be used.
pub fn rewrite(args: &[String]) -> Result<Option<Vec<String>>> {
    let shell_var = std::env::var_os("SHELL").map(PathBuf::from);
    let me = std::fs::read_link("/proc/self/exe").ok();
    let Some(inv) = invocation(args, shell_var.as_deref(), me.as_deref()) else {
        return Ok(None);
    };
    let config = LoginConfig::load(Path::new(config::PATH))?;
    Ok(Some(command_line(&inv, &config)))
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
