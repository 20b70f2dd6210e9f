//! Every fronting trick of issue 11, tried from inside the sandbox through each way out —
//! CONNECT, SOCKS5 and transparent egress — against servers on the host that record what they
//! received: a rustls TLS server (the SNI it read) and an HTTP server (each request it parsed).
//! The tunnel is always opened for the allowed name; the trick asks for another host. Each is
//! judged on the servers: the trick never reaches them, and its allowed twin — the same bytes
//! naming the allowed host — does.

use integration::net::{allow_opts, events};
use integration::recording::{HttpRecorder, TlsRecorder};
use integration::{explain, sh, stdout, TempDir, CALLERS};

/// Python: `open_tunnel(way, port)` returns a socket that reaches allowed.test:`port` through
/// the HTTP proxy's CONNECT, the SOCKS5 proxy, or directly (the transparent redirect);
/// `hello(sni, cuts)` makes a real ClientHello (OpenSSL's) in TLS records cut at `cuts`.
const PRELUDE: &str = r#"
import socket, ssl, struct, sys

def read_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise ConnectionResetError("eof")
        b += c
    return b

def open_tunnel(way, port):
    if way == "connect":
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        s.sendall(b"CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n" % (port, port))
        h = b""
        while not h.endswith(b"\r\n\r\n"):
            h += read_exact(s, 1)
        assert h.startswith(b"HTTP/1.1 200"), h
    elif way == "socks5":
        s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
        s.sendall(b"\x05\x01\x00")
        assert read_exact(s, 2) == b"\x05\x00"
        s.sendall(b"\x05\x01\x00\x03\x0callowed.test" + struct.pack(">H", port))
        r = read_exact(s, 10)
        assert r[1] == 0, r
    else:
        s = socket.create_connection(("allowed.test", port), timeout=10)
    return s

def hello(sni, cuts):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(i, o, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    rec = o.read()
    msg = rec[5:5 + struct.unpack(">H", rec[3:5])[0]]
    out, start = b"", 0
    for end in list(cuts) + [len(msg)]:
        out += b"\x16\x03\x01" + struct.pack(">H", end - start) + msg[start:end]
        start = end
    return out

def attempt(label, way, port, payload):
    try:
        s = open_tunnel(way, port)
        s.sendall(payload)
        data = b""
        while True:
            c = s.recv(4096)
            if not c:
                break
            data += c
            if data[:1] == b"\x16" or b"http-ok" in data and b"second" not in label.encode():
                break
        if data[:1] == b"\x16":
            print(label + "=server-hello")
        else:
            print(label + "=" + repr(data[:300]))
    except (ConnectionResetError, BrokenPipeError):
        print(label + "=reset")
    except OSError as e:
        print(label + "=error " + str(e))
"#;

/// The tricks on the HTTP server: (label, bytes); `{w}` is replaced by the way out, so that each
/// request's target says which way it came.
const HTTP_TRICKS: [(&str, &str); 6] = [
    (
        "crlf",
        r"\r\nGET /crlf-{w} HTTP/1.1\r\nHost: denied.test\r\n\r\n",
    ),
    (
        "lower",
        r"get /lower-{w} HTTP/1.1\r\nHost: denied.test\r\n\r\n",
    ),
    (
        "absolute",
        r"GET http://denied.test/absolute-{w} HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
    ),
    (
        "twohosts",
        r"GET /twohosts-{w} HTTP/1.1\r\nHost: allowed.test\r\nHost: denied.test\r\n\r\n",
    ),
    (
        "second",
        r"GET /first-{w} HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET /second-{w} HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n",
    ),
    ("opaque", r"\x00\x01not-http-{w}\r\n\r\n"),
];

/// The allowed twins: the same quirks, naming the allowed host.
const HTTP_TWINS: [(&str, &str); 2] = [
    (
        "twin",
        r"\r\nget /twin-{w} HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n",
    ),
    (
        "twinabs",
        r"GET http://allowed.test/twinabs-{w} HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n",
    ),
];

const WAYS: [&str; 3] = ["connect", "socks5", "transparent"];

fn script(http_port: u16, tls_port: u16) -> String {
    let mut s = PRELUDE.to_string();
    for w in WAYS {
        for (label, bytes) in HTTP_TRICKS.iter().chain(HTTP_TWINS.iter()) {
            let bytes = bytes.replace("{w}", w);
            s += &format!("attempt(\"{label}-{w}\", \"{w}\", {http_port}, b\"{bytes}\")\n");
        }
        // TLS: the ClientHello whole, split after 1 byte of the handshake message, and split
        // in the middle of the server name list.
        for (label, sni, cuts) in [
            ("tls-one-evil", "denied.test", "[]"),
            ("tls-split-evil", "denied.test", "[1]"),
            ("tls-split3-evil", "denied.test", "[60, 61, 120]"),
            ("tls-one-twin", "allowed.test", "[]"),
            ("tls-split-twin", "allowed.test", "[1, 100]"),
        ] {
            s += &format!(
                "attempt(\"{label}-{w}\", \"{w}\", {tls_port}, hello(\"{sni}\", {cuts}))\n"
            );
        }
    }
    s
}

fn line<'a>(text: &'a str, label: &str) -> &'a str {
    let prefix = format!("{label}=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or("(missing)")
}

