//! How many client connections the proxy holds, and giving memory back after a burst of them:
//! glibc keeps freed heap for reuse (and per-thread arenas of the blocking pool), so a burst of
//! a thousand connections would leave the supervisor tens of MiB larger for good. Once most of a
//! burst's connections are gone, `malloc_trim` returns the free pages to the kernel.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Connections held now, and the most held since memory was last given back.
#[derive(Debug, Default)]
pub struct Load {
    active: AtomicUsize,
    peak: AtomicUsize,
}

/// Counts one connection while it lives.
pub struct Held<'a>(&'a Load);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A burst smaller than this is not worth a trim.
const BURST: usize = 64;
/// How often the proxy looks.
const EVERY: Duration = Duration::from_secs(1);

impl Load {
    pub fn hold(&self) -> Held<'_> {
        let now = self.active.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        Held(self)
    }

    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Whether a burst has passed (at least `BURST` connections, three quarters of them gone);
    /// the peak then starts over from what is held now.
    fn burst_over(&self) -> bool {
        let (active, peak) = (self.active(), self.peak.load(Ordering::Relaxed));
        if peak < BURST || active > peak / 4 {
            return false;
        }
        self.peak.store(active, Ordering::Relaxed);
        true
    }

    /// Forever: after each burst, give free heap back to the kernel.
    pub async fn give_back_after_bursts(&self) {
        loop {
            tokio::time::sleep(EVERY).await;
            if self.burst_over() {
                trim();
            }
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only walks glibc's own heap; 0 keeps no pad at the top.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_over_once_three_quarters_of_it_left() {
        let load = Load::default();
        let held: Vec<Held> = (0..100).map(|_| load.hold()).collect();
        assert_eq!(load.active(), 100);
        assert!(!load.burst_over());
        let mut held = held;
        held.truncate(30);
        assert!(!load.burst_over(), "30 of 100 still held");
        held.truncate(20);
        assert!(load.burst_over());
        assert!(!load.burst_over(), "the peak starts over");
        drop(held);
        assert_eq!(load.active(), 0);
        let small: Vec<Held> = (0..10).map(|_| load.hold()).collect();
        drop(small);
        assert!(!load.burst_over(), "ten connections are no burst");
    }
}
