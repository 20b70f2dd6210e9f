//! Cgroups for the tests of resource limits: groups delegated to the unprivileged test user,
//! made the way an administrator delegates one (a group below this process's own, `chown -R`
//! to the user), and the launcher started inside them.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::NOBODY;

/// This process's group in every mounted hierarchy that has one of `controllers` (v1: the
/// mount's options name it; v2: its `cgroup.controllers` offers it).
pub fn own_groups(controllers: &[&str]) -> Vec<PathBuf> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut out = Vec::new();
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, names, path) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        for m in mountinfo.lines() {
            let Some((pre, post)) = m.split_once(" - ") else {
                continue;
            };
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            if pre[3] != "/" {
                continue;
            }
            let dir = PathBuf::from(pre[4]).join(path.trim_start_matches('/'));
            let wanted = match (names, post[0]) {
                ("", "cgroup2") => {
                    let offered =
                        std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
                    controllers
                        .iter()
                        .any(|c| offered.split_whitespace().any(|o| o == *c))
                }
                (n, "cgroup") if !n.is_empty() => {
                    let opts: Vec<&str> = post[2].split(',').collect();
                    n.split(',').all(|x| opts.contains(&x))
                        && controllers.iter().any(|c| n.split(',').any(|x| x == *c))
                }
                _ => false,
            };
            if wanted && !out.contains(&dir) {
                out.push(dir);
            }
        }
    }
    out
}

/// Groups delegated to uid 65534, removed when dropped (they are empty by then: the launcher
/// started in them has exited).
pub struct Delegated {
    pub dirs: Vec<PathBuf>,
}

impl Delegated {
    /// As root: a group below this process's own in each hierarchy of `controllers`.
    pub fn new(controllers: &[&str]) -> Delegated {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "sl-test-delegated-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let mut dirs = Vec::new();
        for own in own_groups(controllers) {
            let dir = own.join(&name);
            std::fs::create_dir(&dir).expect("create a delegated group (needs root)");
            let st = Command::new("chown")
                .args(["-R", &format!("{NOBODY}:{NOBODY}")])
                .arg(&dir)
                .status()
                .unwrap();
            assert!(st.success());
            dirs.push(dir);
        }
        assert!(!dirs.is_empty(), "no hierarchy has {controllers:?}");
        Delegated { dirs }
    }

    /// Start `cmd` inside the delegated groups (the child moves itself in before its exec).
    pub fn start_in(&self, cmd: &mut Command) {
        let files: Vec<CString> = self
            .dirs
            .iter()
            .map(|d| CString::new(d.join("cgroup.procs").as_os_str().as_bytes()).unwrap())
            .collect();
        // SAFETY: only open/write/close between fork and exec (no allocation: the paths are
        // made above).
        unsafe {
            cmd.pre_exec(move || {
                for f in &files {
                    let fd = libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                }
                Ok(())
            });
        }
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        for d in &self.dirs {
            for _ in 0..100 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}
