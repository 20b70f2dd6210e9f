//! OpenShell request rules (`protocol: rest`) attacked from inside: requests that a server would
//! act on differently from how they read — a method it is told to take instead of the one on the
//! request line — through the plain-HTTP proxy and through a CONNECT tunnel the proxy inspects.
//! Judged on a recording server: the refused requests never reach it, their twins do.

use integration::recording::HttpRecorder;
use integration::{explain, sh, stdout, TempDir, CALLERS};

/// `POST` and `GET` allowed on `/items/**`, `DELETE` refused there by a deny rule.
fn policy(work: &TempDir, port: u16) -> String {
    let text = format!(
        "version: 1
network_policies:
  items:
    name: items-api
    endpoints:
      - host: allowed.test
        port: {port}
        protocol: rest
        rules:
          - allow: {{method: GET, path: /items/**}}
          - allow: {{method: POST, path: /items/**}}
        deny_rules:
          - {{method: DELETE, path: /items/**}}
    binaries:
      - path: /**
"
    );
    work.write("policy.yaml", &text)
        .to_str()
        .unwrap()
        .to_string()
}

/// Python: `ask(label, way, head)` sends one request head (`{t}` stands for the target, which
/// names `/items/<label>`) through the plain-HTTP proxy (`plain`) or a CONNECT tunnel
/// (`tunnel`) and prints `label=<status line>`.
fn script(port: u16, requests: &[(&str, &str)]) -> String {
    let mut s = format!(
        r#"
import socket
def ask(label, way, head):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    if way == "tunnel":
        s.sendall(b"CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        h = b""
        while not h.endswith(b"\r\n\r\n"):
            h += s.recv(1)
        target = "/items/" + label
    else:
        target = "http://allowed.test:{port}/items/" + label
    s.sendall(head.replace("{{t}}", target).encode() + b"Host: allowed.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    print(label + "=" + s.recv(300).decode(errors="replace").split("\r\n")[0])
"#
    );
    for way in ["plain", "tunnel"] {
        for (label, head) in requests {
            s += &format!("ask(\"{label}-{way}\", \"{way}\", \"{head}\")\n");
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
fn a_method_override_is_decided_as_the_method_it_names() {
    // Express's method-override, Rack, Symfony/Laravel and Google's APIs take a POST for the
    // method an X-HTTP-Method-Override (or X-HTTP-Method, X-Method-Override) header — spelled
    // with underscores too, as CGI-style servers read it — or a `_method` query parameter
    // names: a deny rule for DELETE must hold against them.
    let refused = [
        (
            "override",
            r"POST {t} HTTP/1.1\r\nX-HTTP-Method-Override: DELETE\r\n",
        ),
        ("xmethod", r"POST {t} HTTP/1.1\r\nX-HTTP-Method: delete\r\n"),
        (
            "xoverride",
            r"POST {t} HTTP/1.1\r\nX-Method-Override: DELETE\r\n",
        ),
        ("query", r"POST {t}?_method=DELETE HTTP/1.1\r\n"),
        // A CGI-style server (wsgiref, Rack) reads this one as X-HTTP-Method-Override.
        (
            "underscore",
            r"POST {t} HTTP/1.1\r\nX_HTTP_METHOD_OVERRIDE: DELETE\r\n",
        ),
        (
            "twice",
            r"POST {t} HTTP/1.1\r\nX-HTTP-Method-Override: GET\r\nX-HTTP-Method-Override: DELETE\r\n",
        ),
    ];
    let allowed = [
        ("plainpost", r"POST {t} HTTP/1.1\r\n"),
        (
            "toget",
            r"POST {t} HTTP/1.1\r\nX-HTTP-Method-Override: GET\r\n",
        ),
    ];
    for caller in CALLERS {
        let http = HttpRecorder::start();
        let work = TempDir::new("rest-override");
        let policy = policy(&work, http.port);
        let all: Vec<(&str, &str)> = refused.iter().chain(allowed.iter()).copied().collect();
        let py = work.write("override.py", &script(http.port, &all));
        let out = sh(
            caller,
            &work.path,
            &[
                "--network",
                "restricted",
                "--policy",
                &policy,
                "--resolve",
                "allowed.test:127.0.0.1",
            ],
            &format!("python3 {}", py.display()),
        );
        let text = stdout(&out);
        let ctx = || format!("{caller:?}: {}", explain(&out));
        for way in ["plain", "tunnel"] {
            for (label, _) in refused {
                let label = format!("{label}-{way}");
                assert_eq!(
                    line(&text, &label),
                    "HTTP/1.1 403 Forbidden",
                    "{label}: {}",
                    ctx()
                );
                assert!(!http.saw(&format!("/items/{label}")), "{label}: {}", ctx());
            }
            for (label, _) in allowed {
                let label = format!("{label}-{way}");
                assert_eq!(line(&text, &label), "HTTP/1.1 200 OK", "{label}: {}", ctx());
                assert!(http.saw(&format!("/items/{label}")), "{label}: {}", ctx());
            }
        }
    }
}
