//! Verify, don't assume: after every layer is applied and before the target is executed, check
//! from inside that each one is in force. Any failed check refuses the launch.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use serde::Serialize;

use crate::channel::{Step, StepError};
use crate::landlock::LandlockFacts;
use crate::spec::{NetworkSpec, SandboxSpec};
use crate::sys;

/// The facts checked from inside, reported to `--json-status-fd`.
#[derive(Debug, Serialize)]
pub struct Facts {
    pub seccomp_mode: u32,
    /// How many filters are stacked on init's main thread (`Seccomp_filters`, Linux >= 5.9).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_filters: Option<u32>,
    pub no_new_privs: bool,
    pub capabilities: Caps,
    pub uid: u32,
    pub gid: u32,
    pub hostname: String,
    pub landlock: LandlockFacts,
    /// What a write outside the writable roots answered.
    pub landlock_write_probe: String,
    pub network_interfaces: Vec<String>,
    /// What a connect to a non-loopback address answered (absent with the host network).
    pub external_connect: Option<String>,
    pub old_root_reachable: bool,
    pub unreadable: Vec<String>,
    pub unwritable: Vec<String>,
    /// This process's `/proc/self/oom_score_adj`, which everything inside inherits.
    pub oom_score_adj: i32,
    /// The create guard's thread of init, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard_thread: Option<GuardThreadFacts>,
}

/// The create guard's thread: under seccomp like the rest of init, no effective capability,
/// and in its permitted set at most CAP_SYS_PTRACE (raised only to reach a non-dumpable
/// target's own memory and descriptors).
#[derive(Debug, Serialize)]
pub struct GuardThreadFacts {
    pub seccomp_mode: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_filters: Option<u32>,
    pub no_new_privs: bool,
    pub capabilities: Caps,
}

#[derive(Debug, Serialize, Default)]
pub struct Caps {
    pub inheritable: u64,
    pub permitted: u64,
    pub effective: u64,
    pub bounding: u64,
    pub ambient: u64,
}

fn fail(message: String) -> StepError {
    StepError::new(
        Step::Verify,
        message,
        Some("a layer did not take effect; the program was not started. Run `sandbox-launch doctor` and report this"),
    )
}

/// Fields of /proc/self/status.
struct Status {
    seccomp: u32,
    seccomp_filters: Option<u32>,
    nnp: bool,
    caps: Caps,
}

fn read_status(path: &str) -> Result<Status, StepError> {
    let text = sys::read_proc(path).map_err(|e| fail(format!("cannot read {path}: {e}")))?;
    let field = |name: &str| -> Option<&str> {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
            .map(str::trim)
    };
    let hex = |name: &str| -> Result<u64, StepError> {
        field(name)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .ok_or_else(|| fail(format!("{path} has no {name}")))
    };
    Ok(Status {
        seccomp: field("Seccomp").and_then(|v| v.parse().ok()).unwrap_or(0),
        seccomp_filters: field("Seccomp_filters").and_then(|v| v.parse().ok()),
        nnp: field("NoNewPrivs") == Some("1"),
        caps: Caps {
            inheritable: hex("CapInh")?,
            permitted: hex("CapPrm")?,
            effective: hex("CapEff")?,
            bounding: hex("CapBnd")?,
            ambient: hex("CapAmb")?,
        },
    })
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// Creating a directory in /dev is allowed by the mounts (a writable tmpfs of ours, owned by us)
/// and by the permission bits, so only Landlock can refuse it: the refusal proves Landlock works.
fn landlock_probe(facts: &LandlockFacts) -> Result<String, StepError> {
    let probe = Path::new("/dev/.sandbox-launch-probe");
    let c = cpath(probe);
    // SAFETY: mkdir with a valid path.
    let ret = unsafe { libc::mkdir(c.as_ptr(), 0o700) };
    if ret == 0 {
        // SAFETY: rmdir with a valid path.
        unsafe { libc::rmdir(c.as_ptr()) };
        if facts.enforced {
            return Err(fail(
                "Landlock reported enforced, but a write outside the writable roots succeeded"
                    .into(),
            ));
        }
        return Ok("allowed (Landlock not enforced)".into());
    }
    let errno = Errno::last();
    if facts.enforced && errno != Errno::EACCES {
        return Err(fail(format!(
            "the Landlock write probe failed with {errno} instead of EACCES: cannot tell whether Landlock is in force"
        )));
    }
    Ok(format!("denied ({errno})"))
}

fn interfaces() -> Result<Vec<String>, StepError> {
    let text = sys::read_proc("/proc/self/net/dev")
        .map_err(|e| fail(format!("cannot read /proc/self/net/dev: {e}")))?;
    Ok(text
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(|s| s.trim().to_string())
        .collect())
}

/// A UDP connect sends nothing; it only asks the routing table. TEST-NET-1 is never routed here.
/// A UDP "connect" (no packet sent) to a documentation address: `Ok(local address)` when there
/// is a route, the errno when there is none.
fn external_connect() -> Result<Result<std::net::SocketAddr, Errno>, StepError> {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0")
        .or_else(|_| std::net::UdpSocket::bind("0.0.0.0:0"))
        .map_err(|e| {
            fail(format!(
                "cannot create a UDP socket for the network probe: {e}"
            ))
        })?;
    match sock.connect("192.0.2.1:9") {
        Ok(()) => Ok(sock
            .local_addr()
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0)))),
        Err(e) => Ok(Err(Errno::from_raw(e.raw_os_error().unwrap_or(0)))),
    }
}

