//! Slow and silent clients are cut off on every listener, after the configured timeouts (short
//! here): a request head that never ends, a kept-alive connection that idles, a SOCKS5
//! handshake that stalls, a tunnel in which nobody speaks, a tunnel whose first flight stops
//! halfway. Only "it was closed" is asserted, never how fast.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::events::EventSink;
use super::{testing, Timeouts};

const SHORT: Timeouts = Timeouts {
    header: Duration::from_millis(300),
    idle: Duration::from_millis(300),
    tunnel_idle: Some(Duration::from_millis(300)),
};

async fn proxy() -> (SocketAddr, SocketAddr, SocketAddr) {
    let up = testing::upstream().await;
    let (http, socks) = testing::proxy_timed(
        &["allowed.test"],
        &[("allowed.test", "127.0.0.1")],
        EventSink::none(),
        SHORT,
    )
    .await;
    (http, socks, up)
}

/// Everything until the proxy closes (or resets) the connection; panics if it never does.
async fn until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the proxy never closed the connection");
    out
}

#[tokio::test]
async fn a_request_head_that_never_ends_is_cut_off() {
    let (http, _, up) = proxy().await;
    let mut s = TcpStream::connect(http).await.unwrap();
    s.write_all(
        format!(
            "GET http://allowed.test:{}/ HTTP/1.1\r\nX-Slow: ",
            up.port()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    until_closed(&mut s).await;
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_and_a_busy_one_is_not() {
    let (http, _, up) = proxy().await;
    let mut s = TcpStream::connect(http).await.unwrap();
    let req = format!(
        "GET http://allowed.test:{}/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
        up.port()
    );
    // Requests closer together than the timeout keep the connection.
    for _ in 0..3 {
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    until_closed(&mut s).await;
}

#[tokio::test]
async fn a_stalled_socks5_handshake_is_dropped() {
    let (_, socks, _) = proxy().await;
    let mut s = TcpStream::connect(socks).await.unwrap();
    s.write_all(&[5, 1]).await.unwrap();
    assert!(until_closed(&mut s).await.is_empty());
}

#[tokio::test]
async fn a_tunnel_in_which_nobody_speaks_is_closed() {
    let (http, _, up) = proxy().await;
    let mut s = TcpStream::connect(http).await.unwrap();
    s.write_all(
        format!(
            "CONNECT allowed.test:{0} HTTP/1.1\r\nHost: allowed.test:{0}\r\n\r\n",
            up.port()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let head = until_closed(&mut s).await;
    assert!(String::from_utf8_lossy(&head).starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn a_first_flight_that_stops_halfway_is_refused() {
    let (_, socks, up) = proxy().await;
    let mut s = TcpStream::connect(socks).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut choice = [0u8; 2];
    s.read_exact(&mut choice).await.unwrap();
    let mut req = vec![5, 1, 0, 3, 12];
    req.extend_from_slice(b"allowed.test");
    req.extend_from_slice(&up.port().to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[1], 0);
    s.write_all(b"GET / HTTP/1.1\r\nHost: allowed.te")
        .await
        .unwrap();
    assert!(until_closed(&mut s).await.is_empty());
}

/// A CONNECT tunnel opened by TLS inspection, with the short timeouts.
async fn inspected_tunnel() -> TcpStream {
    let (http, up, _) = testing::inspecting_proxy(SHORT).await;
    testing::inspected_tunnel(http, up).await
}

#[tokio::test]
async fn an_inspected_tunnel_is_cut_off_like_any_other_client() {
    // Nobody speaks.
    let mut s = inspected_tunnel().await;
    assert!(until_closed(&mut s).await.is_empty());
    // A TLS handshake that stops halfway.
    let mut s = inspected_tunnel().await;
    let hello = crate::proxy::hello::tests::client_hello(Some("allowed.test"));
    s.write_all(&hello[..hello.len() / 2]).await.unwrap();
    assert!(until_closed(&mut s).await.is_empty());
    // A request head that never ends.
    let mut s = inspected_tunnel().await;
    s.write_all(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Slow: ")
        .await
        .unwrap();
    until_closed(&mut s).await;
}

#[tokio::test]
async fn an_inspected_request_head_may_not_grow_past_the_bound() {
    let mut s = inspected_tunnel().await;
    let mut head = b"GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Big: ".to_vec();
    head.resize(4 * crate::proxy::head::MAX_HEAD, b'a');
    // The proxy may stop reading (and reset) before all of it is written.
    let _ = s.write_all(&head).await;
    let answer = until_closed(&mut s).await;
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

/// A server that speaks first (a banner), then echoes what it receives.
async fn banner_then_echo() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                s.write_all(b"BANNER\n").await.unwrap();
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_established_tunnel_is_closed_once_idle_and_a_busy_one_is_not() {
    let limit = Duration::from_secs(2);
    let timeouts = Timeouts {
        tunnel_idle: Some(limit),
        ..Timeouts::default()
    };
    let pins = [("allowed.test", "127.0.0.1")];
    let (http, _) =
        testing::proxy_timed(&["allowed.test"], &pins, EventSink::none(), timeouts).await;
    let echo = banner_then_echo().await;
    let mut s = TcpStream::connect(http).await.unwrap();
    let connect = format!(
        "CONNECT allowed.test:{0} HTTP/1.1\r\nHost: allowed.test:{0}\r\n\r\n",
        echo.port()
    );
    s.write_all(connect.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(s.read_u8().await.unwrap());
    }
    assert!(head.starts_with(b"HTTP/1.1 200"));
    let mut banner = [0u8; 7];
    s.read_exact(&mut banner).await.unwrap();
    // Bytes closer together than the limit keep the tunnel up for longer than the limit.
    let start = std::time::Instant::now();
    while start.elapsed() < limit + Duration::from_secs(1) {
        s.write_all(b"ping").await.unwrap();
        let mut pong = [0u8; 4];
        s.read_exact(&mut pong).await.unwrap();
        assert_eq!(&pong, b"ping");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Silence: the tunnel is closed.
    assert!(until_closed(&mut s).await.is_empty());
}
