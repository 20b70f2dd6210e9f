//! Nested sandboxes: a `sandbox-launch` started inside this sandbox cannot build namespaces
//! (the seccomp filter refuses them, and Landlock refuses every mount to a process it
//! confines), so it stacks a Landlock layer and a seccomp filter of its own on its program. But
//! every creation and write-open of that program comes here — the guard's filter runs before
//! any Landlock check, and init performs the operation in *its* Landlock domain — so a nested
//! launcher's narrower write set would not hold for them. It registers its rules here instead:
//! for every operation of a process in the registrant's subtree, the guard also applies the
//! nested launcher's persistence rules, strictly — outside the nested writable trees nothing is
//! written (EACCES, as its Landlock layer would answer).
//!
//! A registration can only ever narrow: it adds refusals for its own subtree, never an allow.
//! Anyone inside may register, which changes nothing for anyone else. The subtree is found by
//! walking the asking process's parents; the nested launcher is a child subreaper, so its
//! descendants' orphans stay in its subtree, and its program cannot end it (Landlock scopes
//! signals to the program's own domain; ptrace is refused) — when it ends, it kills its
//! subtree first. A registration lasts as long as the registrant (its pidfd tells).
//!
//! The socket is `SOCKET`, made by init in the sandbox's own `/dev` (a tmpfs of the sandbox; on
//! a host `/dev` only root could make one): its presence, with the kernel's seccomp and
//! no_new_privs facts, is how a launcher tells that it runs inside a sandbox.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

use super::rules::{Op, Rules, Verdict};
use crate::spec::PersistSpec;

/// Where init listens for registrations (a SOCK_SEQPACKET unix socket, one request each).
pub const SOCKET: &str = "/dev/sandbox-launch.sock";

/// At most this many registrations at once (each holds a pidfd and compiled rules).
const MAX_ENTRIES: usize = 64;

/// A nested launcher's request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Register {
    /// Its writable trees (every path outside them is refused) and what is protected in them.
    pub persist: PersistSpec,
    /// The TCP ports its Landlock layer lets the program connect to (`None`: that layer does
    /// not limit TCP). The guard performs connects in init's domain, where the nested layer
    /// does not apply; so it applies this list itself.
    #[serde(default)]
    pub tcp_connect: Option<Vec<u16>>,
}

/// The answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Registered {
    pub ok: bool,
    /// Whether this sandbox has a create guard (without one, creations reach the kernel and
    /// the nested Landlock layer governs them).
    pub guarded: bool,
    pub error: Option<String>,
}

/// One registration.
pub struct Entry {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    rules: Rules,
    /// Nothing at or below these may be written or moved away (`--deny-write`, `--deny-read`).
    denied: Vec<std::path::PathBuf>,
    tcp_connect: Option<Vec<u16>>,
}

impl Entry {
    /// Whether the nested sandbox's Landlock layer would let a TCP connect of process `tgid`
    /// to `port` through: the layer confines the registrant's program, not the registrant.
    pub fn allows_tcp_port(&self, tgid: libc::pid_t, port: u16) -> bool {
        tgid == self.pid || self.tcp_connect.as_ref().is_none_or(|p| p.contains(&port))
    }

    fn alive(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll of one valid pollfd without waiting; a pidfd is readable once the
        // process has exited.
        unsafe { libc::poll(&mut p, 1, 0) == 0 }
    }

    /// Whether the nested sandbox allows `op`; the errno and the reason when it does not.
    pub fn judge(&self, op: Op<'_>) -> Result<(), (Errno, String)> {
        self.contains(op.path())?;
        match self.rules.judge(op) {
            // A git config renamed into place: the sandbox's own rules validate it.
            Verdict::Allow | Verdict::ValidateGitConfig => Ok(()),
            Verdict::Refuse(why) => Err((Errno::EPERM, format!("{why} (a nested sandbox)"))),
        }
    }

    /// Whether `path` may be moved away (the source of a rename): it lies in the nested
    /// sandbox's writable trees, and neither at, below nor above what it denies (moving a
    /// denied file, or a directory holding one, would make it readable or writable under
    /// another name: Landlock's rules follow the directories they were given for).
    pub fn source(&self, path: &Path) -> Result<(), (Errno, String)> {
        self.contains(path)?;
        match self
            .denied
            .iter()
            .find(|d| path.starts_with(d) || d.starts_with(path))
        {
            Some(d) => Err((
                Errno::EPERM,
                format!("{} is denied by a nested sandbox", d.display()),
            )),
            None => Ok(()),
        }
    }

