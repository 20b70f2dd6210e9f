//! Servers on the host's 127.0.0.1 that record what reached them, so that a test judges on what
//! a server received and would act on, not on what the client saw: a TLS server (rustls, the
//! ClientHello read by rustls's server-side `Acceptor`) that records each connection's SNI and
//! how many bytes it received, and an HTTP/1.1 server (`httparse`, the parser of hyper's servers)
//! that records each request's method, target, `Host` headers and body framing, reads bodies as
//! RFC 9112 §6.3 says (`Transfer-Encoding: chunked` over `Content-Length`), with keep-alive, and agrees to
//! switch protocols (to WebSocket or to HTTP/2 over cleartext, `h2c`) as such servers do, after
//! which it records every byte it receives.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One TLS connection as the server saw it.
#[derive(Debug, Clone, Default)]
pub struct TlsConn {
    /// Bytes received from the client (before and during the handshake).
    pub bytes: usize,
    /// The ClientHello was read whole; its SNI.
    pub hello: bool,
    pub sni: Option<String>,
}

pub struct TlsRecorder {
    pub port: u16,
    conns: Arc<Mutex<Vec<TlsConn>>>,
}

impl TlsRecorder {
    /// Serves a certificate for `allowed.test` (self-signed: clients inside do not verify it)
    /// and answers one HTTP request per connection with `tls-ok`.
    pub fn start() -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["allowed.test".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(
            rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()),
        );
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert.der().clone()], key_der)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let conns: Arc<Mutex<Vec<TlsConn>>> = Arc::default();
        let seen = conns.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (seen, config) = (seen.clone(), config.clone());
                std::thread::spawn(move || tls_conn(stream, &seen, config));
            }
        });
        TlsRecorder { port, conns }
    }

    /// The connections that received at least one byte.
    pub fn spoken_to(&self) -> Vec<TlsConn> {
        let conns = self.conns.lock().unwrap();
        conns.iter().filter(|c| c.bytes > 0).cloned().collect()
    }
}

fn tls_conn(mut stream: TcpStream, seen: &Mutex<Vec<TlsConn>>, config: Arc<rustls::ServerConfig>) {
    let index = {
        let mut all = seen.lock().unwrap();
        all.push(TlsConn::default());
        all.len() - 1
    };
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let mut acceptor = rustls::server::Acceptor::default();
    let accepted = loop {
        let mut buf = [0u8; 4096];
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        seen.lock().unwrap()[index].bytes += n;
        let mut rd = &buf[..n];
        while !rd.is_empty() {
            if acceptor.read_tls(&mut rd).is_err() {
                return;
            }
        }
        match acceptor.accept() {
            Ok(None) => continue,
            Ok(Some(a)) => break a,
            Err(_) => return,
        }
    };
    {
        let mut all = seen.lock().unwrap();
        all[index].hello = true;
        all[index].sni = accepted.client_hello().server_name().map(str::to_string);
    }
    let Ok(conn) = accepted.into_connection(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(conn, stream);
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tls.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let _ =
        tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\ntls-ok\n");
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

/// One request as the HTTP server parsed it.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    pub method: String,
    pub target: String,
    /// Every `Host` header's value, in order.
    pub hosts: Vec<String>,
    /// Every `Content-Length` and `Transfer-Encoding` header's value, in order: a request that
    /// carries both, or two lengths, is framed differently by different servers.
    pub content_lengths: Vec<String>,
    pub transfer_encodings: Vec<String>,
    /// The body, as framed.
    pub body: Vec<u8>,
}

/// A connection on which the HTTP server agreed to switch protocols.
#[derive(Debug, Clone)]
pub struct Switched {
    /// The protocol it switched to (`h2c`, `websocket`), as the client named it.
    pub protocol: String,
    /// Every byte received after the request that asked for the switch.
    pub bytes: Vec<u8>,
}

pub struct HttpRecorder {
    pub port: u16,
    requests: Arc<Mutex<Vec<HttpRequest>>>,
    switched: Arc<Mutex<Vec<Switched>>>,
    /// Connections that sent bytes which did not parse as a request.
    garbled: Arc<Mutex<usize>>,
}

impl HttpRecorder {
    /// Answers each request with `http-ok <target>`; keeps connections alive.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests: Arc<Mutex<Vec<HttpRequest>>> = Arc::default();
        let switched: Arc<Mutex<Vec<Switched>>> = Arc::default();
        let garbled: Arc<Mutex<usize>> = Arc::default();
        let (seen, up, bad) = (requests.clone(), switched.clone(), garbled.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (seen, up, bad) = (seen.clone(), up.clone(), bad.clone());
                std::thread::spawn(move || http_conn(stream, &seen, &up, &bad));
            }
        });
        HttpRecorder {
            port,
            requests,
            switched,
            garbled,
        }
    }

    /// The connections that switched protocols, and what arrived on them afterwards.
    pub fn switched(&self) -> Vec<Switched> {
        self.switched.lock().unwrap().clone()
    }

    pub fn requests(&self) -> Vec<HttpRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// Whether a request for a target containing `needle` arrived.
    pub fn saw(&self, needle: &str) -> bool {
        self.requests().iter().any(|r| r.target.contains(needle))
    }

    pub fn garbled(&self) -> usize {
        *self.garbled.lock().unwrap()
    }
}

