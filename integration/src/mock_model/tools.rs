//! The shell tool of each agent and the arguments that make it run a command, built from the
//! tool's own JSON schema (so a renamed or added required field shows up as a clear failure in
//! the agent's tool result rather than a guess here).

use super::Tool;
use serde_json::{json, Map, Value};

/// Names the agents give their shell tool, in order of preference: Claude Code `Bash`, droid
/// `Execute`, codex `shell_command` / `exec_command` / `shell`.
pub const SHELL_TOOLS: &[&str] = &["Bash", "Execute", "shell_command", "exec_command", "shell"];

/// Arguments for `tool` that run `command`: the command field (`command` or `cmd`, a string or
/// an argv array), a description where one is asked for, and every other required field from
/// its schema (first enum value, else an empty or false value of its type).
pub fn shell_arguments(tool: &Tool, command: &str) -> Value {
    let props = tool.schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let required: Vec<&str> = tool.schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut args = Map::new();
    for (name, schema) in &props {
        let value = match name.as_str() {
            "command" | "cmd" if schema["type"] == "array" => json!(["bash", "-c", command]),
            "command" | "cmd" => json!(command),
            "description" => json!("mock model: run the probe"),
            _ if required.contains(&name.as_str()) => filler(schema),
            _ => continue,
        };
        args.insert(name.clone(), value);
    }
    Value::Object(args)
}

fn filler(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match schema["type"].as_str() {
        Some("boolean") => json!(false),
        Some("number") | Some("integer") => json!(schema["minimum"].as_i64().unwrap_or(0)),
        Some("array") => json!([]),
        Some("object") => json!({}),
        _ => json!("mock"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, schema: Value) -> Tool {
        Tool {
            name: name.into(),
            schema,
        }
    }

    #[test]
    fn a_string_command_field_gets_the_command_and_required_fields_a_value() {
        let t = tool(
            "Execute",
            json!({"type": "object", "required": ["command", "riskLevel"], "properties": {
                "command": {"type": "string"},
                "riskLevel": {"type": "string", "enum": ["low", "medium", "high"]},
                "timeout": {"type": "number"}}}),
        );
        assert_eq!(
            shell_arguments(&t, "id"),
            json!({"command": "id", "riskLevel": "low"})
        );
    }

    #[test]
    fn an_argv_command_field_gets_a_shell_invocation() {
        let t = tool(
            "shell",
            json!({"type": "object", "properties": {"command": {"type": "array"}, "workdir": {"type": "string"}}}),
        );
        assert_eq!(
            shell_arguments(&t, "id"),
            json!({"command": ["bash", "-c", "id"]})
        );
    }
}
