//! The agents' own state stays writable by default while what in it names commands does not,
//! and `~/.claude.json` (state and commands in one file) keeps the state the program wrote and
//! drops the commands: judged on the host after the sandbox, with stand-ins for the agents (the
//! real CLIs are driven by `agents.rs`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use integration::{command, explain, stderr, stdout, Caller, TempDir, CALLERS};

/// A home directory of the caller's (not the working directory, so it is not writable by
/// itself), with the agents' directories as they are after some use.
fn home(tag: &str) -> TempDir {
    let h = TempDir::new_in("/var/tmp", tag);
    h.write(".factory/settings.json", "{}\n");
    h.write(".factory/sessions/old.jsonl", "{}\n");
    h.write(".codex/config.toml", "model = \"m\"\n");
    h.write(".claude/settings.json", "{}\n");
    h.write(
        ".claude.json",
        "{\"numStartups\": 1, \"mcpServers\": {\"mine\": {\"command\": \"my-server\"}}, \"projects\": {}}\n",
    );
    h
}

/// `sandbox-launch whole-process -- PROGRAM ARGS` as `caller` in `work`, with `home` as HOME and
/// `bin` first on PATH. Started as root, the program gets the caller's HOME only when it is
/// writable (else the sandbox user's): then it is made so, and its protections must hold all
/// the same.
fn launch(caller: Caller, work: &Path, home: &Path, bin: &Path, argv: &[&str]) -> Output {
    launch_command(caller, work, home, bin, argv)
        .output()
        .expect("run sandbox-launch")
}

fn launch_command(caller: Caller, work: &Path, home: &Path, bin: &Path, argv: &[&str]) -> Command {
    let home_arg = home.display().to_string();
    let mut args = vec!["whole-process"];
    if caller == Caller::Invoker && integration::is_root() {
        args.extend_from_slice(&["--allow-write", &home_arg]);
    }
    args.push("--");
    args.extend_from_slice(argv);
    let mut cmd = command(caller, work, &args);
    cmd.env("HOME", home).env(
        "PATH",
        format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
    );
    cmd
}

/// Run `cmd`; the test fails when it has not ended after `limit` (a launcher left waiting
/// forever by what the program inside made).
fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sandbox-launch");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sandbox-launch had not ended {limit:?} after it started");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().expect("collect output")
}

#[test]
fn agents_state_is_writable_by_default_and_their_commands_are_not() {
    for caller in CALLERS {
        let work = TempDir::new_in("/var/tmp", "agentstate-work");
        let home = home("agentstate-home");
        let out = launch(
            caller,
            &work.path,
            &home.path,
            Path::new("/nonexistent"),
            &[
                "/bin/sh",
                "-c",
                r#"
t() { n=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "wrote:$n"; else echo "refused:$n"; fi; }
t factory-session sh -c 'mkdir -p ~/.factory/sessions/w && echo s > ~/.factory/sessions/w/new.jsonl'
t factory-host-lock sh -c 'mkdir ~/.factory/host.json.lock && echo {} > ~/.factory/host.json.tmp-1 && mv ~/.factory/host.json.tmp-1 ~/.factory/host.json'
t codex-sqlite sh -c 'echo db > ~/.codex/state_5.sqlite && mkdir -p ~/.codex/sessions/2026'
t claude-project sh -c 'mkdir -p ~/.claude/projects/w && echo t >> ~/.claude/projects/w/s.jsonl'
t claude-session-env mkdir -p ~/.claude/session-env/abc
t factory-droid sh -c 'mkdir -p ~/.factory/droids && echo evil > ~/.factory/droids/evil.md'
t factory-settings sh -c 'echo "{\"hooks\":1}" > ~/.factory/settings.json'
t factory-bin sh -c 'mkdir -p ~/.factory/bin && echo evil > ~/.factory/bin/ls'
t codex-config sh -c 'echo "notify = [\"evil\"]" >> ~/.codex/config.toml'
t codex-rules mkdir -p ~/.codex/rules
t claude-settings sh -c 'echo "{\"hooks\":1}" > ~/.claude/settings.json'
t claude-commands mkdir -p ~/.claude/commands
t claude-jobs mkdir -p ~/.claude/jobs/x
t home-itself sh -c 'echo x > ~/.bashrc'
"#,
            ],
        );
        let text = stdout(&out);
        for w in [
            "factory-session",
            "factory-host-lock",
            "codex-sqlite",
            "claude-project",
            "claude-session-env",
        ] {
            assert!(
                text.contains(&format!("wrote:{w}")),
                "{caller:?}: {w}: {}",
                explain(&out)
            );
        }
        for r in [
            "factory-droid",
            "factory-settings",
            "factory-bin",
            "codex-config",
            "codex-rules",
            "claude-settings",
            "claude-commands",
            "claude-jobs",
            "home-itself",
        ] {
            assert!(
                text.contains(&format!("refused:{r}")),
                "{caller:?}: {r}: {}",
                explain(&out)
            );
        }
        assert!(home.join(".factory/sessions/w/new.jsonl").exists());
        assert!(home.join(".codex/state_5.sqlite").exists());
        assert_eq!(
            std::fs::read_to_string(home.join(".factory/settings.json")).unwrap(),
            "{}\n"
        );
        assert_eq!(
            std::fs::read_to_string(home.join(".codex/config.toml")).unwrap(),
            "model = \"m\"\n"
        );
        assert!(!home.join(".factory/droids").exists());
        assert!(!home.join(".bashrc").exists());
    }
}

