//! The sandbox's network namespace: `lo` up, and (in `restricted` mode) the proxy's listening
//! sockets created here, on 127.0.0.1 inside, to be handed to the supervisor.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};

use crate::channel::{AtStep, Step, StepError};

/// `ioctl` on a socket that opens its network namespace (linux/sockios.h, Linux 5.6).
const SIOCGSKNETNS: libc::c_ulong = 0x894C;

/// Give the calling thread a network namespace of its own (owned by the sandbox's user
/// namespace, like every other), and return a descriptor of it, with which init's main thread
/// joins it ([`join`]). Made here and not in the clone: making one costs ~0.3 ms, which the
/// network's thread spends beside init's mounts instead of before them.
pub fn enter_new() -> Result<OwnedFd, StepError> {
    // SAFETY: unshare with a constant flag; it changes only this thread's network namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let e = std::io::Error::last_os_error();
        let hint = match e.raw_os_error() {
            Some(libc::EPERM) => crate::confinement::refused(
                "creating a network namespace (unshare with CLONE_NEWNET)",
            ),
            Some(libc::ENOSPC) | Some(libc::EUSERS) => "the limit of network namespaces is \
                reached (user.max_net_namespaces); run `sandbox-launch doctor`"
                .into(),
            _ => "run `sandbox-launch doctor`".into(),
        };
        return Err(StepError::new(
            Step::Namespaces,
            format!("cannot create a network namespace: unshare(CLONE_NEWNET) => {e}"),
            Some(&hint),
        ));
    }
    let sock = udp_socket()?;
    // SAFETY: an ioctl without argument on our own socket; it returns a new descriptor.
    let fd = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSKNETNS as _) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).at_hint(
            Step::Network,
            "cannot open the new network namespace (SIOCGSKNETNS needs Linux 5.6)",
        );
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// Move the calling thread into the network namespace `ns` (from [`enter_new`]).
pub fn join(ns: &OwnedFd) -> Result<(), StepError> {
    // SAFETY: setns on a namespace descriptor we own; it changes only this thread.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error())
            .at_hint(Step::Network, "cannot join the sandbox's network namespace");
    }
    Ok(())
}

fn udp_socket() -> Result<OwnedFd, StepError> {
    // SAFETY: plain socket(2); the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).at(Step::Network);
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// Bring the loopback interface up (SIOCSIFFLAGS; no netlink, no `ip` binary needed).
pub fn loopback_up() -> Result<(), StepError> {
    let sock = udp_socket()?;
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
