//! The domain-filtering proxy of `--network restricted`. It runs in the supervisor, in the host
//! network namespace, and accepts on listening sockets that the shim created on 127.0.0.1 inside
//! the sandbox's namespace: an HTTP proxy (CONNECT and absolute-URI plain HTTP) and a SOCKS5
//! proxy. Every connection, and every plain-HTTP request, is decided on the host name before
//! anything is resolved; allowed names are resolved once, checked, and the checked address is
//! dialled.

pub mod answer;
pub mod connect;
pub mod decide;
pub mod dns;
pub mod events;
mod explain;
pub mod first_flight;
pub mod glob;
pub mod head;
pub mod hello;
pub mod http;
pub mod http_tunnel;
pub mod identify;
pub mod idle;
pub mod inspect;
pub mod launch;
pub mod load;
pub mod matcher;
pub mod parent;
pub mod request_method;
pub mod request_path;
pub mod resolve;
mod rules;
pub mod sock_diag;
pub mod socks5;
pub mod transparent;
pub mod tunnel;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use decide::Decider;
use events::EventSink;
use identify::Program;
use resolve::Resolver;

/// Everything a connection handler needs; shared by all of them.
pub struct Proxy {
    /// The rules in force; replaced by a reload (take one snapshot per connection).
    pub decider: crate::reload::cell::DeciderCell,
    pub resolver: Resolver,
    /// Shared with the launcher, which writes the sandbox's lifecycle to the same stream.
    pub events: Arc<EventSink>,
    /// Names the program behind a client connection, when it can.
    pub identify: Option<Arc<identify::SocketOwners>>,
    /// TLS inspection for `protocol: rest` endpoints reached through CONNECT.
    pub inspector: Option<Arc<inspect::Inspector>>,
    /// Placeholders to swap for real values (`crate::credentials`).
    pub credentials: Option<Arc<crate::credentials::Credentials>>,
    /// The DNS stub's answers (transparent egress).
    pub stand_ins: dns::StandIns,
    pub timeouts: Timeouts,
    /// Connections held, for giving memory back after a burst.
    pub load: load::Load,
    /// With `--prompts`: denials wait for an answer (`Proxy::admit`).
    pub prompts: Option<Arc<crate::prompt::Prompts>>,
}

/// How long the proxy waits for clients.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// To send a whole request head (HTTP listener, also between kept-alive requests), a SOCKS5
    /// handshake, or a tunnel's first TLS ClientHello or HTTP request head once it has begun.
    pub header: Duration,
    /// A new tunnel in which neither side has said anything.
    pub idle: Duration,
    /// An established tunnel in which no byte has moved either way (`None`: no limit); see
    /// [`idle`].
    pub tunnel_idle: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            tunnel_idle: Some(Duration::from_secs(3600)),
        }
    }
}

impl Proxy {
    pub fn new(decider: Decider, resolver: Resolver, events: impl Into<Arc<EventSink>>) -> Self {
        Proxy {
            decider: crate::reload::cell::DeciderCell::new(decider),
            resolver,
            events: events.into(),
            identify: None,
            inspector: None,
            credentials: None,
            stand_ins: dns::StandIns::default(),
            timeouts: Timeouts::default(),
            load: load::Load::default(),
            prompts: None,
        }
    }

    /// Only looked up when some rule depends on it, the events stream records it, or a prompt
    /// may show it. Call right after the accept (see `SocketOwners::identify`).
    async fn binary_of(&self, peer: SocketAddr, local: Option<SocketAddr>) -> Option<Program> {
        if !self.decider.current().needs_binary()
            && !self.events.is_active()
            && self.prompts.is_none()
        {
            return None;
        }
        let accepted = tokio::time::Instant::now();
        self.identify
            .as_ref()?
            .identify(peer, local?, accepted)
            .await
    }
}

/// Which protocol a listening socket speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Socks5,
    /// Connections redirected inside the sandbox (transparent egress).
    Transparent,
}

/// The in-sandbox ports of the listeners, in the order the shim creates them.
pub const HTTP_PORT: u16 = 3128;
pub const SOCKS5_PORT: u16 = 1080;
pub const LISTENERS: [(Protocol, u16); 2] =
    [(Protocol::Http, HTTP_PORT), (Protocol::Socks5, SOCKS5_PORT)];
/// Transparent egress: where the redirect delivers outbound TCP, and the DNS stub's port.
pub const TRANSPARENT_PORT: u16 = 3129;
pub const DNS_PORT: u16 = 53;

