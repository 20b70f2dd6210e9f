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
use crate::prompt::offer::Answer;
use crate::reload::watch::Watcher;
use crate::reload::Change;
use crate::supervisor::OnDemand;

/// A request line longer than this is refused (and the connection closed).
const MAX_LINE: u64 = 64 * 1024;
/// The longest `stop --grace`.
const MAX_GRACE: f64 = 24.0 * 3600.0;

/// Serve `listener` and follow the `watcher`'s files once either has something: a thread with
/// a single-threaded runtime.
pub fn on_demand(
    listener: Option<UnixListener>,
    watcher: Option<Watcher>,
    live: Arc<Live>,
) -> Option<OnDemand> {
    let fds: Vec<_> = listener
        .iter()
        .map(|l| l.as_raw_fd())
        .chain(watcher.iter().map(Watcher::raw_fd))
        .collect();
    if fds.is_empty() {
        return None;
    }
    Some(OnDemand {
        fds,
        start: Box::new(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("start the control socket's runtime")?;
            std::thread::Builder::new()
                .name("control".into())
                .spawn(move || {
                    runtime.block_on(async move {
                        if let Some(w) = watcher {
                            tokio::spawn(follow_edits(w, live.clone()));
                        }
                        if let Some(l) = listener {
                            if let Err(e) = serve(l, live.clone()).await {
                                live.events.emit(
                                    json!({"event": "control_error", "error": format!("{e:#}")}),
                                );
                            }
                        }
                        std::future::pending::<()>().await
                    })
                })
                .context("start the control socket's thread")?;
            Ok(())
        }),
    })
}

/// Reload after each edit of a watched policy file.
async fn follow_edits(w: Watcher, live: Arc<Live>) {
    let l = live.clone();
    let r = w
        .run(move || {
            let l = l.clone();
            tokio::task::spawn_blocking(move || {
                let _ = l.reload(Change::Refresh, "an edit of a watched policy file");
            });
        })
        .await;
    if let Err(e) = r {
        live.events
            .emit(json!({"event": "warning", "warning": format!("policy files are no longer watched: {e:#}")}));
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
    // What changes the sandbox is counted until its reply is sent (see `Live::settle`).
    let _replying = matches!(
        req,
        Request::Answer { .. }
            | Request::PolicySet { .. }
            | Request::Allow { .. }
            | Request::Deny { .. }
    )
    .then(|| live.in_flight());
    match req {
        Request::Status => send(wr, &protocol::ok(json!({"sandbox": live.status()}))).await,
        Request::Stop { grace } => stop(live, grace, wr).await,
        Request::Events { follow } => events(live, follow, wr).await,
        Request::Prompts { follow } => prompts(live, follow, wr).await,
        Request::Answer { id, answer } => {
            let reply = match (&live.prompts, Answer::parse(&answer)) {
                (None, _) => protocol::error(
                    "this sandbox does not prompt (start it with --prompts); denials are refused at once",
                ),
                (_, None) => protocol::error(format!(
                    "answer {answer:?}: one of allow-once, allow-always, remove-from-deny-list, deny"
                )),
                (Some(p), Some(a)) => {
                    // The lasting answers write a file and recompile the rules: off the runtime.
                    let p = p.clone();
                    match tokio::task::spawn_blocking(move || p.answer(id, a, "the control socket"))
                        .await
                    {
                        Ok(Ok(done)) => protocol::ok(done),
                        Ok(Err(why)) => protocol::error(why),
                        Err(e) => protocol::error(e),
                    }
                }
            };
            send(wr, &reply).await
        }
        Request::PolicySet { file } => change(live, Change::Set(file), wr).await,
        Request::Allow { domain } => change(live, Change::Allow(domain), wr).await,
        Request::Deny { domain } => change(live, Change::Deny(domain), wr).await,
    }
}

/// A reload, off the runtime (it reads files and compiles rules).
async fn change(live: &Arc<Live>, change: Change, wr: &mut OwnedWriteHalf) -> std::io::Result<()> {
    if let Change::Set(file) = &change {
        if !file.is_absolute() {
            return send(
                wr,
                &protocol::error(format!(
                "{}: give an absolute path (the sandbox's working directory is not the client's)",
                file.display()
            )),
            )
            .await;
        }
    }
    let l = live.clone();
    let reply =
        match tokio::task::spawn_blocking(move || l.reload(change, "the control socket")).await {
            Ok(Ok(rules)) => protocol::ok(json!({"rules": rules})),
            Ok(Err(e)) => protocol::error(format!("{e:#}")),
            Err(e) => protocol::error(e),
        };
    send(wr, &reply).await
}

/// The open prompts, then (with `follow`) what happens to them.
async fn prompts(live: &Arc<Live>, follow: bool, wr: &mut OwnedWriteHalf) -> std::io::Result<()> {
    let Some(p) = &live.prompts else {
        return send(
            wr,
            &protocol::error("this sandbox does not prompt (start it with --prompts)"),
        )
        .await;
    };
    let (open, mut rx) = p.subscribe();
    send(
        wr,
        &protocol::ok(json!({"open": open, "timeout": p.timeout().as_secs_f64()})),
    )
    .await?;
    if !follow {
        return Ok(());
    }
    loop {
        match rx.recv().await {
            Ok(update) => send(wr, &update).await?,
            Err(RecvError::Lagged(_)) => {
                // Start over from what is open now.
                let (open, fresh) = p.subscribe();
                rx = fresh;
                for o in open {
                    send(wr, &json!({"prompt": o})).await?;
                }
            }
            Err(RecvError::Closed) => return Ok(()),
        }
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
