//! Where a task just made runs: moved off the calling thread's CPU at once. On a virtual machine
//! an idle vCPU looks preempted to the guest, so a new or just-woken task is often queued behind
//! the busy task that made it while another CPU idles (the supervisor's shim, init's network
//! thread). Only a matter of speed: if a call fails, nothing else depends on it.

const SIZE: usize = std::mem::size_of::<libc::cpu_set_t>();

/// Narrow the process (or thread) `pid`'s CPUs to the others than the caller's, then give it
/// back exactly the CPUs it had: it moves, and stays where it now is.
pub fn move_process(pid: libc::pid_t) {
    move_off_this_cpu(
        // SAFETY: sched_getaffinity into a valid set of SIZE bytes.
        |set| unsafe { libc::sched_getaffinity(pid, SIZE, set) } == 0,
        // SAFETY: sched_setaffinity from a valid set of SIZE bytes.
        |set| unsafe { libc::sched_setaffinity(pid, SIZE, set) } == 0,
    );
}

/// The same for the thread `t` of this process.
pub fn move_thread(t: libc::pthread_t) {
    move_off_this_cpu(
        // SAFETY: a live thread of this process (the caller holds its handle); a valid set of
        // SIZE bytes.
        |set| unsafe { libc::pthread_getaffinity_np(t, SIZE, set) } == 0,
        // SAFETY: as above.
        |set| unsafe { libc::pthread_setaffinity_np(t, SIZE, set) } == 0,
    );
}

fn move_off_this_cpu(
    get: impl FnOnce(&mut libc::cpu_set_t) -> bool,
    set: impl Fn(&libc::cpu_set_t) -> bool,
) {
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_COUNT reads a valid set.
    if !get(&mut allowed) || unsafe { libc::CPU_COUNT(&allowed) } < 2 {
        return;
    }
    // SAFETY: sched_getcpu has no preconditions.
    let Ok(here) = usize::try_from(unsafe { libc::sched_getcpu() }) else {
        return;
    };
    // SAFETY: CPU_ISSET/CPU_CLR on a valid set; `here` is below CPU_SETSIZE (the kernel's id).
    if !unsafe { libc::CPU_ISSET(here, &allowed) } {
        return;
    }
    let mut elsewhere = allowed;
    // SAFETY: as above.
    unsafe { libc::CPU_CLR(here, &mut elsewhere) };
    if set(&elsewhere) {
        set(&allowed);
    }
}
