//! The typed channel between supervisor and shim: one JSON message per SOCK_SEQPACKET datagram,
//! with file descriptors riding along as SCM_RIGHTS where a message carries them.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use anyhow::{bail, Context, Result};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// The largest message either side sends (a spec with 256 paths is far below this).
const MAX_MESSAGE: usize = 1 << 20;
/// The most descriptors one message carries.
const MAX_FDS: usize = 8;

/// Shim -> supervisor.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum FromShim {
    /// A best-effort downgrade or another remark the user must see.
    Warning { text: String },
    /// The proxy listeners, as SCM_RIGHTS, in the order of `NetworkSpec::Restricted::listen_ports`;
    /// with `transparent`, followed by the transparent listener and the DNS stub's socket; then,
    /// when the kernel gave one, a netlink `sock_diag` socket of the sandbox's namespace.
    Listeners { transparent: bool },
    /// Every layer is in force; the facts checked from inside.
    Verified { facts: serde_json::Value },
    /// The target was executed successfully; its pid as seen inside.
    Started { pid: i32 },
    /// The create guard refused to let the program write `path` (`op`: create, write, rename,
    /// bind...) because it is a persistence surface: `surface` says which.
    Refused {
        path: String,
        op: String,
        surface: String,
        /// The process that asked (as the sandbox numbers it) and its executable.
        #[serde(default)]
        pid: i32,
        #[serde(default)]
        exe: Option<String>,
    },
    /// A write outside the writable trees failed in the kernel (`errno`: EROFS, EACCES or
    /// EPERM — a read-only mount, Landlock, the file's mode), reported by the create guard,
    /// which performed it for the program.
    WriteFailed {
        path: String,
        op: String,
        errno: i32,
        pid: i32,
        exe: Option<String>,
    },
    /// A setup step failed; the target never ran.
    Failed(Failure),
    /// The target exited with `code` (128+N for a signal) and nothing else runs inside: the
    /// supervisor may exit without waiting for the kernel to tear the namespaces down.
    Exited { code: i32 },
}

/// Supervisor -> shim, once, right after the clone: the persistence plan, made while the shim
/// set up its network — the read-only binds that take the place of
/// [`crate::spec::MountOp::PersistenceBinds`], and the create guard's whole model (it replaces
/// the spec's). A struct, not a tagged enum like [`FromShim`]: serde decodes a tagged enum
/// through a buffered copy, which doubled the shim's wait for its ~20 KB (then). The rules'
/// surfaces and anchors travel once each (see `persist_wire`).
#[derive(Debug, Serialize, Deserialize)]
pub struct PersistencePlan {
    pub binds: Vec<crate::spec::MountOp>,
    pub persist: crate::spec::PersistSpec,
}

/// Why the sandbox could not be built.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    pub step: Step,
    pub message: String,
    pub hint: Option<String>,
}

/// The setup steps, each with its own documented exit code.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Policy,
    Namespaces,
    Mounts,
    Network,
    Identity,
    Landlock,
    Seccomp,
    Verify,
    /// Resource limits (cgroups, rlimits, the OOM score).
    Limits,
    Exec,
    Internal,
}

impl Step {
    /// The launcher's exit code when this step fails (documented in the README).
    pub fn exit_code(self) -> i32 {
        match self {
            Step::Internal => 110,
            Step::Policy => 111,
            Step::Namespaces => 112,
            Step::Mounts => 113,
            Step::Network => 114,
            Step::Identity => 115,
            Step::Landlock => 116,
            Step::Seccomp => 117,
            Step::Verify => 118,
            Step::Limits => 119,
            Step::Exec => 127,
        }
    }

    /// The step whose exit code is `code`, if any.
    pub fn from_exit_code(code: i32) -> Option<Step> {
        [
            Step::Internal,
            Step::Policy,
            Step::Namespaces,
            Step::Mounts,
            Step::Network,
            Step::Identity,
            Step::Landlock,
            Step::Seccomp,
            Step::Verify,
            Step::Limits,
            Step::Exec,
        ]
        .into_iter()
        .find(|s| s.exit_code() == code)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Step::Policy => "load the policy",
            Step::Namespaces => "create the namespaces and map the user and group ids",
            Step::Mounts => "build the filesystem",
            Step::Network => "set up the network",
            Step::Identity => "drop privileges",
            Step::Landlock => "apply Landlock",
            Step::Seccomp => "apply the seccomp filter",
            Step::Verify => "verify the sandbox",
            Step::Limits => "apply the resource limits",
            Step::Exec => "start the program",
            Step::Internal => "run the sandbox",
        }
    }
}

