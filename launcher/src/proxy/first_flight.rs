//! The client's first flight in a tunnel (CONNECT, SOCKS5, transparent egress): read — not
//! peeked — until it is a whole TLS ClientHello (`hello`) or a whole HTTP request head (`head`),
//! within a size bound and a time bound; the bytes read are returned so that they go to the
//! server first. What does not parse within the bounds is `Unparsed`, which the caller refuses
//! unless the policy says opaque traffic is fine on that endpoint.

use std::time::Duration;

use tokio::net::TcpStream;

use super::head::{self, Head, Named};
use super::hello::{self, Hello, HelloReader};
use super::matcher::Host;

/// Where the name must come from the bytes (a transparent connection to an address the program
/// found itself), how long a silent client is waited for before the connection is treated as
/// server-first (SMTP, databases): such protocols carry no name.
pub const FIRST_BYTES_WAIT: Duration = Duration::from_millis(200);

/// What the client's first flight is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flight {
    /// Nothing arrived in time (a server-first protocol), or the client closed without a byte.
    Silent,
    /// A whole ClientHello; its SNI (none: no name, or an address).
    Tls { sni: Option<String> },
    /// A whole request head; the hosts it names.
    Http { names: Vec<Named> },
    /// Neither, within the bounds: why.
    Unparsed(String),
}

impl Flight {
    /// The hosts the flight names, as the request-head rules see them.
    pub fn names(&self) -> Vec<Named> {
        match self {
            Flight::Tls { sni: Some(name) } => vec![Named {
                via: "TLS SNI",
                name: name.clone(),
            }],
            Flight::Http { names } => names.clone(),
            _ => Vec::new(),
        }
    }

    /// Why a tunnel allowed for `host` must be refused with this first flight (`opaque_ok`: the
    /// policy lets unparsed traffic through on this endpoint).
    pub fn refusal(&self, host: &Host, opaque_ok: bool) -> Option<String> {
        match self {
            Flight::Unparsed(why) if !opaque_ok => Some(format!(
                "{why}; only TLS and HTTP are checked and let through here (an endpoint with `tls: skip` lets other protocols through)"
            )),
            Flight::Unparsed(_) | Flight::Silent => None,
            Flight::Tls { .. } | Flight::Http { .. } => head::mismatch(host, &self.names()),
        }
    }
}

/// What was read, and what it is.
pub struct FirstFlight {
    pub flight: Flight,
    /// Every byte read from the client; they go to the server first.
    pub bytes: Vec<u8>,
}

/// Classify what has arrived so far: `None` while more is needed.
pub fn classify(bytes: &[u8], tls: &mut HelloReader) -> Option<Flight> {
    if bytes.is_empty() {
        return None;
    }
    if bytes[0] == 0x16 {
        return match tls.feed(bytes) {
            Hello::NeedMore => None,
            Hello::Parsed { sni } => Some(Flight::Tls { sni }),
            Hello::Invalid(why) => Some(Flight::Unparsed(why)),
        };
    }
    match head::parse(bytes) {
        Head::NeedMore => None,
        Head::Parsed { names, .. } => Some(Flight::Http { names }),
        Head::Invalid(why) => Some(Flight::Unparsed(why)),
    }
}

/// Read the client's first flight, after `early` (already read from it). The first byte is
/// waited for `wait` (`None`: until it comes or the client closes); the rest for `complete`.
pub async fn read(
    client: &TcpStream,
    early: Vec<u8>,
    wait: Option<Duration>,
    complete: Duration,
) -> FirstFlight {
    let mut bytes = early;
    let mut tls = HelloReader::default();
    if let Some(flight) = classify(&bytes, &mut tls) {
        return FirstFlight { flight, bytes };
    }
    let first_deadline = wait.map(|w| tokio::time::Instant::now() + w);
    let mut complete_deadline = None;
    let bound = hello::MAX_HELLO.max(head::MAX_HEAD) + 1;
    loop {
        let deadline = match bytes.is_empty() {
            true => first_deadline,
            false => Some(*complete_deadline.get_or_insert(tokio::time::Instant::now() + complete)),
        };
        let read = match deadline {
            Some(d) => tokio::time::timeout_at(d, read_some(client, &mut bytes, bound)).await,
            None => Ok(read_some(client, &mut bytes, bound).await),
        };
        let why = match read {
            Ok(Ok(0)) | Err(_) if bytes.is_empty() => {
                return FirstFlight {
                    flight: Flight::Silent,
                    bytes,
                }
            }
            Ok(Ok(0)) => "the client closed before its first TLS ClientHello or HTTP request head was complete".to_string(),
            Ok(Ok(_)) => match classify(&bytes, &mut tls) {
                Some(flight) => return FirstFlight { flight, bytes },
                None => continue,
            },
            Ok(Err(e)) => format!("reading the client's first bytes: {e}"),
            Err(_) => format!(
                "the client's first TLS ClientHello or HTTP request head did not arrive complete within {} s",
                complete.as_secs_f32()
            ),
        };
        return FirstFlight {
            flight: Flight::Unparsed(why),
            bytes,
        };
    }
}

