//! The transparent-egress set-up against the real kernel, in a user + network namespace of a
//! forked child that is unprivileged (uid 65534 when the tests run as root), as the shim does
//! it: TCP to an outside address reaches the redirect listener with the original destination
//! recoverable, DNS to any server reaches the stub, other UDP and IPv6 go nowhere, and loopback
//! traffic is left alone.

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use shim::egress;

const REDIRECT: u16 = 3129;
const DNS: u16 = 5353;

/// Runs in the child; a panic or a false check exits non-zero.
fn scenario() -> Result<(), String> {
    shim::network::loopback_up().map_err(|e| e.to_string())?;
    let listener = TcpListener::bind(("127.0.0.1", REDIRECT)).map_err(|e| e.to_string())?;
    let dns = UdpSocket::bind(("127.0.0.1", DNS)).map_err(|e| e.to_string())?;
    dns.set_read_timeout(Some(Duration::from_secs(2))).unwrap();

    // Before the set-up: no route out.
    let before =
        TcpStream::connect_timeout(&"203.0.113.7:443".parse().unwrap(), Duration::from_secs(1));
    if before.is_ok() {
        return Err("connected out before the redirect was installed".into());
    }

    egress::install(REDIRECT, DNS).map_err(|e| format!("install: {e}"))?;

    let mut out = TcpStream::connect(("203.0.113.7", 443)).map_err(|e| format!("connect: {e}"))?;
    out.write_all(b"hello").unwrap();
    let (mut accepted, _) = listener.accept().unwrap();
    let orig = egress::original_destination(accepted.as_raw_fd()).map_err(|e| e.to_string())?;
    if orig != "203.0.113.7:443".parse::<SocketAddrV4>().unwrap() {
        return Err(format!("original destination {orig}"));
    }
    let mut buf = [0u8; 5];
    accepted.read_exact(&mut buf).unwrap();
    if &buf != b"hello" {
        return Err("payload".into());
    }

    // Loopback is not redirected: a server inside stays reachable on its own port.
    let inside = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = inside.local_addr().unwrap().port();
    TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("loopback: {e}"))?;
    inside.accept().unwrap();

    // DNS to any server lands in the stub; other UDP is dropped.
    let client = UdpSocket::bind("0.0.0.0:0").unwrap();
    client.send_to(b"other", "198.51.100.1:9999").ok();
    client.send_to(b"query", "198.51.100.1:53").unwrap();
    let mut q = [0u8; 16];
    let (n, _) = dns
        .recv_from(&mut q)
        .map_err(|e| format!("dns stub: {e}"))?;
    if &q[..n] != b"query" {
        return Err(format!("the stub got {:?} first", &q[..n]));
    }

    // IPv6 has no route.
    if TcpStream::connect_timeout(
        &"[2001:db8::1]:443".parse().unwrap(),
        Duration::from_secs(1),
    )
    .is_ok()
    {
        return Err("IPv6 connected out".into());
    }
    Ok(())
}

#[test]
fn outbound_tcp_and_dns_are_redirected_inside_the_namespace() {
    // SAFETY: fork in a test process; the child only runs `scenario` and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // Rootless, as most people run it: as root, become uid/gid 65534 first.
        // SAFETY: plain credential syscalls in the child.
        unsafe {
            if libc::geteuid() == 0
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(65534) != 0
                    || libc::setuid(65534) != 0)
            {
                eprintln!("drop to 65534: {}", std::io::Error::last_os_error());
                libc::_exit(2);
            }
        }
        // SAFETY: unshare in the single-threaded child.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
            eprintln!("unshare: {}", std::io::Error::last_os_error());
            unsafe { libc::_exit(2) };
        }
        let code = match scenario() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("egress scenario: {e}");
                1
            }
        };
        // SAFETY: leave the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "see the child's stderr above");
}
