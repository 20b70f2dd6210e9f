//! Host sockets: a pathname unix socket of the host is out of reach from inside unless handed
//! in, wherever it lies (a readable tree, the working directory); a socket the program makes
//! itself works; no datagram unix socket can be made (the only kind a send can address);
//! TCP connects still work. Judged on the host: the host's listener never accepted.

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use integration::*;

/// A host daemon's socket at `path`: it greets every client and counts them.
struct HostDaemon {
    path: PathBuf,
    accepted: Arc<AtomicUsize>,
}

impl HostDaemon {
    fn start(path: PathBuf) -> HostDaemon {
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        // Reachable by the sandbox's user as far as file permissions go: only the sandbox
        // stands in the way.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let _ = s.write_all(b"host-daemon\n");
            }
        });
        HostDaemon { path, accepted }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for HostDaemon {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Python that connects to each path and prints `PATH: ok <greeting>` or `PATH: <error>`.
fn connect_each(paths: &[&Path]) -> String {
    let list: Vec<String> = paths
        .iter()
        .map(|p| format!("{:?}", p.to_str().unwrap()))
        .collect();
    format!(
        r#"python3 - <<'PY'
import socket
for p in [{}]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(p)
        print(p + ": ok " + s.recv(100).decode().strip())
    except OSError as e:
        print(p + ": " + (e.strerror or str(e)))
PY
"#,
        list.join(", ")
    )
}

/// A directory the sandbox can read but that is none of its writable trees or own
/// filesystems, owned by the sandbox's user (as `~/.gnupg` is its user's).
fn readable_dir(tag: &str) -> TempDir {
    let base = "/var/cache/sandbox-launch-tests";
    std::fs::create_dir_all(base).unwrap();
    TempDir::new_in(base, tag)
}

#[test]
fn a_host_socket_is_unreachable_unless_handed_in() {
    for caller in CALLERS {
        let work = TempDir::new("hostsock");
        let home_like = readable_dir("hostsock-ro");
        let outside = HostDaemon::start(home_like.join("S.gpg-agent"));
        let in_work = HostDaemon::start(work.join("ide.sock"));
        let handed = HostDaemon::start(home_like.join("handed.sock"));
        let link = work.join("link.sock");
        std::os::unix::fs::symlink(&outside.path, &link).unwrap();
        let script = connect_each(&[&outside.path, &in_work.path, &link, &handed.path])
            + "cd .. && python3 -c 'import socket,os; s=socket.socket(socket.AF_UNIX); s.connect(os.path.basename(\""
            + work.path.to_str().unwrap()
            + "\")+\"/ide.sock\")' 2>&1 | tail -1\n";
        let out = sh(
            caller,
            &work.path,
            &[
                "--network",
                "none",
                "--allow-unix-socket",
                handed.path.to_str().unwrap(),
            ],
            &script,
        );
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        for refused in [&outside.path, &in_work.path, &link] {
            assert!(
                text.contains(&format!("{}: Permission denied", refused.display())),
                "{} {}",
                refused.display(),
                ctx()
            );
        }
        assert!(text.contains("PermissionError"), "relative path: {}", ctx());
        assert!(
            text.contains(&format!("{}: ok host-daemon", handed.path.display())),
            "{}",
            ctx()
        );
        // Judged on the host: the refused daemons never saw a client.
        assert_eq!(outside.accepted(), 0, "{}", ctx());
        assert_eq!(in_work.accepted(), 0, "{}", ctx());
        assert_eq!(handed.accepted(), 1, "{}", ctx());
    }
}

#[test]
fn sockets_the_program_makes_itself_work_in_its_tree_and_its_tmp() {
    for caller in CALLERS {
        let work = TempDir::new("ownsock");
        let out = sh(
            caller,
            &work.path,
            &["--network", "none"],
            r#"python3 - <<'PY'
import os, socket, threading
for path in ["own.sock", "/tmp/own.sock", "/dev/shm/own.sock"]:
    srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(1)
    def serve():
        c, _ = srv.accept(); c.sendall(b"mine"); c.close()
    t = threading.Thread(target=serve); t.start()
    cl = socket.socket(socket.AF_UNIX); cl.connect(os.path.abspath(path))
    print(path, cl.recv(10).decode()); t.join()
PY
"#,
        );
        let text = stdout(&out);
        for p in [
            "own.sock mine",
            "/tmp/own.sock mine",
            "/dev/shm/own.sock mine",
        ] {
            assert!(text.contains(p), "{caller:?} {p}: {}", explain(&out));
        }
    }
}

#[test]
fn no_unix_datagram_socket_can_be_made_and_streams_cannot_send_to_an_address() {
    for caller in CALLERS {
        let work = TempDir::new("dgram");
        let home_like = readable_dir("dgram-ro");
        let target = home_like.join("log.sock");
        let out = sh(
            caller,
            &work.path,
            &["--network", "none"],
            &format!(
                r#"python3 - <<'PY'
import socket
for kind, name in [(socket.SOCK_DGRAM, "dgram"), (3, "raw")]:
    try:
        socket.socket(socket.AF_UNIX, kind); print(name, "made")
    except OSError as e:
        print(name, e.strerror)
    try:
        socket.socketpair(socket.AF_UNIX, kind); print(name, "pair made")
    except OSError as e:
        print(name, "pair", e.strerror)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.sendto(b"x", "{}"); print("stream sendto sent")
except OSError as e:
    print("stream sendto", e.strerror)
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
a.sendto(b"to-peer", "{}"); print("seqpacket", b.recv(10).decode())
PY
"#,
                target.display(),
                target.display()
            ),
        );
        let text = stdout(&out);
        for expected in [
            "dgram Operation not permitted",
            "dgram pair Operation not permitted",
            "raw Operation not permitted",
            "raw pair Operation not permitted",
            "stream sendto",
            "seqpacket to-peer",
        ] {
            assert!(
                text.contains(expected),
                "{caller:?} {expected}: {}",
                explain(&out)
            );
        }
        assert!(
            !text.contains("sent\n") && !text.contains(" made"),
            "{}",
            explain(&out)
        );
    }
}

#[test]
fn tcp_connects_still_work_through_the_guard() {
    for caller in CALLERS {
        let work = TempDir::new("tcp-guard");
        let out = sh(
            caller,
            &work.path,
            &["--network", "none", "--allow-loopback-port", "47321"],
            r#"python3 - <<'PY'
import socket, threading
srv = socket.socket(); srv.bind(("127.0.0.1", 47321)); srv.listen(8)
def serve():
    for _ in range(3):
        c, _ = srv.accept(); c.sendall(b"tcp-ok"); c.close()
threading.Thread(target=serve).start()
c = socket.create_connection(("127.0.0.1", 47321)); print("blocking", c.recv(10).decode())
n = socket.socket(); n.setblocking(False)
try:
    n.connect(("127.0.0.1", 47321))
except BlockingIOError:
    print("nonblocking in progress")
import select; select.select([n], [], [], 5); print("nonblocking", n.recv(10).decode())
try:
    socket.create_connection(("127.0.0.1", 47322), timeout=5)
except OSError as e:
    print("closed port", e.strerror)
c = socket.create_connection(("127.0.0.1", 47321)); print("again", c.recv(10).decode())
PY
"#,
        );
        let text = stdout(&out);
        for expected in ["blocking tcp-ok", "nonblocking tcp-ok", "again tcp-ok"] {
            assert!(
                text.contains(expected),
                "{caller:?} {expected}: {}",
                explain(&out)
            );
        }
        // Landlock still decides on the port, with the guard connecting for the program.
        assert!(
            text.contains("closed port Permission denied"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}
