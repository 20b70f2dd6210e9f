//! The supervisor's half of the namespaces: clone the shim into new user, mount, PID, IPC, UTS
//! and cgroup namespaces (the shim makes its network namespace itself, beside its mounts: see
//! `shim::network_thread`) and see its uid/gid maps written (by the child itself when
//! unprivileged, from here when started as root). The shim then runs in the cloned process, with
//! no exec.
//!
//! The clone happens while the launcher is still single-threaded, and the child makes only raw
//! syscalls on memory prepared before the clone until its maps are in place.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use seccompiler::BpfProgram;
use shim::channel::{Step, StepError};
use shim::spec::SandboxSpec;

/// The ids inside the sandbox and how they map to the host.
#[derive(Debug, Clone, Copy)]
pub struct Identity {
    /// uid/gid the sandbox runs as (mapped to the same host ids).
    pub uid: u32,
    pub gid: u32,
    /// The launcher runs as real root: the child switches to `uid`/`gid` and drops the
    /// supplementary groups before it execs the shim.
    pub switch_from_root: bool,
}

pub struct ShimProcess {
    pub pid: libc::pid_t,
    pub sync: OwnedFd,
    /// Why the shim has no user namespace of its own, if it has none (see `spawn_shim`).
    pub without_user_namespace: Option<Errno>,
}

fn hint_for_clone(errno: Errno) -> String {
    match errno {
        Errno::EPERM if shim::confinement::under_seccomp() => {
            shim::confinement::refused("creating namespaces (clone with CLONE_NEWUSER)")
        }
        Errno::EPERM | Errno::EACCES => {
            "unprivileged user namespaces are restricted here (kernel.apparmor_restrict_unprivileged_userns=1 on Ubuntu, kernel.unprivileged_userns_clone=0); run `sandbox-launch doctor`".into()
        }
        Errno::ENOSPC | Errno::EUSERS => {
            "the limit of user namespaces is reached (user.max_user_namespaces); run `sandbox-launch doctor`".into()
        }
        Errno::EINVAL => "this kernel lacks one of the namespaces; run `sandbox-launch doctor`".into(),
        _ => "run `sandbox-launch doctor`".into(),
    }
}

/// Clone the shim. On return its id maps are written and it is on its way to exec.
pub fn spawn_shim(
    id: Identity,
    spec: SandboxSpec,
    filter: BpfProgram,
) -> Result<ShimProcess, StepError> {
    let err =
        |what: &str, e: Errno| StepError::new(Step::Namespaces, format!("{what} => {e}"), None);
    let (parent_sock, child_sock) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| err("socketpair", e))?;
    let child_fd = child_sock.as_raw_fd();
    // Real root's child waits for its maps on an eventfd, not on the socket: a socket's
    // wake-up tells the scheduler that the waker is about to sleep, so the child was queued
    // behind the supervisor on its CPU while the other one idled, and the supervisor does not
    // sleep here — it plans the persistence protections (~0.5 ms lost). An eventfd's wake-up
    // puts the child where it can run at once.
    let go = if id.switch_from_root {
        // SAFETY: eventfd with valid flags; the descriptor is owned right away.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(err("eventfd", Errno::last()));
        }
        // SAFETY: a fresh descriptor of ours.
        Some(unsafe { OwnedFd::from_raw_fd(fd) })
    } else {
        None
    };
    let go_fd = go.as_ref().map_or(-1, |g| g.as_raw_fd());
    // Unprivileged, the child maps its own ids (the kernel allows a process to map the one uid
    // it has), which spares a round trip through the supervisor; real root must have them
    // written from the parent namespace, where it holds CAP_SETUID.
    let own_maps = (!id.switch_from_root).then(|| OwnMaps::new(id));

    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    let mut without_user_namespace = None;
    // SAFETY: a fork-like clone from a single-threaded process.
    let mut pid = unsafe { clone_fork_like(flags) };
    if pid < 0 {
        let errno = Errno::last();
        // Real root with CAP_SYS_ADMIN where no user namespace can be made (a kernel or node
        // that disables them, a profile that forbids CLONE_NEWUSER alone): the namespaces are
        // made as root, and the child drops to the sandbox's user exactly as it does inside a
        // user namespace. Every other layer is the same; the launch says so.
        if id.switch_from_root && can_do_without_user_namespace(errno) {
            // SAFETY: as above.
            pid = unsafe { clone_fork_like(flags & !libc::CLONE_NEWUSER) };
            without_user_namespace = Some(errno);
        }
        if pid < 0 {
            return Err(StepError::new(
                Step::Namespaces,
                format!("cannot create a user namespace: clone => {errno}"),
                Some(&hint_for_clone(errno)),
            ));
        }
    }
    if pid == 0 {
        // SAFETY: the child of a fork-like clone of a single-threaded process.
        unsafe {
            child_prepare(
                parent_sock.as_raw_fd(),
                child_fd,
                go_fd,
                id,
                own_maps.as_ref(),
            );
        }
        // The shim runs in this process: no re-exec (a second exec costs more than the rest
        // of the launch). It never returns.
        shim::run::main(child_fd, spec, filter)
    }
    drop(child_sock);
    let shim = ShimProcess {
        pid,
        sync: parent_sock,
        without_user_namespace,
    };
    if own_maps.is_some() {
        run_elsewhere(pid);
        return Ok(shim);
    }
    if without_user_namespace.is_none() {
        if let Err(e) = write_maps(pid, id) {
            kill_and_reap(pid);
            return Err(e);
        }
    }
    // The maps are in place: tell the child to go on.
    let one: u64 = 1;
    let go_fd = go.as_ref().map_or(-1, |g| g.as_raw_fd());
    // SAFETY: write of eight bytes from a valid buffer.
    if unsafe { libc::write(go_fd, (&one as *const u64).cast(), 8) } != 8 {
        let e = Errno::last();
        kill_and_reap(pid);
        return Err(err("write to the sync socket", e));
    }
    run_elsewhere(pid);
    Ok(shim)
}

