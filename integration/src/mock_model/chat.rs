//! OpenAI Chat Completions: the request's `messages`, and the answer as SSE chunks ending in
//! `data: [DONE]` (or one JSON completion when not streaming).

use super::http::Response;
use super::{sse_event, text_of, Api, Reply, Tool, ToolResult, Turn};
use serde_json::{json, Value};

pub fn turn(body: &Value) -> Turn {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let results = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| ToolResult {
            call_id: m["tool_call_id"].as_str().unwrap_or("").to_string(),
            output: text_of(&m["content"]),
        })
        .collect();
    let text_of_role = |role: &str| {
        messages
            .iter()
            .filter(|m| m["role"] == role)
            .map(|m| text_of(&m["content"]))
            .collect::<Vec<_>>()
    };
    Turn {
        api: Api::ChatCompletions,
        model: body["model"].as_str().unwrap_or("").to_string(),
        stream: body["stream"].as_bool().unwrap_or(false),
        tools: body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| Tool {
                name: t["function"]["name"].as_str().unwrap_or("").to_string(),
                schema: t["function"]["parameters"].clone(),
            })
            .collect(),
        results,
        prompt: text_of_role("user").into_iter().next().unwrap_or_default(),
        system: [text_of_role("system"), text_of_role("developer")]
            .concat()
            .join("\n"),
    }
}

pub fn render(reply: &Reply, id: u64, turn: &Turn) -> Response {
    let chat_id = format!("chatcmpl-mock{id}");
    let (message, finish) = match reply {
        Reply::Text(text) => (json!({"role": "assistant", "content": text}), "stop"),
        Reply::Call { name, input } => (
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_mock{id}"),
                "type": "function", "function": {"name": name, "arguments": input.to_string()}}]}),
            "tool_calls",
        ),
    };
    let usage = json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120});
    if !turn.stream {
        return Response::json(
            200,
            &json!({"id": chat_id, "object": "chat.completion", "created": 0, "model": turn.model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage}),
        );
    }
    let mut delta = message;
    if let Some(calls) = delta["tool_calls"].as_array_mut() {
        for c in calls {
            c["index"] = json!(0);
        }
    }
    let chunk = |delta: Value, finish: Value, usage: Value| {
        json!({"id": chat_id, "object": "chat.completion.chunk", "created": 0,
            "model": turn.model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            "usage": usage})
    };
    let mut s = String::new();
    s.push_str(&sse_event(None, &chunk(delta, Value::Null, Value::Null)));
    s.push_str(&sse_event(None, &chunk(json!({}), json!(finish), usage)));
    s.push_str("data: [DONE]\n\n");
    Response::sse(s)
}