    /// Whether `path` lies in the nested sandbox's writable trees.
    pub fn contains(&self, path: &Path) -> Result<(), (Errno, String)> {
        if self.rules.guards(path) {
            Ok(())
        } else {
            Err((
                Errno::EACCES,
                format!(
                    "outside the writable trees of a nested sandbox (pid {})",
                    self.pid
                ),
            ))
        }
    }
}

/// The registrations of this sandbox.
pub struct Registry {
    guarded: bool,
    entries: Mutex<Vec<Arc<Entry>>>,
}

impl Registry {
    pub fn new(guarded: bool) -> Registry {
        Registry {
            guarded,
            entries: Mutex::new(Vec::new()),
        }
    }

    /// The registrations whose subtree holds thread `tid` (none, almost always: then nothing
    /// is read from /proc). `Err` when its ancestry could not be read consistently — the
    /// operation is then refused: a registration that is missed would widen its subtree.
    pub fn for_task(&self, tid: libc::pid_t) -> Result<Vec<Arc<Entry>>, Errno> {
        let entries: Vec<Arc<Entry>> = {
            let Ok(mut all) = self.entries.lock() else {
                return Err(Errno::EACCES);
            };
            all.retain(|e| e.alive());
            all.clone()
        };
        if entries.is_empty() {
            return Ok(entries);
        }
        let chain = (0..ANCESTRY_ATTEMPTS)
            .find_map(|_| ancestry(tid))
            .ok_or(Errno::EACCES)?;
        Ok(entries
            .into_iter()
            .filter(|e| chain.contains(&e.pid))
            .collect())
    }

    /// Register `persist` (and the TCP ports of its layer) for the process `pidfd` refers to
    /// (pid `pid`, as long as it lives).
    fn add(
        &self,
        pid: libc::pid_t,
        pidfd: OwnedFd,
        persist: &PersistSpec,
        tcp_connect: Option<Vec<u16>>,
    ) -> Result<(), String> {
        let mut all = self.entries.lock().map_err(|_| "registry poisoned")?;
        all.retain(|e| e.alive());
        let entry = Arc::new(Entry {
            pid,
            pidfd,
            rules: Rules::new(persist),
            denied: persist.denied.clone(),
            tcp_connect,
        });
        // Gone already: its pid may be another process's by now, which must not be narrowed.
        if !entry.alive() {
            return Err(format!("the registrant (pid {pid}) has exited"));
        }
        if all.len() >= MAX_ENTRIES {
            return Err(format!(
                "{MAX_ENTRIES} nested sandboxes at once is the limit"
            ));
        }
        all.push(entry);
        Ok(())
    }
}

/// How often an ancestry read that the process tree changed under is tried again.
const ANCESTRY_ATTEMPTS: usize = 8;
/// No chain of parents is longer (a pid namespace holds fewer processes): a longer walk is a
/// tree changing under it, and is given up (the operation is refused).
const MAX_DEPTH: usize = 1 << 22;

/// The process of thread `tid` and all its ancestors up to the top of the sandbox's pid
/// namespace, or `None` when they could not be read as one consistent chain. Every step is
/// checked: a parent's status is trusted only if the child still names it as its parent once
/// it has been read (a parent that exits first has its children reparented, and its pid may be
/// reused by an unrelated process) — a chain that skipped or misread a link would leave out the
/// registrations above it. There is no depth limit but the pid namespace's size: a deeper
/// chain of processes must not walk its writes out of a registrant's subtree.
fn ancestry(tid: libc::pid_t) -> Option<Vec<libc::pid_t>> {
    let mut pid = status_field(tid, "Tgid:")?;
    let mut parent = status_field(pid, "PPid:")?;
    let mut chain = vec![pid];
    while parent > 0 && parent != pid {
        if chain.len() >= MAX_DEPTH {
            return None;
        }
        let grandparent = status_field(parent, "PPid:")?;
        if status_field(pid, "PPid:")? != parent {
            return None;
        }
        chain.push(parent);
        pid = parent;
        parent = grandparent;
    }
    Some(chain)
}

