//! The real agent CLIs (installed from npm by `scripts/install-deps.sh --tests`), configured to
//! talk to a [`MockModel`] named `mock.test` and started under `sandbox-launch whole-process`.

use crate::mock_model::MockModel;
use crate::{command, explain, Caller, TempDir};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where `install-deps.sh --tests` puts the CLIs: outside the repository, /tmp and /var/tmp
/// (both private inside the sandbox), world-readable so uid 65534 can run them.
pub const AGENTS_DIR: &str = "/var/cache/sandbox-launch-tests/agents";

/// The host name the agents use for the mock; `--resolve` points it at the host's 127.0.0.1.
pub const MOCK_HOST: &str = "mock.test";

/// How long one agent session may take before the test kills the launcher (and with it
/// everything inside).
const SESSION_LIMIT: Duration = Duration::from_secs(180);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    Claude,
    Codex,
    Droid,
}

pub const AGENTS: [Agent; 3] = [Agent::Claude, Agent::Codex, Agent::Droid];

impl Agent {
    /// The npm package and version `install-deps.sh --tests` installs.
    pub fn package(self) -> &'static str {
        match self {
            Agent::Claude => "@anthropic-ai/claude-code@2.1.330",
            Agent::Codex => "@openai/codex@0.169.0",
            Agent::Droid => "droid@0.215.0",
        }
    }

    fn bin_name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Droid => "droid",
        }
    }

    /// What `--version` prints (a substring).
    fn version(self) -> &'static str {
        match self {
            Agent::Claude => "2.1.330",
            Agent::Codex => "0.169.0",
            Agent::Droid => "0.215.0",
        }
    }

    /// The installed CLI, checked (once per test process) to exist and to run here. A missing
    /// or broken CLI fails the test with the reason and the fix; it is never skipped.
    pub fn cli(self) -> PathBuf {
        static CHECKED: [OnceLock<PathBuf>; 3] =
            [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        CHECKED[self as usize]
            .get_or_init(|| self.check_cli())
            .clone()
    }

    fn check_cli(self) -> PathBuf {
        let path = Path::new(AGENTS_DIR)
            .join("node_modules/.bin")
            .join(self.bin_name());
        assert!(
            path.exists(),
            "{} is not installed at {}: run `scripts/install-deps.sh --tests`, which installs {} \
             from npm into {AGENTS_DIR}",
            self.bin_name(),
            path.display(),
            self.package()
        );
        let out = std::process::Command::new(&path)
            .arg("--version")
            .env("HOME", AGENTS_DIR)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains(self.version()),
            "{} --version does not report {} (reinstall with `scripts/install-deps.sh --tests`): {}",
            path.display(),
            self.version(),
            explain(&out)
        );
        path
    }

    /// A command-bearing configuration file of the agent's, relative to HOME: what the sandbox
    /// must keep the agent from writing (hooks, MCP servers, model providers run later on the
    /// host).
    pub fn config_file(self) -> &'static str {
        match self {
            Agent::Claude => ".claude/settings.json",
            Agent::Codex => ".codex/config.toml",
            Agent::Droid => ".factory/settings.json",
        }
    }

    /// The directory, relative to HOME, where the agent keeps its session transcripts: state
    /// the sandbox must let it write.
    pub fn transcripts_dir(self) -> &'static str {
        match self {
            Agent::Claude => ".claude/projects",
            Agent::Codex => ".codex/sessions",
            Agent::Droid => ".factory/sessions",
        }
    }

    /// The non-empty `*.jsonl` transcripts below `home`'s transcript directory.
    pub fn transcripts(self, home: &Path) -> Vec<PathBuf> {
        fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = entry.path();
                if p.is_dir() {
                    walk(&p, found);
                } else if p.extension().is_some_and(|e| e == "jsonl")
                    && p.metadata().is_ok_and(|m| m.len() > 0)
                {
                    found.push(p);
                }
            }
        }
        let mut found = Vec::new();
        walk(&home.join(self.transcripts_dir()), &mut found);
        found
    }

    /// The agent's configuration for the mock, written into `home` (claude needs none: it
    /// takes the base URL from the environment).
    pub fn configure(self, home: &TempDir, mock: &MockModel) {
        let base = format!("http://{MOCK_HOST}:{}/v1", mock.port);
        match self {
            Agent::Claude => {}
            Agent::Codex => {
                home.write(
                    ".codex/config.toml",
                    &format!(
                        "model = \"mock-model\"\nmodel_provider = \"mock\"\n\n\
                         [model_providers.mock]\nname = \"Mock\"\nbase_url = \"{base}\"\n\
                         wire_api = \"responses\"\n"
                    ),
                );
            }
            Agent::Droid => {
                let settings = serde_json::json!({"customModels": [{
                    "model": "mock-model", "displayName": "Mock", "baseUrl": base,
                    "apiKey": "sk-mock-sandbox-test",
                    "provider": "generic-chat-completion-api", "maxOutputTokens": 4096}]});
                home.write(".factory/settings.json", &settings.to_string());
            }
        }
    }

    /// The non-interactive command line that gives the agent `prompt` and lets it run shell
    /// commands without asking.
    fn args(self, prompt: &str) -> Vec<String> {
        let a: &[&str] = match self {
            Agent::Claude => &["-p", prompt, "--allowedTools", "Bash"],
            // Codex's own sandbox (bwrap, Landlock) cannot nest inside ours: ours is the one.
            Agent::Codex => &[
                "exec",
                "-s",
                "danger-full-access",
                "--skip-git-repo-check",
                prompt,
            ],
            Agent::Droid => &["exec", "--auto", "high", "-m", "custom:mock-model", prompt],
        };
        a.iter().map(|s| s.to_string()).collect()
    }
}

