//! The sends that can name an address: sendto with a `dest_addr`, sendmsg, sendmmsg. All the
//! kernel would read is copied once — the address, the data (the iovecs gathered), the control
//! messages — and init sends that copy (see `perform::send`).

use nix::errno::Errno;

use super::{read_bytes, Message, Request};
use crate::create_guard::target::Memory;

/// `sizeof(struct sockaddr_storage)`: sendto refuses a longer address, sendmsg cuts it there.
const MAX_ADDR: usize = 128;
/// UIO_MAXIOV: more iovecs are EMSGSIZE, more messages of a sendmmsg are not looked at.
const MAX_IOV: u64 = 1024;
/// What one call copies at most: more is sent as a partial send (a stream socket's answer may
/// be one anyway, and a sendmmsg may send fewer messages than asked); no datagram is this long.
const MAX_DATA: usize = 4 << 20;
/// Control messages: far above the kernel's own limit (optmem_max), which answers ENOBUFS.
const MAX_CONTROL: u64 = 64 << 10;
/// `struct msghdr` and `struct mmsghdr` on x86-64.
const MSGHDR: usize = 56;
pub(in crate::create_guard) const MMSGHDR: u64 = 64;
/// `offsetof(struct mmsghdr, msg_len)`.
pub(in crate::create_guard) const MSG_LEN: u64 = 56;

pub(super) fn decode(nr: libc::c_long, a: &[u64; 6], mem: &Memory) -> Result<Request, Errno> {
    let fd = a[0] as u32 as i32;
    match nr {
        libc::SYS_sendto => {
            let name = if a[4] == 0 {
                Vec::new()
            } else {
                let len: usize = (a[5] as u32 as i32).try_into().map_err(|_| Errno::EINVAL)?;
                if len > MAX_ADDR {
                    return Err(Errno::EINVAL);
                }
                read_bytes(mem, a[4], len)?
            };
            let data = read_bytes(mem, a[1], (a[2] as usize).min(MAX_DATA))?;
            Ok(Request::Send {
                fd,
                flags: a[3] as u32 as i32,
                many: None,
                msgs: vec![Message {
                    name,
                    data,
                    control: Vec::new(),
                }],
            })
        }
        libc::SYS_sendmsg => {
            let mut budget = MAX_DATA;
            let msg = message(mem, a[1], &mut budget, true)?.ok_or(Errno::EMSGSIZE)?;
            Ok(Request::Send {
                fd,
                flags: a[2] as u32 as i32,
                many: None,
                msgs: vec![msg],
            })
        }
        libc::SYS_sendmmsg => {
            let (mut msgs, mut budget) = (Vec::new(), MAX_DATA);
            for i in 0..(a[2] as u32 as u64).min(MAX_IOV) {
                match message(mem, a[1] + i * MMSGHDR, &mut budget, i == 0) {
                    Ok(Some(m)) => msgs.push(m),
                    // The first message's error is the call's; after it, the messages so far
                    // are sent (as the kernel does) and the caller comes back for the rest.
                    Err(e) if i == 0 => return Err(e),
                    Ok(None) | Err(_) => break,
                }
            }
            Ok(Request::Send {
                fd,
                flags: a[3] as u32 as i32,
                many: Some(a[1]),
                msgs,
            })
        }
        _ => Err(Errno::ENOSYS),
    }
}

/// The `struct msghdr` at `at`, with what it points to. Its data takes at most `budget` (cut
/// to it for the `first` message, `None` for a later one that does not fit).
fn message(
    mem: &Memory,
    at: u64,
    budget: &mut usize,
    first: bool,
) -> Result<Option<Message>, Errno> {
    let h = read_bytes(mem, at, MSGHDR)?;
    let word = |off: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h[off..off + 8]);
        u64::from_ne_bytes(b)
    };
    let (name_at, iov_at, iovlen, control_at, controllen) =
        (word(0), word(16), word(24), word(32), word(40));
    let namelen = word(8) as u32 as i32;
    if namelen < 0 {
        return Err(Errno::EINVAL);
    }
    let namelen = if name_at == 0 {
        0
    } else {
        (namelen as usize).min(MAX_ADDR)
    };
    if iovlen > MAX_IOV {
        return Err(Errno::EMSGSIZE);
    }
    if controllen > MAX_CONTROL {
        return Err(Errno::ENOBUFS);
    }
    let iovs = read_bytes(mem, iov_at, iovlen as usize * 16)?;
    let iov = |i: usize, off: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&iovs[i * 16 + off..i * 16 + off + 8]);
        u64::from_ne_bytes(b)
    };
    let total = (0..iovlen as usize).fold(0u64, |t, i| t.saturating_add(iov(i, 8)));
    if total > *budget as u64 && !first {
        return Ok(None);
    }
    let mut data = Vec::with_capacity((total as usize).min(*budget));
    for i in 0..iovlen as usize {
        let take = (iov(i, 8) as usize).min(*budget - data.len());
        data.extend_from_slice(&read_bytes(mem, iov(i, 0), take)?);
    }
    *budget -= data.len();
    Ok(Some(Message {
        name: read_bytes(mem, name_at, namelen)?,
        data,
        control: read_bytes(mem, control_at, controllen as usize)?,
    }))
}