/// The variables that point programs inside the sandbox at the proxy.
pub fn proxy_env() -> Vec<(String, String)> {
    let http = format!("http://127.0.0.1:{HTTP_PORT}");
    let socks = format!("socks5h://127.0.0.1:{SOCKS5_PORT}");
    let no_proxy = "localhost,127.0.0.1,::1".to_string();
    let mut env = Vec::new();
    for (name, value) in [
        ("HTTP_PROXY", &http),
        ("HTTPS_PROXY", &http),
        ("ALL_PROXY", &socks),
        ("NO_PROXY", &no_proxy),
    ] {
        env.push((name.to_string(), value.clone()));
        env.push((name.to_ascii_lowercase(), value.clone()));
    }
    // Node 24+ honours the variables only when told; npm, pip, git and curl read them anyway.
    env.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    env
}

/// Serve on already-listening sockets (and the DNS stub's socket, with transparent egress)
/// until every listener fails. Needs a tokio runtime.
pub async fn serve(
    listeners: Vec<(Protocol, std::net::TcpListener)>,
    dns: Option<std::net::UdpSocket>,
    proxy: Arc<Proxy>,
) -> Result<()> {
    let mut tasks = Vec::new();
    let trimmer = proxy.clone();
    tasks.push(tokio::spawn(async move {
        trimmer.load.give_back_after_bursts().await
    }));
    if let Some(socket) = dns {
        socket
            .set_nonblocking(true)
            .context("make the DNS stub's socket non-blocking")?;
        let socket =
            tokio::net::UdpSocket::from_std(socket).context("register the DNS stub's socket")?;
        tasks.push(tokio::spawn(dns::serve(socket, proxy.clone())));
    }
    for (protocol, listener) in listeners {
        listener
            .set_nonblocking(true)
            .context("make the proxy listener non-blocking")?;
        let listener =
            tokio::net::TcpListener::from_std(listener).context("register the proxy listener")?;
        let proxy = proxy.clone();
        tasks.push(tokio::spawn(async move {
            match protocol {
                Protocol::Http => http::serve(listener, proxy).await,
                Protocol::Socks5 => socks5::serve(listener, proxy).await,
                Protocol::Transparent => transparent::serve(listener, proxy).await,
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

/// Start the proxy on its own thread with one single-threaded tokio runtime (no thread per
/// connection). Call only after the sandbox's clone: the supervisor must be single-threaded
/// until then.
pub fn spawn(
    listeners: Vec<(Protocol, std::net::TcpListener)>,
    dns: Option<std::net::UdpSocket>,
    proxy: Proxy,
) -> Result<std::thread::JoinHandle<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the proxy's runtime")?;
    let proxy = Arc::new(proxy);
    tunnel::raise_fd_limit();
    std::thread::Builder::new()
        .name("proxy".into())
        .spawn(move || {
            if let Err(e) = runtime.block_on(serve(listeners, dns, proxy)) {
                crate::say!("sandbox-launch: proxy: {e:#}");
            }
        })
        .context("start the proxy thread")
}

/// Accept connections forever, each handled by `handle` on a task of its own (TCP_NODELAY set).
async fn accept_each<F, Fut>(listener: tokio::net::TcpListener, proxy: Arc<Proxy>, handle: F)
where
    F: Fn(tokio::net::TcpStream, std::net::SocketAddr, Arc<Proxy>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                accept_backoff(e).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let handled = handle(stream, peer, proxy.clone());
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let _held = proxy.load.hold();
            handled.await
        });
    }
}

/// Accept errors such as EMFILE must not end the accept loop; pause briefly instead.
async fn accept_backoff(e: std::io::Error) {
    if !matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::Interrupted
    ) {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Servers on 127.0.0.1 for the proxy's tests.

    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::Arc;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper::{Request, Response};
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpListener;

    use super::*;
    use crate::policy::model::{NetworkPolicy, Source, Sourced};

    /// An HTTP server that answers `upstream host=<Host> path=<path> body=<n bytes>`.
    pub async fn upstream() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let svc = service_fn(|req: Request<hyper::body::Incoming>| async move {
                        let host = req
                            .headers()
                            .get("host")
                            .and_then(|h| h.to_str().ok())
                            .unwrap_or("-")
                            .to_string();
                        let path = req.uri().to_string();
                        let n = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes().len())
                            .unwrap_or(0);
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!(
                            "upstream host={host} path={path} body={n}"
                        )))))
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        addr
    }

    /// A network policy allowing exactly these domains (as `--allow-domain` would).
    pub fn allowing(domains: &[&str]) -> NetworkPolicy {
        NetworkPolicy {
            denied_domains: vec![],
            mode: None,
            allowed_domains: domains
                .iter()
                .map(|d| Sourced::new(d.to_string(), Source::CommandLine))
                .collect(),
            rules: Default::default(),
        }
    }

    /// A proxy (not listening) with these allowed domains; it never asks DNS.
    pub fn proxy_with(domains: &[&str], events: EventSink) -> Proxy {
        Proxy::new(
            Decider::from_policy(&allowing(domains)).unwrap(),
            Resolver::offline(vec![]),
            events,
        )
    }

    /// A proxy listening on 127.0.0.1 (HTTP, SOCKS5), with these allowed domains and names
    /// pinned to addresses; it never asks DNS.
    pub async fn proxy(
        domains: &[&str],
        pins: &[(&str, &str)],
        events: EventSink,
    ) -> (SocketAddr, SocketAddr) {
        proxy_timed(domains, pins, events, Timeouts::default()).await
    }

    /// `proxy`, with these timeouts.
    pub async fn proxy_timed(
        domains: &[&str],
        pins: &[(&str, &str)],
        events: EventSink,
        timeouts: Timeouts,
    ) -> (SocketAddr, SocketAddr) {
        let resolver = Resolver::offline(
            pins.iter()
                .map(|(h, a)| (h.to_string(), a.parse().unwrap()))
                .collect(),
        );
        let mut proxy = Proxy::new(
            Decider::from_policy(&allowing(domains)).unwrap(),
            resolver,
            events,
        );
        proxy.timeouts = timeouts;
        let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let socks = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addrs = (http.local_addr().unwrap(), socks.local_addr().unwrap());
        tokio::spawn(serve(
            vec![(Protocol::Http, http), (Protocol::Socks5, socks)],
            None,
            Arc::new(proxy),
        ));
        addrs
    }

    /// A proxy on 127.0.0.1 (HTTP listener) whose `allowed.test` endpoint checks requests
    /// (`access: full`), so that CONNECT tunnels to it are opened by TLS inspection; the
    /// upstream server `upstream` answers for it; the inspector, whose CA clients may trust.
    pub async fn inspecting_proxy(
        timeouts: Timeouts,
    ) -> (SocketAddr, SocketAddr, Arc<inspect::Inspector>) {
        use crate::policy::model::{Endpoint, NetworkRule};

        let up = upstream().await;
        let mut policy = allowing(&[]);
        let endpoint = Endpoint {
            host: "allowed.test".into(),
            protocol: Some("rest".into()),
            access: Some("full".into()),
            ..Default::default()
        };
        let rule = NetworkRule {
            name: "inspected".into(),
            endpoints: vec![endpoint],
            binaries: Vec::new(),
        };
        policy
            .rules
            .insert("inspected".into(), Sourced::new(rule, Source::CommandLine));
        let decider = Decider::from_policy(&policy).unwrap();
        assert!(decider.needs_inspection());
        let resolver =
            Resolver::offline(vec![("allowed.test".into(), "127.0.0.1".parse().unwrap())]);
        let mut proxy = Proxy::new(decider, resolver, EventSink::none());
        let inspector = Arc::new(inspect::Inspector::new(&[]).unwrap());
        proxy.inspector = Some(inspector.clone());
        proxy.timeouts = timeouts;
        let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = http.local_addr().unwrap();
        tokio::spawn(serve(vec![(Protocol::Http, http)], None, Arc::new(proxy)));
        (addr, up, inspector)
    }

    /// A CONNECT tunnel through `proxy` to allowed.test on `up`'s port, after its `200`.
    pub async fn inspected_tunnel(proxy: SocketAddr, up: SocketAddr) -> tokio::net::TcpStream {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
        let connect = format!(
            "CONNECT allowed.test:{0} HTTP/1.1\r\nHost: allowed.test:{0}\r\n\r\n",
            up.port()
        );
        s.write_all(connect.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut byte).await.unwrap(), 1);
            head.push(byte[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
        s
    }
}

#[cfg(test)]
mod slow_clients;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_points_every_client_at_the_proxy() {
        let env = proxy_env();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("HTTPS_PROXY"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("https_proxy"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("ALL_PROXY"), Some("socks5h://127.0.0.1:1080"));
        assert_eq!(get("no_proxy"), Some("localhost,127.0.0.1,::1"));
        assert_eq!(get("NODE_USE_ENV_PROXY"), Some("1"));
    }
}