/// A failure of one step, carried up to where it is reported.
#[derive(Debug)]
pub struct StepError(pub Failure);

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot {}: {}", self.0.step.describe(), self.0.message)?;
        if let Some(hint) = &self.0.hint {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for StepError {}

/// Attach a step (and optionally a hint) to any error.
pub trait AtStep<T> {
    fn at(self, step: Step) -> std::result::Result<T, StepError>;
    fn at_hint(self, step: Step, hint: &str) -> std::result::Result<T, StepError>;
}

impl<T, E: std::fmt::Display> AtStep<T> for std::result::Result<T, E> {
    fn at(self, step: Step) -> std::result::Result<T, StepError> {
        self.map_err(|e| {
            StepError(Failure {
                step,
                message: e.to_string(),
                hint: None,
            })
        })
    }
    fn at_hint(self, step: Step, hint: &str) -> std::result::Result<T, StepError> {
        self.map_err(|e| {
            StepError(Failure {
                step,
                message: e.to_string(),
                hint: Some(hint.to_string()),
            })
        })
    }
}

impl StepError {
    pub fn new(step: Step, message: impl Into<String>, hint: Option<&str>) -> Self {
        StepError(Failure {
            step,
            message: message.into(),
            hint: hint.map(str::to_string),
        })
    }
}

/// Send one message, with `fds` attached.
/// Send `msg` without waiting: `false` when the socket's buffer is full (the message is
/// dropped) or the other side is gone.
pub fn try_send<T: Serialize>(sock: RawFd, msg: &T) -> bool {
    let Ok(bytes) = serde_json::to_vec(msg) else {
        return false;
    };
    let iov = [IoSlice::new(&bytes)];
    sendmsg::<()>(
        sock,
        &iov,
        &[],
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
        None,
    )
    .is_ok()
}

pub fn send<T: Serialize>(sock: RawFd, msg: &T, fds: &[RawFd]) -> Result<()> {
    let bytes = serde_json::to_vec(msg).context("encode message")?;
    if bytes.len() > MAX_MESSAGE {
        bail!("message of {} bytes is too large", bytes.len());
    }
    let iov = [IoSlice::new(&bytes)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(sock, &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
        .context("send on the sync socket")?;
    Ok(())
}

/// Receive one message and the descriptors that came with it. `Ok(None)` when the peer is gone.
pub fn recv<T: DeserializeOwned>(sock: RawFd) -> Result<Option<(T, Vec<OwnedFd>)>> {
    // A buffer of the message's own size: zeroing MAX_MESSAGE bytes for every message cost
    // more than half a millisecond per launch (a page fault per 4 KiB).
    let mut buf = vec![0u8; pending_len(sock)?.clamp(1, MAX_MESSAGE)];
    let mut cmsg_space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (len, fds) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = loop {
            match recvmsg::<()>(
                sock,
                &mut iov,
                Some(&mut cmsg_space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::ECONNRESET) => continue,
                other => break other.context("receive on the sync socket")?,
            }
        };
        let mut fds = Vec::new();
        for cmsg in msg.cmsgs().context("read control messages")? {
            if let ControlMessageOwned::ScmRights(raw) = cmsg {
                for fd in raw {
                    // SAFETY: the kernel just installed this descriptor for us; we own it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        (msg.bytes, fds)
    };
    if len == 0 {
        return Ok(None);
    }
    let msg = serde_json::from_slice(&buf[..len]).context("decode message")?;
    Ok(Some((msg, fds)))
}

/// The length of the datagram waiting on `sock` (blocks until one arrives; 0 at end of
/// stream). Peeked without control space, so no descriptor is installed twice.
fn pending_len(sock: RawFd) -> Result<usize> {
    loop {
        // SAFETY: recv of zero bytes into a valid (empty) buffer; MSG_TRUNC makes it return the
        // datagram's real length.
        let n = unsafe {
            libc::recv(
                sock,
                std::ptr::null_mut(),
                0,
                libc::MSG_PEEK | libc::MSG_TRUNC,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        // ECONNRESET: the peer closed with a message of ours unread (the shim failed before it
        // read the persistence plan). The kernel says so once; what the peer sent before it
        // closed is still queued, and its last word (why it failed) is there.
        if e.kind() != std::io::ErrorKind::Interrupted && e.raw_os_error() != Some(libc::ECONNRESET)
        {
            return Err(e).context("receive on the sync socket");
        }
    }
}

/// Keep `fd` alive across exec or not.
pub fn set_cloexec(fd: impl AsRawFd, on: bool) -> Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    let flag = if on {
        FdFlag::FD_CLOEXEC
    } else {
        FdFlag::empty()
    };
    // SAFETY: fcntl F_SETFD on a descriptor the caller owns.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd.as_raw_fd()) };
    fcntl(borrowed, FcntlArg::F_SETFD(flag)).context("fcntl(F_SETFD)")?;
    Ok(())
}
