//! `sandbox-launch doctor`: can this host run a sandbox? Each kernel feature is probed for real
//! (in a forked child, so nothing here changes the caller), and each missing one comes with a fix.

use std::path::Path;

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// Missing, but whole-process mode still runs.
    Warn,
    /// Missing, and whole-process mode cannot run with its defaults.
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Whether `whole-process` can run here with its defaults.
    pub ok: bool,
    pub checks: Vec<Check>,
}

fn check(
    name: &'static str,
    status: Status,
    detail: impl Into<String>,
    fix: Option<&str>,
) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        fix: fix.map(str::to_string),
    }
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Probe every feature.
pub fn probe() -> Report {
    let mut checks = vec![kernel()];
    checks.extend(user_namespaces());
    checks.push(namespaces_for_sandbox());
    checks.push(proc_mount());
    checks.push(landlock());
    checks.extend(seccomp());
    checks.push(egress());
    checks.push(overlayfs());
    checks.push(cgroup2());
    let ok = checks.iter().all(|c| c.status != Status::Fail);
    Report { ok, checks }
}

/// Print the report; the exit code is 0 only when whole-process mode can run here.
pub fn run(json: bool) -> i32 {
    let report = probe();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serializes")
        );
    } else {
        for c in &report.checks {
            let tag = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            println!("{tag}  {:<22} {}", c.name, c.detail);
            if let Some(fix) = &c.fix {
                println!("      {:<22} fix: {fix}", "");
            }
        }
        println!();
        if report.ok {
            println!("whole-process mode can run here.");
        } else {
            println!("whole-process mode cannot run here: fix the FAIL lines above.");
        }
    }
    if report.ok {
        0
    } else {
        1
    }
}

fn kernel() -> Check {
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

/// The knobs that restrict unprivileged user namespaces, then a real attempt.
fn user_namespaces() -> Vec<Check> {
    let mut out = Vec::new();
    let mut knobs = Vec::new();
    if let Some(v) = read_trim("/proc/sys/kernel/unprivileged_userns_clone") {
        knobs.push(format!("kernel.unprivileged_userns_clone={v}"));
    }
    if let Some(v) = read_trim("/proc/sys/user/max_user_namespaces") {
        knobs.push(format!("user.max_user_namespaces={v}"));
    }
    if let Some(v) = read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
        knobs.push(format!("kernel.apparmor_restrict_unprivileged_userns={v}"));
    }
    let attempt = in_userns(libc::CLONE_NEWUSER, || Ok(()));
    let knob_text = if knobs.is_empty() {
        String::new()
    } else {
        format!(" ({})", knobs.join(", "))
    };
    match attempt {
        Ok(()) => out.push(check(
            "user namespaces",
            Status::Ok,
            format!("a user namespace can be created and mapped{knob_text}"),
            None,
        )),
        Err(e) => {
            let fix = if read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
                .as_deref()
                == Some("1")
            {
                "AppArmor restricts unprivileged user namespaces: install the profile in \
                 scripts/apparmor/sandbox-launch (see README), or set \
                 kernel.apparmor_restrict_unprivileged_userns=0"
            } else if read_trim("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
                "set user.max_user_namespaces to a positive number (sysctl -w user.max_user_namespaces=15000)"
            } else if read_trim("/proc/sys/kernel/unprivileged_userns_clone").as_deref()
                == Some("0")
            {
                "sysctl -w kernel.unprivileged_userns_clone=1"
            } else {
                "in a container, run it with a seccomp profile that allows unshare/clone with \
                 CLONE_NEWUSER (docker: --security-opt seccomp=unconfined or a custom profile)"
            };
            out.push(check(
                "user namespaces",
                Status::Fail,
                format!("cannot create a user namespace: {e}{knob_text}"),
                Some(fix),
            ))
        }
    }
    out
}

/// Every namespace whole-process mode creates, together.
fn namespaces_for_sandbox() -> Check {
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP
        | libc::CLONE_NEWNET;
    let r = in_userns(flags, || Ok(()));
    match r {
        Ok(()) => check(
            "namespaces",
            Status::Ok,
            "user, mount, pid, ipc, uts, cgroup and network namespaces",
            None,
        ),
        Err(e) => check(
            "namespaces",
            Status::Fail,
            format!("cannot create the sandbox's namespaces together: {e}"),
            Some("a container runtime or security module blocks namespace creation; allow it for this program"),
        ),
    }
}

