//! The real agent CLIs (Claude Code, codex, droid from npm) run under `whole-process` with only
//! the mock model server allowed. The mock answers with a shell tool call and the test judges on
//! what came back to the server and on the host: the command ran inside (seccomp, uid), a write
//! outside failed, a `--deny-read` file was unreadable, a denied host got the proxy's 403 text,
//! and the agents' own vendor and telemetry endpoints were denied without the agent failing.

use integration::agents::*;
use integration::mock_model::{MockModel, Reply, ToolResult, Turn};
use integration::net::events;
use integration::*;
use serde_json::json;
use std::path::PathBuf;

const SECRET: &str = "secret-3b1f0c-never-inside";
const PUBLIC: &str = "public-77a2e9-readable";
const DONE: &str = "mock model: the probe came back";
/// Marks the conversation of a subagent (its prompt comes from the mock's own tool call).
const SUBAGENT: &str = "SUBAGENT-PROBE";

/// The directories of one agent session: a working directory, a HOME the sandbox user owns,
/// a directory outside every writable tree, and a secret passed with `--deny-read`.
struct Fixture {
    dir: TempDir,
    work: PathBuf,
    home: TempDir,
    outside: PathBuf,
    secret: PathBuf,
    public: PathBuf,
    events: PathBuf,
}

impl Fixture {
    fn new(tag: &str) -> Self {
        let dir = test_dir(tag);
        let work = dir.mkdir("work");
        let init = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(&work)
            .status()
            .expect("git init");
        assert!(init.success());
        dir.give_to_sandbox_user(&work);
        let outside = dir.mkdir("outside");
        let secret = dir.write("secret.txt", SECRET);
        let public = dir.write("public.txt", PUBLIC);
        let home = test_dir(&format!("{tag}-home"));
        let events = dir.join("events.jsonl");
        Fixture {
            dir,
            work,
            home,
            outside,
            secret,
            public,
            events,
        }
    }

    fn session<'a>(&'a self, agent: Agent, caller: Caller, mock: &'a MockModel) -> Session<'a> {
        agent.configure(&self.home, mock);
        Session {
            agent,
            caller,
            work: &self.work,
            home: &self.home.path,
            mock,
            opts: vec![
                "--deny-read".into(),
                self.secret.display().to_string(),
                "--events".into(),
                self.events.display().to_string(),
            ],
            extra: Vec::new(),
            env: Vec::new(),
        }
    }

    /// A shell script that reports, as `key=value` lines, where it ran and what it could do;
    /// it also tries to plant a hook in `agent`'s own configuration. Returns the command that
    /// runs it (a script file, so the agents' own command checks see one plain command).
    fn probe(&self, agent: Agent) -> String {
        let script = format!(
            "echo \"seccomp=$(sed -n 's/^Seccomp:[[:space:]]*//p' /proc/self/status)\"\n\
             echo \"uid=$(id -u)\"\n\
             echo \"home=$HOME\"\n\
             if {{ echo '{{\"hooks\": \"planted\"}}' >> \"$HOME/{config}\"; }} 2>/dev/null; then echo config=written; else echo config=refused; fi\n\
             if {{ echo planted > {outside}/planted; }} 2>/dev/null; then echo outside=written; else echo outside=refused; fi\n\
             echo \"secret=[$(cat {secret} 2>&1)]\"\n\
             echo \"public=[$(cat {public} 2>&1)]\"\n\
             echo \"denied=[$(curl -sS --max-time 20 http://denied.test/ 2>&1)]\"\n\
             echo made-inside > made-inside.txt && echo work=written\n\
             git add made-inside.txt && git -c user.name=probe -c user.email=probe@mock.test commit -q -m probe && echo commit=made\n",
            config = agent.config_file(),
            outside = self.outside.display(),
            secret = self.secret.display(),
            public = self.public.display(),
        );
        let path = self.dir.write("probe.sh", &script);
        format!("sh {}", path.display())
    }
}

/// A script: the first turn that offers a shell tool runs `command`; then the final text.
/// Turns without a shell tool (title or summary requests) get plain text.
fn run_once(command: String) -> impl Fn(&Turn) -> Reply + Send + Sync + 'static {
    move |t: &Turn| match (t.shell_tool(), t.results.len()) {
        (Some(_), 0) => t.run(&command),
        (Some(_), _) => Reply::Text(DONE.into()),
        (None, _) => Reply::Text("mock model: ok".into()),
    }
}

/// The value of `key=` in a probe's output.
fn field<'a>(output: &'a str, key: &str) -> Option<&'a str> {
    let prefix = format!("{key}=");
    output
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(prefix.as_str()))
}

