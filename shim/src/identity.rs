//! Identity and privileges: after this, the process has no capability in any set, cannot gain
//! any (no_new_privs), is not dumpable, and writes no core files.

use crate::channel::{AtStep, Step, StepError};
use crate::sys;

/// The highest capability number this kernel knows.
fn last_cap() -> u64 {
    sys::read_proc("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

/// Empty the bounding set, one prctl per capability the kernel knows. Nothing of init's setup
/// needs it (the bounding set limits only what an exec or a capset could add; the mounts and the
/// network use the effective set), so it is done early, where init waits for the launcher
/// anyway, and every thread init starts inherits the empty set.
pub fn drop_bounding() -> Result<(), StepError> {
    for cap in 0..=last_cap() {
        match sys::prctl(
            libc::PR_CAPBSET_DROP,
            cap as libc::c_ulong,
            "PR_CAPBSET_DROP",
        ) {
            Ok(_) => {}
            // A capability number the kernel does not know: nothing to drop.
            Err(e) if e.errno == nix::errno::Errno::EINVAL => {}
            Err(e) => return Err(e).at(Step::Identity),
        }
    }
    Ok(())
}

/// Drop every other capability (ambient, inheritable, permitted, effective; the bounding set is
/// empty already, see [`drop_bounding`]) and set no_new_privs. Must run after everything that
/// needs privilege (mounts, network setup).
/// With `keep_ptrace`, CAP_SYS_PTRACE stays in the permitted set (and nowhere else) for the
/// create guard's thread, which raises it only to reach a non-dumpable target's own memory and
/// descriptors; call [`drop_kept`] in every other thread once that thread has started.
/// `core_hard`: the hard core-file limit the program may raise its own to (init keeps 0).
pub fn drop_privileges(core_hard: u64, keep_ptrace: bool) -> Result<(), StepError> {
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: core_hard,
    };
    // SAFETY: setrlimit with a valid struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) } != 0 {
        return Err(std::io::Error::last_os_error()).at(Step::Identity);
    }
    sys::prctl(libc::PR_SET_DUMPABLE, 0, "PR_SET_DUMPABLE, 0").at(Step::Identity)?;
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if ret != 0 {
        return Err(std::io::Error::last_os_error()).at(Step::Identity);
    }
    for set in [caps::CapSet::Inheritable, caps::CapSet::Effective] {
        caps::clear(None, set).at(Step::Identity)?;
    }
    if keep_ptrace {
        let kept: caps::CapsHashSet = [caps::Capability::CAP_SYS_PTRACE].into_iter().collect();
        // Inside the sandbox's user namespace init holds it; without one (root's fallback) only
        // if the launcher's root had it.
        caps::set(None, caps::CapSet::Permitted, &kept).map_err(|e| {
            StepError::new(
                Step::Identity,
                format!("cannot keep CAP_SYS_PTRACE for the create guard: {e}"),
                Some(
                    "without a user namespace the launcher's root must hold CAP_SYS_PTRACE \
                     (a container: `--cap-add SYS_PTRACE`, with SYS_ADMIN and NET_ADMIN)",
                ),
            )
        })?;
    } else {
        caps::clear(None, caps::CapSet::Permitted).at(Step::Identity)?;
    }
    sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS, 1").at(Step::Identity)?;
    Ok(())
}

/// Drop what [`drop_privileges`] kept, in the calling thread (capabilities are per thread).
pub fn drop_kept() -> Result<(), StepError> {
    caps::clear(None, caps::CapSet::Permitted).at(Step::Identity)
}
