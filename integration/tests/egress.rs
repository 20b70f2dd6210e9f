//! Transparent egress in `--network restricted`: programs that ignore the proxy variables (curl
//! told not to use them, python sockets, Node's fetch) are redirected to the proxy inside the
//! sandbox and filtered by the same rules; the DNS stub answers only allowed names; a request
//! that names another host than the one it was allowed for is refused, through the proxy and
//! without it; and when the redirect cannot be set up the launch says so and keeps the proxy
//! variables. Every server is the tests' own, on the host's 127.0.0.1.

use integration::net::{allow_opts, events, HostServer};
use integration::{
    command_with, doctor, doctor_check, explain, fault_inject, launcher, sh, stderr, stdout,
    TempDir, CALLERS,
};

/// Python lines that leave `s` connected to allowed.test:`port`: through a CONNECT to the
/// sandbox's HTTP proxy (`via_proxy`), or directly (the transparent redirect takes it).
fn open_socket(port: u16, via_proxy: bool) -> String {
    if via_proxy {
        format!(
            "s = socket.create_connection((\"127.0.0.1\", 3128), timeout=10)
s.sendall(b\"CONNECT allowed.test:{port} HTTP/1.1\\r\\nHost: allowed.test:{port}\\r\\n\\r\\n\")
h = b\"\"
while not h.endswith(b\"\\r\\n\\r\\n\"): h += s.recv(1)
assert h.startswith(b\"HTTP/1.1 200\")"
        )
    } else {
        format!("s = socket.create_connection((\"allowed.test\", {port}), timeout=10)")
    }
}

/// Python that opens a plain socket to HOST:PORT, sends a GET for PATH naming HOST_HEADER, and
/// prints `LABEL=` and the first line of the answer, or `LABEL=reset`/`LABEL=errno N`.
fn raw_get(label: &str, host: &str, port: u16, path: &str, host_header: &str) -> String {
    format!(
        r#"python3 -c '
import socket
try:
    s = socket.create_connection(("{host}", {port}), timeout=10)
    s.sendall(b"GET {path} HTTP/1.1\r\nHost: {host_header}\r\nConnection: close\r\n\r\n")
    data = s.recv(200)
    print("{label}=" + (data.decode().splitlines()[0] if data else "eof"))
except ConnectionResetError:
    print("{label}=reset")
except OSError as e:
    print("{label}=errno", e.errno)
'
"#
    )
}

#[test]
fn programs_that_ignore_the_proxy_are_filtered_not_cut_off() {
    let server = HostServer::start();
    let port = server.port;
    for caller in CALLERS {
        let work = TempDir::new("egress-direct");
        let ev = work.join("events.jsonl");
        let mut script = format!(
            "curl -sS --noproxy '*' -m 10 http://allowed.test:{port}/curl-direct; echo \" curl=$?\"
curl -sS --noproxy '*' -m 10 http://denied.test:{port}/denied-name 2>/dev/null; echo \"denied=$?\"
node -e 'fetch(\"http://allowed.test:{port}/node-fetch\").then(r => r.text()).then(t => console.log(\"node=\" + t), e => console.log(\"node-error\", e.cause))'
"
        );
        script += &raw_get(
            "python",
            "allowed.test",
            port,
            "/python-socket",
            "allowed.test",
        );
        script += &raw_get("literal", "192.0.2.1", port, "/ip-literal", "192.0.2.1");
        let out = sh(
            caller,
            &work.path,
            &allow_opts(ev.to_str().unwrap()),
            &script,
        );
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        assert!(
            text.contains("hello-from-host path=/curl-direct curl=0"),
            "{}",
            ctx()
        );
        assert!(
            text.contains("node=hello-from-host path=/node-fetch"),
            "{}",
            ctx()
        );
        assert!(text.contains("python=HTTP/1.1 200 OK"), "{}", ctx());
        // curl exit 6: could not resolve the name (the stub does not know it).
        assert!(text.contains("denied=6"), "{}", ctx());
        assert!(text.contains("literal=reset"), "{}", ctx());
        for seen in ["/curl-direct", "/node-fetch", "/python-socket"] {
            assert!(server.saw(seen), "{seen}: {}", ctx());
        }
        assert!(!server.saw("/denied-name") && !server.saw("/ip-literal"));

        let evs = events(&ev);
        let find = |protocol: &str, host: &str, decision: &str| {
            evs.iter().find(|e| {
                e["protocol"] == protocol && e["host"] == host && e["decision"] == decision
            })
        };
        let allowed = find("transparent", "allowed.test", "allow").expect("allow event");
        assert_eq!(allowed["port"], port);
        assert!(
            evs.iter()
                .any(|e| e["protocol"] == "transparent" && e["binary"] == "/usr/bin/curl"),
            "the program is identified: {evs:?}"
        );
        let dns = find("dns", "denied.test", "deny").expect("dns denial event");
        assert_eq!(dns["reason"], "no rule allows denied.test");
        let literal = find("transparent", "192.0.2.1", "deny").expect("literal denial");
        assert!(
            literal["reason"]
                .as_str()
                .unwrap()
                .contains("no rule names the address"),
            "{literal}"
        );
    }
}

#[test]
fn dns_inside_answers_only_allowed_names_and_any_resolver_is_the_stub() {
    // A hand-made query to an arbitrary resolver address reaches the stub too (the redirect
    // catches all DNS), so no query leaves the sandbox; allowed names get a stand-in address
    // from 198.18.0.0/15, other names NXDOMAIN — for every record type.
    let query = r#"python3 -c '
import socket, struct
def ask(name, qtype, server):
    q = struct.pack(">HHHHHH", 7, 0x100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    q += struct.pack(">HH", qtype, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
    s.sendto(q, (server, 53))
    r = s.recv(512)
    rcode, answers = r[3] & 15, struct.unpack(">H", r[6:8])[0]
    addr = socket.inet_ntoa(r[-4:]) if answers else "-"
    print(name, qtype, "rcode=%d" % rcode, "addr=" + addr)
ask("allowed.test", 1, "192.0.2.53")
ask("secret-data.denied.test", 16, "203.0.113.9")
try:
    print("getaddrinfo", socket.getaddrinfo("allowed.test", 80, socket.AF_INET)[0][4][0])
    socket.getaddrinfo("denied.test", 80)
    print("denied resolved")
except socket.gaierror as e:
    print("denied: gaierror", e.errno)
'"#;
    for caller in CALLERS {
        let work = TempDir::new("egress-dns");
        let ev = work.join("events.jsonl");
        let out = sh(caller, &work.path, &allow_opts(ev.to_str().unwrap()), query);
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        let stand_in = text
            .lines()
            .find_map(|l| l.strip_prefix("allowed.test 1 rcode=0 addr="))
            .unwrap_or_else(|| panic!("no answer for allowed.test: {}", ctx()));
        assert!(stand_in.starts_with("198.18."), "{}", ctx());
        assert!(
            text.contains(&format!("getaddrinfo {stand_in}")),
            "the system resolver sees the same stub: {}",
            ctx()
        );
        assert!(
            text.contains("secret-data.denied.test 16 rcode=3 addr=-"),
            "{}",
            ctx()
        );
        assert!(text.contains("denied: gaierror"), "{}", ctx());
        assert!(!text.contains("denied resolved"), "{}", ctx());
    }
    // With the proxy variables only, nothing inside resolves anything.
    let work = TempDir::new("egress-dns-off");
    let out = sh(
        CALLERS[1],
        &work.path,
        &["--egress", "proxy-only", "--allow-domain", "allowed.test"],
        r#"python3 -c '
import socket
try:
    socket.getaddrinfo("allowed.test", 443); print("RESOLVED")
except OSError as e:
    print("dns: refused", e.errno)
'"#,
    );
    assert!(stdout(&out).contains("dns: refused"), "{}", explain(&out));
}

#[test]
fn a_request_naming_another_host_than_it_was_allowed_for_is_refused() {
    // Domain fronting: connect to (or CONNECT to) an allowed name, then ask for another host in
    // the HTTP Host header or the TLS SNI. Refused through the proxy and without it; the twin
    // that names the allowed host gets through.
    let server = HostServer::start();
    let port = server.port;
    let tls = |label: &str, proxy: bool| {
        let connect = open_socket(port, proxy);
        format!(
            r#"python3 -c '
import socket, ssl
{connect}
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
try:
    ctx.wrap_socket(s, server_hostname="denied.test")
    print("{label}=handshake")
except (ConnectionResetError, ssl.SSLError, OSError) as e:
    print("{label}=refused", type(e).__name__)
'
"#
        )
    };
    let through_proxy = |label: &str, host_header: &str, path: &str| {
        let connect = open_socket(port, true);
        format!(
            r#"python3 -c '
import socket
{connect}
s.sendall(b"GET {path} HTTP/1.1\r\nHost: {host_header}\r\nConnection: close\r\n\r\n")
try:
    data = s.recv(200)
    print("{label}=" + (data.decode().splitlines()[0] if data else "eof"))
except ConnectionResetError:
    print("{label}=reset")
'
"#
        )
    };
    for caller in CALLERS {
        let work = TempDir::new("egress-fronting");
        let ev = work.join("events.jsonl");
        let mut script = String::new();
        script += &through_proxy("connect_ok", "allowed.test", "/connect-twin");
        script += &through_proxy("connect_fronted", "denied.test", "/connect-fronted");
        script += &raw_get(
            "direct_ok",
            "allowed.test",
            port,
            "/direct-twin",
            "allowed.test",
        );
        script += &raw_get(
            "direct_fronted",
            "allowed.test",
            port,
            "/direct-fronted",
            "denied.test",
        );
        script += &tls("tls_connect", true);
        script += &tls("tls_direct", false);
        let out = sh(
            caller,
            &work.path,
            &allow_opts(ev.to_str().unwrap()),
            &script,
        );
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        assert!(text.contains("connect_ok=HTTP/1.1 200 OK"), "{}", ctx());
        assert!(text.contains("direct_ok=HTTP/1.1 200 OK"), "{}", ctx());
        for refused in ["connect_fronted=", "direct_fronted="] {
            let line = text.lines().find(|l| l.starts_with(refused)).unwrap_or("");
            assert!(
                line.ends_with("=reset") || line.ends_with("=eof"),
                "{refused}: {}",
                ctx()
            );
        }
        assert!(text.contains("tls_connect=refused"), "{}", ctx());
        assert!(text.contains("tls_direct=refused"), "{}", ctx());
        assert!(server.saw("/connect-twin") && server.saw("/direct-twin"));
        assert!(!server.saw("/connect-fronted") && !server.saw("/direct-fronted"));
        let evs = events(&ev);
        for (protocol, via) in [
            ("connect", "HTTP Host"),
            ("connect", "TLS SNI"),
            ("transparent", "HTTP Host"),
            ("transparent", "TLS SNI"),
        ] {
            let wanted = format!("{via} asks for denied.test");
            assert!(
                evs.iter().any(|e| e["protocol"] == protocol
                    && e["decision"] == "deny"
                    && e["reason"].as_str().unwrap_or("").contains(&wanted)),
                "{protocol}/{via}: {evs:?}"
            );
        }
    }
}

#[test]
fn landlock_limits_direct_connects_to_the_ports_the_rules_allow() {
    // With only `allowed.test:PORT` allowed, Landlock (which sees the port a program asks for,
    // before the redirect) refuses a direct connect to any other port at once; PORT works.
    let server = HostServer::start();
    let port = server.port;
    let other = if port == 65535 { port - 1 } else { port + 1 };
    for caller in CALLERS {
        let work = TempDir::new("egress-ports");
        let allow = format!("allowed.test:{port}");
        let mut script = raw_get(
            "allowed_port",
            "allowed.test",
            port,
            "/port-twin",
            "allowed.test",
        );
        script += &raw_get(
            "other_port",
            "allowed.test",
            other,
            "/other-port",
            "allowed.test",
        );
        let out = sh(
            caller,
            &work.path,
            &[
                "--resolve",
                "allowed.test:127.0.0.1",
                "--allow-domain",
                &allow,
            ],
            &script,
        );
        let text = stdout(&out);
        assert!(
            text.contains("allowed_port=HTTP/1.1 200 OK"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("other_port=errno 13"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn without_the_redirect_the_launch_keeps_the_proxy_variables_and_says_so() {
    // A host where netlink is refused (here: socket(AF_NETLINK) answers EPERM from an outer
    // filter): the sandbox starts, warns, the proxy still works; a direct connection has no
    // route. `--egress proxy-only` is the same by choice, without the warning.
    let server = HostServer::start();
    let port = server.port;
    let script = format!(
        "curl -sS -m 10 http://allowed.test:{port}/via-proxy; echo \" proxy=$?\"
curl -sS --noproxy '*' -m 5 http://allowed.test:{port}/direct 2>/dev/null; echo \"direct=$?\"
"
    );
    let launcher = launcher().to_str().unwrap().to_string();
    let opts = [
        "--resolve",
        "allowed.test:127.0.0.1",
        "--allow-domain",
        "allowed.test",
    ];
    for caller in CALLERS {
        let work = TempDir::new("egress-fallback");
        let mut args = vec![
            "--errno-if-arg0",
            "socket:16=EPERM",
            "--",
            &launcher,
            "whole-process",
        ];
        args.extend_from_slice(&opts);
        args.extend_from_slice(&["--", "/bin/sh", "-c", &script]);
        let out = command_with(fault_inject(), caller, &work.path, &args)
            .output()
            .expect("run fault-inject");
        let ctx = || format!("{caller:?}: {}", explain(&out));
        assert_eq!(out.status.code(), Some(0), "{}", ctx());
        assert!(
            stderr(&out).contains("transparent egress is not available"),
            "{}",
            ctx()
        );
        let text = stdout(&out);
        assert!(text.contains("path=/via-proxy proxy=0"), "{}", ctx());
        // curl exit 6: nothing resolves inside without the stub.
        assert!(text.contains("direct=6"), "{}", ctx());

        let mut chosen = vec!["--egress", "proxy-only"];
        chosen.extend_from_slice(&opts);
        let out = sh(caller, &work.path, &chosen, &script);
        assert!(
            !stderr(&out).contains("transparent egress"),
            "{}",
            explain(&out)
        );
        let text = stdout(&out);
        assert!(
            text.contains("path=/via-proxy proxy=0"),
            "{}",
            explain(&out)
        );
        assert!(text.contains("direct=6"), "{}", explain(&out));
    }
    assert!(!server.saw("/direct"));
}

#[test]
fn doctor_says_whether_transparent_egress_works_here() {
    for caller in CALLERS {
        let work = TempDir::new("egress-doctor");
        let here = doctor(caller, &work.path, &[]);
        let check = doctor_check(&here, "egress");
        assert_eq!(check["status"], "ok", "{caller:?}: {check}");
        assert!(check["detail"].as_str().unwrap().starts_with("transparent"));

        let without = doctor(caller, &work.path, &["--errno-if-arg0", "socket:16=EPERM"]);
        let check = doctor_check(&without, "egress");
        assert_eq!(check["status"], "warn", "{caller:?}: {check}");
        assert!(
            check["detail"]
                .as_str()
                .unwrap()
                .contains("proxy variables only"),
            "{check}"
        );
        assert!(check["fix"].as_str().unwrap().contains("127.0.0.1:3128"));
    }
}

#[test]
fn the_sandbox_cannot_undo_the_redirect() {
    // The rules and the route live in the sandbox's own namespace, set up before the program
    // ran; the program has no capability there. It tries to delete the default route and to
    // talk to nftables; both are refused, and the redirect still filters afterwards (the twin:
    // an allowed name is still reached through it).
    let server = HostServer::start();
    let port = server.port;
    let script = format!(
        r#"python3 - <<'PY'
import socket, struct, errno
# RTM_DELROUTE for the default route (rtmsg: AF_INET, dst_len 0, table main) with an ACK.
rtmsg = struct.pack("BBBBBBBBI", socket.AF_INET, 0, 0, 0, 254, 0, 0, 0, 0)
msg = struct.pack("=IHHII", 16 + len(rtmsg), 25, 0x1 | 0x4, 1, 0) + rtmsg
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
s.send(msg)
ack = s.recv(4096)
err = struct.unpack("=i", ack[16:20])[0]
print("delroute", "refused" if err == -errno.EPERM else "errno %d" % -err)
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)  # NETLINK_NETFILTER
    print("nfnetlink OPENED")
except OSError as e:
    print("nfnetlink refused", e.errno)
PY
curl -sS --noproxy '*' -m 10 http://allowed.test:{port}/after-tampering; echo " rc=$?"
"#
    );
    for caller in CALLERS {
        let work = TempDir::new("egress-tamper");
        let out = sh(caller, &work.path, &allow_opts("/dev/null"), &script);
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        assert!(text.contains("delroute refused"), "{}", ctx());
        assert!(text.contains("nfnetlink refused"), "{}", ctx());
        assert!(text.contains("path=/after-tampering rc=0"), "{}", ctx());
    }
}

#[test]
fn the_stub_is_used_when_the_policy_lists_what_may_be_read() {
    // OpenShell allow-list mode without /etc: the sandbox's resolv.conf is still there and
    // readable, and names resolve through the stub.
    for caller in CALLERS {
        let work = TempDir::new("egress-allowlist");
        let policy = work.write(
            "policy.yaml",
            "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: [/usr, /lib, /lib64, /bin]\n",
        );
        work.give_to_sandbox_user(&policy);
        let out = sh(
            caller,
            &work.path,
            &[
                "--policy",
                policy.to_str().unwrap(),
                "--resolve",
                "allowed.test:127.0.0.1",
                "--allow-domain",
                "allowed.test",
            ],
            r#"grep nameserver /etc/resolv.conf
/usr/bin/python3 -c 'import socket; print("resolved", socket.gethostbyname("allowed.test"))'"#,
        );
        let text = stdout(&out);
        assert!(
            text.contains("nameserver 127.0.0.1"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("resolved 198.18."),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

/// A server on the host's 127.0.0.1 that speaks first (as SMTP or FTP do): it sends a banner,
/// then echoes one line back prefixed with `echo:`.
fn banner_server() -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = stream.write_all(b"220 banner-from-host\r\n");
                let mut line = String::new();
                let _ = BufReader::new(stream.try_clone().unwrap()).read_line(&mut line);
                let _ = write!(stream, "echo:{line}");
            });
        }
    });
    port
}

#[test]
fn server_first_protocols_get_their_banner_before_the_client_speaks() {
    // The client reads the banner before sending anything — through CONNECT and through the
    // transparent redirect — then its line (not HTTP, not TLS: nothing to check) goes through.
    let port = banner_server();
    let client = |label: &str, via_proxy: bool| {
        let connect = open_socket(port, via_proxy);
        format!(
            r#"python3 -c '
import socket
{connect}
f = s.makefile("rb")
banner = f.readline().decode().strip()
s.sendall(b"hello\n")
print("{label}", banner, f.readline().decode().strip())
'
"#
        )
    };
    for caller in CALLERS {
        let work = TempDir::new("egress-banner");
        let script = client("connect:", true) + &client("transparent:", false);
        let out = sh(caller, &work.path, &allow_opts("/dev/null"), &script);
        let text = stdout(&out);
        for label in ["connect:", "transparent:"] {
            assert!(
                text.contains(&format!("{label} 220 banner-from-host echo:hello")),
                "{caller:?} {label}: {}",
                explain(&out)
            );
        }
    }
}

#[test]
fn an_unreachable_server_is_an_error_event_not_a_denial() {
    // An allowed name whose server is not listening: the program sees its connection reset; the
    // events record the allow decision and a `network_error`, never a `deny`.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for caller in CALLERS {
        let work = TempDir::new("egress-unreachable");
        let ev = work.join("events.jsonl");
        let script = raw_get("dead", "allowed.test", port, "/x", "allowed.test");
        let out = sh(
            caller,
            &work.path,
            &allow_opts(ev.to_str().unwrap()),
            &script,
        );
        let text = stdout(&out);
        assert!(
            text.contains("dead=reset") || text.contains("dead=eof"),
            "{caller:?}: {}",
            explain(&out)
        );
        let evs = events(&ev);
        let transparent: Vec<_> = evs
            .iter()
            .filter(|e| e["protocol"] == "transparent")
            .collect();
        assert!(
            transparent.iter().any(|e| e["event"] == "network_error"
                && e["host"] == "allowed.test"
                && e["error"].as_str().unwrap_or("").contains("cannot connect")),
            "{evs:#?}"
        );
        assert!(
            transparent.iter().all(|e| e["decision"] != "deny"),
            "{evs:#?}"
        );
    }
}
