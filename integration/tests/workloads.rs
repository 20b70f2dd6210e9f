//! What an agent does, inside the sandbox: it starts an MCP stdio server (node) and talks
//! JSON-RPC to it over pipes; the server inherits every layer.

use integration::*;

const SERVER: &str = r#"
const fs = require('fs');
const rl = require('readline').createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const req = JSON.parse(line);
  let result;
  if (req.method === 'initialize') {
    result = { serverInfo: { name: 'probe', version: '1' } };
  } else if (req.method === 'tools/call') {
    const status = fs.readFileSync('/proc/self/status', 'utf8');
    const field = (k) => status.match(new RegExp('^' + k + ':\\s*(\\S+)', 'm'))[1];
    let wrote = 'no';
    try { fs.writeFileSync('/etc/mcp-was-here', 'x'); wrote = 'yes'; } catch (e) { wrote = e.code; }
    fs.writeFileSync('from-mcp.txt', 'hello');
    result = { seccomp: field('Seccomp'), nnp: field('NoNewPrivs'), capeff: field('CapEff'), etc_write: wrote };
  }
  process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: req.id, result }) + '\n');
});
"#;

const AGENT: &str = r#"
import json, subprocess, sys
p = subprocess.Popen(["node", "server.js"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def call(i, method):
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method}) + "\n"); p.stdin.flush()
    return json.loads(p.stdout.readline())
print(json.dumps(call(1, "initialize")))
print(json.dumps(call(2, "tools/call")))
p.stdin.close(); p.wait()
"#;

#[test]
fn an_mcp_stdio_server_started_by_the_agent_inherits_the_sandbox() {
    for caller in CALLERS {
        let work = TempDir::new("mcp");
        work.write("server.js", SERVER);
        work.write("agent.py", AGENT);
        let out = sh(caller, &work.path, &[], "python3 agent.py");
        assert_eq!(out.status.code(), Some(0), "{caller:?}: {}", explain(&out));
        let text = stdout(&out);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["result"]["serverInfo"]["name"], "probe", "{text}");
        let r = &lines[1]["result"];
        assert_eq!(r["seccomp"], "2", "{text}");
        assert_eq!(r["nnp"], "1", "{text}");
        assert_eq!(r["capeff"], "0000000000000000", "{text}");
        assert_ne!(r["etc_write"], "yes", "{text}");
        // The allowed twin: the server's write in the working directory reached the host.
        assert_eq!(
            std::fs::read_to_string(work.join("from-mcp.txt")).unwrap(),
            "hello"
        );
        assert!(!std::path::Path::new("/etc/mcp-was-here").exists());
    }
}