/// The probe's result as the mock received it.
fn probe_result(mock: &MockModel, out: &std::process::Output) -> ToolResult {
    let results = mock.results();
    results
        .iter()
        .find(|r| r.output.contains("seccomp="))
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the mock received no probe result (results: {results:?}; other requests: {:?})\n{}",
                mock.other_requests(),
                explain(out)
            )
        })
}

/// What the probe must have found inside, judged on what reached the server and on the host.
fn assert_probe_ran_inside(f: &Fixture, caller: Caller, result: &str, context: &str) {
    let why = format!("{context}\n--- tool result\n{result}");
    assert_eq!(field(result, "seccomp"), Some("2"), "{why}");
    assert_eq!(
        field(result, "uid"),
        Some(inside_uid(caller).to_string().as_str()),
        "{why}"
    );
    assert_eq!(field(result, "outside"), Some("refused"), "{why}");
    assert!(!f.outside.join("planted").exists(), "{why}");
    assert!(
        !result.contains(SECRET),
        "the --deny-read file was read: {why}"
    );
    assert!(
        result.contains(PUBLIC),
        "the readable twin was not read: {why}"
    );
    assert!(
        result.contains("network policy blocked denied.test"),
        "no 403 text from the proxy for a denied host: {why}"
    );
    assert_eq!(field(result, "work"), Some("written"), "{why}");
    assert_eq!(field(result, "commit"), Some("made"), "{why}");
    let log = std::process::Command::new("git")
        .args(["-c", "safe.directory=*", "log", "--format=%s"])
        .current_dir(&f.work)
        .output()
        .expect("git log");
    assert_eq!(
        stdout(&log),
        "probe\n",
        "the commit is not on the host: {why}"
    );
    assert_eq!(
        std::fs::read_to_string(f.work.join("made-inside.txt"))
            .ok()
            .as_deref(),
        Some("made-inside\n"),
        "the write in the working directory did not reach the host: {why}"
    );
}

/// Every network decision: only mock.test was let through; the agent's own endpoints (vendor
/// API, telemetry) were denied. Returns the denied hosts.
fn assert_only_the_mock_was_reached(f: &Fixture, context: &str) -> Vec<String> {
    let decisions: Vec<serde_json::Value> = events(&f.events)
        .into_iter()
        .filter(|e| e["event"] == "network")
        .collect();
    let allowed: Vec<&serde_json::Value> = decisions
        .iter()
        .filter(|e| e["decision"] == "allow")
        .collect();
    assert!(
        allowed.iter().all(|e| e["host"] == MOCK_HOST),
        "something other than the mock was let through: {allowed:?}\n{context}"
    );
    assert!(
        !allowed.is_empty(),
        "no allowed connection to the mock\n{context}"
    );
    let mut denied: Vec<String> = decisions
        .iter()
        .filter(|e| e["decision"] == "deny")
        .map(|e| e["host"].as_str().unwrap_or("?").to_string())
        .filter(|h| h != "denied.test")
        .collect();
    denied.sort();
    denied.dedup();
    denied
}

fn an_agent_completes_a_sandboxed_tool_call(agent: Agent, callers: &[Caller], vendor_host: &str) {
    for &caller in callers {
        let f = Fixture::new("agent");
        let mock = MockModel::start(run_once(f.probe(agent)));
        let session = f.session(agent, caller, &mock);
        let as_root = caller == Caller::Invoker && is_root();
        if as_root {
            // Like root's /root: root's, mode 0700.
            root_owns(&f.home.path);
        }
        let config = f.home.join(agent.config_file());
        let config_before = std::fs::read(&config).ok();
        let out = session.run("run the probe");
        let context = format!("{agent:?} as {caller:?}\n{}", explain(&out));
        assert_eq!(out.status.code(), Some(0), "{context}");
        assert!(
            stdout(&out).contains(DONE),
            "the final answer is missing: {context}"
        );
        let result = probe_result(&mock, &out);
        assert_probe_ran_inside(&f, caller, &result.output, &context);
        // The agent's own configuration stays as it was on the host; its state is written.
        let context = format!("{context}\n--- tool result\n{}", result.output);
        assert_eq!(
            field(&result.output, "config"),
            Some("refused"),
            "{context}"
        );
        assert_eq!(std::fs::read(&config).ok(), config_before, "{context}");
        // HOME inside is the test's, as root too (it holds the agent's state directory).
        assert_eq!(
            field(&result.output, "home"),
            f.home.path.to_str(),
            "{context}"
        );
        assert!(
            !agent.transcripts(&f.home.path).is_empty(),
            "no session transcript under HOME/{} on the host\n{context}",
            agent.transcripts_dir()
        );
        if as_root {
            let strays = not_owned_by(&f.home.path, 0);
            assert!(
                strays.is_empty(),
                "not root's on the host: {strays:?}\n{context}"
            );
        }
        let denied = assert_only_the_mock_was_reached(&f, &context);
        assert!(
            denied.iter().any(|h| h == vendor_host),
            "{vendor_host} was not among the denied hosts {denied:?}\n{context}"
        );
    }
}