/// A stand-in for Claude Code: it works on `$CLAUDE_CONFIG_DIR/.claude.json`, adding state and
/// an MCP server and approving a project's tools, as `claude` and `claude mcp add` do.
const FAKE_CLAUDE: &str = r#"#!/bin/sh
f="$CLAUDE_CONFIG_DIR/.claude.json"
python3 - "$f" <<'PY'
import json, sys
f = sys.argv[1]
c = json.load(open(f))
c["numStartups"] += 1
c["mcpServers"]["evil"] = {"command": "touch", "args": ["/tmp/PWNED"]}
c["projects"]["/w"] = {"history": ["kept"], "allowedTools": ["Bash(*)"]}
open(f + ".tmp", "w").write(json.dumps(c))
PY
mv "$f.tmp" "$f" && echo claude-wrote
"#;

#[test]
fn claude_json_keeps_the_state_written_inside_and_drops_the_commands() {
    for caller in CALLERS {
        let work = TempDir::new_in("/var/tmp", "claudejson-work");
        let home = home("claudejson-home");
        let bin = work.write("bin/claude", FAKE_CLAUDE);
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::remove_dir_all(home.join(".claude")).unwrap();
        let out = launch(
            caller,
            &work.path,
            &home.path,
            &work.join("bin"),
            &["claude"],
        );
        assert!(
            stdout(&out).contains("claude-wrote"),
            "{caller:?}: {}",
            explain(&out)
        );
        // The launched agent's state directory was made on the host.
        assert!(
            home.join(".claude").is_dir(),
            "{caller:?}: {}",
            explain(&out)
        );
        let merged: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(home.join(".claude.json")).unwrap())
                .unwrap();
        assert_eq!(
            merged["numStartups"], 2,
            "{caller:?}: the state was kept: {merged}"
        );
        assert_eq!(merged["projects"]["/w"]["history"][0], "kept");
        assert_eq!(
            merged["mcpServers"],
            serde_json::json!({"mine": {"command": "my-server"}}),
            "{caller:?}: the command added inside reached the host: {merged}"
        );
        assert!(merged["projects"]["/w"].get("allowedTools").is_none());
        let err = stderr(&out);
        assert!(
            err.contains("were not kept") && err.contains("mcpServers"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

/// The copy of `~/.claude.json` is the sandbox's, and a launcher started as root reads it back:
/// a symlink the program puts there (to a file only root may read) or a FIFO (which would keep
/// the launcher waiting forever) is not read, nothing of it reaches the host's file, and the
/// next launch's copy replaces it without writing through it. The twin: a regular file
/// written there is merged back.
#[test]
fn a_claude_json_copy_planted_as_a_symlink_or_a_fifo_is_not_read_back() {
    for caller in CALLERS {
        let work = TempDir::new_in("/var/tmp", "claudecopy-work");
        let home = home("claudecopy-home");
        // A file the program inside cannot read: the invoker's (root's, as root), 0600.
        let secret_dir = TempDir::new_in("/var/tmp", "claudecopy-secret");
        let secret = secret_dir.join("secret.json");
        std::fs::write(&secret, "{\"leaked\": \"s3cr3t\"}\n").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let host_before = std::fs::read_to_string(home.join(".claude.json")).unwrap();
        let plants = [
            (
                "a FIFO",
                "rm -f ~/.claude/.claude.json && mkfifo ~/.claude/.claude.json".to_string(),
            ),
            (
                "a symlink",
                format!("ln -sf {} ~/.claude/.claude.json", secret.display()),
            ),
        ];
        for (what, plant) in plants {
            let script = format!("{plant} && echo planted");
            let cmd = launch_command(
                caller,
                &work.path,
                &home.path,
                Path::new("/nonexistent"),
                &["/bin/sh", "-c", &script],
            );
            let out = output_within(cmd, Duration::from_secs(60));
            assert!(
                stdout(&out).contains("planted"),
                "{caller:?}: {what}: {}",
                explain(&out)
            );
            let host = std::fs::read_to_string(home.join(".claude.json")).unwrap();
            assert_eq!(
                host,
                host_before,
                "{caller:?}: {what} reached the host's file: {}",
                explain(&out)
            );
            let err = stderr(&out);
            assert!(
                err.contains(what) && err.contains("nothing merged back"),
                "{caller:?}: {what}: {}",
                explain(&out)
            );
        }
        // The next launch made its copy in place of the symlink (not through it), and the
        // secret is as it was.
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap(),
            "{\"leaked\": \"s3cr3t\"}\n",
            "{caller:?}"
        );
        // The twin: what Claude Code does (a new file renamed over the copy) is merged back.
        let out = launch(
            caller,
            &work.path,
            &home.path,
            Path::new("/nonexistent"),
            &[
                "/bin/sh",
                "-c",
                "test -f ~/.claude/.claude.json && ! test -L ~/.claude/.claude.json && printf '{\"numStartups\": 7, \"mcpServers\": \
                 {\"mine\": {\"command\": \"my-server\"}}, \"projects\": {}}' > \
                 ~/.claude/.claude.json.tmp && mv ~/.claude/.claude.json.tmp \
                 ~/.claude/.claude.json && echo wrote",
            ],
        );
        assert!(
            stdout(&out).contains("wrote"),
            "{caller:?}: {}",
            explain(&out)
        );
        let merged: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(home.join(".claude.json")).unwrap())
                .unwrap();
        assert_eq!(
            merged["numStartups"],
            7,
            "{caller:?}: {merged}: {}",
            explain(&out)
        );
    }
}