#[test]
fn fronting_tricks_are_refused_through_every_way_out_and_their_twins_pass() {
    for caller in CALLERS {
        let http = HttpRecorder::start();
        let tls = TlsRecorder::start();
        let work = TempDir::new("fronting");
        let ev = work.join("events.jsonl");
        let py = work.write("tricks.py", &script(http.port, tls.port));
        let out = sh(
            caller,
            &work.path,
            &allow_opts(ev.to_str().unwrap()),
            &format!("python3 {}", py.display()),
        );
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        for w in WAYS {
            // The twins reach the servers.
            for twin in ["twin", "twinabs"] {
                assert!(
                    line(&text, &format!("{twin}-{w}")).contains("http-ok"),
                    "{twin}-{w}: {}",
                    ctx()
                );
                assert!(http.saw(&format!("/{twin}-{w}")), "{twin}-{w}: {}", ctx());
            }
            for twin in ["tls-one-twin", "tls-split-twin"] {
                assert_eq!(
                    line(&text, &format!("{twin}-{w}")),
                    "server-hello",
                    "{}",
                    ctx()
                );
            }
            // The first request of the pipelined pair passes, the second does not.
            assert!(http.saw(&format!("/first-{w}")), "{}", ctx());
            for (trick, _) in HTTP_TRICKS {
                let target = match trick {
                    "second" => format!("/second-{w}"),
                    "opaque" => format!("not-http-{w}"),
                    t => format!("/{t}-{w}"),
                };
                assert!(
                    !http.saw(&target),
                    "{trick}-{w} reached the server: {}",
                    ctx()
                );
                if trick != "second" {
                    let l = line(&text, &format!("{trick}-{w}"));
                    assert!(l == "reset" || l == "b''", "{trick}-{w}: {l}: {}", ctx());
                }
            }
            for trick in ["tls-one-evil", "tls-split-evil", "tls-split3-evil"] {
                let l = line(&text, &format!("{trick}-{w}"));
                assert!(l == "reset" || l == "b''", "{trick}-{w}: {l}: {}", ctx());
            }
        }
        // On the servers: no byte of a refused trick arrived.
        assert_eq!(http.garbled(), 0, "{}", ctx());
        let spoken = tls.spoken_to();
        assert_eq!(spoken.len(), 2 * WAYS.len(), "{spoken:?}: {}", ctx());
        for c in &spoken {
            assert!(c.hello && c.sni.as_deref() == Some("allowed.test"), "{c:?}");
        }
        // The server is told the checked host and port, whatever the client wrote.
        for r in http.requests() {
            assert!(
                r.hosts == [format!("allowed.test:{}", http.port)] && !r.target.contains("denied"),
                "{r:?}"
            );
        }
        // Each refusal is an event that says why.
        let evs = events(&ev);
        for protocol in ["connect", "socks5", "transparent"] {
            for why in [
                "TLS SNI asks for denied.test",
                "HTTP Host asks for denied.test",
                "HTTP request target asks for denied.test",
                "2 Host headers",
                "only TLS and HTTP are checked",
            ] {
                assert!(
                    evs.iter().any(|e| e["protocol"] == protocol
                        && e["decision"] == "deny"
                        && e["reason"].as_str().unwrap_or("").contains(why)),
                    "{protocol}: {why}: {evs:#?}"
                );
            }
        }
    }
}

