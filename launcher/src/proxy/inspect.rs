//! TLS inspection for endpoints with `protocol: rest`: inside a CONNECT tunnel the proxy plays the
//! server with a certificate for the CONNECT host, signed by a CA generated for this sandbox (its
//! key lives only in the supervisor's memory), checks every request against the endpoint's
//! method/path/query rules, and forwards the allowed ones over its own TLS connection to the
//! checked address, verifying the real server against the host's trust store.
//!
//! A tunnel whose first byte is not a TLS handshake is read as plain HTTP and checked the same way.
//! As in every tunnel, the ClientHello's SNI must name the CONNECT host, and every request is
//! sent naming the checked host only (`http_tunnel::tell_checked_host`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::HOST;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::Acceptor;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::Mutex as AsyncMutex;

use super::decide::{Decider, Decision, Verdict};
use super::head::Named;
use super::identify::Program;
use super::idle::{bounded, Activity, Tracked};
use super::matcher::Host;
use super::Proxy;

type Body = http_body_util::combinators::BoxBody<Bytes, hyper::Error>;

/// Anything hyper can speak HTTP/1 over.
trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// How many hosts' certificates are kept at once (each a key pair and a configuration, a few
/// KiB).
const MAX_LEAVES: usize = 1024;

/// The sandbox's certificate authority and the TLS settings on both sides.
pub struct Inspector {
    ca: rcgen::Certificate,
    ca_key: KeyPair,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
    upstream: Arc<ClientConfig>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Inspector {
    /// A fresh CA; upstream servers are verified against the host's trust store (which
    /// `SSL_CERT_FILE`/`SSL_CERT_DIR` of the launcher can replace) plus `extra_roots`.
    pub fn new(extra_roots: &[CertificateDer<'static>]) -> Result<Self> {
        let ca_key = KeyPair::generate().context("generate the sandbox CA key")?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(
            DnType::CommonName,
            "sandbox-launch ephemeral CA (this sandbox only)",
        );
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = params.self_signed(&ca_key).context("sign the sandbox CA")?;

        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        roots.add_parsable_certificates(extra_roots.iter().cloned());
        if roots.is_empty() {
            return Err(anyhow!(
                "no trusted certificates found on the host to verify upstream servers"
            ));
        }
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Inspector {
            ca,
            ca_key,
            leaves: Mutex::new(HashMap::new()),
            upstream: Arc::new(client),
        })
    }

    /// The CA certificate the sandbox must trust (PEM).
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// A server configuration presenting a certificate for `host`, made once per host.
    fn server_config(&self, host: &Host) -> Result<Arc<ServerConfig>> {
        let name = match host {
            Host::Name(n) => n.clone(),
            Host::Ip(ip) => ip.to_string(),
        };
        if let Some(c) = self.leaves.lock().ok().and_then(|m| m.get(&name).cloned()) {
            return Ok(c);
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![name.clone()])?;
        params.distinguished_name.push(DnType::CommonName, &name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = params.signed_by(&key, &self.ca, &self.ca_key)?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), self.ca.der().clone()], key_der)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if let Ok(mut m) = self.leaves.lock() {
            // Bounded: a wildcard endpoint names as many hosts as the program makes up. Past
            // the bound the kept ones are dropped and made again when asked (a few ms each).
            if m.len() >= MAX_LEAVES {
                m.clear();
            }
            m.insert(name, config.clone());
        }
        Ok(config)
    }
}