/// Whether anything of the staging root or the old root is still mounted: a mount at or under
/// `/oldroot`, or more than one mount at `/` (the old root stacked on the new one). Read from
/// `/proc/self/mounts`, which lists the same mounts as `mountinfo` (those reachable from this
/// process's root) with the same escaped mount points, and costs about a third less to make:
/// no root within the filesystem, no mount ids or propagation.
fn old_root_reachable() -> Result<bool, StepError> {
    let text = sys::read_proc("/proc/self/mounts")
        .map_err(|e| fail(format!("cannot read /proc/self/mounts: {e}")))?;
    Ok(root_mounts_left(&text))
}

/// Of a `/proc/self/mounts` text: whether the old root or a second `/` is in it.
fn root_mounts_left(mounts: &str) -> bool {
    let mut roots = 0;
    for line in mounts.lines() {
        let mount_point = line.split(' ').nth(1).unwrap_or("");
        if mount_point == "/" {
            roots += 1;
        }
        if mount_point == "/oldroot" || mount_point.starts_with("/oldroot/") {
            return true;
        }
    }
    roots != 1
}

fn unreadable(path: &Path) -> Result<(), StepError> {
    let c = cpath(path);
    // SAFETY: open with a valid path; closed right away.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd >= 0 {
        // SAFETY: we own fd.
        unsafe { libc::close(fd) };
        return Err(fail(format!(
            "{} is readable although the policy denies reading it",
            path.display()
        )));
    }
    Ok(())
}

fn unwritable(dir: &Path) -> Result<(), StepError> {
    let probe = dir.join(".sandbox-launch-write-probe");
    let c = cpath(&probe);
    // SAFETY: open with a valid path; closed and removed right away if it succeeded.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd >= 0 {
        // SAFETY: we own fd; unlink the probe we just created.
        unsafe {
            libc::close(fd);
            libc::unlink(c.as_ptr());
        }
        return Err(fail(format!(
            "{} is writable although the policy makes it read-only",
            dir.display()
        )));
    }
    Ok(())
}

/// What is settled once init has entered the mount tree and named the host, and which nothing
/// of init's changes afterwards (no mount, no name, no OOM score): checked while init waits for
/// its network's thread to end, the rest by [`verify`] once every layer is in place.
pub struct Settled {
    hostname: String,
    oom_score_adj: i32,
}

