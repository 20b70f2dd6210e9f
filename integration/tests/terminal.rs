//! An interactive program keeps the terminal: a shell in the sandbox, driven through a real pty
//! (tmux), gets job control, Ctrl-C interrupts its foreground job and not the sandbox, and the
//! sandbox ends with the shell's exit status.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use integration::*;

struct Tmux {
    socket: String,
    dir: PathBuf,
}

impl Tmux {
    fn start(caller: Caller, work: &Path, tag: &str) -> Tmux {
        let socket = format!("sl-test-{tag}-{}", std::process::id());
        let launcher = launcher().to_str().unwrap().to_string();
        let exit_file = work.join("exit-status");
        // The launcher's exit status is written outside the sandbox, by tmux's shell.
        let script = format!(
            "export PS1='PROMPT$ ' HOME={home}\n{launcher} whole-process --env PS1 -- /bin/bash --norc --noprofile -i\necho $? > {exit}\n",
            home = work.display(),
            exit = exit_file.display()
        );
        let script_path = work.join("run-in-tmux.sh");
        std::fs::write(&script_path, script).unwrap();
        let mut inner = format!("sh {}", script_path.display());
        if caller == Caller::Unprivileged && is_root() {
            inner = format!("setpriv --reuid {NOBODY} --regid {NOBODY} --clear-groups -- {inner}");
        }
        let tmux = Tmux {
            socket,
            dir: work.to_path_buf(),
        };
        let st = tmux
            .command()
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "120",
                "-y",
                "30",
            ])
            .args(["-c", work.to_str().unwrap()])
            .arg(&inner)
            .status()
            .expect("tmux (scripts/install-deps.sh installs it)");
        assert!(st.success());
        tmux
    }

    /// tmux on this server; its socket's directory (`tmux-UID`) in the test's own directory,
    /// not in the host's /tmp.
    fn command(&self) -> Command {
        let mut c = Command::new("tmux");
        c.env("TMUX_TMPDIR", &self.dir).args(["-L", &self.socket]);
        c
    }

    fn send(&self, keys: &[&str]) {
        let st = self
            .command()
            .args(["send-keys", "-t", "0"])
            .args(keys)
            .status()
            .unwrap();
        assert!(st.success());
    }

    fn screen(&self) -> String {
        let out = self
            .command()
            .args(["capture-pane", "-p", "-t", "0"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_for(&self, what: &str) {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(what) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "timed out waiting for {what:?}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").status();
    }
}

#[test]
fn an_interactive_shell_has_job_control_and_ctrl_c_works() {
    for caller in CALLERS {
        let work = TempDir::new("tty");
        let tmux = Tmux::start(caller, &work.path, "jobs");
        tmux.wait_for("PROMPT$");
        let screen = tmux.screen();
        assert!(
            !screen.contains("no job control")
                && !screen.contains("cannot set terminal process group"),
            "{caller:?}: {screen}"
        );
        // Ctrl-C interrupts the foreground job; the shell (and the sandbox) live on.
        tmux.send(&["sleep 1000", "Enter"]);
        std::thread::sleep(Duration::from_millis(300));
        tmux.send(&["C-c"]);
        tmux.send(&["echo after-sleep-$?", "Enter"]);
        tmux.wait_for("after-sleep-130");
        // Job control: background, list, bring to the foreground, interrupt.
        tmux.send(&["sleep 2000 &", "Enter"]);
        tmux.send(&["jobs; echo listed", "Enter"]);
        tmux.wait_for("listed");
        assert!(
            tmux.screen().contains("sleep 2000"),
            "{caller:?}: {}",
            tmux.screen()
        );
        tmux.send(&["fg", "Enter"]);
        std::thread::sleep(Duration::from_millis(300));
        tmux.send(&["C-c"]);
        tmux.send(&["echo fg-done-$?", "Enter"]);
        tmux.wait_for("fg-done-130");
        // Ctrl-Z stops the foreground job and gives the prompt back.
        tmux.send(&["sleep 3000", "Enter"]);
        std::thread::sleep(Duration::from_millis(300));
        tmux.send(&["C-z"]);
        tmux.wait_for("Stopped");
        tmux.send(&["kill %1; echo killed", "Enter"]);
        tmux.wait_for("killed");
        // It is really the sandbox.
        tmux.send(&["echo host=$(hostname) pid=$$", "Enter"]);
        tmux.wait_for("host=sandbox pid=2");
        // The shell's exit status comes out of the launcher.
        tmux.send(&["exit 7", "Enter"]);
        let exit_file = work.join("exit-status");
        let start = Instant::now();
        while !exit_file.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{caller:?}: no exit"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(std::fs::read_to_string(&exit_file).unwrap().trim(), "7");
    }
}
