//! Registering a nested sandbox's write set with the outer sandbox's create guard (see
//! `shim::create_guard::nested`): the program's creations and write-opens are performed there,
//! so that is where the narrower write set must hold. No answer, or a refusal, stops the launch.

use std::os::fd::AsRawFd;

use shim::channel::{Step, StepError};
use shim::create_guard::nested::{Register, Registered, SOCKET};

/// Whether the outer sandbox has a create guard (which performs the program's creations).
pub fn register(request: &Register) -> Result<bool, StepError> {
    let fail = |why: String| {
        StepError::new(
            Step::Seccomp,
            format!("cannot register the nested sandbox with the outer one's guard ({SOCKET}): {why}"),
            Some("without it the outer guard would write where this policy forbids; run the program in the outer sandbox directly"),
        )
    };
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| fail(format!("socket => {e}")))?;
    let addr = nix::sys::socket::UnixAddr::new(SOCKET).map_err(|e| fail(e.to_string()))?;
    nix::sys::socket::connect(sock.as_raw_fd(), &addr)
        .map_err(|e| fail(format!("connect => {e}")))?;
    // The outer sandbox's init made the socket (its PID 1: nothing else inside can be, as no
    // PID namespace can be made there). Anyone else's socket at that path is not trusted.
    let server = nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| fail(format!("SO_PEERCRED => {e}")))?;
    if server.pid() != 1 {
        return Err(fail(format!(
            "it is served by pid {}, not by the sandbox's init (pid 1)",
            server.pid()
        )));
    }
    shim::channel::send(sock.as_raw_fd(), request, &[]).map_err(|e| fail(format!("{e:#}")))?;
    match shim::channel::recv::<Registered>(sock.as_raw_fd()) {
        Ok(Some((r, _))) if r.ok => Ok(r.guarded),
        Ok(Some((r, _))) => Err(fail(r.error.unwrap_or_else(|| "refused".into()))),
        Ok(None) => Err(fail("no answer".into())),
        Err(e) => Err(fail(format!("{e:#}"))),
    }
}