/// A fresh /proc for a new PID namespace (refused when the host's /proc is partly covered).
fn proc_mount() -> Check {
    let r = in_userns(
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID,
        || {
            mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)?;
            mount(Some("tmpfs"), "/tmp", Some("tmpfs"), 0, None)?;
            // The PID namespace takes effect for children.
            in_child(|| {
                std::fs::create_dir("/tmp/proc").map_err(|e| e.to_string())?;
                mount(
                    Some("proc"),
                    "/tmp/proc",
                    Some("proc"),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    None,
                )
            })
        },
    );
    match r {
        Ok(()) => check(
            "proc mount",
            Status::Ok,
            "a fresh /proc can be mounted for a new PID namespace",
            None,
        ),
        Err(e) => check(
            "proc mount",
            Status::Fail,
            format!("cannot mount /proc in a new PID namespace: {e}"),
            Some(
                "the host's /proc has paths covered by other mounts (common in containers: \
                  docker masks /proc/kcore etc.); run the container with --security-opt \
                  systempaths=unconfined, or as a privileged container",
            ),
        ),
    }
}

fn landlock() -> Check {
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

fn seccomp() -> Vec<Check> {
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

/// How `--network restricted` keeps programs on the proxy: transparent egress needs nftables
/// NAT (redirect) and a route in a namespace of our own, tried here for real.
fn egress() -> Check {
    let r = in_userns(libc::CLONE_NEWUSER | libc::CLONE_NEWNET, || {
        shim::network::loopback_up().map_err(|e| e.to_string())?;
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("listen: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        shim::egress::install(port, 53).map_err(|e| e.to_string())?;
        let _out = std::net::TcpStream::connect("192.0.2.1:9")
            .map_err(|e| format!("a redirected connect failed: {e}"))?;
        let (accepted, _) = listener.accept().map_err(|e| e.to_string())?;
        let orig = shim::egress::original_destination(std::os::fd::AsRawFd::as_raw_fd(&accepted))
            .map_err(|e| format!("SO_ORIGINAL_DST: {e}"))?;
        if orig.to_string() != "192.0.2.1:9" {
            return Err(format!("SO_ORIGINAL_DST says {orig}, expected 192.0.2.1:9"));
        }
        Ok(())
    });
    match r {
        Ok(()) => check(
            "egress",
            Status::Ok,
            "transparent: programs that ignore the proxy variables are redirected to the proxy \
             (nftables redirect and a DNS stub inside the sandbox's own network namespace)",
            None,
        ),
        Err(e) => check(
            "egress",
            Status::Warn,
            format!(
                "proxy variables only ({e}): a program that ignores HTTP(S)_PROXY/ALL_PROXY has \
                 no route out (blocked, not filtered)"
            ),
            Some("a kernel with nf_tables, NAT and nft_redir (CONFIG_NFT_REDIR) enables it; until then point such programs at 127.0.0.1:3128 (HTTP) or 127.0.0.1:1080 (SOCKS5)"),
        ),
    }
}

fn overlayfs() -> Check {
    let r = in_userns(libc::CLONE_NEWUSER | libc::CLONE_NEWNS, || {
        mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)?;
        mount(Some("tmpfs"), "/tmp", Some("tmpfs"), 0, None)?;
        for d in ["/tmp/l", "/tmp/u", "/tmp/w", "/tmp/m"] {
            std::fs::create_dir(d).map_err(|e| e.to_string())?;
        }
        mount(
            Some("overlay"),
            "/tmp/m",
            Some("overlay"),
            0,
            Some("lowerdir=/tmp/l,upperdir=/tmp/u,workdir=/tmp/w"),
        )
    });
    match r {
        Ok(()) => check(
            "overlayfs",
            Status::Ok,
            "overlayfs can be mounted in a user namespace",
            None,
        ),
        Err(e) => check(
            "overlayfs",
            Status::Warn,
            format!("overlayfs in a user namespace: {e} (not needed by whole-process mode)"),
            Some("a kernel >= 5.11"),
        ),
    }
}

fn cgroup2() -> Check {
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

fn errno() -> Result<(), String> {
    Err(std::io::Error::last_os_error().to_string())
}

/// Run `f` in a forked child that has unshared `flags` (which include CLONE_NEWUSER) and whose
/// uid/gid are mapped to themselves as the launcher maps them: by the child itself when
/// unprivileged (the launcher's own code), by this process when root (a process cannot map
/// uid 0 from inside its new namespace).
fn in_userns(flags: libc::c_int, f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    let (ready_r, ready_w) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (go_r, go_w) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    let own_maps = (!uid.is_root()).then(|| {
        crate::namespaces::OwnMaps::new(crate::namespaces::Identity {
            uid: uid.as_raw(),
            gid: gid.as_raw(),
            switch_from_root: false,
        })
    });
    in_child_with(
        move || {
            // SAFETY: unshare has no memory-safety preconditions; we are a forked child.
            let r = if unsafe { libc::unshare(flags) } != 0 {
                errno()
            } else {
                Ok(())
            };
            if let Some(maps) = own_maps {
                r?;
                // SAFETY: only syscalls, in the forked child.
                return if unsafe { maps.write_own() } {
                    f()
                } else {
                    Err("cannot map our own uid/gid in the new user namespace".into())
                };
            }
            let _ = nix::unistd::write(&ready_w, if r.is_ok() { b"k" } else { b"e" });
            r?;
            let mut b = [0u8; 1];
            match nix::unistd::read(&go_r, &mut b) {
                Ok(1) if b[0] == b'k' => f(),
                _ => Err("the parent could not map our ids".into()),
            }
        },
        move |child| {
            let mut b = [0u8; 1];
            if !uid.is_root()
                || !matches!(nix::unistd::read(&ready_r, &mut b), Ok(1))
                || b[0] != b'k'
            {
                return;
            }
            let w = |p: String, s: String| std::fs::write(&p, s).map_err(|e| format!("{p}: {e}"));
            let ok = w(format!("/proc/{child}/uid_map"), format!("{uid} {uid} 1"))
                .and_then(|_| w(format!("/proc/{child}/gid_map"), format!("{gid} {gid} 1")));
            let _ = nix::unistd::write(&go_w, if ok.is_ok() { b"k" } else { b"e" });
        },
    )
}

/// The launcher's own mount wrapper, with the error as text for the report.
fn mount(
    src: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    shim::sys::mount(src.map(Path::new), Path::new(target), fstype, flags, data)
        .map_err(|e| e.to_string())
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

/// Run `f` in a forked child and bring back its result (the error text through a pipe).
fn in_child(f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    in_child_with(f, |_| {})
}

/// As `in_child`, with `parent` run (given the child's pid) while the child runs.
fn in_child_with(
    f: impl FnOnce() -> Result<(), String>,
    parent: impl FnOnce(nix::unistd::Pid),
) -> Result<(), String> {
    let (r, w) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: the doctor is single-threaded; the child only makes syscalls and exits.
    match unsafe { fork() } {
        Err(e) => Err(format!("fork: {e}")),
        Ok(ForkResult::Child) => {
            drop(r);
            drop(parent);
            let code = match f() {
                Ok(()) => 0,
                Err(msg) => {
                    let _ = nix::unistd::write(&w, msg.as_bytes());
                    1
                }
            };
            // SAFETY: _exit skips atexit handlers and destructors that belong to the parent.
            unsafe { libc::_exit(code) }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(w);
            // Close the child's ends of any pipes `f` holds before waiting on them.
            drop(f);
            parent(child);
            let mut msg = Vec::new();
            let mut file = std::fs::File::from(r);
            let _ = std::io::Read::read_to_end(&mut file, &mut msg);
            match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, 0)) => Ok(()),
                Ok(WaitStatus::Exited(_, _)) => Err(String::from_utf8_lossy(&msg).into_owned()),
                Ok(other) => Err(format!("probe ended unexpectedly: {other:?}")),
                Err(e) => Err(format!("waitpid: {e}")),
            }
        }
    }
}
