//! Kernel features the sandbox needs, probed for real: Landlock, seccomp and its actions, the
//! create guard's wait, cgroup v2.

use super::child::in_child;
use super::{check, read_trim, Check, Status};

pub fn kernel() -> Check {
    let u = nix::sys::utsname::uname();
    let detail = match &u {
        Ok(u) => format!(
            "{} {} {}",
            u.sysname().to_string_lossy(),
            u.release().to_string_lossy(),
            u.machine().to_string_lossy()
        ),
        Err(e) => format!("uname failed: {e}"),
    };
    check("kernel", Status::Ok, detail, None)
}

pub fn landlock() -> Check {
    match shim::landlock::kernel_abi() {
        Ok(abi) if abi >= 1 => {
            let mut extras = Vec::new();
            if abi >= 4 {
                extras.push("TCP bind/connect rules");
            }
            if abi >= 6 {
                extras.push("abstract unix socket and signal scoping");
            }
            if abi >= 9 {
                extras.push("pathname unix socket rights");
            }
            let detail = if extras.is_empty() {
                format!("ABI {abi}")
            } else {
                format!("ABI {abi} ({})", extras.join(", "))
            };
            let (status, fix) = if abi < 6 {
                (
                    Status::Warn,
                    Some("a kernel >= 6.12 adds scoping of abstract unix sockets and signals"),
                )
            } else {
                (Status::Ok, None)
            };
            check("landlock", status, detail, fix)
        }
        Ok(_) | Err(_) => {
            let lsm = read_trim("/sys/kernel/security/lsm").unwrap_or_default();
            check(
                "landlock",
                Status::Fail,
                format!("Landlock is not available (active LSMs: {lsm})"),
                Some(
                    "boot a kernel >= 5.13 with CONFIG_SECURITY_LANDLOCK=y and `lsm=landlock,...` \
                      on the kernel command line; or use `landlock: {compatibility: best_effort}` \
                      in the policy to start without it (reported)",
                ),
            )
        }
    }
}

pub fn seccomp() -> Vec<Check> {
    let mut out = Vec::new();
    let actions = read_trim("/proc/sys/kernel/seccomp/actions_avail");
    // SAFETY: PR_GET_SECCOMP takes no pointer arguments.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    match &actions {
        Some(a) => {
            // user_notif: the create guard (protected paths that do not exist yet).
            let need = ["errno", "kill_process", "user_notif"];
            let missing: Vec<_> = need
                .iter()
                .filter(|n| !a.split_whitespace().any(|x| x == **n))
                .collect();
            if missing.is_empty() {
                out.push(check(
                    "seccomp",
                    Status::Ok,
                    format!("filter mode; actions: {a}"),
                    None,
                ));
            } else {
                out.push(check(
                    "seccomp",
                    Status::Fail,
                    format!("actions {missing:?} missing (available: {a})"),
                    Some("a kernel >= 5.14 with CONFIG_SECCOMP_FILTER=y (user notification with ADDFD)"),
                ));
            }
        }
        None => out.push(check(
            "seccomp",
            Status::Fail,
            "seccomp filters are not available",
            Some("a kernel with CONFIG_SECCOMP_FILTER=y"),
        )),
    }
    out.push(guard_waits());
    if mode == 2 {
        out.push(check(
            "outer seccomp",
            Status::Warn,
            "this process already runs under a seccomp filter (a container's?); its denials apply too",
            Some("if a step fails with EPERM, the outer filter may be the cause"),
        ));
    }
    out
}

/// Whether the create guard's filter can make a taken notification wait out signals
/// (SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, Linux 5.19): tried for real, in a child.
fn guard_waits() -> Check {
    let probe = in_child(|| {
        let allow = [libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        }];
        let prog = libc::sock_fprog {
            len: 1,
            filter: allow.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: prctl and seccomp with a valid one-instruction program, in the forked child.
        let fd = unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
                    | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
                &prog as *const libc::sock_fprog,
            )
        };
        if fd < 0 {
            Err(std::io::Error::last_os_error().to_string())
        } else {
            Ok(())
        }
    });
    match probe {
        Ok(()) => check(
            "create guard waits",
            Status::Ok,
            "a creation init has taken waits out signals (WAIT_KILLABLE_RECV)",
            None,
        ),
        Err(e) => check(
            "create guard waits",
            Status::Warn,
            format!("WAIT_KILLABLE_RECV refused ({e}): a signal arriving while init creates a file for the program can make the call fail (EINTR) or restart into EEXIST although the file was made"),
            Some("a kernel >= 5.19"),
        ),
    }
}

pub fn cgroup2() -> Check {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let found = mounts.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        if post.split_whitespace().next()? == "cgroup2" {
            pre.split_whitespace().nth(4).map(str::to_string)
        } else {
            None
        }
    });
    match found {
        Some(at) => check("cgroup v2", Status::Ok, format!("mounted at {at}"), None),
        None => check(
            "cgroup v2",
            Status::Warn,
            "no cgroup2 mount (not needed by whole-process mode; resource limits unavailable)",
            Some("mount -t cgroup2 none /sys/fs/cgroup"),
        ),
    }
}
