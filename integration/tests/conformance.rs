//! Conformance with the peers whose formats sandbox-launch reads: the own test vectors of NVIDIA
//! OpenShell (its policy engine, request-path canonicaliser, validator and example policies) and
//! of Anthropic's sandbox-runtime (its domain matching and settings validation). The vectors are
//! data in `conformance/*.json`, each citing repository, file and test; they run through the real
//! binary: requests live through the proxy to a recording server on the host, policies and
//! settings through `sandbox-launch check`. Where sandbox-launch decides otherwise on purpose, a
//! case says so (`differs`) and the reason is part of the data.
//!
//! Every live group of a file shares one sandbox launch (their hosts do not overlap), so the
//! suite costs a few launches, not one per vector.

use std::collections::BTreeSet;
use std::path::Path;

use integration::recording::HttpRecorder;
use integration::{command, explain, sh, stdout, Caller, TempDir, CALLERS};
use serde_json::Value;

fn data(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn text<'v>(v: &'v Value, key: &str) -> &'v str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("`{key}` missing in {v}"))
}

/// This machine's facts a vector's paths are rewritten to (the original names curl and git).
struct Machine {
    python: String,
    sh: String,
}

impl Machine {
    fn find() -> Self {
        let real = |p: &str| {
            std::fs::canonicalize(p)
                .unwrap_or_else(|e| panic!("{p}: {e} (python3 and sh are needed for these tests)"))
                .to_string_lossy()
                .into_owned()
        };
        // The system's interpreter (scripts/install-deps.sh installs it; a version manager's
        // under a home directory is not readable by the unprivileged user): the client runs as
        // this program, so the proxy identifies it by this path.
        Machine {
            python: real("/usr/bin/python3"),
            sh: real("/bin/sh"),
        }
    }