/// The hostname, the old root gone, the OOM score; see [`Settled`].
pub fn settled(spec: &SandboxSpec) -> Result<Settled, StepError> {
    let hostname = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    if hostname != spec.hostname {
        return Err(fail(format!(
            "hostname is {hostname:?}, expected {:?}",
            spec.hostname
        )));
    }
    if old_root_reachable()? {
        return Err(fail(
            "the host's root is still mounted inside the sandbox".into(),
        ));
    }
    let oom_score_adj = sys::read_proc("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse().ok());
    if oom_score_adj != Some(spec.limits.oom_score_adj) {
        return Err(fail(format!(
            "oom_score_adj is {oom_score_adj:?}, expected {}",
            spec.limits.oom_score_adj
        )));
    }
    Ok(Settled {
        hostname,
        oom_score_adj: spec.limits.oom_score_adj,
    })
}

/// Everything else, once every layer is in place (privileges, Landlock, init's own seccomp
/// filter): what [`settled`] found, with the credentials, the filter, Landlock's write probe,
/// the network's interfaces and route, and the paths that must be unreadable or unwritable.
/// `transparent`: the shim routed outbound traffic into `lo` for the redirect (transparent
/// egress); otherwise there must be no route out at all. The create guard's thread is checked
/// on its own ([`verify_guard_thread`], into `guard_thread`).
pub fn verify(
    spec: &SandboxSpec,
    settled: Settled,
    landlock: LandlockFacts,
    transparent: bool,
) -> Result<Facts, StepError> {
    let status = read_status("/proc/self/status")?;
    if status.seccomp != 2 {
        return Err(fail(format!(
            "seccomp mode is {} instead of 2 (filter)",
            status.seccomp
        )));
    }
    if !status.nnp {
        return Err(fail("no_new_privs is not set".into()));
    }
    let c = &status.caps;
    if c.inheritable | c.permitted | c.effective | c.bounding | c.ambient != 0 {
        return Err(fail(format!("capabilities remain: {c:?}")));
    }
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid, euid, egid) = unsafe {
        (
            libc::getuid(),
            libc::getgid(),
            libc::geteuid(),
            libc::getegid(),
        )
    };
    if (uid, euid, gid, egid) != (spec.uid, spec.uid, spec.gid, spec.gid) {
        return Err(fail(format!(
            "running as uid {uid}/{euid} gid {gid}/{egid}, expected uid {} gid {}",
            spec.uid, spec.gid
        )));
    }
    // SAFETY: a zero-sized query writes nothing.
    let groups = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if spec.no_supplementary_groups && groups != 0 {
        return Err(fail(format!(
            "{groups} supplementary group(s) remain, expected none (started as root)"
        )));
    }
    let Settled {
        hostname,
        oom_score_adj,
    } = settled;
    let landlock_write_probe = landlock_probe(&landlock)?;
    let network_interfaces = interfaces()?;
    let external = if spec.network == NetworkSpec::Full {
        None
    } else {
        if network_interfaces != ["lo"] {
            return Err(fail(format!(
                "the network namespace has interfaces {network_interfaces:?}, expected only lo"
            )));
        }
        match (external_connect()?, transparent) {
            (Err(errno), false) => Some(errno.to_string()),
            (Ok(local), true) if local.ip().is_loopback() => {
                Some("routed into lo, redirected to the proxy (transparent egress)".to_string())
            }
            (Ok(local), _) => {
                return Err(fail(format!(
                    "a connect to a non-loopback address found a route (from {local})"
                )))
            }
            (Err(errno), true) => {
                return Err(fail(format!(
                    "transparent egress is set up but outbound traffic has no route ({errno})"
                )))
            }
        }
    };
    for p in &spec.verify_unreadable {
        unreadable(p)?;
    }
    for d in &spec.verify_unwritable_dirs {
        unwritable(d)?;
    }
    Ok(Facts {
        seccomp_mode: status.seccomp,
        seccomp_filters: status.seccomp_filters,
        no_new_privs: status.nnp,
        capabilities: status.caps,
        uid,
        gid,
        hostname,
        landlock,
        landlock_write_probe,
        network_interfaces,
        external_connect: external,
        old_root_reachable: false,
        oom_score_adj,
        unreadable: spec
            .verify_unreadable
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        unwritable: spec
            .verify_unwritable_dirs
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        guard_thread: None,
    })
}

