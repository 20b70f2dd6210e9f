//! sendto naming an address, sendmsg, sendmmsg: performed by init on the target's own socket
//! (taken with pidfd_getfd) with what `decode` copied, as `connect` is — the kernel, let
//! through, would read the descriptor, the message and the address again. On a unix socket a
//! pathname address is judged (`connect::reach`) and the message goes to the inode judged; a
//! datagram socket the program uses inside (a socketpair, a socket it bound) is no concern.
//! Descriptors passed with SCM_RIGHTS are the target's: init takes each and passes its own.
//!
//! What differs from the kernel's own send: a receiver that asks for credentials
//! (SO_PASSCRED) sees init's process id; explicit SCM_CREDENTIALS naming the program's pid are
//! refused (EPERM) by the kernel; a send of more than 4 MiB is a partial one.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;

use super::super::answer::{answer, pending, Answer};
use super::super::decode::send::{MMSGHDR, MSG_LEN};
use super::super::decode::Message;
use super::super::resolve::Object;
use super::super::target::{Asker, Memory};
use super::super::Handler;
use super::connect::{blocking, proc_address, reach};
use super::socket::{socket_domain, socket_type};

/// A message as init sends it, with the descriptors that must stay open until then.
struct Ready {
    name: Vec<u8>,
    data: Vec<u8>,
    control: Vec<u8>,
    _judged: Option<Object>,
    _passed: Vec<OwnedFd>,
}

/// Where the answer goes and what it reports.
struct Call {
    listener: std::os::fd::RawFd,
    id: u64,
    tid: libc::pid_t,
    flags: i32,
    /// sendmmsg: its vector (a length goes back into each message sent).
    many: Option<(Memory, u64)>,
}

impl Handler {
    pub(super) fn send_message(
        &self,
        who: Asker<'_>,
        fd: i32,
        flags: i32,
        many: Option<u64>,
        msgs: Vec<Message>,
    ) -> Result<Answer, Errno> {
        let sock = who.fd(fd)?;
        let unix = socket_domain(&sock)? == libc::AF_UNIX;
        // Only a datagram socket goes where a send names: a stream refuses an address, a
        // seqpacket socket ignores it (the kernel says so itself, on this very socket).
        let addressed = unix && socket_type(&sock)? == libc::SOCK_DGRAM;
        let mut ready = Vec::with_capacity(msgs.len());
        for (i, m) in msgs.into_iter().enumerate() {
            match prepare(who, unix, addressed, m) {
                Ok(r) => ready.push(r),
                Err(e) if i == 0 => return Err(e),
                // The messages before it go (the caller comes back for the rest).
                Err(_) => break,
            }
        }
        let call = Call {
            listener: self.fd(),
            id: self.current.get(),
            tid: who.tid,
            flags,
            many: many.map(|v| (who.memory(), v)),
        };
        if !blocking(&sock) || flags & libc::MSG_DONTWAIT != 0 {
            return call.run(&sock, &ready);
        }
        // A blocking send may wait long (a full buffer, a receiver's full queue): that part
        // runs on a thread, so the guard keeps answering everyone else. Most single sends go
        // at once, though: tried first without waiting, here.
        let mut sent = 0;
        if let [one] = ready.as_mut_slice() {
            let n = send_one(
                sock.as_raw_fd(),
                one,
                flags | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            );
            if n < 0 && Errno::last() != Errno::EAGAIN {
                return Err(call.failed(Errno::last()));
            }
            if n >= 0 && n as usize == one.data.len() {
                return Ok(Answer::Value(n as i64));
            }
            // A stream took part of it: the rest waits, its control messages went with the
            // part sent.
            if n > 0 {
                sent = n as usize;
                one.data.drain(..sent);
                one.control.clear();
            }
        }
        std::thread::Builder::new()
            .name("guard-send".into())
            .spawn(move || {
                let outcome = match call.run(&sock, &ready) {
                    Ok(Answer::Value(n)) => Ok(Answer::Value(n + sent as i64)),
                    Err(_) if sent > 0 => Ok(Answer::Value(sent as i64)),
                    other => other,
                };
                let _ = answer(call.listener, call.id, outcome);
            })
            .map_err(|_| Errno::EAGAIN)?;
        Ok(Answer::Deferred)
    }
}

