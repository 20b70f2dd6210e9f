//! Who may talk to a control socket: a process of the launcher's own uid (SO_PEERCRED) in the
//! launcher's own user namespace. The sandbox runs in a user namespace of its own, so even a
//! program inside that found a way to the socket (it is hidden from every sandbox) is refused.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

/// `Err` with the reason the peer is refused.
pub fn check(sock: &impl AsFd) -> Result<(), String> {
    let cred = getsockopt(sock, PeerCredentials)
        .map_err(|e| format!("cannot read the client's credentials: {e}"))?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if cred.uid() != me {
        return Err(format!(
            "uid {} may not control this sandbox (only uid {me} may)",
            cred.uid()
        ));
    }
    // The namespace is read by the peer's pid, which is the peer's only while it lives: one
    // that connected and exited (leaving the connection to a child) could have its pid taken
    // by a process of this namespace. Its pidfd, taken by the kernel at connect, tells.
    let pidfd = peer_pidfd(sock)?;
    same_user_namespace(cred.pid())?;
    if exited(&pidfd) {
        return Err("the client exited before it could be checked".into());
    }
    Ok(())
}

/// The pidfd of the process that connected (SO_PEERPIDFD, Linux 6.5).
fn peer_pidfd(sock: &impl AsFd) -> Result<OwnedFd, String> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into an int of the size given.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 || fd < 0 {
        return Err(format!(
            "cannot identify the client's process: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a descriptor the kernel just installed for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether the process of `pidfd` has exited (its pidfd is readable then).
fn exited(pidfd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll of one valid pollfd, without waiting.
    unsafe { libc::poll(&mut p, 1, 0) != 0 }
}

fn same_user_namespace(pid: i32) -> Result<(), String> {
    let ours = std::fs::read_link("/proc/self/ns/user")
        .map_err(|e| format!("cannot read this process's user namespace: {e}"))?;
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/user"))
        .map_err(|e| format!("cannot read the client's user namespace: {e}"))?;
    if ours != theirs {
        return Err(
            "the client runs in another user namespace (inside a sandbox?); control sockets answer only the launcher's own namespace"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_of_the_same_user_and_namespace_is_accepted() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        check(&a).unwrap();
    }

    #[test]
    fn a_client_that_exited_before_the_check_is_refused() {
        let dir = std::env::temp_dir().join(format!("sl-peer-gone-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        // The connecting process leaves the connection to a child and exits. Unreaped, its pid
        // still names it (its user namespace still reads as this one), as it would name a
        // process of this namespace that took its pid.
        let mut client = std::process::Command::new("python3")
            .arg("-c")
            .arg("import os,socket,sys,time\ns=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\nif os.fork() == 0:\n    s.settimeout(10)\n    try: s.recv(1)\n    except OSError: pass\n    os._exit(0)\n")
            .arg(&path)
            .spawn()
            .expect("python3");
        let stat = format!("/proc/{}/stat", client.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !std::fs::read_to_string(&stat).unwrap().contains(") Z ") {
            assert!(
                std::time::Instant::now() < deadline,
                "the client never exited"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let (conn, _) = listener.accept().unwrap();
        let e = check(&conn).unwrap_err();
        assert!(e.contains("exited"), "{e}");
        client.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_client_in_another_user_namespace_is_refused() {
        let dir = std::env::temp_dir().join(format!("sl-peer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        // The same uid, mapped to itself in a new user namespace (as a sandbox is).
        let mut client = std::process::Command::new("unshare")
            .args(["--user", "--map-current-user", "python3", "-c"])
            .arg("import socket,sys,time; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(2)")
            .arg(&path)
            .spawn()
            .expect("unshare (util-linux) and python3");
        let (conn, _) = listener.accept().unwrap();
        let e = check(&conn).unwrap_err();
        assert!(e.contains("another user namespace"), "{e}");
        let _ = client.kill();
        let _ = client.wait();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
