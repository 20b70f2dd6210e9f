//! `sandbox-launch ps`, `stop` and `events`: what a person (or a script) types to see and
//! steer running sandboxes. Each returns the command's exit code: 0 done, 1 refused or failed
//! (one line on stderr saying why).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{json, Value};

use super::client::{running, Client, Found};

fn report(r: Result<i32>) -> i32 {
    r.unwrap_or_else(|e| {
        crate::say!("sandbox-launch: {e:#}");
        1
    })
}

/// `ps [--json]`.
pub fn ps(as_json: bool) -> i32 {
    let found = running();
    if as_json {
        let rows: Vec<Value> = found
            .iter()
            .map(|f| match f {
                Found::Running { status, .. } => status.clone(),
                Found::Unresponsive { socket } => {
                    json!({"socket": socket, "unresponsive": true})
                }
            })
            .collect();
        println!("{}", Value::Array(rows));
        return 0;
    }
    println!(
        "{:<8}  {:<12}  {:>7}  {:>8}  {:<13}  {:<10}  {:>7}  {:>6}  {:>6}  PROGRAM",
        "ID", "NAME", "PID", "UPTIME", "MODE", "NETWORK", "PROMPTS", "DENIED", "WRITES"
    );
    for f in &found {
        match f {
            Found::Running { status: s, .. } => println!(
                "{:<8}  {:<12}  {:>7}  {:>8}  {:<13}  {:<10}  {:>7}  {:>6}  {:>6}  {}",
                s["id"].as_str().unwrap_or("?"),
                s["name"].as_str().unwrap_or("-"),
                s["pid"].as_u64().unwrap_or(0),
                uptime(s["uptime"].as_u64().unwrap_or(0)),
                s["mode"].as_str().unwrap_or("?"),
                s["network"].as_str().unwrap_or("?"),
                s["prompts"]["pending"].as_u64().unwrap_or(0),
                s["denied"]["total"].as_u64().unwrap_or(0),
                s["denied"]["writes"].as_u64().unwrap_or(0),
                program(&s["program"]),
            ),
            Found::Unresponsive { socket } => {
                println!("?         (does not answer: {})", socket.display())
            }
        }
    }
    0
}

fn uptime(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

fn program(argv: &Value) -> String {
    let words: Vec<&str> = argv
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let line = words.join(" ");
    if line.chars().count() > 60 {
        format!("{}…", line.chars().take(59).collect::<String>())
    } else {
        line
    }
}

/// `stop ID|NAME [--grace S]`: returns once the sandbox has ended.
pub fn stop(target: &str, grace: f64) -> i32 {
    report((|| {
        let mut c = Client::to(target)?;
        c.request(&json!({"op": "stop", "grace": grace}))?;
        // The sandbox closes the connection when it ends: at most the grace, plus the time the
        // kernel takes to tear it down.
        let deadline = Instant::now() + Duration::from_secs_f64(grace) + Duration::from_secs(10);
        c.wait_lines(Some(Duration::from_secs(1)))?;
        while Instant::now() < deadline {
            match c.next_line() {
                Ok(None) => {
                    crate::say!("sandbox-launch: stopped {target}");
                    return Ok(0);
                }
                Ok(Some(_)) => {}
                Err(_) => {}
            }
        }
        anyhow::bail!("{target} was signalled but has not ended")
    })())
}

/// `policy set ID|NAME FILE`.
pub fn policy_set(target: &str, file: &std::path::Path) -> i32 {
    report((|| {
        let file = std::path::absolute(file)?;
        change(target, json!({"op": "policy_set", "file": file}))
    })())
}

/// `allow ID|NAME DOMAIN`.
pub fn allow(target: &str, domain: &str) -> i32 {
    report(change(target, json!({"op": "allow", "domain": domain})))
}

/// `deny ID|NAME DOMAIN`.
pub fn deny(target: &str, domain: &str) -> i32 {
    report(change(target, json!({"op": "deny", "domain": domain})))
}

/// A reload; prints what is in force afterwards.
fn change(target: &str, req: Value) -> Result<i32> {
    let mut c = Client::to(target)?;
    // Loading and compiling a large policy can take a moment.
    c.wait_lines(Some(Duration::from_secs(30)))?;
    let reply = c.request(&req)?;
    let rules = &reply["rules"];
    for w in rules["warnings"].as_array().into_iter().flatten() {
        crate::say!("sandbox-launch: warning: {}", w.as_str().unwrap_or(""));
    }
    let list = |k: &str| {
        rules[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    };
    println!("{target}: reloaded");
    println!("  allowed domains:  {}", list("allowed_domains"));
    println!("  denied domains:   {}", list("denied_domains"));
    println!("  network_policies: {}", list("network_policies"));
    Ok(0)
}

/// `events ID|NAME [--follow] [--json]`.
pub fn events(target: &str, follow: bool, as_json: bool) -> i32 {
    report((|| {
        let mut c = Client::to(target)?;
        let reply = c.request(&json!({"op": "events", "follow": follow}))?;
        // Without --follow, the recent events only (the connection stays open for requests).
        let mut left = (!follow).then(|| reply["recent"].as_u64().unwrap_or(0));
        c.wait_lines(None)?;
        let mut out = std::io::stdout().lock();
        while left != Some(0) {
            let Some(event) = c.next_line()? else { break };
            left = left.map(|n| n - 1);
            let line = if as_json {
                event.to_string()
            } else {
                human(&event)
            };
            // A reader that went away (`| head`) ends the command.
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                break;
            }
        }
        Ok(0)
    })())
}

/// One event as a line for people: `12:00:01.123 deny connect pypi.org:443 /usr/bin/curl: no
/// rule allows pypi.org`, other events as their name and fields.
pub fn human(e: &Value) -> String {
    let time = e["time"]
        .as_str()
        .and_then(|t| t.get(11..23))
        .unwrap_or("            ");
    let kind = e["event"].as_str().unwrap_or("?");
    if kind == "network" {
        let port = e["port"]
            .as_u64()
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        let binary = e["binary"]
            .as_str()
            .map(|b| format!(" {b}"))
            .unwrap_or_default();
        return format!(
            "{time} {} {} {}{port}{binary}: {}",
            e["decision"].as_str().unwrap_or("?"),
            e["protocol"].as_str().unwrap_or("?"),
            e["host"].as_str().unwrap_or("?"),
            e["reason"].as_str().unwrap_or(""),
        );
    }
    let mut rest = e.clone();
    if let Value::Object(m) = &mut rest {
        m.remove("time");
        m.remove("event");
    }
    match rest {
        Value::Object(m) if m.is_empty() => format!("{time} {kind}"),
        other => format!("{time} {kind} {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_events_read_as_a_sentence() {
        let e = json!({"event": "network", "time": "2026-01-02T03:04:05.678Z", "decision": "deny",
            "protocol": "connect", "host": "pypi.org", "port": 443, "binary": "/usr/bin/curl",
            "reason": "no rule allows pypi.org"});
        assert_eq!(
            human(&e),
            "03:04:05.678 deny connect pypi.org:443 /usr/bin/curl: no rule allows pypi.org"
        );
        let e = json!({"event": "exited", "time": "2026-01-02T03:04:05.678Z", "exit_code": 0});
        assert_eq!(human(&e), "03:04:05.678 exited {\"exit_code\":0}");
    }

    #[test]
    fn uptime_is_short() {
        assert_eq!(uptime(5), "5s");
        assert_eq!(uptime(65), "1m05s");
        assert_eq!(uptime(3700), "1h01m");
    }
}
