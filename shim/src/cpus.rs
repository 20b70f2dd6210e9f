//! Where a task just made runs: moved off the calling thread's CPU at once, or kept on it. On a
//! virtual machine an idle vCPU looks preempted to the guest, so a new or just-woken task is
//! often queued behind the busy task that made it while another CPU idles (the supervisor's
//! shim, init's network thread), or behind a busy task elsewhere while its maker waits for it
//! (init's guard thread). Only a matter of speed: if a call fails, nothing else depends on it.

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
    let Some((allowed, here)) = this_cpu_among(get) else {
        return;
    };
    let mut elsewhere = allowed;
    // SAFETY: CPU_CLR on a valid set; `here` is below CPU_SETSIZE (the kernel's id).
    unsafe { libc::CPU_CLR(here, &mut elsewhere) };
    if set(&elsewhere) {
        set(&allowed);
    }
}

/// The set `get` fills in, and the CPU the caller runs on, when the set holds it and at least
/// one other (else there is nowhere to move to, or nothing to narrow).
fn this_cpu_among(
    get: impl FnOnce(&mut libc::cpu_set_t) -> bool,
) -> Option<(libc::cpu_set_t, usize)> {
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_COUNT reads a valid set.
    if !get(&mut allowed) || unsafe { libc::CPU_COUNT(&allowed) } < 2 {
        return None;
    }
    // SAFETY: sched_getcpu has no preconditions.
    let here = usize::try_from(unsafe { libc::sched_getcpu() }).ok()?;
    // SAFETY: CPU_ISSET on a valid set; `here` is below CPU_SETSIZE (the kernel's id).
    unsafe { libc::CPU_ISSET(here, &allowed) }.then_some((allowed, here))
}

/// The calling thread narrowed to the CPU it runs on, so that a thread it makes meanwhile starts
/// there (it inherits the set): for a thread the caller waits on at once, which then runs as
/// soon as the caller sleeps, instead of queued behind a busy task on another CPU. Dropping it
/// gives the caller back the CPUs it had; [`Here::release`] gives them to such a thread too.
pub struct Here {
    allowed: libc::cpu_set_t,
}

impl Here {
    /// None (nothing changed) when the calling thread has a single CPU or the kernel refuses.
    pub fn pin() -> Option<Here> {
        // SAFETY: sched_getaffinity of the calling thread into a valid set of SIZE bytes.
        let (allowed, here) =
            this_cpu_among(|set| unsafe { libc::sched_getaffinity(0, SIZE, set) } == 0)?;
        // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
        let mut only: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: CPU_SET on a valid set; `here` is below CPU_SETSIZE (the kernel's id).
        unsafe { libc::CPU_SET(here, &mut only) };
        // SAFETY: sched_setaffinity of the calling thread from a valid set of SIZE bytes.
        (unsafe { libc::sched_setaffinity(0, SIZE, &only) } == 0).then_some(Here { allowed })
    }

    /// Give the thread `tid` of this process, made while pinned, the caller's CPUs back.
    pub fn release(&self, tid: libc::pid_t) {
        // SAFETY: sched_setaffinity of a thread of ours from a valid set of SIZE bytes.
        unsafe { libc::sched_setaffinity(tid, SIZE, &self.allowed) };
    }
}

impl Drop for Here {
    fn drop(&mut self) {
        self.release(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus_of(tid: libc::pid_t) -> usize {
        // SAFETY: as in `Here::pin`.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: as in `Here::pin`.
        assert_eq!(unsafe { libc::sched_getaffinity(tid, SIZE, &mut set) }, 0);
        // SAFETY: CPU_COUNT reads a valid set.
        unsafe { libc::CPU_COUNT(&set) as usize }
    }

    /// A thread made while pinned starts on the caller's CPU alone; both get every CPU back.
    #[test]
    fn a_thread_made_while_pinned_starts_here_and_both_get_their_cpus_back() {
        let all = cpus_of(0);
        let Some(here) = Here::pin() else {
            assert!(all < 2, "pinning refused with {all} CPUs");
            return;
        };
        assert_eq!(cpus_of(0), 1);
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send((unsafe { libc::gettid() }, cpus_of(0))).unwrap();
            go_rx.recv().unwrap();
            cpus_of(0)
        });
        let (tid, at_start) = rx.recv().unwrap();
        assert_eq!(at_start, 1, "the new thread inherits the single CPU");
        here.release(tid);
        drop(here);
        assert_eq!(cpus_of(0), all, "the caller has its CPUs back");
        go_tx.send(()).unwrap();
        assert_eq!(t.join().unwrap(), all, "so has the thread");
    }
}
