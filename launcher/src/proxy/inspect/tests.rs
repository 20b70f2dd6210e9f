//! TLS inspection attacked from inside: a ClientHello naming another host than the CONNECT
//! target, and requests that spell the checked host differently.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::proxy::{testing, Timeouts};

/// The first flight of a real TLS client (rustls) asking for `sni`.
fn client_hello(sni: &str) -> Vec<u8> {
    let config = ClientConfig::builder_with_provider(super::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let mut conn = ClientConnection::new(Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    hello
}

/// What the proxy answers a ClientHello for `sni` with, until it stops or closes.
async fn answer(proxy: std::net::SocketAddr, up: std::net::SocketAddr, sni: &str) -> Vec<u8> {
    let mut tunnel = testing::inspected_tunnel(proxy, up).await;
    tunnel.write_all(&client_hello(sni)).await.unwrap();
    let mut buf = vec![0u8; 16 * 1024];
    match tokio::time::timeout(Duration::from_secs(10), tunnel.read(&mut buf)).await {
        Ok(Ok(n)) => buf[..n].to_vec(),
        Ok(Err(_)) => Vec::new(),
        Err(_) => panic!("the proxy neither answered nor closed"),
    }
}

#[tokio::test]
async fn a_client_hello_naming_another_host_is_refused_and_its_twin_is_served() {
    let (proxy, up, _) = testing::inspecting_proxy(Timeouts::default()).await;
    // The twin: the SNI names the CONNECT host; the proxy goes on with the handshake.
    let served = answer(proxy, up, "allowed.test").await;
    assert_eq!(served.first(), Some(&0x16), "{served:?}");
    // The SNI names another host: no ServerHello, the tunnel is closed.
    assert_eq!(answer(proxy, up, "denied.test").await, b"");
    assert_eq!(
        answer(proxy, up, "ALLOWED.test.").await.first(),
        Some(&0x16)
    );
}

#[tokio::test]
async fn inspected_plain_http_tells_the_server_the_checked_host_only() {
    let (proxy, up, _) = testing::inspecting_proxy(Timeouts::default()).await;
    for head in [
        "GET /a HTTP/1.1\r\nHost: ALLOWED.TEST.\r\nConnection: close\r\n\r\n",
        "GET /a HTTP/1.1\r\nHost: allowed.test:1\r\nConnection: close\r\n\r\n",
        "GET /a HTTP/1.0\r\n\r\n",
    ] {
        let mut tunnel = testing::inspected_tunnel(proxy, up).await;
        tunnel.write_all(head.as_bytes()).await.unwrap();
        let mut out = String::new();
        let _ = tunnel.read_to_string(&mut out).await;
        let told = format!("upstream host=allowed.test:{} path=/a body=0", up.port());
        assert!(out.contains(&told), "{head:?}: {out}");
    }
}

/// Made-up host names (a wildcard endpoint allows as many as a program makes up) keep at
/// most `super::MAX_LEAVES` certificates; one asked again is the same while kept.
#[test]
fn the_kept_certificates_are_bounded() {
    let inspector = super::Inspector::new(&[]).unwrap();
    let host = |i: usize| crate::proxy::matcher::Host::Name(format!("h{i}.example.test"));
    let first = inspector.server_config(&host(0)).unwrap();
    assert!(Arc::ptr_eq(
        &first,
        &inspector.server_config(&host(0)).unwrap()
    ));
    for i in 1..=super::MAX_LEAVES {
        inspector.server_config(&host(i)).unwrap();
    }
    let kept = inspector.leaves.lock().unwrap().len();
    assert!((1..=super::MAX_LEAVES).contains(&kept), "{kept}");
}
