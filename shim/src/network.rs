//! The sandbox's network namespace: `lo` up, and (in `restricted` mode) the proxy's listening
//! sockets created here, on 127.0.0.1 inside, to be handed to the supervisor.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};

use crate::channel::{AtStep, Step, StepError};

/// Bring the loopback interface up (SIOCSIFFLAGS; no netlink, no `ip` binary needed).
pub fn loopback_up() -> Result<(), StepError> {
    // SAFETY: plain socket(2); the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).at(Step::Network);
    }
    // SAFETY: fd is a fresh descriptor we own.
    let sock: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: ioctl on our socket with a valid ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(std::io::Error::last_os_error()).at_hint(
            Step::Network,
            "cannot read the flags of `lo` in the new network namespace",
        );
    }
    // SAFETY: the union member ifru_flags is the one SIOCGIFFLAGS filled.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: as above.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(std::io::Error::last_os_error()).at_hint(
            Step::Network,
            "cannot bring `lo` up in the new network namespace",
        );
    }
    Ok(())
}

/// Listen on 127.0.0.1:`port` for each port, inside this namespace.
pub fn listeners(ports: &[u16]) -> Result<Vec<TcpListener>, StepError> {
    ports
        .iter()
        .map(|&port| {
            TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
                .map_err(|e| format!("listen on 127.0.0.1:{port} inside the sandbox: {e}"))
                .at(Step::Network)
        })
        .collect()
}

/// The DNS stub's socket: UDP on 127.0.0.1:`port` inside.
pub fn dns_socket(port: u16) -> Result<UdpSocket, StepError> {
    UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
        .map_err(|e| format!("DNS stub: bind 127.0.0.1:{port} (udp) inside the sandbox: {e}"))
        .at(Step::Network)
}

/// A netlink `sock_diag` socket of this network namespace, for the supervisor's proxy: it asks
/// the kernel which socket a connection comes from without reading the whole TCP table.
pub fn sock_diag() -> std::io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the descriptor is ours.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}
