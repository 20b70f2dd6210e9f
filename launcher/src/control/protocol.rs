//! The control protocol: JSON Lines over the control socket (README, "Control socket").
//!
//! A client writes one request object per line; the sandbox answers each with one reply line,
//! `{"ok": true, …}` or `{"ok": false, "error": "…"}`. Requests that subscribe (`events` with
//! `follow`, `prompts`, `stop`) then keep sending lines on the same connection until it closes.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// One request.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// What `ps` shows: id, name, pids, program, modes, pending prompts, denials.
    Status,
    /// SIGTERM to the program, SIGKILL to the whole sandbox after `grace` seconds; the
    /// connection closes when the sandbox has ended.
    Stop {
        #[serde(default = "default_grace")]
        grace: f64,
    },
    /// The recent events (lifecycle, denials, prompts, reloads), then with `follow` every event
    /// as it happens.
    Events {
        #[serde(default)]
        follow: bool,
    },
    /// The open prompts, then (with `follow`) `{"prompt": …}` as one opens or more requests
    /// join it and `{"closed": {"id", "outcome"}}` as one ends.
    Prompts {
        #[serde(default)]
        follow: bool,
    },
    /// Answer prompt `id` (or the oldest open one): `allow-once`, `allow-always`,
    /// `remove-from-deny-list` or `deny`, as the prompt offers.
    Answer {
        #[serde(default)]
        id: Option<u64>,
        answer: String,
    },
    /// Replace the network rules with those of an OpenShell policy YAML (the `--policy` layer)
    /// or a settings JSON (the `--settings` layer); static sections may not change.
    PolicySet { file: std::path::PathBuf },
    /// Allow a domain in this sandbox (not written anywhere).
    Allow { domain: String },
    /// Deny a domain in this sandbox (not written anywhere); open tunnels to it are closed.
    Deny { domain: String },
}

pub fn default_grace() -> f64 {
    10.0
}

/// `{"ok": true}` merged with `fields`.
pub fn ok(fields: Value) -> Value {
    let mut v = json!({"ok": true});
    if let (Value::Object(out), Value::Object(more)) = (&mut v, fields) {
        out.extend(more);
    }
    v
}

pub fn error(message: impl std::fmt::Display) -> Value {
    json!({"ok": false, "error": message.to_string()})
}

/// Parse one request line; the error says what a request looks like.
pub fn parse(line: &str) -> Result<Request, String> {
    serde_json::from_str(line).map_err(|e| {
        format!("not a request ({e}); send one JSON object per line, e.g. {{\"op\": \"status\"}}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_tagged_by_op() {
        assert_eq!(parse(r#"{"op":"status"}"#).unwrap(), Request::Status);
        assert_eq!(
            parse(r#"{"op":"stop"}"#).unwrap(),
            Request::Stop { grace: 10.0 }
        );
        assert_eq!(
            parse(r#"{"op":"events","follow":true}"#).unwrap(),
            Request::Events { follow: true }
        );
    }

    #[test]
    fn unknown_ops_and_fields_are_errors() {
        assert!(parse(r#"{"op":"format_disk"}"#).is_err());
        assert!(parse(r#"{"op":"stop","grace":1,"force":true}"#).is_err());
        assert!(parse("status")
            .unwrap_err()
            .contains("one JSON object per line"));
    }

    #[test]
    fn answers_and_reloads_are_requests_too() {
        assert_eq!(
            parse(r#"{"op":"answer","answer":"deny"}"#).unwrap(),
            Request::Answer {
                id: None,
                answer: "deny".into()
            }
        );
        assert!(parse(r#"{"op":"policy_set"}"#).is_err());
    }

    #[test]
    fn replies_carry_ok() {
        assert_eq!(ok(json!({"a": 1})), json!({"ok": true, "a": 1}));
        assert_eq!(error("no"), json!({"ok": false, "error": "no"}));
    }
}
