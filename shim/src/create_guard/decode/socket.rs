//! Socket syscalls that name an address: bind (a pathname unix socket is a new name).

use nix::errno::Errno;

use super::{read_bytes, Request};
use crate::create_guard::target::Memory;

/// `sizeof(struct sockaddr_storage)`: the kernel refuses longer addresses (EINVAL).
const MAX_ADDR: u64 = 128;

pub(super) fn decode(nr: libc::c_long, a: &[u64; 6], mem: &Memory) -> Result<Request, Errno> {
    match nr {
        libc::SYS_bind => {
            let len = a[2] as u32 as u64;
            if len > MAX_ADDR {
                return Err(Errno::EINVAL);
            }
            Ok(Request::Bind {
                fd: a[0] as u32 as i32,
                addr: read_bytes(mem, a[1], len as usize)?,
            })
        }
        _ => Err(Errno::ENOSYS),
    }
}
