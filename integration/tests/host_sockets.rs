//! Host sockets: a pathname unix socket of the host is out of reach from inside unless handed
//! in, wherever it lies (a readable tree, the working directory); a socket the program makes
//! itself works; datagram sockets work inside and no send reaches a host socket; TCP connects
//! still work. Judged on the host: the host's listener never accepted.

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

/// A host daemon's datagram socket at `path`: it collects what it receives.
struct HostLog {
    path: PathBuf,
    got: Arc<std::sync::Mutex<Vec<String>>>,
}

impl HostLog {
    fn start(path: PathBuf) -> HostLog {
        let _ = std::fs::remove_file(&path);
        let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = got.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            while let Ok(n) = sock.recv(&mut buf) {
                keep.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        });
        HostLog { path, got }
    }

    fn got(&self) -> Vec<String> {
        self.got.lock().unwrap().clone()
    }
}

impl Drop for HostLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn datagram_sockets_work_inside_and_no_send_reaches_a_host_socket_not_handed_in() {
    for caller in CALLERS {
        let work = TempDir::new("dgram");
        let home_like = readable_dir("dgram-ro");
        let host = HostLog::start(home_like.join("log.sock"));
        let handed = HostLog::start(home_like.join("handed.sock"));
        std::os::unix::fs::symlink(&host.path, work.join("link.sock")).unwrap();
        let out = sh(
            caller,
            &work.path,
            &[
                "--network",
                "none",
                "--allow-unix-socket",
                handed.path.to_str().unwrap(),
            ],
            &format!(
                r#"python3 - <<'PY'
import ctypes, os, socket
host, handed = {host:?}, {handed:?}
def attempt(name, f):
    try:
        f(); print(name, "sent")
    except OSError as e:
        print(name, e.strerror)
# Inside the sandbox, datagram sockets are as usual: a pair, one's own names, passed descriptors.
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
a.send(b"pair"); print("socketpair", b.recv(10).decode())
r, w = os.pipe()
socket.send_fds(a, [b"fd"], [w]); msg, fds, _, _ = socket.recv_fds(b, 10, 1)
os.write(fds[0], b"through-passed-fd"); print("scm_rights", os.read(r, 40).decode())
for path in ["own.dgram", "/tmp/own.dgram"]:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); srv.bind(path)
    cl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    cl.sendto(b"sendto", path); cl.sendmsg([b"send", b"msg"], [], 0, os.path.abspath(path))
    print(path, srv.recv(10).decode(), srv.recv(10).decode())
# sendmmsg (what glibc's resolver uses): two messages, each length written back.
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_char_p), ("len", ctypes.c_size_t)]
class msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(iovec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]
class mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", msghdr), ("len", ctypes.c_uint)]
libc = ctypes.CDLL(None, use_errno=True)
def sendmmsg(sock, path, payloads):
    addr = ctypes.create_string_buffer(b"\x01\x00" + path.encode() + b"\x00")
    vec = (mmsghdr * len(payloads))()
    iovs = [iovec(p, len(p)) for p in payloads]
    for i, io in enumerate(iovs):
        vec[i].hdr.name = ctypes.cast(addr, ctypes.c_void_p); vec[i].hdr.namelen = len(addr.raw)
        vec[i].hdr.iov = ctypes.pointer(io); vec[i].hdr.iovlen = 1
    n = libc.sendmmsg(sock.fileno(), vec, len(payloads), 0)
    return n, ctypes.get_errno(), [m.len for m in vec]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); srv.bind("mm.dgram")
