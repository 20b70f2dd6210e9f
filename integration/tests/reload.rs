//! Hot reload of a running sandbox's network rules (issue 12): `policy set` widens (a host
//! becomes reachable without a restart) and narrows (an open tunnel to a host no longer allowed
//! is closed), refuses a change of a static section (and keeps the rules in force), the
//! `allow` shorthand, and an edit of a `--settings` file named on the command line. Servers are
//! on the host's 127.0.0.1, named through `--resolve`; OpenShell endpoints name them exactly.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use integration::live::{ctl, listed, wait_for_file, Running};
use integration::net::{events, HostServer};
use integration::{explain, stderr, stdout, TempDir, CALLERS};

/// A TCP server on the host's 127.0.0.1 that echoes what it gets, per connection.
fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

fn endpoint_policy(entries: &[(&str, u16, bool)]) -> String {
    let mut y = String::from("version: 1\nnetwork_policies:\n");
    for (i, (host, port, skip)) in entries.iter().enumerate() {
        y.push_str(&format!(
            "  p{i}:\n    endpoints:\n      - {{ host: {host}, port: {port}{} }}\n    binaries:\n      - {{ path: \"/**\" }}\n",
            if *skip { ", tls: skip" } else { "" }
        ));
    }
    y
}

/// Retry `http://HOST:PORT/PATH` until it answers 200 (at most ~30 s); marks `first-denied` at
/// the first refusal.
fn until_reachable(host: &str, port: u16, path: &str) -> String {
    format!(
        "i=0; while [ $i -lt 300 ]; do c=$(curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 http://{host}:{port}/{path}); \
         if [ \"$c\" = 200 ]; then echo reached-{path}; break; fi; touch first-denied-{path}; sleep 0.1; i=$((i+1)); done\n"
    )
}