/// Have the child run on another CPU than this one, now (`shim::cpus`): the supervisor goes on
/// working right after the clone (it plans the persistence protections), and the child waited
/// for the supervisor's CPU for 0.3-0.5 ms while another one idled.
fn run_elsewhere(pid: libc::pid_t) {
    shim::cpus::move_process(pid);
}

/// # Safety
/// A fork-like clone (no new stack, SIGCHLD on exit): only from a single-threaded process.
unsafe fn clone_fork_like(flags: libc::c_int) -> libc::pid_t {
    libc::syscall(
        libc::SYS_clone,
        (flags | libc::SIGCHLD) as libc::c_ulong,
        0usize,
        0usize,
        0usize,
        0usize,
    ) as libc::pid_t
}

/// Whether a failed user namespace may be done without: the failure says user namespaces are
/// unavailable (not some other namespace), and this process holds CAP_SYS_ADMIN, which making
/// the other namespaces without one takes. (The caller is real root.)
pub fn can_do_without_user_namespace(errno: Errno) -> bool {
    matches!(
        errno,
        Errno::EPERM | Errno::EACCES | Errno::ENOSPC | Errno::EUSERS | Errno::EINVAL
    ) && has_cap_sys_admin()
}

fn has_cap_sys_admin() -> bool {
    has_effective(CAP_SYS_ADMIN)
}

/// Whether this process holds `cap` (one of the first 32) in its effective set.
fn has_effective(cap: u32) -> bool {
    let mut header = libc_cap_header();
    let mut data = [CapData::default(); 2];
    // SAFETY: capget with valid pointers.
    (unsafe { capget(&mut header, &mut data) } == 0) && data[0].effective & (1 << cap) != 0
}

/// Why root's write of the sandbox's id maps was refused, and what to do: a container's root
/// without CAP_SETUID/CAP_SETGID (`--cap-drop ALL`) cannot map any id but its own.
fn hint_for_maps() -> String {
    if !has_effective(CAP_SETUID) || !has_effective(CAP_SETGID) {
        return "the launcher runs as root without CAP_SETUID/CAP_SETGID, which mapping the \
                sandbox's user into its user namespace takes: keep them (`--cap-add SETUID \
                --cap-add SETGID` after `--cap-drop ALL`), or run the container as that user \
                (`--user UID:GID`)"
            .into();
    }
    "the kernel refused the id mapping of the new user namespace; run `sandbox-launch doctor`"
        .into()
}

pub fn kill_and_reap(pid: libc::pid_t) {
    // SAFETY: signalling and reaping our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
}

/// Root's write of the maps of `pid`'s new user namespace. `doctor` maps its probes with it.
pub(crate) fn write_maps(pid: libc::pid_t, id: Identity) -> Result<(), StepError> {
    let write = |file: &str, content: String| -> Result<(), StepError> {
        let path = format!("/proc/{pid}/{file}");
        std::fs::write(&path, content.as_bytes()).map_err(|e| {
            StepError::new(
                Step::Namespaces,
                format!("cannot write {path}: {e}"),
                Some(&hint_for_maps()),
            )
        })
    };
    write("uid_map", format!("{0} {0} 1\n", id.uid))?;
    write("gid_map", format!("{0} {0} 1\n", id.gid))?;
    Ok(())
}