#[test]
fn claude_code_runs_its_shell_tool_inside_the_sandbox() {
    an_agent_completes_a_sandboxed_tool_call(Agent::Claude, &CALLERS, "api.anthropic.com");
}

#[test]
fn codex_run_by_an_unprivileged_user_runs_its_shell_tool_inside_the_sandbox() {
    an_agent_completes_a_sandboxed_tool_call(Agent::Codex, &[Caller::Unprivileged], "chatgpt.com");
}

#[test]
fn droid_run_by_an_unprivileged_user_runs_its_shell_tool_inside_the_sandbox() {
    an_agent_completes_a_sandboxed_tool_call(
        Agent::Droid,
        &[Caller::Unprivileged],
        "api.factory.ai",
    );
}

/// Runs the command line it is given as an MCP stdio server and removes the `roots` capability
/// from the client's `initialize` request on the way.
const NO_ROOTS: &str = r#"
const { spawn } = require('child_process');
const server = spawn(process.execPath, process.argv.slice(2), { stdio: ['pipe', 'inherit', 'inherit'] });
require('readline').createInterface({ input: process.stdin }).on('line', (line) => {
  try {
    const msg = JSON.parse(line);
    if (msg.method === 'initialize' && msg.params && msg.params.capabilities) {
      delete msg.params.capabilities.roots;
      line = JSON.stringify(msg);
    }
  } catch (e) {}
  server.stdin.write(line + '\n');
}).on('close', () => server.stdin.end());
server.on('exit', (code) => process.exit(code === null ? 1 : code));
"#;

/// `@modelcontextprotocol/server-filesystem`, started by Claude Code as an MCP stdio server,
/// runs inside: its own /proc/self/status shows the filter, it cannot read the denied file nor
/// write outside, and its write in the working directory reaches the host.
#[test]
fn an_mcp_server_from_npm_started_by_claude_code_is_confined() {
    let server = std::path::Path::new(AGENTS_DIR)
        .join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(
        server.exists(),
        "{} is missing: run `scripts/install-deps.sh --tests`",
        server.display()
    );
    for caller in CALLERS {
        let f = Fixture::new("mcp");
        let steps = [
            ("read_text_file", json!({"path": "/proc/self/status"})),
            ("read_text_file", json!({"path": f.secret})),
            (
                "write_file",
                json!({"path": f.outside.join("mcp-planted"), "content": "planted"}),
            ),
            (
                "write_file",
                json!({"path": f.work.join("mcp-made.txt"), "content": "made"}),
            ),
            ("read_text_file", json!({"path": f.public})),
        ];
        let mock = MockModel::start(move |t: &Turn| match steps.get(t.results.len()) {
            _ if t.tool("mcp__fs__read_text_file").is_none() => {
                Reply::Text(format!("mock model: no MCP tools offered: {:?}", t.tools))
            }
            Some((tool, input)) => Reply::Call {
                name: format!("mcp__fs__{tool}"),
                input: input.clone(),
            },
            None => Reply::Text(DONE.into()),
        });
        // Claude Code offers MCP roots (its working directory), which the server would take
        // instead of its command line; hide that capability so the server's own checks allow
        // the paths the sandbox must refuse.
        let no_roots = f.dir.write("no-roots.js", NO_ROOTS);
        let config = json!({"mcpServers": {"fs": {"command": "node",
            "args": [no_roots, server, f.dir.path, "/proc"]}}});
        let mut session = f.session(Agent::Claude, caller, &mock);
        session.extra = vec![
            "--mcp-config".into(),
            config.to_string(),
            "--strict-mcp-config".into(),
            "--allowedTools".into(),
            "mcp__fs".into(),
        ];
        // MCP tools offered up front, not behind Claude Code's tool search.
        session.env = vec![("ENABLE_TOOL_SEARCH".into(), "false".into())];
        let out = session.run("use the filesystem tools");
        let context = format!("{caller:?}\n{}", explain(&out));
        assert_eq!(out.status.code(), Some(0), "{context}");
        let r: Vec<String> = mock
            .results()
            .into_iter()
            .map(|r| mcp_text(&r.output))
            .collect();
        assert_eq!(r.len(), 5, "{r:#?}\n{context}");
        assert!(
            r[0].lines()
                .any(|l| l.starts_with("Seccomp:") && l.ends_with('2')),
            "the MCP server's own status: {}\n{context}",
            r[0]
        );
        // Refused by the kernel (the mask, the read-only mount), not by the server's own checks.
        assert!(
            !r[1].contains(SECRET) && r[1].contains("EACCES"),
            "the MCP server read the denied file: {r:#?}"
        );
        assert!(r[2].contains("EROFS"), "{r:#?}\n{context}");
        assert!(!f.outside.join("mcp-planted").exists(), "{r:#?}\n{context}");
        assert_eq!(
            std::fs::read_to_string(f.work.join("mcp-made.txt"))
                .ok()
                .as_deref(),
            Some("made"),
            "{r:#?}\n{context}"
        );
        assert!(r[4].contains(PUBLIC), "{r:#?}\n{context}");
        assert_only_the_mock_was_reached(&f, &context);
    }
}

