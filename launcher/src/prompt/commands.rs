//! `sandbox-launch prompt [ID|NAME]`: answer a running sandbox's prompts — interactively (a
//! person in another terminal or a tmux pane), or, with `--answer`, the next prompt, once (a
//! script, an automated reviewer). Two connections: one follows the prompts, one answers.

use std::io::{BufRead, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};

use super::offer::Answer;
use crate::control::client::{self, Client};

/// The sandbox to talk to: the one named, or the only one running.
fn socket_of(target: Option<&str>) -> Result<std::path::PathBuf> {
    if let Some(t) = target {
        return client::find(t);
    }
    let mut running: Vec<(std::path::PathBuf, Value)> = client::running()
        .into_iter()
        .filter_map(|f| match f {
            client::Found::Running { socket, status } => Some((socket, status)),
            client::Found::Unresponsive { .. } => None,
        })
        .collect();
    match running.len() {
        0 => bail!("no sandbox is running"),
        1 => Ok(running.remove(0).0),
        _ => bail!(
            "{} sandboxes are running; name one: {}",
            running.len(),
            running
                .iter()
                .map(|(_, s)| s["name"]
                    .as_str()
                    .or(s["id"].as_str())
                    .unwrap_or("?")
                    .to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Follow the prompts of the sandbox at `socket`: the open ones now, then every change, as
/// `Event`s on a channel (a thread reads the connection).
fn follow(socket: &std::path::Path) -> Result<mpsc::Receiver<Value>> {
    let mut c = Client::connect(socket)?;
    let reply = c.request(&json!({"op": "prompts", "follow": true}))?;
    c.wait_lines(None)?;
    let (tx, rx) = mpsc::channel();
    for p in reply["open"].as_array().cloned().unwrap_or_default() {
        let _ = tx.send(json!({"prompt": p}));
    }
    std::thread::spawn(move || {
        while let Ok(Some(line)) = c.next_line() {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

/// `prompt TARGET --answer A [--timeout S]`: answer the next prompt (an open one, else the next
/// to open), then exit. 0 when the answer took effect.
pub fn answer_next(target: Option<&str>, answer: &str, timeout: Option<f64>, as_json: bool) -> i32 {
    let run = || -> Result<i32> {
        let answer = Answer::parse(answer).ok_or_else(|| {
            anyhow!(
                "--answer {answer}: one of allow-once, allow-always, remove-from-deny-list, deny"
            )
        })?;
        let socket = socket_of(target)?;
        let updates = follow(&socket)?;
        let deadline = timeout.map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
        let prompt = loop {
            let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let line = match wait {
                Some(w) => updates.recv_timeout(w).map_err(|e| match e {
                    mpsc::RecvTimeoutError::Timeout => {
                        anyhow!("no prompt within {} s", timeout.unwrap_or(0.0))
                    }
                    mpsc::RecvTimeoutError::Disconnected => anyhow!("the sandbox ended"),
                })?,
                None => updates.recv().map_err(|_| anyhow!("the sandbox ended"))?,
            };
            if line.get("prompt").is_some_and(|p| fits(p, answer)) {
                break line["prompt"].clone();
            }
        };
        let mut c = Client::connect(&socket)?;
        let done =
            c.request(&json!({"op": "answer", "id": prompt["id"], "answer": answer.name()}))?;
        if as_json {
            println!("{done}");
        } else {
            println!("{}", summary(&prompt, &done));
        }
        Ok(0)
    };
    run().unwrap_or_else(|e| {
        crate::say!("sandbox-launch: {e:#}");
        1
    })
}

/// Whether `answer` is meant for prompts of this kind: a filesystem prompt never offers
/// `allow-once` or `remove-from-deny-list` (nothing waits on it), so a script that answers
/// network prompts that way lets it be. Every other mismatch is the sandbox's to refuse (an
/// organisation's deny says why).
fn fits(prompt: &Value, answer: Answer) -> bool {
    prompt["kind"] != "filesystem"
        || !matches!(answer, Answer::AllowOnce | Answer::RemoveFromDenyList)
}

fn summary(prompt: &Value, done: &Value) -> String {
    let did = shown(done["did"].as_str().unwrap_or(""));
    format!(
        "prompt #{} {}: {}{}",
        prompt["id"],
        shown(
            prompt["host"]
                .as_str()
                .or(prompt["directory"].as_str())
                .unwrap_or("?")
        ),
        shown(done["answer"].as_str().unwrap_or("?")),
        if did.is_empty() {
            String::new()
        } else {
            format!(" ({did})")
        }
    )
}

/// The longest a name from the sandbox is shown (a path may be 4096 bytes long).
const SHOWN_MAX: usize = 512;

/// Text from the sandbox as it may reach the operator's terminal: a prompt names paths and
/// executables the program inside chose, which may hold escape sequences (clear the screen,
/// retitle the window, move the cursor), carriage returns and newlines (draw a prompt of its
/// own over the real one) or bidirectional overrides (show a name reversed). Each such
/// character is shown escaped, `\u{1b}`; a very long text is cut.
fn shown(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == SHOWN_MAX {
            out.push_str(&format!("… ({} more characters)", text.chars().count() - i));
            break;
        }
        if invisible(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// C0 and C1 controls and DEL, and the zero-width, line/paragraph separator and
/// bidirectional formatting characters.
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// A string field of a prompt, as [`shown`].
fn field(v: &Value, or: &str) -> String {
    shown(v.as_str().unwrap_or(or))
}

/// `prompt [TARGET]`: show each prompt and read the answer from the terminal, until the
/// sandbox ends or input does.
pub fn interactive(target: Option<&str>) -> i32 {
    let run = || -> Result<i32> {
        let socket = socket_of(target)?;
        let updates = follow(&socket)?;
        let mut open: Vec<Value> = Vec::new();
        let stdin = std::io::stdin();
        let mut input = stdin.lock().lines();
        crate::say!("sandbox-launch: waiting for prompts (Ctrl-D to stop)");
        loop {
            // Everything that happened meanwhile, then wait for a prompt if none is open.
            loop {
                let next = if open.is_empty() {
                    updates.recv().ok()
                } else {
                    updates.try_recv().ok()
                };
                let Some(line) = next else { break };
                if let Some(p) = line.get("prompt") {
                    open.retain(|o| o["id"] != p["id"]);
                    open.push(p.clone());
                } else if let Some(c) = line.get("closed") {
                    open.retain(|o| o["id"] != c["id"]);
                }
            }
            let Some(prompt) = open.first().cloned() else {
                crate::say!("sandbox-launch: the sandbox ended");
                return Ok(0);
            };
            print!("{}", show(&prompt));
            std::io::stdout().flush()?;
            let Some(Ok(line)) = input.next() else {
                return Ok(0);
            };
            let Some(answer) = choose(&prompt, line.trim()) else {
                println!("(type the number or the name of an answer)");
                continue;
            };
            let mut c = Client::connect(&socket)?;
            match c.request(&json!({"op": "answer", "id": prompt["id"], "answer": answer})) {
                Ok(done) => println!("{}", summary(&prompt, &done)),
                Err(e) => println!("not done: {e:#}"),
            }
            open.retain(|o| o["id"] != prompt["id"]);
        }
    };
    run().unwrap_or_else(|e| {
        crate::say!("sandbox-launch: {e:#}");
        1
    })
}

/// A prompt for people.
fn show(p: &Value) -> String {
    let program = match (&p["program"]["exe"], &p["program"]["pid"]) {
        (Value::String(exe), Value::Number(pid)) => format!("{} (pid {pid})", shown(exe)),
        (Value::String(exe), _) => shown(exe),
        _ => "a program".into(),
    };
    if p["kind"] == "filesystem" {
        let mut out = format!(
            "\nprompt #{}: {program} could not {} {}{}\n  {}\n",
            p["id"],
            field(&p["operation"], "write"),
            field(&p["path"], "?"),
            if p["organization"] == json!(true) {
                " (organization policy)"
            } else {
                ""
            },
            field(&p["reason"], ""),
        );
        out.push_str(&offers(p));
        return out;
    }
    let ports: Vec<String> = p["ports"]
        .as_array()
        .map(|a| a.iter().map(Value::to_string).collect())
        .unwrap_or_default();
    let mut out = format!(
        "\nprompt #{}: {program} wants {}{}{}\n  {}\n",
        p["id"],
        field(&p["host"], "?"),
        if ports.is_empty() {
            String::new()
        } else {
            format!(" port {}", ports.join(", "))
        },
        if p["organization"] == json!(true) {
            " (organization policy)"
        } else {
            ""
        },
        field(&p["reason"], ""),
    );
    out.push_str(&offers(p));
    out
}

/// The offers of a prompt, numbered, and what happens without an answer.
fn offers(p: &Value) -> String {
    let mut out = String::new();
    for (i, o) in p["offers"].as_array().into_iter().flatten().enumerate() {
        out.push_str(&format!(
            "  {}) {}: {}\n",
            i + 1,
            field(&o["answer"], "?"),
            field(&o["does"], "")
        ));
    }
    let unanswered = if p["kind"] == "filesystem" {
        "closed, nothing changed,"
    } else {
        "denied"
    };
    out.push_str(&format!(
        "  ({unanswered} if unanswered within {:.0} s)\nanswer: ",
        p["expires_in"].as_f64().unwrap_or(0.0)
    ));
    out
}

/// The answer typed: its number or name, of those the prompt offers.
fn choose(p: &Value, typed: &str) -> Option<String> {
    let offers: Vec<&str> = p["offers"]
        .as_array()?
        .iter()
        .filter_map(|o| o["answer"].as_str())
        .collect();
    if let Ok(n) = typed.parse::<usize>() {
        return offers.get(n.checked_sub(1)?).map(|s| s.to_string());
    }
    offers.iter().find(|o| **o == typed).map(|s| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_chosen_by_number_or_name_among_those_offered() {
        let p = json!({"offers": [{"answer": "allow-once"}, {"answer": "deny"}]});
        assert_eq!(choose(&p, "2").as_deref(), Some("deny"));
        assert_eq!(choose(&p, "allow-once").as_deref(), Some("allow-once"));
        assert_eq!(choose(&p, "allow-always"), None);
        assert_eq!(choose(&p, "0"), None);
    }

    #[test]
    fn a_prompt_names_the_program_the_host_and_what_each_answer_does() {
        let p = json!({"id": 3, "host": "registry.npmjs.org", "ports": [443],
            "program": {"exe": "/usr/bin/npm", "pid": 42}, "organization": false,
            "reason": "no rule allows registry.npmjs.org", "expires_in": 59.0,
            "offers": [{"answer": "deny", "does": "refuse it"}]});
        let text = show(&p);
        assert!(
            text.contains("prompt #3: /usr/bin/npm (pid 42) wants registry.npmjs.org port 443"),
            "{text}"
        );
        assert!(text.contains("1) deny: refuse it"), "{text}");
    }

    #[test]
    fn what_the_program_named_reaches_the_terminal_without_control_characters() {
        let evil =
            "/w/x\u{1b}[2J\u{1b}]0;owned\u{7}\r\nprompt #9: /usr/bin/npm wants safe.test\u{202e}";
        let p = json!({"id": 4, "kind": "filesystem", "path": evil, "directory": "/w",
            "operation": "create", "program": {"exe": evil, "pid": 7}, "organization": false,
            "reason": evil, "expires_in": 59.0,
            "offers": [{"answer": "allow-always", "does": evil}]});
        let text = show(&p) + &summary(&p, &json!({"answer": "deny", "did": evil}));
        assert!(
            !text
                .chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{text:?}"
        );
        assert!(!text.lines().any(|l| l.starts_with("prompt #9")), "{text}");
        assert!(text.contains("/w/x\\u{1b}[2J"), "{text}");
        let long = shown(&"a".repeat(5000));
        assert!(
            long.len() < 600 && long.ends_with("(4488 more characters)"),
            "{long}"
        );
    }

    #[test]
    fn a_script_answering_allow_once_leaves_filesystem_prompts_alone() {
        let fs = json!({"kind": "filesystem"});
        let net = json!({"kind": "network"});
        assert!(!fits(&fs, Answer::AllowOnce));
        assert!(!fits(&fs, Answer::RemoveFromDenyList));
        assert!(fits(&fs, Answer::AllowAlways) && fits(&fs, Answer::Deny));
        assert!(fits(&net, Answer::AllowOnce));
    }

    #[test]
    fn a_filesystem_prompt_names_the_program_the_path_and_that_nothing_waits() {
        let p = json!({"id": 4, "kind": "filesystem", "path": "/srv/data/x",
            "directory": "/srv/data", "operation": "create",
            "program": {"exe": "/usr/bin/touch", "pid": 7}, "organization": false,
            "reason": "read-only in the sandbox: outside the writable trees", "expires_in": 59.0,
            "offers": [{"answer": "allow-always", "does": "add `/srv/data` to allowWrite"}]});
        let text = show(&p);
        assert!(
            text.contains("prompt #4: /usr/bin/touch (pid 7) could not create /srv/data/x"),
            "{text}"
        );
        assert!(text.contains("1) allow-always: add `/srv/data`"), "{text}");
        assert!(text.contains("closed, nothing changed,"), "{text}");
    }
}
