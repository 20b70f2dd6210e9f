//! Helpers of the network tests: a plain HTTP server on the host's 127.0.0.1, the options that
//! name it inside, and the events file.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// A plain HTTP server on the host's 127.0.0.1 that answers `hello-from-host path=<path>` and
/// remembers the paths it was asked for.
pub struct HostServer {
    pub port: u16,
    paths: Arc<Mutex<Vec<String>>>,
}

impl HostServer {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = paths.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                loop {
                    let mut line = String::new();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) if line == "\r\n" => break,
                        Ok(_) => {}
                    }
                }
                let path = request_line.split(' ').nth(1).unwrap_or("?").to_string();
                seen.lock().unwrap().push(path.clone());
                let body = format!("hello-from-host path={path}");
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        HostServer { port, paths }
    }

    pub fn saw(&self, path: &str) -> bool {
        self.paths.lock().unwrap().iter().any(|p| p == path)
    }
}

/// `restricted`, `allowed.test` allowed, `allowed.test` and `denied.test` both naming the host's
/// 127.0.0.1, decisions written to `events`.
pub fn allow_opts(events: &str) -> Vec<&str> {
    vec![
        "--network",
        "restricted",
        "--resolve",
        "allowed.test:127.0.0.1",
        "--resolve",
        "denied.test:127.0.0.1",
        "--allow-domain",
        "allowed.test",
        "--events",
        events,
    ]
}

pub fn events(path: &std::path::Path) -> Vec<serde_json::Value> {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        f.read_to_string(&mut text).unwrap();
    }
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
