//! Just enough netlink to configure the sandbox's own network namespace without the `ip` and
//! `nft` binaries: build messages with (nested) attributes, send them, and read the kernel's
//! acknowledgements. Every request asks for an ACK, so an error is never silent.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_EXCL: u16 = 0x200;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;
const NLMSG_ERROR: u16 = 0x2;
const NLA_F_NESTED: u16 = 0x8000;
const HEADER_LEN: usize = 16;

/// One netlink message being built: header, fixed family header, then attributes.
pub struct Message {
    buf: Vec<u8>,
    /// Start offsets of the nests still open.
    open: Vec<usize>,
}

impl Message {
    /// A message of `kind` with `flags` and the fixed-size family header `fixed` (rtmsg,
    /// nfgenmsg...). The sequence number is set when the message is sent.
    pub fn new(kind: u16, flags: u16, fixed: &[u8]) -> Message {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set by finish
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // sequence
        buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
        buf.extend_from_slice(fixed);
        pad(&mut buf);
        Message {
            buf,
            open: Vec::new(),
        }
    }

    /// An attribute with a raw payload.
    pub fn attr(&mut self, kind: u16, payload: &[u8]) -> &mut Self {
        let len = 4 + payload.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        pad(&mut self.buf);
        self
    }

    /// A NUL-terminated string attribute.
    pub fn attr_str(&mut self, kind: u16, s: &str) -> &mut Self {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.attr(kind, &v)
    }

    /// A 32-bit attribute in network byte order (what nf_tables expects).
    pub fn attr_be32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.attr(kind, &v.to_be_bytes())
    }

    /// Open a nested attribute; close it with `end`.
    pub fn begin(&mut self, kind: u16) -> &mut Self {
        self.open.push(self.buf.len());
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        self
    }

    pub fn end(&mut self) -> &mut Self {
        let start = self.open.pop().expect("end() without begin()");
        let len = (self.buf.len() - start) as u16;
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        self
    }

    fn finish(&mut self, seq: u32) -> &[u8] {
        assert!(self.open.is_empty(), "unclosed nested attribute");
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf[8..12].copy_from_slice(&seq.to_ne_bytes());
        &self.buf
    }
}

fn pad(buf: &mut Vec<u8>) {
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

/// A netlink socket of one protocol (NETLINK_ROUTE, NETLINK_NETFILTER).
pub struct Socket {
    fd: OwnedFd,
    seq: u32,
}

impl Socket {
    pub fn open(protocol: libc::c_int) -> io::Result<Socket> {
        // SAFETY: plain socket(2); the descriptor is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is fresh and ours.
        Ok(Socket {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            seq: 1,
        })
    }

    /// Send `messages` in one datagram; `acked` lists which of them asked for an ACK (the
    /// nfnetlink batch markers do not get one). Returns once every ACK arrived; the first error
    /// the kernel reports is returned.
    pub fn transact(&mut self, messages: &mut [Message], acked: &[bool]) -> io::Result<()> {
        let mut datagram = Vec::new();
        let mut waiting = Vec::new();
        for (m, &ack) in messages.iter_mut().zip(acked) {
            let seq = self.seq;
            self.seq += 1;
            datagram.extend_from_slice(m.finish(seq));
            if ack {
                waiting.push(seq);
            }
        }
        // SAFETY: sockaddr_nl is plain data; all zero addresses the kernel.
        let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: sendto with a buffer and address we own, lengths matching.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                datagram.as_ptr().cast(),
                datagram.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut first_error = None;
        let mut buf = vec![0u8; 16 * 1024];
        while !waiting.is_empty() {
            // SAFETY: recv into a buffer we own.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for (seq, errno) in acks(&buf[..n as usize]) {
                waiting.retain(|&s| s != seq);
                if errno != 0 && first_error.is_none() {
                    first_error = Some(io::Error::from_raw_os_error(-errno));
                }
            }
            if first_error.is_some() {
                // After an error in a batch the kernel may not acknowledge the rest.
                break;
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The (sequence, error) pairs of the NLMSG_ERROR messages in a datagram (error 0 is an ACK).
fn acks(mut data: &[u8]) -> Vec<(u32, i32)> {
    let mut out = Vec::new();
    while data.len() >= HEADER_LEN {
        let len = u32::from_ne_bytes(data[0..4].try_into().unwrap()) as usize;
        let kind = u16::from_ne_bytes(data[4..6].try_into().unwrap());
        let seq = u32::from_ne_bytes(data[8..12].try_into().unwrap());
        if len < HEADER_LEN || len > data.len() {
            break;
        }
        if kind == NLMSG_ERROR && len >= HEADER_LEN + 4 {
            let errno = i32::from_ne_bytes(data[16..20].try_into().unwrap());
            out.push((seq, errno));
        }
        let step = (len + 3) & !3;
        data = &data[step.min(data.len())..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_attributes_carry_their_length_and_padding() {
        let mut m = Message::new(7, NLM_F_REQUEST, &[1, 2]);
        m.begin(4).attr_str(1, "abc").attr_be32(2, 5).end();
        let bytes = m.finish(9).to_vec();
        // header 16 + fixed 2 padded to 4 + nest(4 + str 8 + u32 8) = 40
        assert_eq!(bytes.len(), 40);
        assert_eq!(u32::from_ne_bytes(bytes[0..4].try_into().unwrap()), 40);
        assert_eq!(u32::from_ne_bytes(bytes[8..12].try_into().unwrap()), 9);
        assert_eq!(u16::from_ne_bytes(bytes[20..22].try_into().unwrap()), 20);
        assert_eq!(
            u16::from_ne_bytes(bytes[22..24].try_into().unwrap()),
            4 | NLA_F_NESTED
        );
        assert_eq!(&bytes[28..32], b"abc\0");
        assert_eq!(&bytes[36..40], &5u32.to_be_bytes());
    }

    #[test]
    fn errors_are_read_from_acks() {
        let mut d = Vec::new();
        for (seq, err) in [(3u32, 0i32), (4, -1)] {
            d.extend_from_slice(&36u32.to_ne_bytes());
            d.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
            d.extend_from_slice(&0u16.to_ne_bytes());
            d.extend_from_slice(&seq.to_ne_bytes());
            d.extend_from_slice(&0u32.to_ne_bytes());
            d.extend_from_slice(&err.to_ne_bytes());
            d.extend_from_slice(&[0u8; 16]);
        }
        assert_eq!(acks(&d), [(3, 0), (4, -1)]);
    }
}
