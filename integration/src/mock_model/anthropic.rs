//! Anthropic Messages API: the request's conversation, and the answer as SSE (`stream: true`) or
//! one JSON message.

use super::http::Response;
use super::{sse_event, text_of, Api, Reply, Tool, ToolResult, Turn};
use serde_json::{json, Value};

pub fn turn(body: &Value) -> Turn {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let mut results = Vec::new();
    for m in &messages {
        for block in m["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                results.push(ToolResult {
                    call_id: block["tool_use_id"].as_str().unwrap_or("").to_string(),
                    output: text_of(&block["content"]),
                });
            }
        }
    }
    let prompt = messages
        .iter()
        .find(|m| m["role"] == "user")
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default();
    Turn {
        api: Api::AnthropicMessages,
        model: body["model"].as_str().unwrap_or("").to_string(),
        stream: body["stream"].as_bool().unwrap_or(false),
        tools: body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| Tool {
                name: t["name"].as_str().unwrap_or("").to_string(),
                schema: t["input_schema"].clone(),
            })
            .collect(),
        results,
        prompt,
        system: text_of(&body["system"]),
    }
}

pub fn render(reply: &Reply, id: u64, turn: &Turn) -> Response {
    let (block, stop_reason) = match reply {
        Reply::Text(text) => (json!({"type": "text", "text": text}), "end_turn"),
        Reply::Call { name, input } => (
            json!({"type": "tool_use", "id": format!("toolu_mock{id}"), "name": name, "input": input}),
            "tool_use",
        ),
    };
    let usage = json!({"input_tokens": 100, "output_tokens": 20,
        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    if !turn.stream {
        return Response::json(
            200,
            &json!({"id": format!("msg_mock{id}"), "type": "message", "role": "assistant",
                "model": turn.model, "content": [block], "stop_reason": stop_reason,
                "stop_sequence": null, "usage": usage}),
        );
    }
    let (start, delta) = match reply {
        Reply::Text(text) => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
        ),
        Reply::Call { input, .. } => {
            let mut start = block.clone();
            start["input"] = json!({});
            (
                start,
                json!({"type": "input_json_delta", "partial_json": input.to_string()}),
            )
        }
    };
    let mut s = String::new();
    let mut ev = |name: &str, data: Value| s.push_str(&sse_event(Some(name), &data));
    ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": format!("msg_mock{id}"),
            "type": "message", "role": "assistant", "model": turn.model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 100, "output_tokens": 1,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
    );
    ev(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": start}),
    );
    ev(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": 0, "delta": delta}),
    );
    ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": 20}}),
    );
    ev("message_stop", json!({"type": "message_stop"}));
    Response::sse(s)
}
