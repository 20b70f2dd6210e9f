//! Where a task just made runs: moved off the calling thread's CPU at once, started elsewhere,
//! or kept on it. On a virtual machine an idle vCPU looks preempted to the guest, so a new or
//! just-woken task is often queued behind the busy task that made it while another CPU idles
//! (the supervisor's shim, init's network thread), or behind a busy task elsewhere while its
//! maker waits for it (init's guard thread). Only a matter of speed: if a call fails, nothing
//! else depends on it.

use std::sync::{Arc, Mutex};

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

/// A thread started on another CPU than the caller's: made with the set of the caller's CPUs
/// but its own (`pthread_attr_setaffinity_np`, applied before the thread first runs), so it never
/// runs behind the caller, and no task is moved: a move of a task that already runs or waits to
/// run is a migration, and on a virtual machine an interrupt to the other vCPU. Once running, the
/// thread takes the caller's whole set back (it stays where it is). Init's network thread starts
/// this way: made by a std thread and moved, it ran first on init's CPU in about half of the
/// launches, where its making of the network namespace (~0.3 ms in one system call) held init
/// up. The thread has no handler of its own for a stack overflow, as a std thread has: an
/// overflow ends the process (the launch fails) instead of printing which thread overflowed.
pub struct Elsewhere<T> {
    thread: libc::pthread_t,
    result: Arc<Mutex<Option<Outcome<T>>>>,
}

/// The CPU the thread started on, and what `f` returned or its panic.
type Outcome<T> = (libc::c_int, std::thread::Result<T>);

struct Start<F, T> {
    f: F,
    result: Arc<Mutex<Option<Outcome<T>>>>,
    /// The caller's CPUs, taken back by the thread once it runs.
    allowed: Option<libc::cpu_set_t>,
}

/// Start `f` on a thread with a stack of `stack` bytes, on another CPU than the caller's when
/// the caller may run on two or more (else wherever the kernel puts it).
pub fn spawn_elsewhere<F, T>(stack: usize, f: F) -> std::io::Result<Elsewhere<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: sched_getaffinity of the calling thread into a valid set of SIZE bytes.
    let placed = this_cpu_among(|set| unsafe { libc::sched_getaffinity(0, SIZE, set) } == 0);
    let result = Arc::new(Mutex::new(None));
    let start = Box::into_raw(Box::new(Start {
        f,
        result: result.clone(),
        allowed: placed.map(|(allowed, _)| allowed),
    }));
    let mut thread: libc::pthread_t = 0;
    // SAFETY: the attributes are initialised before use and destroyed after; `run::<F, T>`
    // takes back the box `start` points to, once, on the new thread (or here if there is none).
    let ret = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        let mut ret = libc::pthread_attr_init(&mut attr);
        if ret == 0 {
            ret = libc::pthread_attr_setstacksize(&mut attr, stack);
            if let (0, Some((allowed, here))) = (ret, placed) {
                let mut elsewhere = allowed;
                libc::CPU_CLR(here, &mut elsewhere);
                // Refused, the thread starts wherever the kernel puts it.
                libc::pthread_attr_setaffinity_np(&mut attr, SIZE, &elsewhere);
            }
            if ret == 0 {
                ret = libc::pthread_create(&mut thread, &attr, run::<F, T>, start.cast());
            }
            libc::pthread_attr_destroy(&mut attr);
        }
        if ret != 0 {
            drop(Box::from_raw(start));
        }
        ret
    };
    if ret != 0 {
        return Err(std::io::Error::from_raw_os_error(ret));
    }
    Ok(Elsewhere { thread, result })
}

extern "C" fn run<F: FnOnce() -> T, T>(start: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: the box `spawn_elsewhere` made for this thread, handed over by pthread_create.
    let Start { f, result, allowed } = *unsafe { Box::from_raw(start.cast::<Start<F, T>>()) };
    // SAFETY: sched_getcpu has no preconditions.
    let started_on = unsafe { libc::sched_getcpu() };
    if let Some(allowed) = allowed {
        // SAFETY: sched_setaffinity of the calling thread from a valid set of SIZE bytes.
        unsafe { libc::sched_setaffinity(0, SIZE, &allowed) };
    }
    // A panic must not unwind out of a C start routine: it is what `join` returns.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    if let Ok(mut slot) = result.lock() {
        *slot = Some((started_on, outcome));
    }
    std::ptr::null_mut()
}

impl<T> Elsewhere<T> {
    /// Wait for the thread to end: what `f` returned, or its panic.
    pub fn join(self) -> std::thread::Result<T> {
        self.join_started_on().1
    }

    /// The same, with the CPU the thread started on (-1 if unknown).
    fn join_started_on(self) -> Outcome<T> {
        // SAFETY: a joinable thread of this process, joined once (`self` is consumed).
        let ret = unsafe { libc::pthread_join(self.thread, std::ptr::null_mut()) };
        let outcome = (ret == 0)
            .then(|| self.result.lock().ok().and_then(|mut slot| slot.take()))
            .flatten();
        outcome.unwrap_or_else(|| (-1, Err(Box::new("the thread could not be joined"))))
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

    /// A thread started elsewhere starts on another CPU than the caller's, then has every CPU
    /// the caller has; `join` gives what it returned, or that it panicked. With a single CPU
    /// (`taskset -c 0`), the caller still gets its thread, on that CPU.
    #[test]
    fn a_thread_started_elsewhere_starts_on_another_cpu_and_gets_every_cpu() {
        let all = cpus_of(0);
        // The caller's CPU as `spawn_elsewhere` reads it: a try in which the caller changed
        // CPUs is made again.
        let mut only_here = None;
        for _ in 0..100 {
            // SAFETY: sched_getcpu has no preconditions.
            let caller_cpu = unsafe { libc::sched_getcpu() };
            let t = spawn_elsewhere(256 * 1024, || cpus_of(0)).unwrap();
            // SAFETY: as above.
            let moved = caller_cpu != unsafe { libc::sched_getcpu() };
            let (started_on, cpus) = t.join_started_on();
            assert_eq!(cpus.unwrap(), all, "the thread has the caller's CPUs back");
            if !moved {
                only_here = Some(started_on == caller_cpu);
                break;
            }
        }
        let started_here = only_here.expect("the caller changed CPUs during every try");
        assert!(
            all < 2 || !started_here,
            "the thread started on the caller's CPU"
        );
        let panicked = spawn_elsewhere(256 * 1024, || -> u8 { panic!("on purpose") }).unwrap();
        assert!(panicked.join().is_err(), "a panic is reported, not lost");
    }
}