    fn fill(&self, s: &str, port: u16) -> String {
        let dir = |p: &str| {
            Path::new(p)
                .parent()
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        s.replace("{PORT}", &port.to_string())
            .replace("{PYTHON_DIR}", &dir(&self.python))
            .replace("{PYTHON}", &self.python)
            .replace("{SH_DIR}", &dir(&self.sh))
            .replace("{SH}", &self.sh)
    }
}

/// Python that sends each request of a JSON list `[method, host, port, target]` as plain HTTP
/// (absolute form, the target's bytes as written) through the proxy, and prints `INDEX STATUS`.
const CLIENT: &str = r#"
import json, socket, sys
for i, (m, host, port, target) in enumerate(json.load(open(sys.argv[1]))):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(("%s http://%s:%s%s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n\r\n"
               % (m, host, port, target, host, port)).encode("latin-1"))
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    parts = data.split(b"\r\n")[0].decode("latin-1").split(" ")
    print(i, parts[1] if len(parts) > 1 else "closed", flush=True)
    s.close()
"#;

/// One request of a live case, and what must happen to it.
struct Live {
    cite: String,
    method: String,
    host: String,
    port: String,
    target: String,
    allow: bool,
    /// The target the server must receive (allowed cases).
    sent: String,
    /// The rules allow it, but the host resolves to the recording server's loopback address,
    /// which only a rule naming the host exactly may reach (OpenShell's own guard does the same):
    /// judged on the decision, which names the rule that allowed it (a host no rule names has
    /// none).
    guarded: bool,
}

fn live_cases(groups: &[Value], machine: &Machine, port: u16) -> Vec<Live> {
    let mut out = Vec::new();
    for g in groups {
        for c in g["cases"].as_array().expect("cases") {
            let target = text(c, "target").to_string();
            out.push(Live {
                cite: text(c, "cite").to_string(),
                method: text(c, "method").to_string(),
                host: text(c, "host").to_string(),
                port: machine.fill(c["port"].as_str().unwrap_or("{PORT}"), port),
                allow: match text(c, "expect") {
                    "allow" => true,
                    "deny" => false,
                    other => panic!("expect: {other}"),
                },
                sent: c["sent"].as_str().unwrap_or(&target).to_string(),
                guarded: c["guarded"].as_bool().unwrap_or(false),
                target,
            });
        }
    }
    out
}

/// Send every case from inside the sandbox (`opts` carry the policy) and check each answer and
/// what the server received.
fn run_live(
    caller: Caller,
    work: &TempDir,
    machine: &Machine,
    server: &HttpRecorder,
    opts: &[String],
    cases: &[Live],
) {
    let requests: Vec<Value> = cases
        .iter()
        .map(|c| serde_json::json!([c.method, c.host, c.port, c.target]))
        .collect();
    let list = work.write("requests.json", &Value::Array(requests).to_string());
    work.write("client.py", CLIENT);
    // Names are pinned to the recording server; addresses and malformed hosts (which some
    // vectors send on purpose) are not names.
    let name = |h: &str| {
        let h = h.strip_suffix('.').unwrap_or(h);
        !h.is_empty()
            && h.len() < 254
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
            && h.rsplit('.')
                .next()
                .is_some_and(|l| l.starts_with(|c: char| c.is_ascii_alphabetic()))
    };
    let hosts: BTreeSet<String> = cases
        .iter()
        .filter(|c| name(&c.host))
        .map(|c| c.host.to_ascii_lowercase())
        .collect();
    let mut args: Vec<String> = vec!["--network".into(), "restricted".into()];
    for h in hosts {
        args.extend(["--resolve".into(), format!("{h}:127.0.0.1")]);
    }
    let events = work.join("events.jsonl");
    args.extend(["--events".into(), events.display().to_string()]);
    args.extend(opts.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sh(
        caller,
        &work.path,
        &args,
        &format!("{} client.py {}", machine.python, list.display()),
    );
    let decisions = integration::net::events(&events);
    let answers: Vec<String> = stdout(&out)
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(_, s)| s.to_string()))
        .collect();
    assert_eq!(answers.len(), cases.len(), "{caller:?}: {}", explain(&out));
    let mut wrong = Vec::new();
    for (c, status) in cases.iter().zip(&answers) {
        if c.guarded {
            let by_rule = decisions.iter().any(|e| {
                e["event"] == "network"
                    && e["host"].as_str() == Some(&c.host.to_ascii_lowercase())
                    && e["rule"].is_string()
            });
            if status == "200" || !by_rule {
                wrong.push(format!(
                    "{} {}:{}{} -> {status}, expected the rules to allow it and the loopback guard to stop it [{}]",
                    c.method, c.host, c.port, c.target, c.cite
                ));
            }
            continue;
        }
        if (status == "200") != c.allow {
            wrong.push(format!(
                "{} {}:{}{} -> {status}, expected {} [{}]",
                c.method,
                c.host,
                c.port,
                c.target,
                if c.allow { "allow" } else { "deny" },
                c.cite
            ));
        }
    }
    let received: Vec<String> = server.requests().into_iter().map(|r| r.target).collect();
    let expected: Vec<String> = cases
        .iter()
        .filter(|c| c.allow && !c.guarded)
        .map(|c| c.sent.clone())
        .collect();
    assert!(
        wrong.is_empty(),
        "{caller:?}: {} of {} cases decided otherwise:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
    assert_eq!(
        received, expected,
        "{caller:?}: the server received other requests than the allowed cases, canonical"
    );
}

#[test]
fn openshell_requests_are_decided_as_openshell_decides_them() {
    let doc = data("openshell_requests.json");
    let groups = doc["groups"].as_array().expect("groups");
    let machine = Machine::find();
    for caller in CALLERS {
        let server = HttpRecorder::start();
        let work = TempDir::new("conformance-os");
        let mut yaml = String::from("version: 1\nnetwork_policies:\n");
        for g in groups {
            yaml.push_str("  ");
            yaml.push_str(&machine.fill(text(g, "policy"), server.port));
        }
        let policy = work.write("policy.yaml", &yaml);
        let cases = live_cases(groups, &machine, server.port);
        let opts = vec!["--policy".to_string(), policy.display().to_string()];
        run_live(caller, &work, &machine, &server, &opts, &cases);
    }
}

/// `check` with `flag FILE` for every case of `file`: exit 0 for `accept`, 111 for `refuse`
/// (with `says` on stderr when given).
fn check_files(file: &str, flag: &str, ext: &str) -> usize {
    let doc = data(file);
    let work = TempDir::new("conformance-check");
    let mut wrong = Vec::new();
    let cases = doc["cases"].as_array().expect("cases");
    for (i, c) in cases.iter().enumerate() {
        let body = match &c["file"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let path = work.write(&format!("case-{i}.{ext}"), &body);
        let out = command(
            Caller::Invoker,
            &work.path,
            &["check", flag, path.to_str().unwrap()],
        )
        .output()
        .expect("run sandbox-launch check");
        let accepted = match out.status.code() {
            Some(0) => true,
            Some(111) => false,
            _ => panic!("{}: {}", text(c, "cite"), explain(&out)),
        };
        let want = text(c, "expect") == "accept";
        let stderr = String::from_utf8_lossy(&out.stderr);
        let says = c["says"].as_str().unwrap_or("");
        if accepted != want || (!accepted && !stderr.contains(says)) {
            wrong.push(format!(
                "{} -> {}, expected {} {says:?}\n  {}",
                text(c, "cite"),
                if accepted { "accepted" } else { "refused" },
                text(c, "expect"),
                stderr.trim()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases of {file} decided otherwise:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
    cases.len()
}

#[test]
fn openshell_policies_are_accepted_and_refused_as_openshell_does() {
    assert!(check_files("openshell_policies.json", "--policy", "yaml") > 0);
}

#[test]
fn sandbox_runtime_settings_are_accepted_and_refused_as_sandbox_runtime_does() {
    assert!(check_files("sandbox_runtime_settings.json", "--settings", "json") > 0);
}

#[test]
fn sandbox_runtime_domains_are_decided_as_sandbox_runtime_decides_them() {
    let doc = data("sandbox_runtime_domains.json");
    let groups = doc["groups"].as_array().expect("groups");
    let machine = Machine::find();
    for caller in CALLERS {
        let server = HttpRecorder::start();
        let work = TempDir::new("conformance-srt");
        let (mut allowed, mut denied) = (Vec::new(), Vec::new());
        for g in groups {
            for d in g["allowedDomains"].as_array().expect("allowedDomains") {
                allowed.push(machine.fill(d.as_str().unwrap(), server.port));
            }
            for d in g["deniedDomains"].as_array().expect("deniedDomains") {
                denied.push(machine.fill(d.as_str().unwrap(), server.port));
            }
        }
        let settings = serde_json::json!({
            "network": {"allowedDomains": allowed, "deniedDomains": denied},
            "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}
        });
        let file = work.write("srt.json", &settings.to_string());
        let cases = live_cases(groups, &machine, server.port);
        let opts = vec!["--settings".to_string(), file.display().to_string()];
        run_live(caller, &work, &machine, &server, &opts, &cases);
    }
}