/// Append what the socket has (at most up to `bound` bytes in all); 0 at end of stream.
async fn read_some(
    client: &TcpStream,
    bytes: &mut Vec<u8>,
    bound: usize,
) -> std::io::Result<usize> {
    loop {
        client.readable().await?;
        let start = bytes.len();
        let want = (bound - start).clamp(1, 4096);
        bytes.resize(start + want, 0);
        match client.try_read(&mut bytes[start..]) {
            Ok(n) => {
                bytes.truncate(start + n);
                return Ok(n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => bytes.truncate(start),
            Err(e) => {
                bytes.truncate(start);
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::proxy::hello::tests::{client_hello, hello_message, records};

    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        (l.accept().await.unwrap().0, c)
    }

    #[tokio::test]
    async fn a_hello_in_many_records_and_writes_is_read_whole() {
        let msg = hello_message(Some("big.example.com"), 6000);
        let all = records(&msg, &[3, 1000, 5000]);
        let (server, mut client) = pair().await;
        let send = all.clone();
        tokio::spawn(async move {
            for piece in send.chunks(700) {
                client.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        });
        let got = read(&server, Vec::new(), None, Duration::from_secs(5)).await;
        assert_eq!(
            got.flight,
            Flight::Tls {
                sni: Some("big.example.com".into())
            }
        );
        assert_eq!(got.bytes, all);
    }

    #[tokio::test]
    async fn early_bytes_count_as_the_start_of_the_flight() {
        let hello = client_hello(Some("a.test"));
        let (server, mut client) = pair().await;
        client.write_all(&hello[20..]).await.unwrap();
        let got = read(&server, hello[..20].to_vec(), None, Duration::from_secs(5)).await;
        assert_eq!(
            got.flight,
            Flight::Tls {
                sni: Some("a.test".into())
            }
        );
        assert_eq!(got.bytes, hello);
    }

    #[tokio::test]
    async fn a_silent_client_is_not_waited_for_longer_than_asked() {
        let (server, _client) = pair().await;
        let got = read(
            &server,
            Vec::new(),
            Some(Duration::from_millis(50)),
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(got.flight, Flight::Silent);
    }

    #[tokio::test]
    async fn a_head_that_stops_halfway_is_unparsed_after_the_bound() {
        let (server, mut client) = pair().await;
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: a")
            .await
            .unwrap();
        let t = std::time::Instant::now();
        let got = read(&server, Vec::new(), None, Duration::from_millis(100)).await;
        assert!(
            matches!(got.flight, Flight::Unparsed(ref why) if why.contains("within")),
            "{:?}",
            got.flight
        );
        assert!(t.elapsed() < Duration::from_secs(2));
        drop(client);
    }

    #[test]
    fn unparsed_flights_pass_only_where_opaque_is_fine() {
        let host = Host::parse("allowed.test").unwrap();
        let unparsed = Flight::Unparsed("SSH".into());
        assert!(unparsed
            .refusal(&host, false)
            .unwrap()
            .contains("tls: skip"));
        assert_eq!(unparsed.refusal(&host, true), None);
        assert_eq!(Flight::Silent.refusal(&host, false), None);
        let evil = Flight::Tls {
            sni: Some("evil.test".into()),
        };
        assert!(evil
            .refusal(&host, true)
            .unwrap()
            .contains("TLS SNI asks for evil.test"));
        assert_eq!(Flight::Tls { sni: None }.refusal(&host, false), None);
    }
}
