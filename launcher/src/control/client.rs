//! The client side of the control socket, for the commands (`ps`, `stop`, `events`, ...):
//! find a sandbox by id or name, send request lines, read reply lines. Blocking: a command
//! talks to one sandbox at a time.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use super::dir::ControlDir;
use super::registration::is_stale;

/// How long a sandbox may take to answer a plain request.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client> {
        let stream = UnixStream::connect(path)
            .with_context(|| format!("cannot connect to {}", path.display()))?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        Ok(Client {
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
        })
    }

    /// Connect to the sandbox with this id or name.
    pub fn to(target: &str) -> Result<Client> {
        Client::connect(&find(target)?)
    }

    /// How long to wait for each further line (`None`: for ever).
    pub fn wait_lines(&mut self, timeout: Option<Duration>) -> Result<()> {
        self.writer.set_read_timeout(timeout)?;
        Ok(())
    }

    /// Send a request and read its reply; a refusal (`ok: false`) is an error with its text.
    pub fn request(&mut self, req: &Value) -> Result<Value> {
        let mut line = req.to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .context("send the request")?;
        let reply = self
            .next_line()?
            .ok_or_else(|| anyhow!("the sandbox closed the connection without a reply"))?;
        if reply["ok"] != json!(true) {
            bail!(
                "{}",
                reply["error"]
                    .as_str()
                    .unwrap_or("the sandbox refused the request")
            );
        }
        Ok(reply)
    }

    /// The next line the sandbox sends; `None` when the connection closed (the sandbox ended).
    pub fn next_line(&mut self) -> Result<Option<Value>> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Ok(None),
            Ok(_) => serde_json::from_str(&line)
                .map(Some)
                .with_context(|| format!("the sandbox sent a line that is not JSON: {line:?}")),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(None),
            Err(e) => Err(e).context("read from the sandbox"),
        }
    }
}

/// A running sandbox as `ps` sees it.
pub enum Found {
    Running {
        socket: PathBuf,
        status: Value,
    },
    /// It did not answer in time.
    Unresponsive {
        socket: PathBuf,
    },
}

/// Every running sandbox of this user; stale sockets (their launcher was killed) are removed.
pub fn running() -> Vec<Found> {
    let dir = ControlDir::locate();
    if dir.check_private().is_err() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for socket in dir.sockets() {
        match Client::connect(&socket).and_then(|mut c| c.request(&json!({"op": "status"}))) {
            Ok(reply) => out.push(Found::Running {
                socket,
                status: reply["sandbox"].clone(),
            }),
            Err(_) if is_stale(&socket) => remove_stale(&dir, &socket),
            Err(_) if socket.exists() => out.push(Found::Unresponsive { socket }),
            Err(_) => {}
        }
    }
    if out.is_empty() {
        dir.remove_if_empty();
    }
    out
}

/// Remove a socket whose launcher is gone, rechecked under the directory's lock.
fn remove_stale(dir: &ControlDir, socket: &Path) {
    let Ok(_lock) = dir.lock() else { return };
    if is_stale(socket) {
        let _ = std::fs::remove_file(socket);
    }
}

/// The control socket of the sandbox named `target`, or whose id it is.
pub fn find(target: &str) -> Result<PathBuf> {
    let dir = ControlDir::locate();
    dir.check_private()
        .map_err(|e| anyhow!("no sandbox is running ({e:#})"))?;
    if !target.contains('/') {
        let named = dir.path.join(format!("{target}.sock"));
        if named.exists() && !is_stale(&named) {
            return Ok(named);
        }
    }
    for found in running() {
        if let Found::Running { socket, status } = found {
            if status["id"] == json!(target) || status["name"] == json!(target) {
                return Ok(socket);
            }
        }
    }
    bail!("no running sandbox has the id or name {target:?}; `sandbox-launch ps` lists them")
}