/// Judge the address (of a send that goes where it names), take the descriptors passed.
fn prepare(who: Asker<'_>, unix: bool, addressed: bool, m: Message) -> Result<Ready, Errno> {
    let judged = if addressed {
        reach(who, &m.name)?
    } else {
        None
    };
    let name = match &judged {
        Some(j) => proc_address(j)?,
        None => m.name,
    };
    let mut control = m.control;
    let passed = if unix {
        take_passed(who, &mut control)?
    } else {
        Vec::new()
    };
    Ok(Ready {
        name,
        data: m.data,
        control,
        _judged: judged,
        _passed: passed,
    })
}

/// Put init's own duplicates in place of the target's descriptors in each SCM_RIGHTS message
/// of `control`, in place. The kernel answers a malformed header EINVAL; so does this.
fn take_passed(who: Asker<'_>, control: &mut [u8]) -> Result<Vec<OwnedFd>, Errno> {
    const HDR: usize = std::mem::size_of::<libc::cmsghdr>();
    let align = |n: usize| (n + 7) & !7;
    let mut taken = Vec::new();
    let mut at = 0;
    while at + HDR <= control.len() {
        let word = |o: usize| -> [u8; 8] {
            let mut b = [0u8; 8];
            b.copy_from_slice(&control[o..o + 8]);
            b
        };
        let len = usize::from_ne_bytes(word(at));
        let level = i32::from_ne_bytes([
            control[at + 8],
            control[at + 9],
            control[at + 10],
            control[at + 11],
        ]);
        let kind = i32::from_ne_bytes([
            control[at + 12],
            control[at + 13],
            control[at + 14],
            control[at + 15],
        ]);
        if len < HDR || len > control.len() - at {
            return Err(Errno::EINVAL);
        }
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
            for o in (at + HDR..at + len).step_by(4) {
                let Some(b) = control.get(o..o + 4) else {
                    break;
                };
                let fd = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
                let mine = who.fd(fd)?;
                control[o..o + 4].copy_from_slice(&mine.as_raw_fd().to_ne_bytes());
                taken.push(mine);
            }
        }
        at += align(len);
    }
    Ok(taken)
}

impl Call {
    /// A send failed with `e`: on a broken stream the program gets its SIGPIPE, as from the
    /// kernel (init's own send asks for none).
    fn failed(&self, e: Errno) -> Errno {
        if e == Errno::EPIPE && self.flags & libc::MSG_NOSIGNAL == 0 {
            // SAFETY: tkill takes integer arguments only.
            unsafe { libc::syscall(libc::SYS_tkill, self.tid, libc::SIGPIPE) };
        }
        e
    }

    /// Send each message; the first one's error is the call's, after it the count so far.
    fn run(&self, sock: &OwnedFd, msgs: &[Ready]) -> Result<Answer, Errno> {
        let mut sent = 0i64;
        for (i, m) in msgs.iter().enumerate() {
            let n = send_one(sock.as_raw_fd(), m, self.flags | libc::MSG_NOSIGNAL);
            if n < 0 {
                let e = self.failed(Errno::last());
                if i == 0 {
                    return Err(e);
                }
                break;
            }
            match self.many {
                None => return Ok(Answer::Value(n as i64)),
                Some((mem, vector)) => {
                    // Only while the target still waits: its tid is then still that thread.
                    if !pending(self.listener, self.id) {
                        return Err(Errno::ENOENT);
                    }
                    let at = vector + i as u64 * MMSGHDR + MSG_LEN;
                    mem.write_u32(at, n as u32)?;
                }
            }
            sent += 1;
        }
        Ok(Answer::Value(sent))
    }
}

fn send_one(sock: std::os::fd::RawFd, m: &Ready, flags: i32) -> isize {
    let mut iov = libc::iovec {
        iov_base: m.data.as_ptr() as *mut libc::c_void,
        iov_len: m.data.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below is valid for its length.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    if !m.name.is_empty() {
        h.msg_name = m.name.as_ptr() as *mut libc::c_void;
        h.msg_namelen = m.name.len() as libc::socklen_t;
    }
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    if !m.control.is_empty() {
        h.msg_control = m.control.as_ptr() as *mut libc::c_void;
        h.msg_controllen = m.control.len();
    }
    // SAFETY: a valid socket and a msghdr whose buffers outlive the call (the kernel only reads
    // them).
    unsafe { libc::sendmsg(sock, &h, flags) }
}
