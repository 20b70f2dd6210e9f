//! Who may talk to a control socket: a process of the launcher's own uid (SO_PEERCRED) in the
//! launcher's own user namespace. The sandbox runs in a user namespace of its own, so even a
//! program inside that found a way to the socket (it is hidden from every sandbox) is refused.

use std::os::fd::AsFd;

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
    same_user_namespace(cred.pid())
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
