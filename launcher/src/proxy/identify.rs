//! Which program opened a proxy connection: the client's address (as the accepted socket sees
//! it) is looked up in the sandbox's TCP table (`/proc/<shim>/net/tcp{,6}`) for the socket's
//! inode; the processes of the sandbox holding `socket:[inode]` are its owners, and their
//! `/proc/<pid>/exe` (and their ancestors' up to the sandbox's init) name the program.
//!
//! When the owners disagree (a socket shared across an exec of different programs), the answer
//! is "unknown", which rules with `binaries` treat as not matching: ambiguity fails closed.
//!
//! Cost under load: one scan (the TCP tables and every process's descriptors) answers for every
//! connection accepted before it began, so a burst of connections costs a few scans, not one
//! each; scans run one at a time on tokio's blocking pool, never on the proxy's thread. A
//! connection is only ever answered from a scan that began after it was accepted: its client
//! socket was alive then, and no other socket can have held its address meanwhile.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use super::sock_diag::SockDiag;

/// The program behind a connection.
#[derive(Debug, Clone)]
pub struct Program {
    pub exe: PathBuf,
    /// The executables of its parent, grandparent, ... up to (not including) the sandbox's init.
    pub ancestors: Vec<PathBuf>,
    /// One process running it (host pid), for prompts; not part of what the program is.
    pub pid: Option<libc::pid_t>,
}

/// The same program: the same executable under the same ancestors, whichever process runs it.
impl PartialEq for Program {
    fn eq(&self, other: &Self) -> bool {
        self.exe == other.exe && self.ancestors == other.ancestors
    }
}

impl Eq for Program {}

impl Program {
    /// The program itself, then its ancestors.
    pub fn chain(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(self.exe.as_path()).chain(self.ancestors.iter().map(PathBuf::as_path))
    }
}

/// What one scan found.
#[derive(Debug, Default)]
struct Snapshot {
    began: Option<Instant>,
    /// Without `sock_diag`: (client end, server end) -> socket inode, from the TCP tables.
    conns: HashMap<(SocketAddr, SocketAddr), u64>,
    /// Socket inode -> the program owning it (`None`: its owners disagree).
    programs: HashMap<u64, Option<Program>>,
}

/// Scans start at most this often: under a sustained load every scan answers for all the
/// connections that arrived since the last one, and the scanning stays a fraction of a core.
const MIN_GAP: std::time::Duration = std::time::Duration::from_millis(5);

/// Looks connections up among the processes below the sandbox's init.
#[derive(Debug)]
pub struct SocketOwners {
    init: libc::pid_t,
    /// Finds one socket's inode by its addresses; without it the TCP tables are read.
    diag: Option<SockDiag>,
    latest: Mutex<Arc<Snapshot>>,
    /// Held while a scan runs: one at a time.
    scanning: tokio::sync::Mutex<()>,
    /// How many scans ran (the load tests count them).
    pub scans: std::sync::atomic::AtomicUsize,
}

impl SocketOwners {
    pub fn new(init: libc::pid_t, diag: Option<SockDiag>) -> Self {
        SocketOwners {
            init,
            diag,
            latest: Mutex::default(),
            scanning: tokio::sync::Mutex::new(()),
            scans: Default::default(),
        }
    }

    /// The sandbox's init is the supervisor's only child.
    pub fn of_only_child(diag: Option<SockDiag>) -> Option<Self> {
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        let children = children(me);
        match children.as_slice() {
            [only] => Some(Self::new(*only, diag)),
            _ => None,
        }
    }

    /// The program that owns the client end `peer` of a connection to `local`, accepted at
    /// `accepted` (or before).
    pub async fn identify(
        self: &Arc<Self>,
        peer: SocketAddr,
        local: SocketAddr,
        accepted: Instant,
    ) -> Option<Program> {
        let key = (canonical(peer), canonical(local));
        let inode = match &self.diag {
            Some(diag) => match diag.inode(key.0, key.1) {
                Ok(Some(inode)) => Some(inode),
                Ok(None) => return None,
                Err(_) => None,
            },
            None => None,
        };
        if let Some(found) = self.answer(inode, &key, accepted) {
            return found;
        }
        let _one_at_a_time = self.scanning.lock().await;
        // A scan that began after our accept may have finished while we waited.
        if let Some(found) = self.answer(inode, &key, accepted) {
            return found;
        }
        let previous = self.latest.lock().ok()?.began;
        if let Some(previous) = previous {
            tokio::time::sleep_until(previous + MIN_GAP).await;
        }
        let began = Instant::now();
        self.scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let owners = self.clone();
        let mut snapshot = tokio::task::spawn_blocking(move || owners.scan())
            .await
            .ok()?;
        snapshot.began = Some(began);
        if let Ok(mut latest) = self.latest.lock() {
            *latest = Arc::new(snapshot);
        }
        self.answer(inode, &key, accepted).flatten()
    }

    /// From the latest scan: by inode from any scan (socket inodes are not reused while the
    /// socket lives), by addresses only from a scan that began after `accepted`.
    fn answer(
        &self,
        inode: Option<u64>,
        key: &(SocketAddr, SocketAddr),
        accepted: Instant,
    ) -> Option<Option<Program>> {
        let latest = self.latest.lock().ok()?.clone();
        let fresh = latest.began? >= accepted;
        let inode = match inode {
            Some(inode) => inode,
            None if fresh => match latest.conns.get(key) {
                Some(inode) => *inode,
                None => return Some(None),
            },
            None => return None,
        };
        match latest.programs.get(&inode) {
            Some(program) => Some(program.clone()),
            None if fresh => Some(None),
            None => None,
        }
    }

