//! Moving the bytes of an established tunnel (CONNECT, SOCKS5) between the client and the
//! upstream socket: splice(2) through a pipe, so the payload never enters user space, driven by
//! tokio's readiness (no thread per tunnel). Falls back to a buffered copy where splice is not
//! available.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::net::TcpStream;

/// How much one splice call moves at most (a pipe holds what the kernel gives it, 64 KiB by
/// default; we ask for 1 MiB).
const CHUNK: usize = 1 << 20;

/// Close with a reset, so the program sees "connection reset" at once rather than an EOF that
/// could pass for an empty answer.
pub fn reset(stream: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a correctly sized linger struct.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    drop(stream);
}

/// Relay a tunnel opened for `host`:`port` in both directions until both are closed (half-closes are
/// passed on). Whoever speaks first decides how: when the server does (SMTP, SSH servers,
/// databases), the tunnel is relayed as it is; when the client does, its first flight (after
/// `early`, which was already read from it) must be a TLS ClientHello or an HTTP request head
/// that names `host` — or, where `opaque_ok`, anything. HTTP goes on request by request through
/// `http_tunnel`, so that every request on the connection is checked. A tunnel in which
/// nobody speaks for `timeouts.idle` is closed, and so is an established one in which no byte
/// moves for `timeouts.tunnel_idle`. On a refusal the client is reset and the reason returned.
pub async fn relay_for(
    client: TcpStream,
    upstream: TcpStream,
    early: Vec<u8>,
    host: &super::matcher::Host,
    port: u16,
    opaque_ok: bool,
    timeouts: &super::Timeouts,
) -> Option<String> {
    use super::first_flight::{self, Flight};
    if early.is_empty() {
        // Peeked, not `readable()`: readiness can be reported before a byte is there.
        let (mut from_server, mut from_client) = ([0u8; 1], [0u8; 1]);
        let server_first = tokio::select! {
            biased;
            // A TLS or HTTP server never speaks first: if the server has, it is not one.
            _ = upstream.peek(&mut from_server) => true,
            _ = client.peek(&mut from_client) => false,
            _ = tokio::time::sleep(timeouts.idle) => {
                reset(client);
                return None;
            }
        };
        if server_first {
            relay(client, upstream, Vec::new(), timeouts.tunnel_idle).await;
            return None;
        }
    }
    let first = first_flight::read(&client, early, None, timeouts.header).await;
    if let Some(why) = first.flight.refusal(host, opaque_ok) {
        reset(client);
        return Some(why);
    }
    match first.flight {
        Flight::Http { .. } if matches!(host, super::matcher::Host::Name(_)) => {
            super::http_tunnel::serve(client, first.bytes, upstream, (host, port), timeouts).await
        }
        _ => {
            relay(client, upstream, first.bytes, timeouts.tunnel_idle).await;
            None
        }
    }
}

/// Relay both ways, `early` first (it was read from the client already): splice through pipes,
/// or a buffered copy where pipes cannot be had; until both sides are done, or no byte has moved
/// for `idle_limit`.
pub async fn relay(
    client: TcpStream,
    upstream: TcpStream,
    early: Vec<u8>,
    idle_limit: Option<std::time::Duration>,
) {
    use super::idle::{bounded, Activity, Tracked};
    use tokio::io::AsyncWriteExt;
    let activity = Activity::new();
    let (Ok(up), Ok(down)) = (Pipe::new(), Pipe::new()) else {
        let mut client = Tracked::new(client, activity.clone());
        let mut upstream = Tracked::new(upstream, activity.clone());
        let copy = async {
            if upstream.write_all(&early).await.is_ok() {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            }
        };
        bounded(idle_limit, &activity, copy).await;
        return;
    };
    let client_side = async {
        // Written through a shared reference: `upstream` is only spliced into after this.
        let mut sent = 0;
        while sent < early.len() {
            upstream.writable().await?;
            match upstream.try_write(&early[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        drop(early);
        one_way(&client, &upstream, &up, &activity).await
    };
    let both = async {
        let _ = tokio::try_join!(client_side, one_way(&upstream, &client, &down, &activity));
    };
    bounded(idle_limit, &activity, both).await;
}

struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 fills the two descriptors on success.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors are fresh and ours.
        let pipe = unsafe {
            Pipe {
                read: OwnedFd::from_raw_fd(fds[0]),
                write: OwnedFd::from_raw_fd(fds[1]),
            }
        };
        // A larger pipe means fewer wake-ups; the default is fine when this is refused.
        // SAFETY: fcntl on our own pipe.
        unsafe {
            libc::fcntl(
                pipe.write.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                CHUNK as libc::c_int,
            )
        };
        Ok(pipe)
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: splice between descriptors we hold, without offsets.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `from` -> pipe -> `to` until `from` reaches end of stream; then half-close `to`.
async fn one_way(
    from: &TcpStream,
    to: &TcpStream,
    pipe: &Pipe,
    activity: &super::idle::Activity,
) -> io::Result<()> {
    loop {
        let mut in_pipe = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                splice(from.as_raw_fd(), pipe.write.as_raw_fd(), CHUNK)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        activity.touch();
        if in_pipe == 0 {
            // SAFETY: shutdown of the write half of a socket we hold.
            unsafe { libc::shutdown(to.as_raw_fd(), libc::SHUT_WR) };
            return Ok(());
        }
        while in_pipe > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                splice(pipe.read.as_raw_fd(), to.as_raw_fd(), in_pipe)
            }) {
                Ok(n) => in_pipe -= n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Let the supervisor hold as many descriptors as its hard limit allows: each tunnel costs two
/// sockets and two pipes.
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    #[tokio::test]
    async fn bytes_and_half_closes_cross_the_relay_both_ways() {
        let (mut client, client_side) = pair().await;
        let (upstream_side, mut server) = pair().await;
        tokio::spawn(async move { relay(client_side, upstream_side, Vec::new(), None).await });
        let payload: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        let send = payload.clone();
        let writer = tokio::spawn(async move {
            client.write_all(&send).await.unwrap();
            client.shutdown().await.unwrap();
            let mut back = Vec::new();
            client.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, payload);
        server.write_all(b"reply after half-close").await.unwrap();
        drop(server);
        assert_eq!(writer.await.unwrap(), b"reply after half-close");
    }
}
