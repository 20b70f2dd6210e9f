//! Which program opened a proxy connection: the client's address (as the accepted socket sees
//! it) is looked up in the sandbox's TCP table (`/proc/<shim>/net/tcp{,6}`) for the socket's
//! inode; the processes of the sandbox holding `socket:[inode]` are its owners, and their
//! `/proc/<pid>/exe` (and their ancestors' up to the sandbox's init) name the program.
//!
//! When the owners disagree (a socket shared across an exec of different programs), the answer
//! is "unknown", which rules with `binaries` treat as not matching: ambiguity fails closed.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// The program behind a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub exe: PathBuf,
    /// The executables of its parent, grandparent, ... up to (not including) the sandbox's init.
    pub ancestors: Vec<PathBuf>,
}

impl Program {
    /// The program itself, then its ancestors.
    pub fn chain(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(self.exe.as_path()).chain(self.ancestors.iter().map(PathBuf::as_path))
    }
}

/// Looks connections up among the processes below the sandbox's init.
#[derive(Debug, Clone, Copy)]
pub struct SocketOwners {
    init: libc::pid_t,
}

impl SocketOwners {
    pub fn new(init: libc::pid_t) -> Self {
        SocketOwners { init }
    }

    /// The sandbox's init is the supervisor's only child.
    pub fn of_only_child() -> Option<Self> {
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let children = children(me);
        match children.as_slice() {
            [only] => Some(Self::new(*only)),
            _ => None,
        }
    }

    /// The program that owns the client end `peer` of a connection to `local`.
    pub fn identify(&self, peer: SocketAddr, local: SocketAddr) -> Option<Program> {
        let net = PathBuf::from(format!("/proc/{}/net", self.init));
        let inode = ["tcp", "tcp6"].iter().find_map(|t| {
            let table = std::fs::read_to_string(net.join(t)).ok()?;
            socket_inode(&table, peer, local)
        })?;
        let target = format!("socket:[{inode}]");
        let mut owners = Vec::new();
        for pid in descendants(self.init) {
            if holds(pid, &target) {
                owners.push(pid);
            }
        }
        let programs: Vec<Program> = owners.iter().filter_map(|&pid| self.program(pid)).collect();
        let first = programs.first()?;
        if programs.len() != owners.len() || programs.iter().any(|p| p.exe != first.exe) {
            return None;
        }
        Some(first.clone())
    }

    fn program(&self, pid: libc::pid_t) -> Option<Program> {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        let mut ancestors = Vec::new();
        let mut seen = HashSet::new();
        let mut p = parent(pid)?;
        while p != self.init && p > 1 && seen.insert(p) {
            ancestors.push(std::fs::read_link(format!("/proc/{p}/exe")).ok()?);
            p = parent(p)?;
        }
        Some(Program { exe, ancestors })
    }
}

/// Find the inode of the socket whose local address is `client` and remote address `server`
/// in a `/proc/net/tcp{,6}` table.
pub fn socket_inode(table: &str, client: SocketAddr, server: SocketAddr) -> Option<u64> {
    let client = canonical(client);
    let server = canonical(server);
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let local = parse_addr(cols.get(1)?)?;
        let remote = parse_addr(cols.get(2)?)?;
        if canonical(local) == client && canonical(remote) == server {
            cols.get(9)?.parse().ok().filter(|&i: &u64| i != 0)
        } else {
            None
        }
    })
}

fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(super::matcher::canonical_ip(a.ip()), a.port())
}

/// `0100007F:0C38` (IPv4) or 32 hex digits (IPv6), each 32-bit word in host byte order.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        Some(
            u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16)
                .ok()?
                .to_ne_bytes(),
        )
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

fn children(pid: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<libc::pid_t>().ok()),
            );
        }
    }
    out
}

fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let mut out = Vec::new();
    let mut queue = vec![root];
    let mut seen = HashSet::new();
    while let Some(pid) = queue.pop() {
        for c in children(pid) {
            if seen.insert(c) {
                out.push(c);
                queue.push(c);
            }
        }
    }
    out
}

fn parent(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may contain spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

fn holds(pid: libc::pid_t, target: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .map(|l| l.as_os_str() == target)
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0C38 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:A1B2 0100007F:0C38 01 00000000:00000000 00:00000000 00000000 65534        0 2222 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:0C38 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 3333 1 0000000000000000 20 4 30 10 -1
";

    #[test]
    fn the_client_end_of_the_connection_is_found_in_the_tcp_table() {
        let client: SocketAddr = "127.0.0.1:41394".parse().unwrap();
        let server: SocketAddr = "127.0.0.1:3128".parse().unwrap();
        assert_eq!(socket_inode(TABLE, client, server), Some(2222));
        assert_eq!(socket_inode(TABLE, server, client), Some(3333));
        let other: SocketAddr = "127.0.0.1:41395".parse().unwrap();
        assert_eq!(socket_inode(TABLE, other, server), None);
    }

    #[test]
    fn ipv6_table_addresses_are_decoded() {
        // ::1 port 3128 as the kernel prints it.
        let a = parse_addr("00000000000000000000000001000000:0C38").unwrap();
        assert_eq!(a, "[::1]:3128".parse().unwrap());
        let mapped = parse_addr("0000000000000000FFFF00000100007F:0C38").unwrap();
        assert_eq!(canonical(mapped), "127.0.0.1:3128".parse().unwrap());
    }

    #[tokio::test]
    async fn a_connection_of_this_process_is_traced_to_this_executable() {
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        // Our own connection: look it up with ourselves as the "init" of a one-process tree by
        // checking the pieces directly.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let table = std::fs::read_to_string(format!("/proc/{me}/net/tcp")).unwrap();
        let inode = socket_inode(
            &table,
            client.local_addr().unwrap(),
            listener.local_addr().unwrap(),
        )
        .expect("our socket is in the table");
        assert!(holds(me, &format!("socket:[{inode}]")));
        assert_eq!(
            std::fs::read_link(format!("/proc/{me}/exe")).unwrap(),
            std::env::current_exe().unwrap()
        );
    }
}