#[test]
fn plain_http_tells_the_server_the_checked_host_only() {
    for caller in CALLERS {
        let http = HttpRecorder::start();
        let port = http.port;
        let work = TempDir::new("fronting-plain");
        let script = format!(
            r#"python3 -c '
import socket
def ask(label, req):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(req)
    print(label + "=" + s.recv(300).decode(errors="replace").splitlines()[0])
ask("hosted", b"GET http://allowed.test:{port}/hosted HTTP/1.1\r\nHost: denied.test\r\nHost: other.test\r\nConnection: close\r\n\r\n")
ask("userinfo", b"GET http://denied.test@allowed.test:{port}/userinfo HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
ask("crlf", b"\r\nget http://allowed.test:{port}/crlf HTTP/1.1\r\nConnection: close\r\n\r\n")
'"#
        );
        let out = sh(caller, &work.path, &allow_opts("/dev/null"), &script);
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        assert_eq!(line(&text, "hosted"), "HTTP/1.1 200 OK", "{}", ctx());
        assert_eq!(line(&text, "crlf"), "HTTP/1.1 200 OK", "{}", ctx());
        assert_eq!(
            line(&text, "userinfo"),
            "HTTP/1.1 400 Bad Request",
            "{}",
            ctx()
        );
        let reqs = http.requests();
        let hosted = reqs.iter().find(|r| r.target == "/hosted").expect("hosted");
        assert_eq!(hosted.hosts, [format!("allowed.test:{port}")]);
        assert!(reqs.iter().any(|r| r.target == "/crlf"), "{reqs:?}");
        assert!(!http.saw("/userinfo"), "{reqs:?}");
    }
}

#[test]
fn other_protocols_pass_only_where_the_policy_says_tls_skip() {
    // An endpoint with `tls: skip` lets a client-first protocol that is neither TLS nor HTTP
    // through (here: junk to the HTTP server, which records it as garbled); the same endpoint
    // without it refuses.
    for caller in CALLERS {
        for (skip, passes) in [("        tls: skip\n", true), ("", false)] {
            let http = HttpRecorder::start();
            let port = http.port;
            let work = TempDir::new("fronting-opaque");
            let policy = work.write(
                "policy.yaml",
                &format!(
                    "version: 1
network_policies:
  local:
    name: local-test-server
    endpoints:
      - host: allowed.test
        port: {port}
{skip}    binaries:
      - path: /**
"
                ),
            );
            let script = format!(
                "{PRELUDE}\nattempt(\"opaque\", \"connect\", {port}, b\"\\x00\\x01junk\\r\\n\\r\\n\")\n"
            );
            let py = work.write("opaque.py", &script);
            let out = sh(
                caller,
                &work.path,
                &[
                    "--network",
                    "restricted",
                    "--policy",
                    policy.to_str().unwrap(),
                    "--resolve",
                    "allowed.test:127.0.0.1",
                ],
                &format!("python3 {}", py.display()),
            );
            let ctx = || format!("{caller:?} skip={passes}: {}", explain(&out));
            assert!(line(&stdout(&out), "opaque") != "(missing)", "{}", ctx());
            // Wait for the server to notice the junk (it arrives after the client's answer).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while passes && http.garbled() == 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert_eq!(http.garbled(), usize::from(passes), "{}", ctx());
        }
    }
}

/// Python, after `PRELUDE`: ask to switch protocols in a tunnel opened for allowed.test, then
/// speak the new protocol: HTTP/2 (the connection preface and a request naming denied.test) or
/// WebSocket (one masked text frame).
const SWITCH: &str = r#"
def h2_request(authority, path):
    block = b"\x82\x86\x41" + bytes([len(authority)]) + authority + b"\x44" + bytes([len(path)]) + path
    frame = len(block).to_bytes(3, "big") + b"\x01\x05" + (3).to_bytes(4, "big") + block
    return b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + frame

def ws_frame(text):
    mask = b"\x01\x02\x03\x04"
    return bytes([0x81, 0x80 | len(text)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(text))

def switch(label, way, port, protocol):
    try:
        s = open_tunnel(way, port)
        extra = b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n" if protocol == "h2c" else b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        s.sendall(b"GET /" + label.encode() + b" HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: " + protocol.encode() + b"\r\n" + extra + b"\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            c = s.recv(1)
            if not c:
                break
            head += c
        status = head.split(b"\r\n")[0].decode(errors="replace")
        if protocol == "h2c":
            s.sendall(h2_request(b"denied.test", b"/smuggled-" + label.encode()))
        else:
            s.sendall(ws_frame(b"ws-" + label.encode()))
        s.settimeout(1)
        try:
            s.recv(4096)
        except OSError:
            pass
        print(label + "=" + status)
    except (ConnectionResetError, BrokenPipeError):
        print(label + "=reset")
    except OSError as e:
        print(label + "=error " + str(e))
"#;

#[test]
fn an_h2c_upgrade_cannot_carry_requests_past_the_check_and_websockets_still_switch() {
    // After `101 Switching Protocols` to h2c the server reads HTTP/2 requests, each naming its
    // own `:authority`, which the proxy would only relay: the switch must never happen. The
    // twin: a WebSocket switch (whose frames name no host) still happens, its bytes flow.
    for caller in CALLERS {
        let http = HttpRecorder::start();
        let work = TempDir::new("fronting-switch");
        let mut script = format!("{PRELUDE}{SWITCH}");
        for w in WAYS {
            for protocol in ["h2c", "websocket"] {
                script += &format!(
                    "switch(\"switch-{protocol}-{w}\", \"{w}\", {}, \"{protocol}\")\n",
                    http.port
                );
            }
        }
        let py = work.write("switch.py", &script);
        let out = sh(
            caller,
            &work.path,
            &allow_opts("/dev/null"),
            &format!("python3 {}", py.display()),
        );
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        let switched = http.switched();
        for w in WAYS {
            assert_eq!(
                line(&text, &format!("switch-websocket-{w}")),
                "HTTP/1.1 101 Switching Protocols",
                "{}",
                ctx()
            );
            let ws = format!("ws-switch-websocket-{w}");
            assert!(
                switched
                    .iter()
                    .any(|s| s.protocol == "websocket" && s.bytes.len() >= 6 + ws.len()),
                "{w}: {switched:?}: {}",
                ctx()
            );
            // The h2c request is answered as the HTTP/1.1 request it also is.
            assert_eq!(
                line(&text, &format!("switch-h2c-{w}")),
                "HTTP/1.1 200 OK",
                "{}",
                ctx()
            );
            assert!(http.saw(&format!("/switch-h2c-{w}")), "{}", ctx());
        }
        assert!(
            switched.iter().all(|s| s.protocol != "h2c"),
            "{switched:?}: {}",
            ctx()
        );
        for r in http.requests() {
            assert!(!r.target.contains("smuggled"), "{r:?}");
        }
    }
}
