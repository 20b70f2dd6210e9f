//! The namespaces, tried the way the launch makes them: user namespaces (and what restricts
//! them), all of them together, the hostname, the filesystem the shim builds, transparent egress.

use shim::channel::StepError;
use shim::confinement;
use shim::spec::MountPlan;

use super::child::{in_child, in_userns, mount};
use super::{check, read_trim, Check, Status};

/// The knobs that restrict unprivileged user namespaces, then a real attempt.
pub fn user_namespaces() -> Vec<Check> {
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
            // Made, but root's map of the sandbox's user refused: the launch fails there too.
            if let (detail, Some(fix)) = split_failure(&e) {
                out.push(check(
                    "user namespaces",
                    Status::Fail,
                    format!("{detail}{knob_text}"),
                    Some(&fix),
                ));
                return out;
            }
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
                &confinement::refused("creating a user namespace")
            };
            // Real root with CAP_SYS_ADMIN makes the sandbox's namespaces without one.
            let without = nix::unistd::geteuid().is_root()
                && crate::namespaces::can_do_without_user_namespace(nix::errno::Errno::EPERM);
            let (status, detail) = if without {
                (
                    Status::Warn,
                    format!(
                        "cannot create a user namespace: {e}{knob_text}; as root with \
                         CAP_SYS_ADMIN the launch makes its namespaces without one and drops to \
                         the sandbox's user (every other layer in place; it warns)"
                    ),
                )
            } else {
                (
                    Status::Fail,
                    format!("cannot create a user namespace: {e}{knob_text}"),
                )
            };
            out.push(check("user namespaces", status, detail, Some(fix)))
        }
    }
    out
}

/// Every namespace whole-process mode creates, together.
pub fn namespaces_for_sandbox() -> Check {
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
        Err(e) => match split_failure(&e) {
            (detail, Some(fix)) => check("namespaces", Status::Fail, detail, Some(&fix)),
            (_, None) => check(
                "namespaces",
                Status::Fail,
                format!("cannot create the sandbox's namespaces together: {e}"),
                Some("a container runtime or security module blocks namespace creation; allow it for this program"),
            ),
        },
    }
}

/// The sandbox's hostname, set in a UTS namespace of its own as the shim sets it (container
/// profiles often refuse sethostname even there).
pub fn hostname() -> Check {
    let r = in_userns(libc::CLONE_NEWUSER | libc::CLONE_NEWUTS, || {
        shim::run::set_hostname("sandbox").map_err(failure_text)
    });
    match r {
        Ok(()) => check(
            "hostname",
            Status::Ok,
            "the sandbox's own hostname can be set",
            None,
        ),
        Err(e) => {
            let (detail, fix) = split_failure(&e);
            check("hostname", Status::Fail, detail, fix.as_deref())
        }
    }
}

/// The whole filesystem the shim builds (private mounts, a staging tmpfs, pivot_root, the host
/// root bound read-only, a fresh /proc for a new PID namespace, a minimal /dev), by the shim's
/// own code in a child of new user, mount and PID namespaces.
pub fn filesystem() -> Check {
    let r = in_userns(
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID,
        // The PID namespace takes effect for children.
        || {
            in_child(|| {
                let plan = MountPlan {
                    host_root: true,
                    ..MountPlan::default()
                };
                shim::mounts::build(&plan).map_err(failure_text)
            })
        },
    );
    match r {
        Ok(()) => check(
            "filesystem",
            Status::Ok,
            "a new root with a fresh /proc and /dev can be built",
            None,
        ),
        Err(e) => {
            let (detail, fix) = split_failure(&e);
            check("filesystem", Status::Fail, detail, fix.as_deref())
        }
    }
}

/// A step's failure as it crosses from the probe's child: JSON of the message and the hint.
fn failure_text(e: StepError) -> String {
    serde_json::to_string(&e.0).unwrap_or_else(|_| e.to_string())
}

/// The message and the hint of a failure that `failure_text` wrote (else the text as it is).
pub fn split_failure(text: &str) -> (String, Option<String>) {
    match serde_json::from_str::<shim::channel::Failure>(text) {
        Ok(f) => (
            format!("cannot {}: {}", f.step.describe(), f.message),
            f.hint,
        ),
        Err(_) => (text.to_string(), None),
    }
}

/// How `--network restricted` keeps programs on the proxy: transparent egress needs nftables
/// NAT (redirect) and a route in a namespace of our own, tried here for real.
pub fn egress() -> Check {
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
                "proxy variables only ({}): a program that ignores HTTP(S)_PROXY/ALL_PROXY has \
                 no route out (blocked, not filtered)",
                split_failure(&e).0
            ),
            Some("a kernel with nf_tables, NAT and nft_redir (CONFIG_NFT_REDIR) enables it; until then point such programs at 127.0.0.1:3128 (HTTP) or 127.0.0.1:1080 (SOCKS5)"),
        ),
    }
}

pub fn overlayfs() -> Check {
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
            format!(
                "overlayfs in a user namespace: {} (not needed by whole-process mode)",
                split_failure(&e).0
            ),
            Some("a kernel >= 5.11"),
        ),
    }
}