/// Serve the client side of an allowed tunnel whose requests must be checked one by one.
pub async fn intercept(
    proxy: Arc<Proxy>,
    rules: Arc<Decider>,
    inspector: Arc<Inspector>,
    client: TcpStream,
    upstream: TcpStream,
    decision: Decision,
    binary: Option<Program>,
) -> Result<()> {
    // The same bounds as every other client: `idle` for the first byte, `header` for the TLS
    // handshake and for each request head, whose size is capped as on the HTTP listener.
    let timeouts = proxy.timeouts;
    let mut first = [0u8; 1];
    let Ok(peeked) = tokio::time::timeout(timeouts.idle, client.peek(&mut first)).await else {
        super::tunnel::reset(client);
        return Ok(());
    };
    let tls = peeked? == 1 && first[0] == 0x16;
    let (client_io, upstream_io): (Box<dyn Io>, Box<dyn Io>) = if tls {
        let config = inspector.server_config(&decision.host)?;
        let late = || anyhow!("the program inside did not finish its TLS handshake in time");
        let deadline = tokio::time::Instant::now() + timeouts.header;
        let hello = tokio_rustls::LazyConfigAcceptor::new(Acceptor::default(), client);
        let start = tokio::time::timeout_at(deadline, hello)
            .await
            .map_err(|_| late())?
            .context("TLS ClientHello of the program inside")?;
        // The SNI must name the host the tunnel was allowed for, as in a tunnel that is not
        // inspected: one rule for every tunnel (the upstream is told the checked name anyway).
        let sni = start.client_hello().server_name().map(str::to_string);
        let named = sni.map(|name| Named {
            via: "TLS SNI",
            name,
        });
        if let Some(why) = super::head::mismatch(&decision.host, named.as_slice()) {
            let mut refused = decision;
            refused.verdict = Verdict::Deny;
            refused.reason = why;
            refused.hint = None;
            proxy
                .events
                .decision("connect", &refused, binary.as_ref(), None);
            super::tunnel::reset(start.io);
            return Ok(());
        }
        let client_tls = tokio::time::timeout_at(deadline, start.into_stream(config))
            .await
            .map_err(|_| late())?
            .context("TLS handshake with the program inside")?;
        let server_name = match &decision.host {
            Host::Name(n) => ServerName::try_from(n.clone())?,
            Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
        };
        let upstream_tls = tokio_rustls::TlsConnector::from(inspector.upstream.clone())
            .connect(server_name, upstream)
            .await
            .with_context(|| format!("TLS handshake with {}", decision.host))?;
        (Box::new(client_tls), Box::new(upstream_tls))
    } else {
        (Box::new(client), Box::new(upstream))
    };
    // Established: bounded by the idle limit of tunnels from here on.
    let activity = Activity::new();
    let client_io = Tracked::new(client_io, activity.clone());
    let upstream_io = Tracked::new(upstream_io, activity.clone());
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .handshake::<_, Incoming>(TokioIo::new(upstream_io))
        .await?;
    tokio::spawn(conn);
    let sender = Arc::new(AsyncMutex::new(sender));
    let protocol = if tls { "https" } else { "http-in-tunnel" };
    let svc = service_fn(move |req: Request<Incoming>| {
        let proxy = proxy.clone();
        let rules = rules.clone();
        let sender = sender.clone();
        let decision = decision.clone();
        let binary = binary.clone();
        async move {
            Ok::<_, std::convert::Infallible>(
                one_request(
                    &proxy,
                    &rules,
                    &sender,
                    &decision,
                    binary.as_ref(),
                    protocol,
                    req,
                )
                .await,
            )
        }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header)
        .max_buf_size(super::head::MAX_HEAD)
        .serve_connection(TokioIo::new(client_io), svc);
    if let Some(served) = bounded(timeouts.tunnel_idle, &activity, connection).await {
        served?;
    }
    Ok(())
}

async fn one_request(
    proxy: &Proxy,
    rules: &Decider,
    sender: &AsyncMutex<hyper::client::conn::http1::SendRequest<Incoming>>,
    conn: &Decision,
    binary: Option<&Program>,
    protocol: &str,
    mut req: Request<Incoming>,
) -> Response<Body> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    // The rules the connection was decided with (its request rules are indices into them).
    let mut d = rules.check_http(conn, &method, req.headers(), &path, req.uri().query());
    // The tunnel was checked for its CONNECT host: a request naming another host, or naming
    // it ambiguously, is refused.
    let target = req.uri().to_string();
    let names = super::head::names(
        &method,
        &target,
        req.headers().get_all(HOST).iter().map(|v| v.as_bytes()),
    );
    let mismatch = match names {
        Ok(names) => super::head::mismatch(&conn.host, &names),
        Err(why) => Some(why),
    };
    if let Some(why) = mismatch {
        d.verdict = Verdict::Deny;
        d.reason = why;
        d.hint = None;
    }
    proxy
        .events
        .decision(protocol, &d, binary, Some((&method, &path)));
    if !d.verdict.lets_through() {
        return super::answer::denied(&d);
    }
    let (host, port) = (conn.host.clone(), conn.port);
    if let Some(refused) =
        crate::credentials::rewrite::guard(proxy, &host, port, &mut req, protocol)
    {
        return refused;
    }
    // No protocol switch is relayed here: an offer (`Upgrade: h2c`, WebSocket) is taken off, and
    // the server answers the HTTP/1.1 request it also is (RFC 9110 §7.8 lets it ignore it).
    req.headers_mut().remove(hyper::header::UPGRADE);
    req.headers_mut().remove("http2-settings");
    let default_port = if protocol == "https" { 443 } else { 80 };
    if let Err(why) = super::http_tunnel::tell_checked_host(&mut req, &host, port, default_port) {
        return super::answer::bad_request(&why);
    }
    let mut sender = sender.lock().await;
    if sender.ready().await.is_err() {
        return gateway_error(&conn.host);
    }
    if let Some(path) = &d.canonical_path {
        // The server is sent the path the rules were checked against.
        *req.uri_mut() = super::request_path::with_path(req.uri(), path);
    }
    match sender.send_request(req).await {
        Ok(resp) => resp.map(|b| b.boxed()),
        Err(_) => gateway_error(&conn.host),
    }
}

fn gateway_error(host: &Host) -> Response<Body> {
    let body = format!("sandbox-launch proxy: the connection to {host} failed\n");
    let mut resp = Response::new(
        http_body_util::Full::new(Bytes::from(body))
            .map_err(|e| match e {})
            .boxed(),
    );
    *resp.status_mut() = StatusCode::BAD_GATEWAY;
    resp
}

#[cfg(test)]
mod tests;
