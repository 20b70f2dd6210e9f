//! The inode of one TCP socket of the sandbox, asked of the kernel by its addresses (netlink
//! `sock_diag`, an exact `inet_diag` lookup): one request, answered in the same system call, so
//! it costs microseconds however many sockets the sandbox holds — unlike reading
//! `/proc/<pid>/net/tcp`, which lists every socket, thousands of TIME_WAIT ones under load.
//!
//! A netlink socket answers for the network namespace it was made in: the shim makes this one
//! inside the sandbox and hands it over with the proxy's listeners.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const INET_DIAG_NOCOOKIE: u32 = !0;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct SockId {
    sport: [u8; 2],
    dport: [u8; 2],
    src: [u8; 16],
    dst: [u8; 16],
    interface: u32,
    cookie: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Request {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: SockId,
}

/// `inet_diag_msg` after the 16-byte `nlmsghdr`: family, state, timer, retrans (4 bytes), the
/// socket id (48), expires, rqueue, wqueue, uid (16), then the inode.
const INODE_AT: usize = 16 + 4 + size_of::<SockId>() + 16;

/// A netlink `sock_diag` socket of the sandbox's network namespace.
#[derive(Debug)]
pub struct SockDiag {
    socket: Mutex<OwnedFd>,
}

impl SockDiag {
    pub fn new(socket: OwnedFd) -> Self {
        SockDiag {
            socket: Mutex::new(socket),
        }
    }

    /// The inode of the TCP socket whose own address is `local` and whose peer is `remote`
    /// (`None`: no such socket).
    pub fn inode(&self, local: SocketAddr, remote: SocketAddr) -> io::Result<Option<u64>> {
        let mut req = Request {
            len: size_of::<Request>() as u32,
            kind: SOCK_DIAG_BY_FAMILY,
            flags: libc::NLM_F_REQUEST as u16,
            protocol: libc::IPPROTO_TCP as u8,
            states: !0,
            ..Request::default()
        };
        req.id.cookie = [INET_DIAG_NOCOOKIE; 2];
        req.id.sport = local.port().to_be_bytes();
        req.id.dport = remote.port().to_be_bytes();
        match (local.ip(), remote.ip()) {
            (IpAddr::V4(l), IpAddr::V4(r)) => {
                req.family = libc::AF_INET as u8;
                req.id.src[..4].copy_from_slice(&l.octets());
                req.id.dst[..4].copy_from_slice(&r.octets());
            }
            (l, r) => {
                req.family = libc::AF_INET6 as u8;
                req.id.src = v6(l);
                req.id.dst = v6(r);
            }
        }
        let socket = self
            .socket
            .lock()
            .map_err(|_| io::Error::other("sock_diag socket poisoned"))?;
        let fd = socket.as_raw_fd();
        // SAFETY: sending a plain-old-data struct of the size we state, on our own socket.
        let sent =
            unsafe { libc::send(fd, (&req as *const Request).cast(), size_of::<Request>(), 0) };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = [0u8; 1024];
        // SAFETY: receiving into a buffer we own, of the length we pass. The kernel queued the
        // answer before send returned, so this does not wait.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(parse_answer(&buf[..n as usize]))
    }
}

/// An address as `inet_diag` writes IPv6: IPv4 as `::ffff:a.b.c.d`.
fn v6(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The inode in a `SOCK_DIAG_BY_FAMILY` answer; `None` for an error (no such socket).
fn parse_answer(b: &[u8]) -> Option<u64> {
    let kind = u16::from_ne_bytes([*b.get(4)?, *b.get(5)?]);
    if kind != SOCK_DIAG_BY_FAMILY {
        return None;
    }
    let inode = u32::from_ne_bytes(b.get(INODE_AT..INODE_AT + 4)?.try_into().ok()?);
    (inode != 0).then_some(u64::from(inode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inode_of_one_connection_is_found_by_its_addresses() {
        let diag = SockDiag::new(shim::network::sock_diag().unwrap());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (local, remote) = (client.local_addr().unwrap(), client.peer_addr().unwrap());
        let table = std::fs::read_to_string("/proc/self/net/tcp").unwrap();
        let want = super::super::identify::socket_inode(&table, local, remote).unwrap();
        assert_eq!(diag.inode(local, remote).unwrap(), Some(want));
        // The server's end is another socket; a closed port is none.
        assert_ne!(diag.inode(remote, local).unwrap(), Some(want));
        let nothing: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(diag.inode(local, nothing).unwrap(), None);
    }
}
