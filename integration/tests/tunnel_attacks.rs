//! The proxy attacked from inside with what servers parse differently from a naive reader:
//! request smuggling (a second `Content-Length` or a `Transfer-Encoding` next to one, on a
//! kept-alive connection), pipelined requests whose second names another host or path, requests
//! without `Host` or with another spelling of the allowed host, and targets that are an address
//! or another spelling of the allowed name — through the plain-HTTP proxy, CONNECT, SOCKS5 and
//! transparent egress. Judged on a recording server (what it parsed, with bodies framed as RFC
//! 9112 says); every refusal has its allowed twin.

use integration::recording::HttpRecorder;
use integration::{explain, sh, stdout, TempDir, CALLERS};

/// Python: `tunnel(way, port)` is a socket to allowed.test:`port` through CONNECT, SOCKS5 or
/// directly (the transparent redirect), or through the plain-HTTP proxy (`plain`: the caller
/// writes absolute URIs); `send(label, way, port, payload)` sends the bytes and prints
/// `label=` and everything that came back until the connection closed or went quiet.
const PRELUDE: &str = r#"
import socket, struct, sys

def read_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise ConnectionResetError("eof")
        b += c
    return b

def tunnel(way, port, host=b"allowed.test"):
    if way == "connect":
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port))
        h = b""
        while not h.endswith(b"\r\n\r\n"):
            h += read_exact(s, 1)
        if not h.startswith(b"HTTP/1.1 200"):
            return None, h.split(b"\r\n")[0].decode()
    elif way == "socks5":
        s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
        s.sendall(b"\x05\x01\x00")
        assert read_exact(s, 2) == b"\x05\x00"
        s.sendall(b"\x05\x01\x00\x03" + bytes([len(host)]) + host + struct.pack(">H", port))
        r = read_exact(s, 10)
        if r[1] != 0:
            return None, "socks%d" % r[1]
    elif way == "plain":
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    else:
        s = socket.create_connection((host.decode(), port), timeout=10)
    return s, "open"

def send(label, way, port, payload, host=b"allowed.test"):
    try:
        s, status = tunnel(way, port, host)
        if s is None:
            print(label + "=" + status)
            return
        s.sendall(payload)
        s.settimeout(2)
        data = b""
        try:
            while True:
                c = s.recv(4096)
                if not c:
                    break
                data += c
        except socket.timeout:
            pass
        print(label + "=" + repr(data[:200]))
    except (ConnectionResetError, BrokenPipeError):
        print(label + "=reset")
    except OSError as e:
        print(label + "=error " + str(e))
"#;

const WAYS: [&str; 4] = ["plain", "connect", "socks5", "transparent"];

fn line<'a>(text: &'a str, label: &str) -> &'a str {
    let prefix = format!("{label}=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or("(missing)")
}

/// The request line's target for `path` on the way out `way` (absolute for the plain proxy).
fn target(way: &str, port: u16, path: &str) -> String {
    match way {
        "plain" => format!("http://allowed.test:{port}{path}"),
        _ => path.to_string(),
    }
}

/// Smuggling payloads: (label, head and body). `{t}` is the first request's target, `{s}` the
/// smuggled one's (which names denied.test); the first request itself is allowed.
const SMUGGLING: [(&str, &str); 6] = [
    (
        "cl-te",
        r"POST {t} HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET {s} HTTP/1.1\r\nHost: denied.test\r\n\r\n",
    ),
    (
        "te-cl",
        r"POST {t} HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 70\r\n\r\n0\r\n\r\nGET {s} HTTP/1.1\r\nHost: denied.test\r\n\r\n",
    ),
    (
        "two-cl",
        r"POST {t} HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\nGET {s} HTTP/1.1\r\nHost: denied.test\r\n\r\n",
    ),
    (
        "te-junk",
        r"POST {t} HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n0\r\n\r\nGET {s} HTTP/1.1\r\nHost: denied.test\r\n\r\n",
    ),
    (
        "te-identity",
        r"POST {t} HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked, identity\r\nContent-Length: 5\r\n\r\n0\r\n\r\nGET {s} HTTP/1.1\r\nHost: denied.test\r\n\r\n",
    ),
    (
        "chunk-ext",
        r"POST {t} HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n2;x\r\nab\r\n0\r\n\r\nGET {s} HTTP/1.1\r\nHost: denied.test\r\n\r\n",
    ),
];