/// A numeric field of `/proc/<pid>/status`.
fn status_field(pid: libc::pid_t, key: &str) -> Option<libc::pid_t> {
    let mut text = String::new();
    std::fs::File::open(format!("/proc/{pid}/status"))
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// Bind the registration socket (init, while it may still create it in the sandbox's `/dev`;
/// `root` is where that `/dev` is now). Everyone inside may connect.
pub fn bind(root: &Path) -> std::io::Result<OwnedFd> {
    let path = root.join(SOCKET.trim_start_matches('/'));
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    let addr = nix::sys::socket::UnixAddr::new(&path)?;
    nix::sys::socket::bind(sock.as_raw_fd(), &addr)?;
    nix::sys::socket::listen(&sock, nix::sys::socket::Backlog::new(16)?)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
    Ok(sock)
}

/// Answer registrations on `listener` from a thread of init, for as long as init lives. The
/// thread starts on init's CPU, where it runs as soon as init waits for the program (a thread
/// left to the kernel's choice was queued behind the program and set itself up when the
/// program ended, beside init's last steps).
pub fn serve(listener: OwnedFd, registry: Arc<Registry>) {
    let spawned = crate::cpus::spawn(REGISTRY_STACK, crate::cpus::Start::Here, move || {
        // SAFETY: PR_SET_NAME with a NUL-terminated name of at most 16 bytes.
        unsafe { libc::prctl(libc::PR_SET_NAME, c"nest-registry".as_ptr()) };
        loop {
            // SAFETY: accept4 on a listening socket, no address wanted.
            let fd = unsafe {
                libc::accept4(
                    listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                if Errno::last() == Errno::EINTR || Errno::last() == Errno::ECONNABORTED {
                    continue;
                }
                return;
            }
            // SAFETY: a descriptor just returned to us.
            let conn = unsafe { OwnedFd::from_raw_fd(fd) };
            let answer = register(&conn, &registry);
            let _ = crate::channel::send(conn.as_raw_fd(), &answer, &[]);
        }
    });
    // Without the thread nothing can register: nested launches are refused, nothing widens.
    drop(spawned);
}

/// The registry's thread decodes requests (JSON nested at most 128 deep): a std thread's stack.
const REGISTRY_STACK: usize = 2 << 20;

/// One request: the peer's own subtree is narrowed by what it sends.
fn register(conn: &OwnedFd, registry: &Registry) -> Registered {
    let fail = |e: String| Registered {
        ok: false,
        guarded: registry.guarded,
        error: Some(e),
    };
    // A client that connects and sends nothing must not hold up the others.
    let timeout = nix::sys::time::TimeVal::from(libc::timeval {
        tv_sec: Duration::from_secs(2).as_secs() as libc::time_t,
        tv_usec: 0,
    });
    let _ = nix::sys::socket::setsockopt(conn, nix::sys::socket::sockopt::ReceiveTimeout, &timeout);
    let peer = match nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials)
    {
        Ok(c) => c.pid(),
        Err(e) => return fail(format!("SO_PEERCRED => {e}")),
    };
    // A connect made by this sandbox's create guard (every connect of a guarded sandbox) has
    // init as its peer: the guard's stamp, sent before the connecting program got its answer,
    // names the process it connected for, with a pidfd the guard opened while that process
    // was known to live (it waited for the answer).
    // SAFETY: getpid cannot fail.
    let (peer, pidfd) = if peer == unsafe { libc::getpid() } {
        match stamp_of(conn) {
            Ok(p) => p,
            Err(e) => return fail(format!("the guard's stamp: {e}")),
        }
    } else {
        // The peer's pidfd, taken by the kernel when it connected: a pidfd opened from its pid
        // later could be another process's, should the peer have exited and its pid been
        // reused (a registration must narrow the registrant's subtree only).
        match peer_pidfd(conn) {
            Ok(fd) => (peer, fd),
            Err(e) => return fail(format!("SO_PEERPIDFD => {e}")),
        }
    };
    let request: Register = match crate::channel::recv(conn.as_raw_fd()) {
        Ok(Some((r, _fds))) => r,
        Ok(None) => return fail("no request".into()),
        Err(e) => return fail(format!("{e:#}")),
    };
    match registry.add(peer, pidfd, &request.persist, request.tcp_connect) {
        Ok(()) => Registered {
            ok: true,
            guarded: registry.guarded,
            error: None,
        },
        Err(e) => fail(e),
    }
}

/// The first message on a connection the create guard made for a program: these four bytes,
/// the program's process id (native order), and its pidfd (SCM_RIGHTS).
pub const STAMP: [u8; 4] = *b"SLG1";

fn stamp_of(conn: &OwnedFd) -> Result<(libc::pid_t, OwnedFd), String> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut buf = [0u8; 8];
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let msg = recvmsg::<()>(
        conn.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| e.to_string())?;
    let mut pidfd = None;
    for c in msg.cmsgs().map_err(|e| e.to_string())? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for fd in fds {
                // SAFETY: a descriptor just received, owned by nobody else.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                pidfd.get_or_insert(fd);
            }
        }
    }
    let n = msg.bytes;
    match pidfd {
        Some(fd) if n == buf.len() && buf[..4] == STAMP => Ok((
            libc::pid_t::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]),
            fd,
        )),
        _ => Err("missing or malformed".into()),
    }
}

