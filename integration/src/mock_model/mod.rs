//! A mock model server for driving the real agent CLIs offline: it speaks the Anthropic Messages
//! API (`POST /v1/messages`, SSE or JSON), the OpenAI Responses API (`POST /v1/responses`) and
//! Chat Completions (`POST /v1/chat/completions`), both with SSE, on the host's 127.0.0.1.
//!
//! A test gives it a script: a function from the conversation so far (a [`Turn`]: the tools the
//! client offers, the tool results it sent back) to the next answer (a [`Reply`]: text or a tool
//! call). Every request is recorded, so the test judges on what the server received — the output
//! of a command the agent ran inside the sandbox reaches the server only as a tool result.

mod anthropic;
mod chat;
pub mod http;
mod responses;
mod tools;

use http::{Request, Response};
use serde_json::{json, Value};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use tools::shell_arguments;

/// Which wire format a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    AnthropicMessages,
    OpenAiResponses,
    ChatCompletions,
}

/// A tool the client offered the model.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    /// JSON schema of the tool's arguments.
    pub schema: Value,
}

/// A tool result the client sent back: what the tool (a command inside the sandbox) produced.
#[derive(Debug, Clone)]
pub struct ToolResult {
    pub call_id: String,
    pub output: String,
}

/// The conversation as one request presents it.
#[derive(Debug, Clone)]
pub struct Turn {
    pub api: Api,
    pub model: String,
    pub stream: bool,
    pub tools: Vec<Tool>,
    /// Every tool result in the conversation, oldest first.
    pub results: Vec<ToolResult>,
    /// The text of the first user message (the prompt).
    pub prompt: String,
    /// The system prompt (instructions), as text.
    pub system: String,
}

impl Turn {
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The client's shell tool, if it offered one (each agent names it differently).
    pub fn shell_tool(&self) -> Option<&Tool> {
        tools::SHELL_TOOLS.iter().find_map(|n| self.tool(n))
    }

    /// A call of the client's shell tool running `command`; text saying so when there is none.
    pub fn run(&self, command: &str) -> Reply {
        match self.shell_tool() {
            Some(tool) => Reply::Call {
                name: tool.name.clone(),
                input: shell_arguments(tool, command),
            },
            None => Reply::Text(format!(
                "mock: no shell tool among {:?}",
                self.tools.iter().map(|t| &t.name).collect::<Vec<_>>()
            )),
        }
    }
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Text(String),
    Call { name: String, input: Value },
}

/// What the server received and answered.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    /// The parsed conversation, for the model endpoints.
    pub turn: Option<Turn>,
    pub reply: Option<Reply>,
    /// The request body (JSON when it parsed, else a string).
    pub body: Value,
}

pub type Script = Arc<dyn Fn(&Turn) -> Reply + Send + Sync>;

/// The running server. It lives until the test process ends (tests are short-lived).
pub struct MockModel {
    pub port: u16,
    log: Arc<Mutex<Vec<Exchange>>>,
}

impl MockModel {
    /// Listen on 127.0.0.1 (an ephemeral port) and answer with `script`.
    pub fn start(script: impl Fn(&Turn) -> Reply + Send + Sync + 'static) -> Self {
        Self::start_on(0, Arc::new(script))
    }

    pub fn start_on(port: u16, script: Script) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the mock model server");
        let port = listener.local_addr().expect("local addr").port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = log.clone();
        let ids = Arc::new(AtomicU64::new(1));
        http::serve(
            listener,
            Arc::new(move |req: Request| {
                let (response, exchange) = answer(&req, &script, &ids);
                seen.lock().expect("mock log").push(exchange);
                response
            }),
        );
        MockModel { port, log }
    }

    /// Everything received so far.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.log.lock().expect("mock log").clone()
    }

    /// Every tool result received so far, over all conversations.
    pub fn results(&self) -> Vec<ToolResult> {
        let mut seen: Vec<ToolResult> = Vec::new();
        for e in self.exchanges() {
            for r in e.turn.iter().flat_map(|t| t.results.iter()) {
                if !seen.iter().any(|s| s.call_id == r.call_id) {
                    seen.push(r.clone());
                }
            }
        }
        seen
    }

    /// The requests that were not model calls (telemetry, metadata, …), as `METHOD target`.
    pub fn other_requests(&self) -> Vec<String> {
        self.exchanges()
            .iter()
            .filter(|e| e.turn.is_none())
            .map(|e| format!("{} {}", e.method, e.target))
            .collect()
    }
}

fn answer(req: &Request, script: &Script, ids: &AtomicU64) -> (Response, Exchange) {
    let body: Value = serde_json::from_slice(&req.body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&req.body).into_owned()));
    let api = match (req.method.as_str(), req.path()) {
        ("POST", p) if p.ends_with("/messages") => Some(Api::AnthropicMessages),
        ("POST", p) if p.ends_with("/responses") => Some(Api::OpenAiResponses),
        ("POST", p) if p.ends_with("/chat/completions") => Some(Api::ChatCompletions),
        _ => None,
    };
    let mut exchange = Exchange {
        method: req.method.clone(),
        target: req.target.clone(),
        headers: req.headers.clone(),
        turn: None,
        reply: None,
        body: body.clone(),
    };
    let response = match api {
        Some(api) => {
            let turn = match api {
                Api::AnthropicMessages => anthropic::turn(&body),
                Api::OpenAiResponses => responses::turn(&body),
                Api::ChatCompletions => chat::turn(&body),
            };
            let reply = script(&turn);
            let id = ids.fetch_add(1, Ordering::SeqCst);
            let response = match api {
                Api::AnthropicMessages => anthropic::render(&reply, id, &turn),
                Api::OpenAiResponses => responses::render(&reply, id, &turn),
                Api::ChatCompletions => chat::render(&reply, id, &turn),
            };
            exchange.turn = Some(turn);
            exchange.reply = Some(reply);
            response
        }
        None if req.path().ends_with("/messages/count_tokens") => {
            Response::json(200, &json!({"input_tokens": 100}))
        }
        None => Response::json(
            404,
            &json!({"error": {"type": "not_found_error", "message": "mock model server: no such endpoint"}}),
        ),
    };
    (response, exchange)
}

/// The text of a content value: a string, or an array of parts with `text` (any part type).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().map(text_of).collect::<Vec<_>>().join("\n"),
        Value::Object(o) => o
            .get("text")
            .or_else(|| o.get("content"))
            .or_else(|| o.get("output"))
            .map(text_of)
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// One SSE event, named or not.
fn sse_event(name: Option<&str>, data: &Value) -> String {
    match name {
        Some(n) => format!("event: {n}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

#[cfg(test)]
mod tests;