#[test]
fn request_smuggling_on_a_kept_alive_connection_never_reaches_the_server() {
    for caller in CALLERS {
        let http = HttpRecorder::start();
        let port = http.port;
        let work = TempDir::new("smuggling");
        let mut script = PRELUDE.to_string();
        for way in WAYS {
            for (label, payload) in SMUGGLING {
                let payload = payload
                    .replace("{t}", &target(way, port, &format!("/{label}-{way}")))
                    .replace("{s}", &format!("http://denied.test/smuggled-{label}-{way}"));
                script += &format!("send(\"{label}-{way}\", \"{way}\", {port}, b\"{payload}\")\n");
            }
            // The twin: a chunked body that only looks like a request, then a second request
            // for the allowed host on the same connection: both arrive, as what they are.
            let twin = format!(
                r"POST {} HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n19\r\nGET /in-body HTTP/1.1\r\n\r\n\r\n0\r\n\r\nGET {} HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n",
                target(way, port, &format!("/twin-{way}")),
                target(way, port, &format!("/twin-second-{way}"))
            );
            script += &format!("send(\"twin-{way}\", \"{way}\", {port}, b\"{twin}\")\n");
        }
        let py = work.write("smuggle.py", &script);
        let out = sh(
            caller,
            &work.path,
            &integration::net::allow_opts("/dev/null"),
            &format!("python3 {}", py.display()),
        );
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        let reqs = http.requests();
        for way in WAYS {
            for (label, _) in SMUGGLING {
                assert!(
                    line(&text, &format!("{label}-{way}")) != "(missing)",
                    "{}",
                    ctx()
                );
            }
            let twin = reqs
                .iter()
                .find(|r| r.target == format!("/twin-{way}"))
                .unwrap_or_else(|| panic!("twin-{way}: {reqs:#?}: {}", ctx()));
            assert_eq!(twin.body, b"GET /in-body HTTP/1.1\r\n\r\n", "{}", ctx());
            assert!(http.saw(&format!("/twin-second-{way}")), "{}", ctx());
        }
        for r in &reqs {
            assert!(
                !r.target.contains("smuggled") && !r.target.contains("in-body"),
                "{r:?}"
            );
            assert_eq!(r.hosts, [format!("allowed.test:{port}")], "{r:?}");
            // One framing per request, so that no server reads it another way.
            assert!(
                r.content_lengths.len() + r.transfer_encodings.len() <= 1,
                "{r:?}"
            );
        }
        assert_eq!(http.garbled(), 0, "{reqs:#?}: {}", ctx());
    }
}