/// The pidfd of the process that connected on `conn` (Linux 6.5).
fn peer_pidfd(conn: &OwnedFd) -> std::io::Result<OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into an int of the size given.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 || fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just installed for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ProtectRule;
    use std::os::fd::RawFd;

    fn pidfd(pid: libc::pid_t) -> OwnedFd {
        // SAFETY: pidfd_open of a child or of this process.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(fd >= 0);
        // SAFETY: just returned.
        unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
    }

    fn entry(roots: &[&str], protected: &[&str]) -> Entry {
        // SAFETY: pidfd_open of this process.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, std::process::id(), 0) };
        assert!(fd >= 0);
        let spec = PersistSpec {
            roots: roots.iter().map(Into::into).collect(),
            rules: protected
                .iter()
                .map(|p| ProtectRule {
                    anchor: None,
                    pattern: p.to_string(),
                    surface: (*p).into(),
                })
                .collect(),
            denied: vec!["/w/inner/secret".into()],
            ..Default::default()
        };
        Entry {
            pid: std::process::id() as i32,
            // SAFETY: just returned.
            pidfd: unsafe { OwnedFd::from_raw_fd(fd as RawFd) },
            rules: Rules::new(&spec),
            denied: spec.denied.clone(),
            tcp_connect: None,
        }
    }

    #[test]
    fn outside_the_nested_writable_trees_nothing_is_written() {
        let e = entry(&["/w/inner"], &[".envrc"]);
        let create = |p: &str| {
            e.judge(Op::Create {
                path: Path::new(p),
                dir: false,
            })
        };
        assert!(create("/w/inner/a.txt").is_ok());
        assert_eq!(create("/w/outer.txt").unwrap_err().0, Errno::EACCES);
        assert_eq!(create("/w/inner/.envrc").unwrap_err().0, Errno::EPERM);
        assert!(e.contains(Path::new("/w/inner/x")).is_ok());
        assert!(e.contains(Path::new("/w/innerx")).is_err());
    }

    #[test]
    fn what_a_nested_sandbox_denies_is_not_moved_away_nor_written() {
        let e = entry(&["/w/inner"], &[]);
        assert!(e.source(Path::new("/w/inner/file")).is_ok());
        assert_eq!(
            e.source(Path::new("/w/inner/secret/key")).unwrap_err().0,
            Errno::EPERM
        );
        assert_eq!(e.source(Path::new("/w/inner")).unwrap_err().0, Errno::EPERM);
        assert_eq!(
            e.source(Path::new("/w/other")).unwrap_err().0,
            Errno::EACCES
        );
        let write = e.judge(Op::Write {
            path: Path::new("/w/inner/secret/key"),
        });
        assert_eq!(write.unwrap_err().0, Errno::EPERM);
    }

    #[test]
    fn a_registration_applies_to_the_registrant_and_its_descendants_only() {
        let registry = Registry::new(true);
        let me = std::process::id() as libc::pid_t;
        registry
            .add(
                me,
                pidfd(me),
                &PersistSpec {
                    roots: vec!["/x".into()],
                    ..Default::default()
                },
                Some(vec![443]),
            )
            .unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert_eq!(registry.for_task(me).unwrap().len(), 1);
        assert_eq!(registry.for_task(child.id() as i32).unwrap().len(), 1);
        // Its TCP rules come with it, for its program (the guard applies them to connects).
        let e = &registry.for_task(me).unwrap()[0];
        assert!(e.allows_tcp_port(me + 1, 443) && !e.allows_tcp_port(me + 1, 3128));
        assert!(e.allows_tcp_port(me, 3128));
        // The parent of this test process is not in the subtree.
        let parent = status_field(me, "PPid:").unwrap();
        assert!(registry.for_task(parent).unwrap().is_empty());
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_dead_registrant_is_forgotten() {
        let registry = Registry::new(true);
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        registry
            .add(pid, pidfd(pid), &PersistSpec::default(), None)
            .unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(registry.for_task(pid).unwrap().is_empty());
        assert!(registry.entries.lock().unwrap().is_empty());
    }

    #[test]
    fn a_registrant_gone_before_it_is_registered_narrows_nobody() {
        let registry = Registry::new(true);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let fd = pidfd(pid);
        child.wait().unwrap();
        assert!(registry
            .add(pid, fd, &PersistSpec::default(), None)
            .is_err());
        assert!(registry.entries.lock().unwrap().is_empty());
    }

    #[test]
    fn the_ancestry_of_a_process_reaches_the_top_of_its_pid_namespace() {
        let me = std::process::id() as libc::pid_t;
        let chain = ancestry(me).unwrap();
        assert_eq!(chain[0], me);
        assert_eq!(chain[1], status_field(me, "PPid:").unwrap());
        let top = *chain.last().unwrap();
        assert!(status_field(top, "PPid:").unwrap() == 0, "{chain:?}");
    }
}