#[test]
fn policy_set_and_allow_widen_a_running_sandbox() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("reload-widen");
        let p = server.port;
        let script = format!(
            "{}{}",
            until_reachable("new.test", p, "widen"),
            until_reachable("other.test", p, "shorthand")
        );
        let sb = Running::start(
            caller,
            &work.path,
            "widen",
            &[
                "--resolve",
                "new.test:127.0.0.1",
                "--resolve",
                "other.test:127.0.0.1",
                "--events",
                "events.jsonl",
            ],
            &script,
        );
        wait_for_file(&work.join("first-denied-widen"));
        listed(caller, &work.path, "widen");
        std::fs::write(
            work.join("wider.yaml"),
            endpoint_policy(&[("new.test", p, false)]),
        )
        .unwrap();
        let file = work.join("wider.yaml");
        let out = ctl(
            caller,
            &work.path,
            &["policy", "set", "widen", file.to_str().unwrap()],
        );
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(stdout(&out).contains("p0"), "{}", explain(&out));
        wait_for_file(&work.join("first-denied-shorthand"));
        let out = ctl(caller, &work.path, &["allow", "widen", "other.test"]);
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        let out = sb.finish(Duration::from_secs(60));
        let text = stdout(&out);
        assert!(
            text.contains("reached-widen"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("reached-shorthand"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(server.saw("/widen") && server.saw("/shorthand"));
        let reloads = events(&work.join("events.jsonl"))
            .into_iter()
            .filter(|e| e["event"] == "reload")
            .count();
        assert_eq!(reloads, 2, "{caller:?}: every reload is an event");
    }
}

/// Inside: a CONNECT tunnel through the proxy to the echo server, pinged every 0.1 s until it
/// closes (the number of pings answered so far in `pings`); then a new tunnel is tried.
const TUNNEL: &str = r#"
import socket, sys, time, os
port = sys.argv[1]
def tunnel():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(("CONNECT echo.test:%s HTTP/1.1\r\nHost: echo.test:%s\r\n\r\n" % (port, port)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return s, head.split(b"\r\n")[0].decode()
s, status = tunnel()
print("tunnel:", status, flush=True)
n = 0
try:
    while n < 400:
        n += 1
        s.sendall(b"ping%d\n" % n)
        got = s.recv(100)
        if not got:
            raise OSError("eof")
        with open("pings.tmp", "w") as f:
            f.write(str(n))
        os.rename("pings.tmp", "pings")
        if n == 3:
            open("tunnel-up", "w").close()
        time.sleep(0.1)
    print("still open after", n, flush=True)
except OSError as e:
    print("closed after", n, e, flush=True)
s2, status = tunnel()
print("new tunnel:", status, flush=True)
"#;

#[test]
fn a_narrowing_reload_closes_an_open_tunnel_and_a_static_change_is_refused() {
    let echo = echo_server();
    for caller in CALLERS {
        let work = TempDir::new("reload-narrow");
        std::fs::write(work.join("tunnel.py"), TUNNEL).unwrap();
        std::fs::write(
            work.join("open.yaml"),
            endpoint_policy(&[("echo.test", echo, true)]),
        )
        .unwrap();
        std::fs::write(
            work.join("narrow.yaml"),
            endpoint_policy(&[("unrelated.test", 443, false)]),
        )
        .unwrap();
        std::fs::write(
            work.join("static.yaml"),
            format!(
                "{}filesystem_policy:\n  include_workdir: true\n  read_only: [/usr]\n",
                endpoint_policy(&[("echo.test", echo, true)])
            ),
        )
        .unwrap();
        work.give_to_sandbox_user(&work.path);
        let sb = Running::start(
            caller,
            &work.path,
            "narrow",
            &[
                "--policy",
                "open.yaml",
                "--resolve",
                "echo.test:127.0.0.1",
                "--events",
                "events.jsonl",
            ],
            &format!("python3 tunnel.py {echo}"),
        );
        wait_for_file(&work.join("tunnel-up"));
        // A static section may not change: refused, naming it, and the rules stay.
        let bad = work.join("static.yaml");
        let out = ctl(
            caller,
            &work.path,
            &["policy", "set", "narrow", bad.to_str().unwrap()],
        );
        assert_eq!(out.status.code(), Some(1), "{caller:?}: {}", explain(&out));
        assert!(
            stderr(&out).contains("filesystem_policy"),
            "{}",
            explain(&out)
        );
        // The tunnel lives on through the refused reload: two more pings answered after it.
        let answered = || -> u32 {
            std::fs::read_to_string(work.join("pings"))
                .ok()
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0)
        };
        let after_refusal = answered();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while answered() < after_refusal + 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "{caller:?}: the tunnel stopped after the refused reload ({after_refusal} pings)"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Narrow: the open tunnel is closed.
        let narrow = work.join("narrow.yaml");
        let out = ctl(
            caller,
            &work.path,
            &["policy", "set", "narrow", narrow.to_str().unwrap()],
        );
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        let out = sb.finish(Duration::from_secs(60));
        let text = stdout(&out);
        assert!(
            text.contains("tunnel: HTTP/1.1 200"),
            "{caller:?}: {}",
            explain(&out)
        );
        let closed_after: u32 = text
            .lines()
            .find_map(|l| l.strip_prefix("closed after "))
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{caller:?}: the tunnel stayed open: {}", explain(&out)));
        // It was closed by the narrowing, not before: it had lived through the refused reload.
        assert!(
            closed_after > after_refusal + 2,
            "{caller:?}: closed after {closed_after}, {after_refusal} pings at the refusal"
        );
        assert!(
            text.contains("new tunnel: HTTP/1.1 403"),
            "{caller:?}: {text}"
        );
        let closing = events(&work.join("events.jsonl")).into_iter().find(|e| {
            e["event"] == "network"
                && e["host"] == "echo.test"
                && e["reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("closed: the reloaded policy no longer allows"))
        });
        assert!(
            closing.is_some(),
            "{caller:?}: no event for the closed tunnel"
        );
        let refused = events(&work.join("events.jsonl"))
            .into_iter()
            .any(|e| e["event"] == "reload_failed");
        assert!(refused, "{caller:?}: the refused reload is an event");
    }
}

#[test]
fn an_edit_of_the_settings_file_named_on_the_command_line_takes_effect_at_once() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("reload-watch");
        let settings = work.join("settings.json");
        let write = |domains: &str| {
            // As editors do: a new file renamed over the old one.
            let tmp = work.join(".settings.json.tmp");
            std::fs::write(
                &tmp,
                format!(
                    "{{\n  // the sandbox's\n  \"sandbox\": {{\"network\": {{\"allowedDomains\": [{domains}]}}}}\n}}\n"
                ),
            )
            .unwrap();
            std::fs::rename(&tmp, &settings).unwrap();
        };
        write("\"unrelated.test\"");
        work.give_to_sandbox_user(&work.path);
        let sb = Running::start(
            caller,
            &work.path,
            "watched",
            &[
                "--settings",
                settings.to_str().unwrap(),
                "--resolve",
                "watched.test:127.0.0.1",
            ],
            &until_reachable("watched.test", server.port, "edited"),
        );
        wait_for_file(&work.join("first-denied-edited"));
        // Loopback needs the host named exactly, as here.
        write("\"unrelated.test\", \"watched.test\"");
        let out = sb.finish(Duration::from_secs(60));
        assert!(
            stdout(&out).contains("reached-edited"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(server.saw("/edited"));
    }
}
