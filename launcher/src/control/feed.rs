//! What a running sandbox remembers of its events for the control socket: the most recent
//! lines (for `sandbox-launch events ID`), the followers of the stream (`--follow`), and a tally
//! of denials by host (for `ps` and the `-v` exit summary). Bounded: a ring of lines, one
//! counter per denied host (at most `MAX_HOSTS`, then one for the rest).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::broadcast;

/// Lines kept for clients that attach later.
const RECENT: usize = 200;
/// Followers that fall this many lines behind lose lines (and are told how many).
const FOLLOW_BUFFER: usize = 1024;
/// Denied hosts counted one by one; beyond that they are counted together.
const MAX_HOSTS: usize = 1000;
/// Sent to followers when the sandbox has ended (never an event: events are JSON objects).
pub const END: &str = "";

pub struct Feed {
    state: Mutex<State>,
    /// Made by the first follower: its ring of `FOLLOW_BUFFER` slots is ~40 KiB that every
    /// launch would otherwise allocate and touch before the clone, for a stream that is
    /// rarely followed. A follower only ever gets what is sent after it subscribed.
    followers: OnceLock<broadcast::Sender<Arc<str>>>,
}

#[derive(Default)]
struct State {
    recent: VecDeque<Arc<str>>,
    denied: BTreeMap<String, u64>,
    denied_total: u64,
    /// Filesystem violations (writes refused, or failed outside the writable trees).
    writes: u64,
}

impl Default for Feed {
    fn default() -> Self {
        Feed {
            state: Mutex::default(),
            followers: OnceLock::new(),
        }
    }
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Feed")
    }
}

/// The denials so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub total: u64,
    /// Host -> count, most denied first (ties by name).
    pub hosts: Vec<(String, u64)>,
    /// Filesystem violations.
    pub writes: u64,
}

impl Feed {
    /// Remember a line and pass it to the followers.
    pub fn push(&self, line: &str) {
        let line: Arc<str> = Arc::from(line);
        if let Ok(mut s) = self.state.lock() {
            if s.recent.len() == RECENT {
                s.recent.pop_front();
            }
            s.recent.push_back(line.clone());
        }
        // No follower: nothing to do.
        if let Some(followers) = self.followers.get() {
            let _ = followers.send(line);
        }
    }

    /// The sandbox has ended: let the followers write what they have (at most `limit`), so
    /// that they see the last events before the launcher exits and closes their connections.
    pub fn finish(&self, limit: std::time::Duration) {
        if !self.has_followers() {
            return;
        }
        if let Some(followers) = self.followers.get() {
            let _ = followers.send(Arc::from(END));
        }
        let deadline = std::time::Instant::now() + limit;
        while self.has_followers() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    pub fn has_followers(&self) -> bool {
        self.followers.get().is_some_and(|f| f.receiver_count() > 0)
    }

    fn sender(&self) -> &broadcast::Sender<Arc<str>> {
        self.followers
            .get_or_init(|| broadcast::channel(FOLLOW_BUFFER).0)
    }

    /// The recent lines and a subscription to what follows, taken together so none is lost
    /// or repeated in between.
    pub fn subscribe(&self) -> (Vec<Arc<str>>, broadcast::Receiver<Arc<str>>) {
        match self.state.lock() {
            Ok(s) => (
                s.recent.iter().cloned().collect(),
                self.sender().subscribe(),
            ),
            Err(_) => (Vec::new(), self.sender().subscribe()),
        }
    }

    pub fn count_denial(&self, host: &str) {
        let Ok(mut s) = self.state.lock() else { return };
        s.denied_total += 1;
        if let Some(n) = s.denied.get_mut(host) {
            *n += 1;
        } else if s.denied.len() < MAX_HOSTS {
            s.denied.insert(host.to_string(), 1);
        } else {
            *s.denied.entry("(other hosts)".into()).or_default() += 1;
        }
    }

    /// One filesystem violation.
    pub fn count_write(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.writes += 1;
        }
    }

    pub fn tally(&self) -> Tally {
        let Ok(s) = self.state.lock() else {
            return Tally::default();
        };
        let mut hosts: Vec<(String, u64)> = s.denied.iter().map(|(h, n)| (h.clone(), *n)).collect();
        hosts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Tally {
            total: s.denied_total,
            hosts,
            writes: s.writes,
        }
    }
}

impl Tally {
    /// The `-v` exit line: `3 requests denied (pypi.org ×2, files.pythonhosted.org): allow with
    /// --allow-domain pypi.org --allow-domain files.pythonhosted.org`; `None` when none was.
    pub fn summary(&self) -> Option<String> {
        if self.total == 0 {
            return None;
        }
        const SHOWN: usize = 5;
        let mut named: Vec<String> = self
            .hosts
            .iter()
            .take(SHOWN)
            .map(|(h, n)| {
                if *n > 1 {
                    format!("{h} ×{n}")
                } else {
                    h.clone()
                }
            })
            .collect();
        if self.hosts.len() > SHOWN {
            named.push(format!("{} more hosts", self.hosts.len() - SHOWN));
        }
        let flags: Vec<String> = self
            .hosts
            .iter()
            .take(SHOWN)
            .filter(|(h, _)| !h.starts_with('('))
            .map(|(h, _)| format!("--allow-domain {h}"))
            .collect();
        let noun = if self.total == 1 {
            "request"
        } else {
            "requests"
        };
        Some(format!(
            "{} {noun} denied ({}): allow with {}",
            self.total,
            named.join(", "),
            flags.join(" ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_hosts_most_denied_first() {
        let feed = Feed::default();
        for h in ["files.pythonhosted.org", "pypi.org", "pypi.org"] {
            feed.count_denial(h);
        }
        assert_eq!(
            feed.tally().summary().unwrap(),
            "3 requests denied (pypi.org ×2, files.pythonhosted.org): allow with \
             --allow-domain pypi.org --allow-domain files.pythonhosted.org"
        );
        assert_eq!(Feed::default().tally().summary(), None);
    }

    #[test]
    fn recent_lines_are_bounded_and_followers_get_what_follows() {
        let feed = Feed::default();
        for i in 0..(RECENT + 5) {
            feed.push(&format!("{i}"));
        }
        let (recent, mut rx) = feed.subscribe();
        assert_eq!(recent.len(), RECENT);
        assert_eq!(&*recent[0], "5");
        assert!(feed.has_followers());
        feed.push("next");
        assert_eq!(&*rx.try_recv().unwrap(), "next");
    }
}