#[test]
fn pipelined_requests_and_missing_or_odd_hosts_reach_the_server_as_the_checked_host() {
    for caller in CALLERS {
        let http = HttpRecorder::start();
        let port = http.port;
        let work = TempDir::new("pipelined");
        let mut script = PRELUDE.to_string();
        for way in ["connect", "socks5", "transparent"] {
            let pipelined = [
                (
                    "pipe-host",
                    format!("GET /pipe-host-1-{way} HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\nGET /pipe-host-2-{way} HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n"),
                ),
                (
                    "pipe-target",
                    format!("GET /pipe-target-1-{way} HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\nGET http://denied.test/pipe-target-2-{way} HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"),
                ),
                (
                    "pipe-homograph",
                    format!("GET /pipe-homograph-1-{way} HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\nGET /pipe-homograph-2-{way} HTTP/1.1\\r\\nHost: \\xd0\\xb0llowed.test\\r\\n\\r\\n"),
                ),
            ];
            for (label, payload) in pipelined {
                script += &format!("send(\"{label}-{way}\", \"{way}\", {port}, b\"{payload}\")\n");
            }
            // Allowed, but spelt otherwise, or not named at all: the server is told the
            // checked host.
            for (label, head) in [
                ("http10", "HTTP/1.0\\r\\n"),
                ("nohost", "HTTP/1.1\\r\\nConnection: close\\r\\n"),
                (
                    "upper",
                    "HTTP/1.1\\r\\nHost: ALLOWED.TEST.\\r\\nConnection: close\\r\\n",
                ),
                (
                    "fullwidth",
                    "HTTP/1.1\\r\\nHost: allowed\\xef\\xbc\\x8etest\\r\\nConnection: close\\r\\n",
                ),
                (
                    "port",
                    "HTTP/1.1\\r\\nHost: allowed.test:1\\r\\nConnection: close\\r\\n",
                ),
            ] {
                script += &format!(
                    "send(\"{label}-{way}\", \"{way}\", {port}, b\"GET /{label}-{way} {head}\\r\\n\")\n"
                );
            }
        }
        let py = work.write("pipelined.py", &script);
        let out = sh(
            caller,
            &work.path,
            &integration::net::allow_opts("/dev/null"),
            &format!("python3 {}", py.display()),
        );
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        let reqs = http.requests();
        for way in ["connect", "socks5", "transparent"] {
            for label in ["pipe-host", "pipe-target", "pipe-homograph"] {
                assert!(http.saw(&format!("/{label}-1-{way}")), "{label}: {}", ctx());
                assert!(
                    !http.saw(&format!("/{label}-2-{way}")),
                    "{label}: {}",
                    ctx()
                );
                let answer = line(&text, &format!("{label}-{way}"));
                assert!(answer.contains("403 Forbidden"), "{label}-{way}: {answer}");
            }
            for label in ["http10", "nohost", "upper", "fullwidth", "port"] {
                let r = reqs
                    .iter()
                    .find(|r| r.target == format!("/{label}-{way}"))
                    .unwrap_or_else(|| panic!("{label}-{way}: {reqs:#?}: {}", ctx()));
                assert_eq!(r.hosts, [format!("allowed.test:{port}")], "{r:?}");
            }
        }
        for r in &reqs {
            assert_eq!(r.hosts, [format!("allowed.test:{port}")], "{r:?}");
        }
    }
}

#[test]
fn an_address_or_another_spelling_of_the_allowed_name_is_decided_as_itself() {
    // allowed.test resolves to 127.0.0.1, but a rule naming allowed.test does not allow the
    // address (nor its IPv6 spellings); a rule naming the address does (the twin).
    const ASK: &str = r#"
import ipaddress
def connect_status(label, target):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target))
    print(label + "=" + s.recv(200).split(b"\r\n")[0].decode())