/// A directory for an agent test outside /tmp (private inside the sandbox, so a HOME there would
/// not exist inside), removed when dropped. Its parent is made by `install-deps.sh --tests`
/// (sticky and world-writable, like /tmp).
pub fn test_dir(tag: &str) -> TempDir {
    let base = Path::new(AGENTS_DIR)
        .parent()
        .expect("cache dir")
        .join("runs");
    if !base.is_dir() {
        std::fs::create_dir_all(&base).unwrap_or_else(|e| {
            panic!(
                "cannot create {}: {e}; run `scripts/install-deps.sh --tests` (as root)",
                base.display()
            )
        });
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    }
    TempDir::new_in(base.to_str().expect("utf-8 path"), tag)
}

/// One agent session: the agent started in `work` with HOME=`home`, under `whole-process` with
/// only `mock.test` allowed, plus `opts` (launcher options) and `extra` (agent arguments).
pub struct Session<'a> {
    pub agent: Agent,
    pub caller: Caller,
    pub work: &'a Path,
    pub home: &'a Path,
    pub mock: &'a MockModel,
    pub opts: Vec<String>,
    pub extra: Vec<String>,
    /// Extra environment of the agent.
    pub env: Vec<(String, String)>,
}

impl Session<'_> {
    pub fn run(&self, prompt: &str) -> Output {
        let cli = self.agent.cli();
        let resolve = format!("{MOCK_HOST}:127.0.0.1");
        let mut args: Vec<String> = vec![
            "whole-process".into(),
            "--allow-domain".into(),
            MOCK_HOST.into(),
            "--resolve".into(),
            resolve,
        ];
        // The sandbox passes only an allowlist of the environment: name what the agent needs.
        let env = self.environment();
        for (name, _) in &env {
            args.push("--env".into());
            args.push(name.clone());
        }
        args.extend(self.opts.iter().cloned());
        args.push("--".into());
        args.push(cli.to_string_lossy().into_owned());
        args.extend(self.agent.args(prompt));
        args.extend(self.extra.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = command(self.caller, self.work, &args);
        cmd.env("HOME", self.home).envs(env);
        output_within(cmd, SESSION_LIMIT)
    }

    /// The agent's own variables (Claude Code takes its endpoint and key from the environment)
    /// and the session's extra ones.
    fn environment(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        if self.agent == Agent::Claude {
            let base = format!("http://{MOCK_HOST}:{}", self.mock.port);
            env.push(("ANTHROPIC_BASE_URL".to_string(), base));
            env.push((
                "ANTHROPIC_API_KEY".to_string(),
                "sk-mock-sandbox-test".to_string(),
            ));
        }
        env.extend(self.env.iter().cloned());
        env
    }
}

/// Run `cmd` to completion, or kill it (the launcher; everything inside dies with it) after
/// `limit` and report what it printed so far.
fn output_within(mut cmd: std::process::Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sandbox-launch");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = err.join().unwrap_or_default();
            panic!(
                "the agent session did not end within {limit:?}; killed. stderr:\n{}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}