/// The text of an MCP tool result as Claude Code passes it on (`{"content": "..."}` or plain).
fn mcp_text(output: &str) -> String {
    serde_json::from_str::<serde_json::Value>(output)
        .ok()
        .and_then(|v| v["content"].as_str().map(str::to_string))
        .unwrap_or_else(|| output.to_string())
}

/// A Claude Code subagent (the `Agent` tool) gets its own conversation with the model; the
/// shell command it runs is inside the same sandbox.
#[test]
fn a_claude_code_subagent_runs_its_commands_inside_the_sandbox() {
    for caller in CALLERS {
        let f = Fixture::new("subagent");
        let probe = f.probe(Agent::Claude);
        let mock = MockModel::start(move |t: &Turn| {
            let sub = t.prompt.contains(SUBAGENT);
            match (sub, t.results.len()) {
                (true, 0) => t.run(&probe),
                (true, _) => Reply::Text(format!("subagent done: {}", t.results[0].output)),
                (false, 0) if t.tool("Agent").is_some() => Reply::Call {
                    name: "Agent".into(),
                    input: json!({"description": "run the probe",
                        "prompt": format!("{SUBAGENT}: run the probe"),
                        "subagent_type": "general-purpose"}),
                },
                (false, _) => Reply::Text(DONE.into()),
            }
        });
        let out = f
            .session(Agent::Claude, caller, &mock)
            .run("delegate the probe to a subagent");
        let context = format!("{caller:?}\n{}", explain(&out));
        assert_eq!(out.status.code(), Some(0), "{context}");
        let sub_turns = mock
            .exchanges()
            .iter()
            .filter(|e| e.turn.as_ref().is_some_and(|t| t.prompt.contains(SUBAGENT)))
            .count();
        assert!(
            sub_turns >= 2,
            "the subagent never talked to the model\n{context}"
        );
        let result = probe_result(&mock, &out);
        assert_probe_ran_inside(&f, caller, &result.output, &context);
    }
}

/// Started by root (a container entrypoint), codex finds its configuration and keeps its state
/// in the caller's HOME (root's, 0700), which stays root's on the host.
#[test]
fn codex_started_by_root_runs_its_shell_tool_inside_the_sandbox() {
    an_agent_completes_a_sandboxed_tool_call(Agent::Codex, &[Caller::Invoker], "chatgpt.com");
}

/// Started by root, droid finds its `customModels` and keeps its sessions in the caller's HOME
/// (root's, 0700), which stays root's on the host.
#[test]
fn droid_started_by_root_runs_its_shell_tool_inside_the_sandbox() {
    an_agent_completes_a_sandboxed_tool_call(Agent::Droid, &[Caller::Invoker], "api.factory.ai");
}

/// Give `dir` and everything below it to root, mode 0700 at the top (like /root).
fn root_owns(dir: &std::path::Path) {
    let s = std::process::Command::new("chown")
        .args(["-R", "0:0"])
        .arg(dir)
        .status()
        .expect("chown");
    assert!(s.success());
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
}

/// Every path below `dir` (itself included) whose owner is not `uid`.
fn not_owned_by(dir: &std::path::Path, uid: u32) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.uid() != uid {
            out.push(p.clone());
        }
        if meta.is_dir() {
            todo.extend(
                std::fs::read_dir(&p)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
        }
    }
    out
}