n, _, lens = sendmmsg(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM), "mm.dgram", [b"one", b"three"])
print("sendmmsg own", n, lens, srv.recv(10).decode(), srv.recv(10).decode())
n, err, _ = sendmmsg(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM), host, [b"leak-mmsg"])
print("sendmmsg host", n, os.strerror(err))
# A host socket that was not handed in: by sendto, sendmsg, from a socketpair, by a link, connect.
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
attempt("sendto host", lambda: s.sendto(b"leak-sendto", host))
attempt("sendmsg host", lambda: s.sendmsg([b"leak-sendmsg"], [], 0, host))
attempt("pair sendto host", lambda: a.sendto(b"leak-pair", host))
attempt("link sendto host", lambda: s.sendto(b"leak-link", "link.sock"))
attempt("connect host", lambda: s.connect(host))
attempt("sendto handed", lambda: s.sendto(b"handed", handed))
# Streams take no address; a seqpacket socket ignores it.
st = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
attempt("stream sendto host", lambda: st.sendto(b"leak-stream", host))
p, q = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
p.sendto(b"to-peer", host); print("seqpacket", q.recv(10).decode())
PY
"#,
                host = host.path.to_str().unwrap(),
                handed = handed.path.to_str().unwrap(),
            ),
        );
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        for expected in [
            "socketpair pair",
            "scm_rights through-passed-fd",
            "own.dgram sendto sendmsg",
            "/tmp/own.dgram sendto sendmsg",
            "sendmmsg own 2 [3, 5] one three",
            "sendmmsg host -1 Permission denied",
            "sendto host Permission denied",
            "sendmsg host Permission denied",
            "pair sendto host Permission denied",
            "link sendto host Permission denied",
            "connect host Permission denied",
            "sendto handed sent",
            "seqpacket to-peer",
        ] {
            assert!(text.contains(expected), "{expected}: {}", ctx());
        }
        assert!(!text.contains("stream sendto host sent"), "{}", ctx());
        // Judged on the host: only the handed-in socket received anything.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while handed.got().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(host.got(), Vec::<String>::new(), "{}", ctx());
        assert_eq!(handed.got(), vec!["handed".to_string()], "{}", ctx());
    }
}

#[test]
fn tcp_connects_still_work_through_the_guard() {
    for caller in CALLERS {
        let work = TempDir::new("tcp-guard");
        let out = sh(
            caller,
            &work.path,
            &[
                "--network",
                "none",
                "--allow-loopback-port",
                "47321",
                "--allow-loopback-port",
                "47323",
            ],
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
six = socket.socket(socket.AF_INET6); six.bind(("::1", 47321)); six.listen(1)
c6 = socket.create_connection(("::1", 47321), timeout=5); s6, _ = six.accept(); s6.sendall(b"v6-ok")
print("ipv6", c6.recv(10).decode())
# A listener whose queue is full answers no SYN: a connect with a timeout times out, as outside.
full = socket.socket(); full.bind(("127.0.0.1", 47323)); full.listen(0)
held = []
for _ in range(4):
    h = socket.socket(); h.setblocking(False); h.connect_ex(("127.0.0.1", 47323)); held.append(h)
try:
    socket.create_connection(("127.0.0.1", 47323), timeout=1); print("full queue connected")
except OSError as e:
    print("full queue", type(e).__name__)
PY
"#,
        );
        let text = stdout(&out);
        for expected in [
            "blocking tcp-ok",
            "nonblocking tcp-ok",
            "again tcp-ok",
            "ipv6 v6-ok",
            "full queue TimeoutError",
        ] {
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

#[test]
fn a_host_abstract_socket_is_out_of_reach_in_either_network_mode() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let name = format!("sl-host-abstract-{}", std::process::id());
    let stream = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
    let dgram_name = format!("{name}-dgram");
    let dgram =
        UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&dgram_name).unwrap()).unwrap();
    dgram.set_nonblocking(true).unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for mut s in stream.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            let _ = s.write_all(b"host-abstract\n");
        }
    });
    let script = format!(
        r#"python3 - <<'PY'
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0{name}"); print("stream reached")
except OSError as e:
    print("stream", e.strerror)
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
try:
    d.sendto(b"leak", "\0{dgram_name}"); print("dgram reached")
except OSError as e:
    print("dgram", e.strerror)
PY
"#
    );
    for caller in CALLERS {
        let work = TempDir::new("abstract");
        // Its own network namespace holds no host name; sharing the host's, Landlock's scope
        // (ABI >= 6, as on this host) keeps it out.
        for (mode, refusal) in [
            ("none", "Connection refused"),
            ("full", "Operation not permitted"),
        ] {
            let out = sh(caller, &work.path, &["--network", mode], &script);
            let text = stdout(&out);
            for kind in ["stream", "dgram"] {
                assert!(
                    text.contains(&format!("{kind} {refusal}")),
                    "{caller:?} {mode} {kind}: {}",
                    explain(&out)
                );
            }
        }
    }
    // Judged on the host: no client, no datagram.
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
    assert!(dgram.recv(&mut [0u8; 16]).is_err());
}
