//! What name a client's first bytes ask for: the SNI of a TLS ClientHello or the `Host` of an
//! HTTP request. Read with MSG_PEEK, so the bytes stay in the socket for the tunnel to relay.
//!
//! Used where the proxy chose the upstream from something other than the bytes themselves (a
//! CONNECT authority, a DNS answer the stub gave, an address): a request that then names a
//! different host (domain fronting through a shared front end) is refused.

use std::time::Duration;

use tokio::net::TcpStream;

use super::matcher::Host;

/// Where the name must come from the bytes (a transparent connection to an address the program
/// found itself), how long a silent client is waited for before the connection is treated as
/// server-first (SMTP, databases): such protocols carry no name. Tunnels opened for a name do
/// not wait: the server's bytes flow at once and the client's are checked when they come.
pub const FIRST_BYTES_WAIT: Duration = Duration::from_millis(200);
/// Once a client has started a TLS record or an HTTP header, how long it has to complete it.
pub const COMPLETE_WAIT: Duration = Duration::from_secs(2);
/// A ClientHello or an HTTP header block larger than this is not waited for.
const MAX_PEEK: usize = 16 * 1024;

/// What the first bytes of a client say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstBytes {
    /// Nothing arrived in time (a server-first protocol), or the client closed.
    Silent,
    /// Neither TLS nor HTTP.
    Opaque,
    /// TLS without SNI, or HTTP without `Host`.
    Unnamed,
    /// A name, and where it was found (`TLS SNI`, `HTTP Host`).
    Named { via: &'static str, name: String },
    /// TLS or HTTP that did not arrive complete in time: cannot be checked, so refused.
    Incomplete { what: &'static str },
}

/// Peek at the client until its first TLS record or HTTP header block is complete or it is
/// clearly something else. The first byte is waited for `wait` (`None`: until it comes or the
/// client closes); the rest of a started record or header for `COMPLETE_WAIT`.
pub async fn first_bytes(client: &TcpStream, wait: Option<Duration>) -> FirstBytes {
    let silent_deadline = wait.map(|w| tokio::time::Instant::now() + w);
    let mut complete_deadline = None;
    // Small first: a ClientHello or a request header usually fits; grown only when it does not
    // (thousands of idle tunnels may be waiting here at once).
    let mut buf = vec![0u8; 2048];
    let mut last = 0;
    loop {
        let deadline = complete_deadline.or(silent_deadline);
        let peeked = match deadline {
            Some(d) => tokio::time::timeout_at(d, client.peek(&mut buf)).await,
            None => Ok(client.peek(&mut buf).await),
        };
        let n = match peeked {
            Ok(Ok(n)) => n,
            Ok(Err(_)) => return FirstBytes::Silent,
            Err(_) if last == 0 => return FirstBytes::Silent,
            Err(_) => return classify(&buf[..last]),
        };
        if n == 0 {
            return FirstBytes::Silent;
        }
        let started = *complete_deadline.get_or_insert(tokio::time::Instant::now() + COMPLETE_WAIT);
        match classify(&buf[..n]) {
            FirstBytes::Incomplete { .. } if n == buf.len() && n < MAX_PEEK => {
                buf.resize((n * 4).min(MAX_PEEK), 0);
            }
            FirstBytes::Incomplete { .. } if n < MAX_PEEK => {
                last = n;
                if tokio::time::Instant::now() >= started {
                    return classify(&buf[..n]);
                }
                // More of it is on its way; peek does not wait for new bytes, so pause briefly.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            other => return other,
        }
    }
}

/// Why a connection decided for `host` must be refused, given what its first bytes ask for.
/// An address (`Host::Ip`) is not compared: a name found in the bytes may only help find a rule.
pub fn mismatch(host: &Host, first: &FirstBytes) -> Option<String> {
    match (first, host) {
        (FirstBytes::Named { via, name }, Host::Name(h)) => match Host::parse(name) {
            Ok(asked) if asked == *host => None,
            _ => Some(format!(
                "{via} asks for {name}, but the connection was opened for {h}; a request must name the host it was allowed for"
            )),
        },
        (FirstBytes::Incomplete { what }, _) => Some(format!(
            "the client's first {what} did not arrive complete within {} s, so the host it asks for cannot be checked",
            COMPLETE_WAIT.as_secs()
        )),
        _ => None,
    }
}

/// For a tunnel opened to `host`: why it must be closed, if the client's first bytes name
/// another host. `early` is what was already read from the client. Waits for the client as
/// long as it takes (the caller lets the server's bytes through meanwhile).
pub async fn check_tunnel(client: &TcpStream, early: &[u8], host: &Host) -> Option<String> {
    if !matches!(host, Host::Name(_)) {
        return None;
    }
    let first = if early.is_empty() {
        first_bytes(client, None).await
    } else {
        classify(early)
    };
    mismatch(host, &first)
}

/// Classify what has arrived so far.
pub fn classify(b: &[u8]) -> FirstBytes {
    let incomplete = |what| FirstBytes::Incomplete { what };
    if b.first() == Some(&0x16) {
        if b.len() < 5 {
            return incomplete("TLS record");
        }
        let len = usize::from(u16::from_be_bytes([b[3], b[4]]));
        if b.len() < 5 + len {
            return incomplete("TLS ClientHello");
        }
        return match sni(&b[5..5 + len]) {
            Some(Some(name)) => FirstBytes::Named {
                via: "TLS SNI",
                name,
            },
            Some(None) => FirstBytes::Unnamed,
            None => FirstBytes::Opaque,
        };
    }
    if looks_like_http(b) {
        let Some(end) = find(b, b"\r\n\r\n") else {
            return incomplete("HTTP request header");
        };
        return match host_header(&b[..end]) {
            Some(name) => FirstBytes::Named {
                via: "HTTP Host",
                name,
            },
            None => FirstBytes::Unnamed,
        };
    }
    FirstBytes::Opaque
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// An upper-case method token followed by a space, within the first bytes.
fn looks_like_http(b: &[u8]) -> bool {
    let token = b.iter().take_while(|c| c.is_ascii_uppercase()).count();
    (3..=10).contains(&token) && b.get(token) == Some(&b' ')
}

/// The `Host` header's host (without port) in an HTTP header block.
fn host_header(head: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(head).ok()?;
    let value = text.split("\r\n").skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("host")
            .then(|| value.trim())
    })?;
    let host = match value.strip_prefix('[') {
        Some(rest) => &value[..rest.find(']')? + 2],
        None => value.rsplit_once(':').map_or(value, |(h, _)| h),
    };
    (!host.is_empty()).then(|| host.to_string())
}

/// The SNI of a TLS handshake message: `None` if it is not a ClientHello, `Some(None)` if the
/// ClientHello has no server name.
fn sni(hs: &[u8]) -> Option<Option<String>> {
    let mut r = Reader(hs);
    if r.u8()? != 1 {
        return None; // not a ClientHello
    }
    let n = r.u24()?;
    let body = r.take(n)?;
    let mut r = Reader(body);
    r.take(2 + 32)?; // version, random
    let n = usize::from(r.u8()?);
    r.take(n)?; // session id
    let n = r.u16()?;
    r.take(n)?; // cipher suites
    let n = usize::from(r.u8()?);
    r.take(n)?; // compression methods
    if r.0.is_empty() {
        return Some(None);
    }
    let n = r.u16()?;
    let mut exts = Reader(r.take(n)?);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let n = exts.u16()?;
        let data = exts.take(n)?;
        if kind != 0 {
            continue;
        }
        let mut list = Reader(data);
        let n = list.u16()?;
        let mut list = Reader(list.take(n)?);
        while !list.0.is_empty() {
            let name_type = list.u8()?;
            let n = list.u16()?;
            let name = list.take(n)?;
            if name_type == 0 {
                return Some(Some(String::from_utf8_lossy(name).into_owned()));
            }
        }
    }
    Some(None)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    fn u24(&mut self) -> Option<usize> {
        self.take(3)
            .map(|b| (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal ClientHello record carrying `sni` (if any).
    pub fn client_hello(sni: Option<&str>) -> Vec<u8> {
        let mut exts = Vec::new();
        if let Some(name) = sni {
            let n = name.len() as u16;
            exts.extend_from_slice(&0u16.to_be_bytes());
            exts.extend_from_slice(&(n + 5).to_be_bytes());
            exts.extend_from_slice(&(n + 3).to_be_bytes());
            exts.push(0);
            exts.extend_from_slice(&n.to_be_bytes());
            exts.extend_from_slice(name.as_bytes());
        }
        let mut body = vec![3, 3];
        body.extend_from_slice(&[0u8; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut hs = vec![1];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn sni_is_read_from_a_client_hello() {
        let hello = client_hello(Some("api.example.com"));
        assert_eq!(
            classify(&hello),
            FirstBytes::Named {
                via: "TLS SNI",
                name: "api.example.com".into()
            }
        );
        assert_eq!(classify(&client_hello(None)), FirstBytes::Unnamed);
    }

    #[test]
    fn a_split_client_hello_is_incomplete_not_unnamed() {
        let hello = client_hello(Some("api.example.com"));
        assert!(matches!(
            classify(&hello[..hello.len() - 3]),
            FirstBytes::Incomplete { .. }
        ));
        assert!(matches!(
            classify(&hello[..3]),
            FirstBytes::Incomplete { .. }
        ));
    }

    #[test]
    fn http_host_is_read_without_its_port() {
        let req = b"GET /x HTTP/1.1\r\nUser-Agent: t\r\nhOsT: Evil.test:8080\r\n\r\n";
        assert_eq!(
            classify(req),
            FirstBytes::Named {
                via: "HTTP Host",
                name: "Evil.test".into()
            }
        );
        assert_eq!(classify(b"GET / HTTP/1.0\r\n\r\n"), FirstBytes::Unnamed);
        assert!(matches!(
            classify(b"GET / HTTP/1.1\r\nHost: a"),
            FirstBytes::Incomplete { .. }
        ));
        assert_eq!(
            host_header(b"GET / HTTP/1.1\r\nHost: [::1]:80").as_deref(),
            Some("[::1]")
        );
    }

    #[test]
    fn a_different_name_in_the_first_bytes_is_a_mismatch() {
        let host = Host::parse("api.allowed.test").unwrap();
        let named = |n: &str| FirstBytes::Named {
            via: "TLS SNI",
            name: n.into(),
        };
        assert_eq!(mismatch(&host, &named("API.allowed.test.")), None);
        assert!(mismatch(&host, &named("evil.test"))
            .unwrap()
            .contains("evil.test"));
        assert_eq!(mismatch(&host, &FirstBytes::Opaque), None);
        assert_eq!(mismatch(&host, &FirstBytes::Silent), None);
        assert!(mismatch(
            &host,
            &FirstBytes::Incomplete {
                what: "TLS ClientHello"
            }
        )
        .is_some());
        let ip = Host::parse("192.0.2.1").unwrap();
        assert_eq!(mismatch(&ip, &named("evil.test")), None);
    }

    /// A connected pair on 127.0.0.1: (what the proxy holds, what the client writes to).
    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        (l.accept().await.unwrap().0, c)
    }

    #[tokio::test]
    async fn a_large_client_hello_in_two_writes_is_waited_for_and_read_whole() {
        use tokio::io::AsyncWriteExt;
        let mut hello = client_hello(Some("big.example.com"));
        // Pad the ClientHello with an unknown extension to ~6 KiB (past the first buffer).
        let pad = 6000u16;
        let ext_len_at = 5 + 4 + 2 + 32 + 1 + 4 + 2;
        let exts = u16::from_be_bytes([hello[ext_len_at], hello[ext_len_at + 1]]) + 4 + pad;
        hello[ext_len_at..ext_len_at + 2].copy_from_slice(&exts.to_be_bytes());
        hello.extend_from_slice(&0xffffu16.to_be_bytes());
        hello.extend_from_slice(&pad.to_be_bytes());
        hello.extend(std::iter::repeat_n(0u8, usize::from(pad)));
        let hs_len = (hello.len() - 9) as u32;
        hello[6..9].copy_from_slice(&hs_len.to_be_bytes()[1..]);
        let rec_len = (hello.len() - 5) as u16;
        hello[3..5].copy_from_slice(&rec_len.to_be_bytes());

        let (server, mut client) = pair().await;
        client.write_all(&hello[..1000]).await.unwrap();
        let rest = hello[1000..].to_vec();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            client.write_all(&rest).await.unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
        });
        assert_eq!(
            first_bytes(&server, None).await,
            FirstBytes::Named {
                via: "TLS SNI",
                name: "big.example.com".into()
            }
        );
    }

    #[tokio::test]
    async fn a_silent_client_is_not_waited_for_longer_than_asked() {
        let (server, _client) = pair().await;
        let t = std::time::Instant::now();
        assert_eq!(
            first_bytes(&server, Some(Duration::from_millis(50))).await,
            FirstBytes::Silent
        );
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn other_protocols_are_opaque() {
        assert_eq!(classify(b"SSH-2.0-OpenSSH_9.2\r\n"), FirstBytes::Opaque);
        assert_eq!(classify(b"\x00\x01binary"), FirstBytes::Opaque);
        // A handshake record that is not a ClientHello.
        assert_eq!(classify(&[0x16, 3, 3, 0, 1, 2]), FirstBytes::Opaque);
    }
}
