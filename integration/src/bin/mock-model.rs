//! The mock model server on its own, for trying an agent by hand against it:
//!
//!     mock-model [--port N] [--log DIR] [--command CMD]
//!
//! The first turn of a conversation that offers a shell tool calls it with CMD (default `id`);
//! once a tool result came back, the answer is text quoting it. Every request is printed on
//! stderr and, with `--log`, written to DIR/NNN.json.

use integration::mock_model::{MockModel, Reply, Turn};
use std::sync::Arc;

fn main() -> anyhow::Result<()> {
    let mut port = 0u16;
    let mut log: Option<std::path::PathBuf> = None;
    let mut command = "id".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))
        };
        match a.as_str() {
            "--port" => port = value()?.parse()?,
            "--log" => log = Some(value()?.into()),
            "--command" => command = value()?,
            _ => anyhow::bail!("usage: mock-model [--port N] [--log DIR] [--command CMD]"),
        }
    }
    if let Some(dir) = &log {
        std::fs::create_dir_all(dir)?;
    }
    let script = move |turn: &Turn| match turn.results.last() {
        None if turn.shell_tool().is_some() => turn.run(&command),
        None => Reply::Text("mock model: hello".into()),
        Some(r) => Reply::Text(format!("mock model got the tool result:\n{}", r.output)),
    };
    let server = MockModel::start_on(port, Arc::new(script));
    println!("{}", server.port);
    let mut printed = 0;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let all = server.exchanges();
        for (i, e) in all.iter().enumerate().skip(printed) {
            let tools = e.turn.as_ref().map(|t| {
                t.tools
                    .iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            });
            eprintln!(
                "#{i} {} {} tools=[{}] results={} -> {:?}",
                e.method,
                e.target,
                tools.unwrap_or_default(),
                e.turn.as_ref().map_or(0, |t| t.results.len()),
                e.reply
            );
            if let Some(dir) = &log {
                let record = serde_json::json!({"method": e.method, "target": e.target,
                    "headers": e.headers, "body": e.body, "reply": format!("{:?}", e.reply)});
                std::fs::write(
                    dir.join(format!("{i:03}.json")),
                    serde_json::to_string_pretty(&record)?,
                )?;
            }
        }
        printed = all.len();
    }
}