def socks_status(label, atyp, addr, port):
    s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
    s.sendall(b"\x05\x01\x00")
    read_exact(s, 2)
    if atyp == 3:
        addr = bytes([len(addr)]) + addr
    s.sendall(b"\x05\x01\x00" + bytes([atyp]) + addr + struct.pack(">H", port))
    r = read_exact(s, 2)
    print(label + "=socks%d" % r[1])
    if r[1] == 0:
        read_exact(s, 8)
        s.sendall(b"GET /" + label.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        s.recv(100)
"#;
    for caller in CALLERS {
        for (allow, address_allowed) in [("allowed.test", false), ("127.0.0.1", true)] {
            let http = HttpRecorder::start();
            let port = http.port;
            let work = TempDir::new("literals");
            let mut script = format!("{PRELUDE}{ASK}");
            for (label, t) in [
                ("v4", "127.0.0.1"),
                ("mapped", "[::ffff:127.0.0.1]"),
                ("upper", "ALLOWED.TEST"),
                ("dot", "allowed.test."),
                ("dots", "allowed.test.."),
                ("homograph", "\\xd0\\xb0llowed.test"),
                ("decimal", "2130706433"),
            ] {
                script += &format!("connect_status(\"connect-{label}\", b\"{t}:{port}\")\n");
            }
            let v6 = |a: &str| format!("ipaddress.IPv6Address(\"{a}\").packed");
            for (label, atyp, addr) in [
                ("socks-v4", 1, "bytes([127, 0, 0, 1])".to_string()),
                ("socks-mapped", 4, v6("::ffff:127.0.0.1")),
                ("socks-nat64", 4, v6("64:ff9b::7f00:1")),
                ("socks-v6name", 3, "b\"::ffff:7f00:1\"".to_string()),
                ("socks-upper", 3, "b\"ALLOWED.TEST.\"".to_string()),
            ] {
                script += &format!("socks_status(\"{label}\", {atyp}, {addr}, {port})\n");
            }
            let py = work.write("literals.py", &script);
            let opts = [
                "--network",
                "restricted",
                "--resolve",
                "allowed.test:127.0.0.1",
                "--allow-domain",
                allow,
            ];
            let out = sh(
                caller,
                &work.path,
                &opts,
                &format!("python3 {}", py.display()),
            );
            let text = stdout(&out);
            let ctx = || format!("{caller:?} allow={allow}: {}", explain(&out));
            let by_name = |ok: bool| match ok {
                true => "HTTP/1.1 200 OK",
                false => "HTTP/1.1 403 Forbidden",
            };
            let socks = |ok: bool| match ok {
                true => "socks0",
                false => "socks2",
            };
            assert_eq!(
                line(&text, "connect-v4"),
                by_name(address_allowed),
                "{}",
                ctx()
            );
            assert_eq!(
                line(&text, "connect-mapped"),
                by_name(address_allowed),
                "{}",
                ctx()
            );
            assert_eq!(
                line(&text, "connect-upper"),
                by_name(!address_allowed),
                "{}",
                ctx()
            );
            assert_eq!(
                line(&text, "connect-dot"),
                by_name(!address_allowed),
                "{}",
                ctx()
            );
            for malformed in ["dots", "homograph", "decimal"] {
                let l = line(&text, &format!("connect-{malformed}"));
                assert_eq!(l, "HTTP/1.1 400 Bad Request", "{malformed}: {}", ctx());
            }
            assert_eq!(line(&text, "socks-v4"), socks(address_allowed), "{}", ctx());
            assert_eq!(
                line(&text, "socks-mapped"),
                socks(address_allowed),
                "{}",
                ctx()
            );
            assert_eq!(
                line(&text, "socks-v6name"),
                socks(address_allowed),
                "{}",
                ctx()
            );
            assert_eq!(
                line(&text, "socks-upper"),
                socks(!address_allowed),
                "{}",
                ctx()
            );
            // NAT64 embeds the address, but is not it: never allowed by a rule naming 127.0.0.1.
            assert_eq!(line(&text, "socks-nat64"), "socks2", "{}", ctx());
            // What reached the server came through the allowed twins only.
            assert_eq!(http.saw("/socks-v4"), address_allowed, "{}", ctx());
            assert_eq!(http.saw("/socks-mapped"), address_allowed, "{}", ctx());
            assert!(!http.saw("/socks-nat64"), "{}", ctx());
        }
    }
}