/// The child's own id maps, formatted before the clone (the child only makes raw syscalls).
/// `doctor` probes with the same code.
pub(crate) struct OwnMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl OwnMaps {
    pub(crate) fn new(id: Identity) -> Self {
        OwnMaps {
            uid_map: format!("{0} {0} 1\n", id.uid).into_bytes(),
            gid_map: format!("{0} {0} 1\n", id.gid).into_bytes(),
        }
    }

    /// Write them for this process. Without CAP_SETGID in the parent namespace a gid map
    /// requires setgroups to be denied first.
    ///
    /// # Safety
    /// Raw syscalls only: callable in the child of a fork-like clone.
    pub(crate) unsafe fn write_own(&self) -> bool {
        write_file(c"/proc/self/setgroups", b"deny")
            && write_file(c"/proc/self/uid_map", &self.uid_map)
            && write_file(c"/proc/self/gid_map", &self.gid_map)
    }
}

/// # Safety
/// Raw syscalls only.
unsafe fn write_file(path: &std::ffi::CStr, content: &[u8]) -> bool {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return false;
    }
    let ok = libc::write(fd, content.as_ptr().cast(), content.len()) == content.len() as isize;
    libc::close(fd);
    ok
}

/// The cloned child, before the shim runs. Only raw syscalls.
///
/// # Safety
/// Must run only in the child of a fork-like clone of a single-threaded process.
unsafe fn child_prepare(
    parent_sock: RawFd,
    sock: RawFd,
    go: RawFd,
    id: Identity,
    own: Option<&OwnMaps>,
) {
    libc::close(parent_sock);
    libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        0,
        0,
        0,
    );
    if let Some(maps) = own {
        if !maps.write_own() {
            libc::_exit(Step::Namespaces.exit_code());
        }
        // Should the supervisor die before the parent-death signal was armed, the shim's
        // first message (before the target starts) fails and it gives up.
        return;
    }
    // Wait for the id maps: the go on the eventfd. The socket ending first (the supervisor is
    // gone) ends the child; a message on it (the persistence plan, sent right after the go)
    // waits for the shim.
    let mut fds = [
        libc::pollfd {
            fd: go,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: sock,
            events: 0,
            revents: 0,
        },
    ];
    loop {
        let n = libc::poll(fds.as_mut_ptr(), 2, -1);
        if n > 0 {
            break;
        }
        if n < 0 && *libc::__errno_location() != libc::EINTR {
            libc::_exit(1);
        }
    }
    let mut value = 0u64;
    if fds[0].revents & libc::POLLIN == 0 || libc::read(go, (&mut value as *mut u64).cast(), 8) != 8
    {
        libc::_exit(1);
    }
    libc::close(go);
    if id.switch_from_root {
        if !switch_to(id) {
            libc::_exit(Step::Identity.exit_code());
        }
        // A change of credentials clears the parent-death signal.
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
    }
}

/// Real root's child, its maps written: become the sandbox's user, keeping the namespace's
/// capabilities (the shim drops every one of them itself before the target runs). `doctor`'s
/// probes switch with it.
///
/// # Safety
/// Raw syscalls only: callable in the child of a fork-like clone.
pub(crate) unsafe fn switch_to(id: Identity) -> bool {
    // No supplementary group either (root's own, `disk`, `shadow`...): checked, as a
    // setgroups that says it did what it did not would leave them all.
    if libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0
        || libc::setgroups(0, std::ptr::null()) != 0
        || libc::getgroups(0, std::ptr::null_mut()) != 0
        || libc::setresgid(id.gid, id.gid, id.gid) != 0
        || libc::setresuid(id.uid, id.uid, id.uid) != 0
    {
        return false;
    }
    libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0);
    // setresuid cleared the effective set; take back what is still permitted.
    let mut header = libc_cap_header();
    let mut data = [CapData::default(); 2];
    if capget(&mut header, &mut data) != 0 {
        return false;
    }
    data[0].effective = data[0].permitted;
    data[1].effective = data[1].permitted;
    capset(&mut header, &data) == 0
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// capability.h: CAP_SYS_ADMIN, in the first 32-bit word of the sets.
const CAP_SYS_ADMIN: u32 = 21;
/// capability.h: CAP_SETGID and CAP_SETUID.
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;

fn libc_cap_header() -> CapHeader {
    CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    }
}

/// # Safety
/// Raw capget with valid pointers.
unsafe fn capget(h: &mut CapHeader, d: &mut [CapData; 2]) -> libc::c_long {
    libc::syscall(libc::SYS_capget, h as *mut CapHeader, d.as_mut_ptr())
}

/// # Safety
/// Raw capset with valid pointers.
unsafe fn capset(h: &mut CapHeader, d: &[CapData; 2]) -> libc::c_long {
    libc::syscall(libc::SYS_capset, h as *mut CapHeader, d.as_ptr())
}
