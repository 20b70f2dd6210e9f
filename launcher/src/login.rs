//! `sandbox-launch` as a login shell (`chsh -s /usr/local/bin/sandbox-launch`, a kiosk's or a
//! devbox's `/etc/passwd` entry): `login`/`sshd` start it as `-sandbox-launch` (a leading dash
//! means "login shell") or as `sandbox-launch -c COMMAND` (ssh with a command, scp, rsync). Both
//! are turned into ordinary command lines, so the same policy hierarchy and the same sandbox apply.

use std::path::Path;

/// The shell that runs inside: `$SANDBOX_LAUNCH_SHELL`, else bash, else sh.
fn inner_shell() -> String {
    if let Some(s) = std::env::var_os("SANDBOX_LAUNCH_SHELL") {
        return s.to_string_lossy().into_owned();
    }
    if Path::new("/bin/bash").exists() {
        "/bin/bash".into()
    } else {
        "/bin/sh".into()
    }
}

/// The command line to parse instead of `args` when started as a shell; None otherwise.
pub fn rewrite(args: &[String]) -> Option<Vec<String>> {
    let argv0 = args.first()?;
    let me = "sandbox-launch".to_string();
    match args.get(1..).unwrap_or_default() {
        // `shell -c COMMAND`, as sshd runs a remote command.
        [c, command] if c == "-c" => {
            Some(vec![me, "per-command".into(), "-c".into(), command.clone()])
        }
        // A login shell: an interactive login shell inside.
        [] if argv0.starts_with('-') => Some(vec![
            me,
            "whole-process".into(),
            "--".into(),
            inner_shell(),
            "-l".into(),
        ]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_login_shell_runs_an_interactive_login_shell_inside() {
        let r = rewrite(&v(&["-sandbox-launch"])).unwrap();
        assert_eq!(&r[1..3], &v(&["whole-process", "--"])[..]);
        assert_eq!(r.last().unwrap(), "-l");
    }

    #[test]
    fn dash_c_runs_one_command() {
        assert_eq!(
            rewrite(&v(&["sandbox-launch", "-c", "ls -l"])).unwrap(),
            v(&["sandbox-launch", "per-command", "-c", "ls -l"])
        );
    }

    #[test]
    fn ordinary_command_lines_are_left_alone() {
        assert_eq!(rewrite(&v(&["sandbox-launch", "doctor"])), None);
        assert_eq!(rewrite(&v(&["sandbox-launch"])), None);
        assert_eq!(
            rewrite(&v(&["sandbox-launch", "whole-process", "-c"])),
            None
        );
    }
}