    /// Every socket of the sandbox's processes and the program owning it.
    fn scan(&self) -> Snapshot {
        let mut conns = HashMap::new();
        if self.diag.is_none() {
            let net = PathBuf::from(format!("/proc/{}/net", self.init));
            for table in ["tcp", "tcp6"] {
                if let Ok(text) = std::fs::read_to_string(net.join(table)) {
                    conns.extend(connections(&text));
                }
            }
        }
        let wanted: HashSet<u64> = conns.values().copied().collect();
        let mut holders: HashMap<u64, Vec<libc::pid_t>> = HashMap::new();
        for pid in descendants(self.init) {
            for inode in socket_inodes(pid) {
                if self.diag.is_some() || wanted.contains(&inode) {
                    holders.entry(inode).or_default().push(pid);
                }
            }
        }
        let mut by_pid: HashMap<libc::pid_t, Option<Program>> = HashMap::new();
        let mut programs = HashMap::new();
        for (inode, pids) in holders {
            let found: Vec<Option<Program>> = pids
                .iter()
                .map(|&pid| {
                    by_pid
                        .entry(pid)
                        .or_insert_with(|| self.program(pid))
                        .clone()
                })
                .collect();
            let agreed = match found.first() {
                Some(Some(first)) if found.iter().all(|p| p.as_ref() == Some(first)) => {
                    Some(first.clone())
                }
                _ => None,
            };
            programs.insert(inode, agreed);
        }
        Snapshot {
            began: None,
            conns,
            programs,
        }
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
        Some(Program {
            exe,
            ancestors,
            pid: Some(pid),
        })
    }
}

/// The connected sockets of a `/proc/net/tcp{,6}` table: ((local, remote), inode), addresses
/// canonical (IPv4-mapped IPv6 as IPv4). Listening sockets are left out.
fn connections(table: &str) -> impl Iterator<Item = ((SocketAddr, SocketAddr), u64)> + '_ {
    table.lines().skip(1).filter_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // LISTEN and TIME_WAIT sockets have no program behind them.
        if matches!(cols.get(3), Some(&"0A") | Some(&"06")) {
            return None;
        }
        let local = canonical(parse_addr(cols.get(1)?)?);
        let remote = canonical(parse_addr(cols.get(2)?)?);
        let inode: u64 = cols.get(9)?.parse().ok().filter(|&i: &u64| i != 0)?;
        Some(((local, remote), inode))
    })
}

/// The inodes of the sockets `pid` holds.
fn socket_inodes(pid: libc::pid_t) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| {
            let link = std::fs::read_link(fd.path()).ok()?;
            let text = link.to_str()?;
            text.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// Find the inode of the socket whose local address is `client` and remote address `server`
/// in a `/proc/net/tcp{,6}` table.
pub fn socket_inode(table: &str, client: SocketAddr, server: SocketAddr) -> Option<u64> {
    let wanted = (canonical(client), canonical(server));
    connections(table).find_map(|(conn, inode)| (conn == wanted).then_some(inode))
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
        assert!(socket_inodes(me).contains(&inode));
        assert_eq!(
            std::fs::read_link(format!("/proc/{me}/exe")).unwrap(),
            std::env::current_exe().unwrap()
        );
    }

    #[tokio::test]
    async fn a_burst_of_connections_is_answered_by_a_few_scans_off_the_proxy_thread() {
        for diag in [false, true] {
            burst(diag).await;
        }
    }

    async fn burst(diag: bool) {
        // This test process stands for the sandbox's processes: its parent plays the init.
        // SAFETY: getppid cannot fail.
        let parent = unsafe { libc::getppid() };
        let diag = diag.then(|| SockDiag::new(shim::network::sock_diag().unwrap()));
        let owners = Arc::new(SocketOwners::new(parent, diag));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        let mut accepted = Vec::new();
        for _ in 0..50 {
            clients.push(tokio::net::TcpStream::connect(server).await.unwrap());
            accepted.push(listener.accept().await.unwrap());
        }
        let at = Instant::now();
        let lookups = accepted.iter().map(|(_, peer)| {
            let owners = owners.clone();
            let peer = *peer;
            tokio::spawn(async move { owners.identify(peer, server, at).await })
        });
        let me = std::env::current_exe().unwrap();
        for lookup in lookups.collect::<Vec<_>>() {
            let program = lookup.await.unwrap().expect("identified");
            assert_eq!(program.exe, me);
        }
        let scans = owners.scans.load(std::sync::atomic::Ordering::Relaxed);
        assert!((1..=2).contains(&scans), "{scans} scans for 50 connections");
        // A connection accepted after the last scan began is not answered from it.
        let late = tokio::net::TcpStream::connect(server).await.unwrap();
        let (_, peer) = listener.accept().await.unwrap();
        let program = owners.identify(peer, server, Instant::now()).await;
        assert_eq!(program.map(|p| p.exe), Some(me));
        assert_eq!(
            owners.scans.load(std::sync::atomic::Ordering::Relaxed),
            scans + 1
        );
        drop(late);
    }
}
