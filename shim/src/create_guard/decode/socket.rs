//! Socket syscalls that name an address: bind (a pathname unix socket is a new name) and
//! connect (which socket is reached, see `host_sockets`).

use nix::errno::Errno;

use super::{read_bytes, Request};
use crate::create_guard::target::Memory;

/// `sizeof(struct sockaddr_storage)`: the kernel refuses longer addresses (EINVAL).
const MAX_ADDR: u64 = 128;

pub(super) fn decode(nr: libc::c_long, a: &[u64; 6], mem: &Memory) -> Result<Request, Errno> {
    match nr {
        libc::SYS_bind | libc::SYS_connect => {
            let len = a[2] as u32 as u64;
            if len > MAX_ADDR {
                return Err(Errno::EINVAL);
            }
            let (fd, addr) = (a[0] as u32 as i32, read_bytes(mem, a[1], len as usize)?);
            Ok(if nr == libc::SYS_bind {
                Request::Bind { fd, addr }
            } else {
                Request::Connect { fd, addr }
            })
        }
        _ => Err(Errno::ENOSYS),
    }
}