#[test]
fn an_inspected_tunnel_never_switches_to_h2c() {
    // Plain HTTP in a CONNECT tunnel to an endpoint with request rules is read by the proxy
    // request by request; after a switch to HTTP/2 over cleartext the server would read
    // requests the proxy never saw. The offer is taken off: the server answers HTTP/1.1.
    const SWITCH: &str = r#"
def h2c(label, port):
    s, status = tunnel("connect", port)
    s.sendall(b"GET /" + label.encode() + b" HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(1)
        if not c:
            break
        head += c
    block = b"\x82\x86\x41\x0bdenied.test\x44\x10/smuggled-h2c-in"
    frame = len(block).to_bytes(3, "big") + b"\x01\x05" + (3).to_bytes(4, "big") + block
    try:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + frame)
        s.settimeout(1)
        s.recv(4096)
    except OSError:
        pass
    print(label + "=" + head.split(b"\r\n")[0].decode(errors="replace"))
"#;
    for caller in CALLERS {
        let http = HttpRecorder::start();
        let port = http.port;
        let work = TempDir::new("h2c-inspected");
        let policy = work.write(
            "policy.yaml",
            &format!(
                "version: 1
network_policies:
  api:
    name: api
    endpoints:
      - host: allowed.test
        port: {port}
        protocol: rest
        rules:
          - allow: {{method: GET, path: /**}}
    binaries:
      - path: /**
"
            ),
        );
        let py = work.write(
            "h2c.py",
            &format!("{PRELUDE}{SWITCH}h2c(\"h2c-inspected\", {port})\n"),
        );
        let opts = [
            "--network",
            "restricted",
            "--policy",
            policy.to_str().unwrap(),
            "--resolve",
            "allowed.test:127.0.0.1",
        ];
        let out = sh(
            caller,
            &work.path,
            &opts,
            &format!("python3 {}", py.display()),
        );
        let ctx = || format!("{caller:?}: {}", explain(&out));
        assert_eq!(
            line(&stdout(&out), "h2c-inspected"),
            "HTTP/1.1 200 OK",
            "{}",
            ctx()
        );
        assert!(http.saw("/h2c-inspected"), "{}", ctx());
        let switched = http.switched();
        assert!(switched.is_empty(), "{switched:?}: {}", ctx());
        assert!(!http.saw("smuggled"), "{}", ctx());
    }
}

#[test]
fn pipelined_and_smuggled_requests_are_each_decided_by_the_request_rules() {
    // GET under /items/ is allowed, nothing else: on one kept-alive connection, through the
    // plain-HTTP proxy and an inspected CONNECT tunnel, the second (pipelined) request asks for
    // another path and a third for an allowed one again; a smuggled request hides in a body.
    for caller in CALLERS {
        let http = HttpRecorder::start();
        let port = http.port;
        let work = TempDir::new("pipelined-rules");
        let policy = work.write(
            "policy.yaml",
            &format!(
                "version: 1
network_policies:
  api:
    name: api
    endpoints:
      - host: allowed.test
        port: {port}
        protocol: rest
        rules:
          - allow: {{method: GET, path: /items/**}}
    binaries:
      - path: /**
"
            ),
        );
        let mut script = PRELUDE.to_string();
        for way in ["plain", "connect"] {
            let t = |path: &str| target(way, port, path);
            let pipelined = format!(
                r"GET {} HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET {} HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET {} HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n",
                t(&format!("/items/one-{way}")),
                t(&format!("/secret/two-{way}")),
                t(&format!("/items/three-{way}")),
            );
            script += &format!("send(\"pipe-{way}\", \"{way}\", {port}, b\"{pipelined}\")\n");
            let smuggled = format!(
                r"GET {} HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /secret/smuggled-{way} HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
                t(&format!("/items/carrier-{way}")),
            );
            script += &format!("send(\"smuggle-{way}\", \"{way}\", {port}, b\"{smuggled}\")\n");
        }
        let py = work.write("rules.py", &script);
        let opts = [
            "--network",
            "restricted",
            "--policy",
            policy.to_str().unwrap(),
            "--resolve",
            "allowed.test:127.0.0.1",
        ];
        let out = sh(
            caller,
            &work.path,
            &opts,
            &format!("python3 {}", py.display()),
        );
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        for way in ["plain", "connect"] {
            assert!(http.saw(&format!("/items/one-{way}")), "{}", ctx());
            assert!(http.saw(&format!("/items/three-{way}")), "{}", ctx());
            assert!(!http.saw(&format!("/secret/two-{way}")), "{}", ctx());
            assert!(
                line(&text, &format!("pipe-{way}")).contains("403 Forbidden"),
                "{}",
                ctx()
            );
            assert!(http.saw(&format!("/items/carrier-{way}")), "{}", ctx());
        }
        for r in http.requests() {
            assert!(!r.target.contains("secret"), "{r:?}: {}", ctx());
            assert!(
                r.content_lengths.len() + r.transfer_encodings.len() <= 1,
                "{r:?}"
            );
        }
        assert_eq!(http.garbled(), 0, "{}", ctx());
    }
}