/// The guard thread's filter is shared with init's main thread, which has one more stacked on
/// it that narrows it back to the policy (see `create_guard::GuardThread`): where the kernel
/// counts filters, the main thread must have more than the guard's thread.
pub fn verify_main_thread_narrowed(main: Option<u32>, guard: Option<u32>) -> Result<(), StepError> {
    match (main, guard) {
        (Some(m), Some(g)) if m <= g => Err(fail(format!(
            "init's main thread has {m} seccomp filter(s) and its guard thread {g}: the filter \
             that holds the main thread to the policy is missing"
        ))),
        _ => Ok(()),
    }
}

/// The create guard's thread of init (`tid`), once its filter is in place.
pub fn verify_guard_thread(tid: libc::pid_t) -> Result<GuardThreadFacts, StepError> {
    let status = read_status(&format!("/proc/self/task/{tid}/status"))?;
    if status.seccomp != 2 || !status.nnp {
        return Err(fail(format!(
            "the create guard's thread runs with seccomp mode {} and no_new_privs {}",
            status.seccomp, status.nnp
        )));
    }
    let c = &status.caps;
    let ptrace = 1u64 << caps::Capability::CAP_SYS_PTRACE.index();
    if c.inheritable | c.effective | c.bounding | c.ambient != 0 || c.permitted & !ptrace != 0 {
        return Err(fail(format!(
            "the create guard's thread holds more than CAP_SYS_PTRACE (permitted only): {c:?}"
        )));
    }
    Ok(GuardThreadFacts {
        seccomp_mode: status.seccomp,
        seccomp_filters: status.seccomp_filters,
        no_new_privs: status.nnp,
        capabilities: status.caps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "/dev/vda / ext4 ro,nosuid,nodev,relatime 0 0\n\
        proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n\
        tmpfs /dev tmpfs rw,nosuid,noexec,mode=755 0 0\n\
        /dev/vda /work/my\\040dir ext4 rw,relatime 0 0\n";

    #[test]
    fn a_main_thread_without_its_narrowing_filter_is_refused() {
        assert!(verify_main_thread_narrowed(Some(2), Some(1)).is_ok());
        let e = verify_main_thread_narrowed(Some(1), Some(1)).unwrap_err();
        assert!(e.0.message.contains("missing"), "{}", e.0.message);
        // A kernel that does not count filters: nothing to compare.
        assert!(verify_main_thread_narrowed(None, None).is_ok());
    }

    #[test]
    fn one_root_and_no_old_root_is_clean() {
        assert!(!root_mounts_left(MOUNTS));
    }

    #[test]
    fn a_second_root_is_the_old_root_stacked() {
        let stacked = format!("{MOUNTS}/dev/sda1 / ext4 rw,relatime 0 0\n");
        assert!(root_mounts_left(&stacked));
    }

    #[test]
    fn anything_at_or_under_oldroot_is_the_old_root() {
        for mp in ["/oldroot", "/oldroot/proc"] {
            let left = format!("{MOUNTS}/dev/sda1 {mp} ext4 rw 0 0\n");
            assert!(root_mounts_left(&left), "{mp}");
        }
        let near = format!("{MOUNTS}/dev/sda1 /oldroots ext4 rw 0 0\n");
        assert!(!root_mounts_left(&near));
    }

    #[test]
    fn no_root_at_all_is_not_clean() {
        assert!(root_mounts_left("proc /proc proc rw 0 0\n"));
    }

    #[test]
    fn files_are_read_to_their_end() {
        // Longer than the page read at a time.
        let long = concat!(env!("CARGO_MANIFEST_DIR"), "/src/verify.rs");
        let text = sys::read_proc(long).unwrap();
        assert!(text.len() > 4096);
        assert_eq!(text, std::fs::read_to_string(long).unwrap());
        let mounts = sys::read_proc("/proc/self/mounts").unwrap();
        assert!(mounts.lines().any(|l| l.split(' ').nth(1) == Some("/")));
    }
}
