//! The control socket's server: accept, check the peer, then answer request lines.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::broadcast::error::RecvError;

use super::feed::END;
use super::protocol::{self, Request};
use super::{peer, Live};
use crate::supervisor::OnDemand;

/// A request line longer than this is refused (and the connection closed).
const MAX_LINE: u64 = 64 * 1024;
/// The longest `stop --grace`.
const MAX_GRACE: f64 = 24.0 * 3600.0;

/// Serve `listener` once a client connects: a thread with a single-threaded runtime.
pub fn on_demand(listener: UnixListener, live: Arc<Live>) -> OnDemand {
    OnDemand {
        fds: vec![listener.as_raw_fd()],
        start: Box::new(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("start the control socket's runtime")?;
            std::thread::Builder::new()
                .name("control".into())
                .spawn(move || {
                    if let Err(e) = runtime.block_on(serve(listener, live)) {
                        eprintln!("sandbox-launch: control socket: {e:#}");
                    }
                })
                .context("start the control socket's thread")?;
            Ok(())
        }),
    }
}

async fn serve(listener: UnixListener, live: Arc<Live>) -> Result<()> {
    listener
        .set_nonblocking(true)
        .context("make the control socket non-blocking")?;
    let listener =
        tokio::net::UnixListener::from_std(listener).context("register the control socket")?;
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let live = live.clone();
        tokio::spawn(async move {
            let _ = handle(stream, live).await;
        });
    }
}

async fn handle(stream: UnixStream, live: Arc<Live>) -> std::io::Result<()> {
    let refused = peer::check(&stream).err();
    let (rd, mut wr) = stream.into_split();
    if let Some(why) = refused {
        return send(&mut wr, &protocol::error(why)).await;
    }
    let mut rd = BufReader::new(rd);
    let mut line = Vec::new();
    loop {
        line.clear();
        if read_line(&mut rd, &mut line).await? == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') && line.len() as u64 >= MAX_LINE {
            return send(&mut wr, &protocol::error("request line too long")).await;
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        match protocol::parse(text.trim()) {
            Ok(req) => dispatch(req, &live, &mut wr).await?,
            Err(why) => send(&mut wr, &protocol::error(why)).await?,
        }
    }
}

/// One line, at most `MAX_LINE` bytes.
async fn read_line<R: AsyncBufRead + Unpin>(
    rd: &mut R,
    out: &mut Vec<u8>,
) -> std::io::Result<usize> {
    (&mut *rd).take(MAX_LINE).read_until(b'\n', out).await
}

async fn send(wr: &mut OwnedWriteHalf, v: &Value) -> std::io::Result<()> {
    let mut line = v.to_string();
    line.push('\n');
    wr.write_all(line.as_bytes()).await
}

async fn dispatch(req: Request, live: &Arc<Live>, wr: &mut OwnedWriteHalf) -> std::io::Result<()> {
    match req {
        Request::Status => send(wr, &protocol::ok(json!({"sandbox": live.status()}))).await,
        Request::Stop { grace } => stop(live, grace, wr).await,
        Request::Events { follow } => events(live, follow, wr).await,
    }
}

/// SIGTERM now, SIGKILL after the grace; the reply stays open until the sandbox ends (the
/// launcher's exit closes it).
async fn stop(live: &Arc<Live>, grace: f64, wr: &mut OwnedWriteHalf) -> std::io::Result<()> {
    if !(0.0..=MAX_GRACE).contains(&grace) {
        return send(
            wr,
            &protocol::error(format!("grace {grace}: give 0 to {MAX_GRACE} seconds")),
        )
        .await;
    }
    if let Err(e) = live.signal(libc::SIGTERM) {
        return send(
            wr,
            &protocol::error(format!("cannot signal the sandbox: {e}")),
        )
        .await;
    }
    live.events
        .emit(json!({"event": "stop", "signal": "SIGTERM", "grace": grace}));
    let later = live.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs_f64(grace)).await;
        if later.signal(libc::SIGKILL).is_ok() {
            later
                .events
                .emit(json!({"event": "stop", "signal": "SIGKILL", "after": grace}));
        }
    });
    send(
        wr,
        &protocol::ok(json!({"signal": "SIGTERM", "grace": grace})),
    )
    .await?;
    std::future::pending::<()>().await;
    Ok(())
}

/// The recent events, then (with `follow`) each new one, as the lines `--events` writes.
async fn events(live: &Arc<Live>, follow: bool, wr: &mut OwnedWriteHalf) -> std::io::Result<()> {
    let (recent, rx) = live.events.feed().subscribe();
    // Without `follow`, unsubscribe at once (a follower makes the sink record every event).
    let mut rx = follow.then_some(rx);
    send(wr, &protocol::ok(json!({"recent": recent.len()}))).await?;
    for line in recent {
        wr.write_all(line.as_bytes()).await?;
        wr.write_all(b"\n").await?;
    }
    let Some(rx) = rx.as_mut() else {
        return Ok(());
    };
    loop {
        match rx.recv().await {
            Ok(line) if &*line == END => return wr.flush().await,
            Ok(line) => {
                wr.write_all(line.as_bytes()).await?;
                wr.write_all(b"\n").await?;
            }
            Err(RecvError::Lagged(n)) => {
                send(wr, &json!({"event": "lagged", "missed": n})).await?;
            }
            Err(RecvError::Closed) => return Ok(()),
        }
    }
}
