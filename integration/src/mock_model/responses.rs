//! OpenAI Responses API: the request's `input` items, and the answer as SSE events
//! (`response.created`, `response.output_item.done`, `response.completed`).

use super::http::Response;
use super::{sse_event, text_of, Api, Reply, Tool, ToolResult, Turn};
use serde_json::{json, Value};

pub fn turn(body: &Value) -> Turn {
    let input = match &body["input"] {
        Value::Array(items) => items.clone(),
        Value::String(s) => vec![json!({"type": "message", "role": "user", "content": s})],
        _ => Vec::new(),
    };
    let results = input
        .iter()
        .filter(|i| {
            i["type"]
                .as_str()
                .is_some_and(|t| t.ends_with("_call_output"))
        })
        .map(|i| ToolResult {
            call_id: i["call_id"].as_str().unwrap_or("").to_string(),
            output: text_of(&i["output"]),
        })
        .collect();
    // The prompt is the last user message before any tool output: agents put their own context
    // (environment, AGENTS.md) in earlier user messages.
    let prompt = input
        .iter()
        .take_while(|i| {
            !i["type"]
                .as_str()
                .is_some_and(|t| t.ends_with("_call_output") || t.ends_with("_call"))
        })
        .filter(|i| i["role"] == "user")
        .last()
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default();
    Turn {
        api: Api::OpenAiResponses,
        model: body["model"].as_str().unwrap_or("").to_string(),
        stream: body["stream"].as_bool().unwrap_or(false),
        tools: body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| Tool {
                name: t["name"]
                    .as_str()
                    .or_else(|| t["type"].as_str())
                    .unwrap_or("")
                    .to_string(),
                schema: t["parameters"].clone(),
            })
            .collect(),
        results,
        prompt,
        system: text_of(&body["instructions"]),
    }
}

pub fn render(reply: &Reply, id: u64, turn: &Turn) -> Response {
    let item = match reply {
        Reply::Text(text) => json!({"type": "message", "id": format!("msg_mock{id}"),
            "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        Reply::Call { name, input } => {
            json!({"type": "function_call", "id": format!("fc_mock{id}"),
            "call_id": format!("call_mock{id}"), "name": name, "arguments": input.to_string(),
            "status": "completed"})
        }
    };
    let response_id = format!("resp_mock{id}");
    let usage = json!({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 120});
    let done = json!({"id": response_id, "object": "response", "status": "completed",
        "model": turn.model, "output": [item], "usage": usage});
    if !turn.stream {
        return Response::json(200, &done);
    }
    let mut s = String::new();
    let mut ev = |name: &str, data: Value| s.push_str(&sse_event(Some(name), &data));
    ev(
        "response.created",
        json!({"type": "response.created", "response": {"id": response_id, "object": "response",
            "status": "in_progress", "model": turn.model, "output": []}}),
    );
    ev(
        "response.output_item.added",
        json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
    );
    if let Reply::Text(text) = reply {
        ev(
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "item_id": format!("msg_mock{id}"),
                "output_index": 0, "content_index": 0, "delta": text}),
        );
    }
    ev(
        "response.output_item.done",
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
    );
    ev(
        "response.completed",
        json!({"type": "response.completed", "response": done}),
    );
    Response::sse(s)
}