fn http_conn(
    mut stream: TcpStream,
    seen: &Mutex<Vec<HttpRequest>>,
    switched: &Mutex<Vec<Switched>>,
    bad: &Mutex<usize>,
) {
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let mut buf = Vec::new();
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let target = req.path.unwrap_or("").to_string();
                let values = |name: &str| -> Vec<String> {
                    req.headers
                        .iter()
                        .filter(|h| h.name.eq_ignore_ascii_case(name))
                        .map(|h| String::from_utf8_lossy(h.value).into_owned())
                        .collect()
                };
                let mut request = HttpRequest {
                    method: req.method.unwrap_or("").to_string(),
                    target: target.clone(),
                    hosts: values("host"),
                    content_lengths: values("content-length"),
                    transfer_encodings: values("transfer-encoding"),
                    body: Vec::new(),
                };
                let upgrade = req
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("upgrade"))
                    .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
                    .filter(|p| p == "h2c" || p == "websocket");
                buf.drain(..len);
                let framed = match request.transfer_encodings.last() {
                    Some(te) if te.to_ascii_lowercase().trim().ends_with("chunked") => {
                        read_chunked(&mut stream, &mut buf)
                    }
                    Some(_) => None,
                    None => match request.content_lengths.first() {
                        Some(n) => n
                            .trim()
                            .parse()
                            .ok()
                            .and_then(|n| read_exactly(&mut stream, &mut buf, n)),
                        None => Some(Vec::new()),
                    },
                };
                let Some(body) = framed else {
                    *bad.lock().unwrap() += 1;
                    seen.lock().unwrap().push(request);
                    return;
                };
                request.body = body;
                seen.lock().unwrap().push(request);
                if let Some(protocol) = upgrade {
                    return switch(stream, protocol, buf, switched);
                }
                let body = format!("http-ok {target}\n");
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if stream.write_all(reply.as_bytes()).is_err() {
                    return;
                }
                continue;
            }
            Ok(httparse::Status::Partial) => {}
            Err(_) => {
                *bad.lock().unwrap() += 1;
                return;
            }
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => {
                if !buf.is_empty() {
                    *bad.lock().unwrap() += 1;
                }
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Agree to switch to `protocol` and record everything that arrives afterwards (`early`: what
/// had arrived already).
fn switch(
    mut stream: TcpStream,
    protocol: String,
    early: Vec<u8>,
    switched: &Mutex<Vec<Switched>>,
) {
    let reply = format!(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: {protocol}\r\n\r\n"
    );
    if stream.write_all(reply.as_bytes()).is_err() {
        return;
    }
    let index = {
        let mut all = switched.lock().unwrap();
        all.push(Switched {
            protocol,
            bytes: early,
        });
        all.len() - 1
    };
    let mut chunk = [0u8; 4096];
    while let Ok(n @ 1..) = stream.read(&mut chunk) {
        switched.lock().unwrap()[index]
            .bytes
            .extend_from_slice(&chunk[..n]);
    }
}

/// Read more of `stream` into `buf`; false at the end of the stream.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// The first `n` bytes of the stream (after what `buf` holds); `None` if it ends first.
fn read_exactly(stream: &mut TcpStream, buf: &mut Vec<u8>, n: usize) -> Option<Vec<u8>> {
    while buf.len() < n {
        if !fill(stream, buf) {
            return None;
        }
    }
    Some(buf.drain(..n).collect())
}

/// One CRLF-terminated line (without it).
fn read_line(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(at) = buf.windows(2).position(|w| w == b"\r\n") {
            let line = buf[..at].to_vec();
            buf.drain(..at + 2);
            return Some(line);
        }
        if !fill(stream, buf) {
            return None;
        }
    }
}

/// A chunked body (RFC 9112 §7.1), chunk extensions and trailers dropped; `None` if malformed
/// or cut short.
fn read_chunked(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(stream, buf)?;
        let size = String::from_utf8(line).ok()?;
        let size = size.split(';').next()?.trim();
        let size = usize::from_str_radix(size, 16).ok()?;
        if size == 0 {
            while !read_line(stream, buf)?.is_empty() {}
            return Some(body);
        }
        body.extend(read_exactly(stream, buf, size)?);
        if !read_line(stream, buf)?.is_empty() {
            return None;
        }
    }
}
