//! The nested launcher stays with its program as an init would, without a PID namespace: a
//! child subreaper (orphans of the subtree come back to it, so the subtree cannot be left),
//! forwarding the signals sent to it, and when the program ends, killing whatever of the
//! subtree is left before it exits with the program's status. Never `kill(-1)`: that would
//! reach the outer sandbox's processes.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use shim::init::wait_set;

/// Become a child subreaper and block the signals that are forwarded (read from the returned
/// signalfd instead). Before the fork.
pub fn prepare() -> std::io::Result<OwnedFd> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    shim::init::block_signals();
    let set = wait_set();
    // SAFETY: signalfd on a valid set of blocked signals.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned to us.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// How the program ended.
pub struct Ended {
    /// The exit code to give (128+N for signal N).
    pub code: i32,
    pub timed_out: bool,
}

/// Wait for `child`, forwarding signals; at `timeout`, SIGTERM, then after `grace` SIGKILL to
/// the whole subtree. Then the rest of the subtree is killed and reaped.
pub fn supervise(
    child: libc::pid_t,
    signals: &OwnedFd,
    timeout: Option<Duration>,
    grace: Duration,
) -> Ended {
    let start = Instant::now();
    let mut term_sent: Option<Instant> = None;
    let code = loop {
        if let Some(code) = reap(child) {
            break code;
        }
        let wait = match (timeout, term_sent) {
            (_, Some(t)) => grace.saturating_sub(t.elapsed()),
            (Some(limit), None) => limit.saturating_sub(start.elapsed()),
            (None, None) => Duration::from_secs(3600),
        };
        if wait.is_zero() {
            match term_sent {
                None => {
                    // SAFETY: signalling our own child.
                    unsafe { libc::kill(child, libc::SIGTERM) };
                    term_sent = Some(Instant::now());
                }
                Some(_) => kill_subtree(),
            }
            continue;
        }
        let mut p = libc::pollfd {
            fd: signals.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll of one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, wait.as_millis().min(i32::MAX as u128) as i32) };
        if n > 0 {
            forward_one(child, signals);
        }
    };
    kill_subtree();
    Ended {
        code,
        timed_out: term_sent.is_some(),
    }
}

/// Reap every child that has ended; the program's exit code once it has.
fn reap(child: libc::pid_t) -> Option<i32> {
    let mut found = None;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if pid == child {
            found = Some(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            });
        }
    }
}

/// Pass a signal sent to the launcher on to the program; a terminal's own (Ctrl-C, SIGWINCH)
/// already reached it, as it is in the same process group.
fn forward_one(child: libc::pid_t, signals: &OwnedFd) {
    // SAFETY: signalfd_siginfo is plain data; read fills it.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: reading one record into a buffer of its size.
    let r = unsafe {
        libc::read(
            signals.as_raw_fd(),
            &mut info as *mut _ as *mut libc::c_void,
            size,
        )
    };
    let sig = info.ssi_signo as i32;
    if r as usize == size && sig != libc::SIGCHLD && info.ssi_code <= 0 {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child, sig) };
    }
}

/// The processes below `pid` (its children, theirs, …), read from /proc.
fn descendants(pid: libc::pid_t, out: &mut Vec<libc::pid_t>) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for t in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(t.path().join("children")) else {
            continue;
        };
        for c in text.split_whitespace().filter_map(|c| c.parse().ok()) {
            if !out.contains(&c) {
                out.push(c);
                descendants(c, out);
            }
        }
    }
}

/// SIGKILL everything below this process and reap it, until nothing is left (orphans come
/// back here: this process is their subreaper).
pub fn kill_subtree() {
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    for _ in 0..1000 {
        let mut all = Vec::new();
        descendants(me, &mut all);
        if all.is_empty() {
            return;
        }
        for p in &all {
            // SAFETY: signalling processes of our own subtree.
            unsafe { libc::kill(*p, libc::SIGKILL) };
        }
        let _ = reap(0);
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_are_found_below_a_process() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & sleep 5 & wait"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let mut all = Vec::new();
        descendants(child.id() as i32, &mut all);
        assert_eq!(all.len(), 2, "{all:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        for p in all {
            // SAFETY: the test's own grandchildren.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
    }
}
