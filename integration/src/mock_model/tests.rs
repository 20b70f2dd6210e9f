//! The mock's wire formats, checked on request bodies shaped like the agents' own (recorded
//! from Claude Code 2.1.330, codex 0.169.0 and droid 0.215.0) and over a real socket.

use super::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

fn bash_tool() -> Value {
    json!({"name": "Bash", "input_schema": {"type": "object", "required": ["command"],
        "properties": {"command": {"type": "string"}, "description": {"type": "string"}}}})
}

/// The `data:` payloads of an SSE body that are JSON.
fn sse_data(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

#[test]
fn anthropic_tool_results_are_read_and_a_call_streams_as_a_tool_use_block() {
    let body = json!({"model": "claude-x", "stream": true, "tools": [bash_tool()],
        "system": [{"type": "text", "text": "You are Claude Code"}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "run the probe"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "seccomp=2"}]}]}]});
    let turn = anthropic::turn(&body);
    assert_eq!(turn.prompt, "run the probe");
    assert_eq!(turn.system, "You are Claude Code");
    assert_eq!(turn.results[0].call_id, "toolu_1");
    assert_eq!(turn.results[0].output, "seccomp=2");
    let reply = turn.run("id");
    let events = sse_data(&anthropic::render(&reply, 7, &turn).body);
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        types,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(events[1]["content_block"]["name"], "Bash");
    let input: Value =
        serde_json::from_str(events[2]["delta"]["partial_json"].as_str().unwrap()).unwrap();
    assert_eq!(input["command"], "id");
    assert_eq!(events[4]["delta"]["stop_reason"], "tool_use");
}

#[test]
fn responses_function_call_outputs_are_read_and_a_call_is_a_function_call_item() {
    let body = json!({"model": "mock-model", "stream": true, "instructions": "codex",
        "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object",
            "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}],
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "sandbox notes"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run the probe"}]},
            {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "Output:\nuid=65534"}]});
    let turn = responses::turn(&body);
    assert_eq!(turn.prompt, "run the probe");
    assert_eq!(turn.results[0].output, "Output:\nuid=65534");
    let events = sse_data(&responses::render(&turn.run("id"), 3, &turn).body);
    let done = events
        .iter()
        .find(|e| e["type"] == "response.output_item.done")
        .unwrap();
    assert_eq!(done["item"]["type"], "function_call");
    assert_eq!(done["item"]["call_id"], "call_mock3");
    assert_eq!(done["item"]["arguments"], json!({"cmd": "id"}).to_string());
    assert_eq!(events.last().unwrap()["type"], "response.completed");
}

#[test]
fn chat_tool_messages_are_read_and_a_call_streams_as_tool_calls_ending_in_done() {
    let body = json!({"model": "mock-model", "stream": true,
        "tools": [{"type": "function", "function": {"name": "Execute", "parameters": {
            "type": "object", "required": ["command"], "properties": {"command": {"type": "string"}}}}}],
        "messages": [
            {"role": "system", "content": "droid"},
            {"role": "user", "content": [{"type": "text", "text": "run the probe"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "Execute", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "uid=0"}]});
    let turn = chat::turn(&body);
    assert_eq!(
        (turn.prompt.as_str(), turn.system.as_str()),
        ("run the probe", "droid")
    );
    assert_eq!(turn.results[0].output, "uid=0");
    let response = chat::render(&turn.run("id"), 1, &turn);
    assert!(String::from_utf8_lossy(&response.body).ends_with("data: [DONE]\n\n"));
    let chunks = sse_data(&response.body);
    let call = &chunks[0]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(
        (call["index"].clone(), call["function"]["name"].clone()),
        (json!(0), json!("Execute"))
    );
    assert_eq!(chunks[1]["choices"][0]["finish_reason"], "tool_calls");
}

/// Two requests on one kept-alive connection, the second through a proxy's absolute form, and
/// an unknown path answered 404 and recorded.
#[test]
fn the_server_answers_kept_alive_connections_and_records_every_request() {
    let mock = MockModel::start(|t: &Turn| Reply::Text(format!("{} results", t.results.len())));
    let mut conn = TcpStream::connect(("127.0.0.1", mock.port)).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    for target in [
        "/v1/chat/completions".to_string(),
        format!("http://mock.test:{}/v1/chat/completions", mock.port),
        "/v1/nothing".to_string(),
    ] {
        write!(
            conn,
            "POST {target} HTTP/1.1\r\nHost: mock.test\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        let mut len = 0;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).unwrap();
            if h == "\r\n" {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut answer = vec![0; len];
        reader.read_exact(&mut answer).unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        if target.ends_with("/nothing") {
            assert!(status.contains(" 404 "), "{status}");
        } else {
            assert!(status.contains(" 200 "), "{status}");
            assert_eq!(answer["choices"][0]["message"]["content"], "0 results");
        }
    }
    assert_eq!(mock.exchanges().len(), 3);
    assert_eq!(mock.other_requests(), ["POST /v1/nothing"]);
}
