//! Which pathname unix sockets a program inside may connect to. A socket is reached through the
//! filesystem, and a read-only mount does not stop `connect()`, so every host daemon whose
//! socket lies in a readable tree (gpg-agent in `~/.gnupg`, ssh ControlMaster sockets in
//! `~/.ssh`, IDE and database sockets) would be one `connect()` away. Allowed are only:
//!
//! * sockets handed in with `--allow-unix-socket`,
//! * sockets on the sandbox's own filesystems (its `/tmp`, `/dev/shm`, the emptied `/run`...):
//!   nothing of the host is there unless handed in,
//! * sockets bound inside the sandbox (every `bind` goes through the guard, which notes them),
//! * init's own: the registration socket of nested sandboxes (`nested::SOCKET`).
//!
//! The decision is on the socket's inode, found from the path init copied once and resolved as
//! the target would; init then connects the target's socket to that very inode (through its
//! `/proc/self/fd` link), so neither a rewritten address nor a renamed path can change what is
//! reached. Sends that name an address (sendto with one, sendmsg, sendmmsg: the only way a
//! datagram reaches a socket it is not connected to) are judged the same way and performed by
//! init (`perform::send`). Abstract names are not files: the sandbox's own network namespace
//! holds them (and Landlock scopes them to the sandbox where the kernel can, ABI >= 6).

use std::collections::HashSet;
use std::ffi::CStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use crate::spec::HostSockets as Spec;

/// A file's identity.
type Inode = (u64, u64);

struct Rules {
    handed_in: HashSet<Inode>,
    /// Init's own sockets (see `init`): connects there are stamped with who asked.
    inits_own: HashSet<Inode>,
    own_filesystems: HashSet<u64>,
    bound_inside: Mutex<HashSet<Inode>>,
}

/// Set once by init, after the mounts (the paths are looked up in the sandbox's view), before
/// the program starts.
static RULES: OnceLock<Rules> = OnceLock::new();

fn stat(path: &Path) -> Result<libc::stat, String> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: a NUL in the path", path.display()))?;
    // SAFETY: stat fills the struct it is given.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid struct.
    if unsafe { libc::stat(c.as_ptr(), &mut st) } < 0 {
        return Err(format!(
            "{}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(st)
}

fn inode(st: &libc::stat) -> Inode {
    (st.st_dev, st.st_ino)
}

/// Note what the spec names, and `inits_own`, the sockets init made for the sandbox (the
/// registration socket of nested sandboxes); a handed-in socket or an own filesystem that is not
/// there is an error (the layout planned them).
pub fn init(spec: &Spec, inits_own: &[&Path]) -> Result<(), String> {
    let mut handed_in = HashSet::new();
    for p in &spec.handed_in {
        let st = stat(p).map_err(|e| format!("the handed-in socket {e}"))?;
        handed_in.insert(inode(&st));
    }
    let mut own = HashSet::new();
    for p in inits_own {
        let i = inode(&stat(p)?);
        handed_in.insert(i);
        own.insert(i);
    }
    let mut own_filesystems = HashSet::new();
    for p in &spec.own_filesystems {
        own_filesystems.insert(stat(p)?.st_dev);
    }
    RULES
        .set(Rules {
            handed_in,
            inits_own: own,
            own_filesystems,
            bound_inside: Mutex::default(),
        })
        .map_err(|_| "the host-socket rules were set twice".to_string())
}

/// Whether a connect to the socket `st` may go ahead. Without rules (no spec), nothing is
/// allowed: a guard that does not know the rules fails closed.
pub fn may_connect(st: &libc::stat) -> bool {
    let Some(r) = RULES.get() else {
        return false;
    };
    r.handed_in.contains(&inode(st))
        || r.own_filesystems.contains(&st.st_dev)
        || r.bound_inside.lock().is_ok_and(|b| b.contains(&inode(st)))
}

/// Whether `st` is one of init's own sockets (a connection there gets the guard's stamp).
pub fn is_inits_own(st: &libc::stat) -> bool {
    RULES
        .get()
        .is_some_and(|r| r.inits_own.contains(&inode(st)))
}

/// A socket was just bound at `name` in `dir`: it is the sandbox's own.
pub fn bound(dir: &OwnedFd, name: &CStr) {
    // SAFETY: fstatat fills the struct it is given.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor, a NUL-terminated name and a valid struct.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK {
        if let Some(Ok(mut b)) = RULES.get().map(|r| r.bound_inside.lock()) {
            b.insert(inode(&st));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_without_rules_allows_no_connect() {
        // Nothing in the shim's unit tests sets the rules.
        // SAFETY: a zeroed stat is a valid value.
        let st: libc::stat = unsafe { std::mem::zeroed() };
        assert!(!may_connect(&st));
    }
}
