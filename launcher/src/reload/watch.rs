//! The policy files named on the command line (`--policy`, `--settings`), watched with inotify:
//! an edit is reloaded as `policy set` would (a static change refused, the old rules kept), so
//! it takes effect at once. The directories are watched, not the files, so that an editor's
//! write-and-rename is seen as well as a write in place.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::unix::AsyncFd;

/// Edits that come together (an editor's temporary file, rename, chmod) make one reload.
const SETTLE: Duration = Duration::from_millis(100);

pub struct Watcher {
    fd: OwnedFd,
    /// (watch descriptor, file name) of each watched file.
    files: Vec<(i32, OsString)>,
}

impl Watcher {
    /// Watch `files` (made before the clone, so that a failure is reported at launch);
    /// `None` when there is none.
    pub fn new(files: &[PathBuf]) -> Result<Option<Watcher>> {
        if files.is_empty() {
            return Ok(None);
        }
        // SAFETY: inotify_init1 with valid flags; the result is checked.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("inotify_init1");
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut watched = Vec::new();
        for file in files {
            let file =
                std::path::absolute(file).with_context(|| format!("watch {}", file.display()))?;
            let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
                continue;
            };
            let c = CString::new(dir.as_os_str().as_bytes()).context("path contains NUL")?;
            let mask = libc::IN_CLOSE_WRITE | libc::IN_MOVED_TO | libc::IN_CREATE;
            // SAFETY: inotify_add_watch on our descriptor with a valid C string.
            let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) };
            if wd < 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("watch {} for edits", dir.display()));
            }
            watched.push((wd, name.to_os_string()));
        }
        Ok(Some(Watcher { fd, files: watched }))
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Call `changed` after each edit of a watched file, for as long as the runtime runs.
    pub async fn run(self, changed: impl Fn()) -> Result<()> {
        // SAFETY: the descriptor is owned by the AsyncFd from here on, open, and never changed.
        let fd =
            unsafe { AsyncFd::register(self.fd) }.context("register the inotify descriptor")?;
        loop {
            let mut hit = false;
            loop {
                let mut guard = fd.readable().await.context("wait for inotify")?;
                match read_events(guard.get_inner().as_raw_fd()) {
                    Ok(events) => {
                        hit |= events
                            .iter()
                            .any(|(wd, name)| self.files.iter().any(|(w, n)| w == wd && n == name));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        guard.clear_ready();
                        if hit {
                            break;
                        }
                    }
                    Err(e) => return Err(e).context("read inotify events"),
                }
            }
            tokio::time::sleep(SETTLE).await;
            // What came meanwhile belongs to this reload.
            while read_events(fd.get_ref().as_raw_fd()).is_ok() {}
            changed();
        }
    }
}

/// The (watch descriptor, name) of the events that can be read now.
fn read_events(fd: RawFd) -> std::io::Result<Vec<(i32, OsString)>> {
    let mut buf = [0u8; 4096];
    // SAFETY: read into a buffer of its size.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let head = std::mem::size_of::<libc::inotify_event>();
    let mut at = 0usize;
    while at + head <= n as usize {
        // SAFETY: the kernel wrote whole records; read_unaligned copes with any alignment.
        let ev: libc::inotify_event =
            unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
        let name_bytes = &buf[at + head..(at + head + ev.len as usize).min(n as usize)];
        let name = name_bytes.split(|b| *b == 0).next().unwrap_or(&[]);
        out.push((ev.wd, OsStr::from_bytes(name).to_os_string()));
        at += head + ev.len as usize;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn an_edit_in_place_and_a_rename_over_the_file_are_both_seen() {
        let d = std::env::temp_dir().join(format!("sl-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        let file = d.join("settings.json");
        std::fs::write(&file, "{}").unwrap();
        let w = Watcher::new(std::slice::from_ref(&file)).unwrap().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let count = seen.clone();
        let task = tokio::spawn(w.run(move || {
            count.fetch_add(1, Ordering::SeqCst);
        }));
        let wait_for = |n: usize| {
            let seen = seen.clone();
            async move {
                for _ in 0..100 {
                    if seen.load(Ordering::SeqCst) >= n {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                panic!("saw {} edits, wanted {n}", seen.load(Ordering::SeqCst));
            }
        };
        std::fs::write(d.join("other.json"), "{}").unwrap();
        std::fs::write(&file, "{\"a\": 1}").unwrap();
        wait_for(1).await;
        std::fs::write(d.join("tmp"), "{\"b\": 2}").unwrap();
        std::fs::rename(d.join("tmp"), &file).unwrap();
        wait_for(2).await;
        task.abort();
        std::fs::remove_dir_all(&d).unwrap();
    }
}
