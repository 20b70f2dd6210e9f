//! The idle limit of an established tunnel: when no byte has moved either way for
//! `Timeouts::tunnel_idle` (default one hour, Envoy's default for TCP proxying;
//! `--tunnel-idle-timeout`, `0` for none), the tunnel is closed. Long polls and WebSockets
//! whose peers ping stay up; a forgotten connection does not hold two sockets and two pipes of
//! the supervisor for ever.
//!
//! Activity is a timestamp that the relays touch as bytes move (one relaxed atomic store per
//! read or write); a watchdog sleeps until the limit could have passed and looks again.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When bytes last moved in a tunnel (either way).
#[derive(Debug)]
pub struct Activity {
    origin: Instant,
    /// Milliseconds after `origin`.
    last: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            origin: Instant::now(),
            last: AtomicU64::new(0),
        })
    }

    /// Bytes moved just now.
    pub fn touch(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }

    /// Resolves once nothing has moved for `limit`; never without a limit.
    pub async fn idle_for(&self, limit: Option<Duration>) {
        let Some(limit) = limit else {
            return std::future::pending().await;
        };
        loop {
            let last = self.origin + Duration::from_millis(self.last.load(Ordering::Relaxed));
            if last.elapsed() >= limit {
                return;
            }
            tokio::time::sleep_until(last + limit).await;
        }
    }
}

/// Run `relay` until it ends or the tunnel has been idle for `limit`; `None` when it was cut off.
pub async fn bounded<F: Future>(
    limit: Option<Duration>,
    activity: &Activity,
    relay: F,
) -> Option<F::Output> {
    tokio::select! {
        out = relay => Some(out),
        _ = activity.idle_for(limit) => None,
    }
}

/// `--tunnel-idle-timeout`: a duration (`90`, `10m`, `1h`), or `0`/`none` for no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleLimit(pub Option<Duration>);

pub fn parse_limit(text: &str) -> Result<IdleLimit, String> {
    match text.trim() {
        "0" | "none" => Ok(IdleLimit(None)),
        t => crate::limits::quantity::duration(t).map(|d| IdleLimit(Some(d))),
    }
}

/// A socket whose reads and writes count as activity of a tunnel.
pub struct Tracked<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> Tracked<T> {
    pub fn new(inner: T, activity: Arc<Activity>) -> Self {
        Tracked { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tunnel_is_idle_only_once_the_limit_passed_without_traffic() {
        let activity = Activity::new();
        let limit = Duration::from_secs(1);
        let watch = tokio::spawn({
            let activity = activity.clone();
            async move {
                activity.idle_for(Some(limit)).await;
                Instant::now()
            }
        });
        // Traffic every 50 ms, for longer than the limit, keeps it up.
        let mut last = Instant::now();
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            last = Instant::now();
            activity.touch();
        }
        assert!(!watch.is_finished());
        let cut = watch.await.unwrap();
        // Millisecond timestamps: up to 1 ms early.
        assert!(cut + Duration::from_millis(1) >= last + limit);
    }

    #[tokio::test]
    async fn without_a_limit_a_tunnel_is_never_idle() {
        let activity = Activity::new();
        let relay = tokio::time::sleep(Duration::from_millis(200));
        assert_eq!(bounded(None, &activity, relay).await, Some(()));
        let relay = std::future::pending::<()>();
        let limit = Some(Duration::from_millis(50));
        assert_eq!(bounded(limit, &activity, relay).await, None);
    }

    #[test]
    fn the_flag_takes_a_duration_or_none() {
        assert_eq!(parse_limit("0"), Ok(IdleLimit(None)));
        assert_eq!(parse_limit("none"), Ok(IdleLimit(None)));
        assert_eq!(
            parse_limit("10m"),
            Ok(IdleLimit(Some(Duration::from_secs(600))))
        );
        assert!(parse_limit("soon").is_err());
    }
}
