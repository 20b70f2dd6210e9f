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

/// The set of the one CPU `cpu` (a kernel's CPU id, below CPU_SETSIZE).
fn only(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET on a valid set; `cpu` is below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set
}

/// Run `f` with the calling thread held to the CPU it runs on, then give it back exactly the
/// CPUs it had: a child cloned meanwhile starts there too, so that waking it and being woken by
/// it stay on one CPU (each wake-up of an idle vCPU costs 40-60 µs here).
pub fn on_this_cpu<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: sched_getaffinity of the calling thread into a valid set of SIZE bytes.
    let Some((allowed, here)) =
        this_cpu_among(|set| unsafe { libc::sched_getaffinity(0, SIZE, set) } == 0)
    else {
        return f();
    };
    // SAFETY: sched_setaffinity of the calling thread from a valid set of SIZE bytes.
    let narrowed = unsafe { libc::sched_setaffinity(0, SIZE, &only(here)) } == 0;
    let r = f();
    if narrowed {
        // SAFETY: as above, back to the set read before.
        unsafe { libc::sched_setaffinity(0, SIZE, &allowed) };
    }
    r
}

/// Where a thread made by [`spawn`] first runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Start {
    /// On another CPU than the caller's: for a thread that works while the caller does (init's
    /// network thread). Made by a std thread and moved, that one ran first on init's CPU in
    /// about half of the launches, where its making of the network namespace (~0.3 ms in one
    /// system call) held init up.
    Elsewhere,
    /// On the caller's CPU: for a thread the caller waits for at once, which then runs as soon
    /// as the caller sleeps, instead of queued behind a busy task on another CPU (init's guard
    /// thread: left to the kernel, it took 0.2-0.3 ms more in over a third of the launches).
    Here,
}

/// A thread made with its first CPUs in its attributes (`pthread_attr_setaffinity_np`, applied
/// before it first runs): no task is moved, and a move of a task that already runs or waits to
/// run is a migration, and on a virtual machine an interrupt to the other vCPU. Once running,
/// the thread takes the caller's whole set back (it stays where it is). Like every thread of
/// the launcher (whose `main` skips Rust's start-up, see `sandbox_launch::process_start`), it
/// has no handler for a stack overflow: an overflow ends the process (the launch fails) without
/// saying which thread overflowed. Dropped without [`Thread::join`], the thread goes on,
/// detached.
pub struct Thread<T> {
    thread: Option<libc::pthread_t>,
    result: Arc<Mutex<Option<Outcome<T>>>>,
}

/// The CPU the thread started on, and what `f` returned or its panic.
type Outcome<T> = (libc::c_int, std::thread::Result<T>);

struct Payload<F, T> {
    f: F,
    result: Arc<Mutex<Option<Outcome<T>>>>,
    /// The caller's CPUs, taken back by the thread once it runs.
    allowed: Option<libc::cpu_set_t>,
}

/// Start `f` on a thread with a stack of `stack` bytes, first run where `start` says when the
/// caller may run on two CPUs or more (else wherever the kernel puts it).
pub fn spawn<F, T>(stack: usize, start: Start, f: F) -> std::io::Result<Thread<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: sched_getaffinity of the calling thread into a valid set of SIZE bytes.
    let placed = this_cpu_among(|set| unsafe { libc::sched_getaffinity(0, SIZE, set) } == 0);
    let first = placed.map(|(allowed, here)| {
        if start == Start::Here {
            return only(here);
        }
        let mut first = allowed;
        // SAFETY: CPU_CLR on a valid set; `here` is below CPU_SETSIZE (the kernel's id).
        unsafe { libc::CPU_CLR(here, &mut first) };
        first
    });
    let result = Arc::new(Mutex::new(None));
    let payload = Box::into_raw(Box::new(Payload {
        f,
        result: result.clone(),
        allowed: placed.map(|(allowed, _)| allowed),
    }));
    let mut thread: libc::pthread_t = 0;
    // SAFETY: the attributes are initialised before use and destroyed after; `run::<F, T>`
    // takes back the box `payload` points to, once, on the new thread (or here if there is
    // none).
    let ret = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        let mut ret = libc::pthread_attr_init(&mut attr);
        if ret == 0 {
            ret = libc::pthread_attr_setstacksize(&mut attr, stack);
            if let (0, Some(first)) = (ret, &first) {
                // Refused, the thread starts wherever the kernel puts it.
                libc::pthread_attr_setaffinity_np(&mut attr, SIZE, first);
            }
            if ret == 0 {
                ret = libc::pthread_create(&mut thread, &attr, run::<F, T>, payload.cast());
            }
            libc::pthread_attr_destroy(&mut attr);
        }
        if ret != 0 {
            drop(Box::from_raw(payload));
        }
        ret
    };
    if ret != 0 {
        return Err(std::io::Error::from_raw_os_error(ret));
    }
    Ok(Thread {
        thread: Some(thread),
        result,
    })
}

extern "C" fn run<F: FnOnce() -> T, T>(payload: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: the box `spawn` made for this thread, handed over by pthread_create.
    let Payload { f, result, allowed } = *unsafe { Box::from_raw(payload.cast::<Payload<F, T>>()) };
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

impl<T> Thread<T> {
    /// Wait for the thread to end: what `f` returned, or its panic.
    pub fn join(self) -> std::thread::Result<T> {
        self.join_started_on().1
    }

    /// The same, with the CPU the thread started on (-1 if unknown).
    fn join_started_on(mut self) -> Outcome<T> {
        let joined = self.thread.take().is_some_and(|t| {
            // SAFETY: a joinable thread of this process, joined once (taken out of `self`).
            unsafe { libc::pthread_join(t, std::ptr::null_mut()) == 0 }
        });
        let outcome = joined
            .then(|| self.result.lock().ok().and_then(|mut slot| slot.take()))
            .flatten();
        outcome.unwrap_or_else(|| (-1, Err(Box::new("the thread could not be joined"))))
    }
}

impl<T> Drop for Thread<T> {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            // SAFETY: a joinable thread of this process, never joined: its resources go with
            // its end.
            unsafe { libc::pthread_detach(t) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus_of(tid: libc::pid_t) -> usize {
        // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: sched_getaffinity into a valid set of SIZE bytes.
        assert_eq!(unsafe { libc::sched_getaffinity(tid, SIZE, &mut set) }, 0);
        // SAFETY: CPU_COUNT reads a valid set.
        unsafe { libc::CPU_COUNT(&set) as usize }
    }

    /// Whether a thread made with `start` started on the caller's CPU (read before and after
    /// making it: a try in which the caller changed CPUs is made again). The thread gets every
    /// CPU the caller has.
    fn started(start: Start) -> bool {
        let all = cpus_of(0);
        for _ in 0..100 {
            // SAFETY: sched_getcpu has no preconditions.
            let caller_cpu = unsafe { libc::sched_getcpu() };
            let t = spawn(256 * 1024, start, || cpus_of(0)).unwrap();
            // SAFETY: as above.
            let moved = caller_cpu != unsafe { libc::sched_getcpu() };
            let (started_on, cpus) = t.join_started_on();
            assert_eq!(cpus.unwrap(), all, "the thread has the caller's CPUs back");
            if !moved {
                return started_on == caller_cpu;
            }
        }
        panic!("the caller changed CPUs during every try");
    }

    /// Elsewhere: on another CPU than the caller's; here: on the caller's. With a single CPU
    /// (`taskset -c 0`), the caller still gets its threads, on that CPU.
    #[test]
    fn threads_start_where_asked_and_get_every_cpu() {
        let several = cpus_of(0) >= 2;
        assert!(
            !several || !started(Start::Elsewhere),
            "elsewhere started here"
        );
        assert!(started(Start::Here), "here started elsewhere");
    }

    /// `join` gives what the thread returned, or that it panicked; a thread dropped unjoined
    /// goes on.
    #[test]
    fn join_reports_a_panic_and_a_dropped_thread_goes_on() {
        let t = spawn(256 * 1024, Start::Elsewhere, || 7u8).unwrap();
        assert_eq!(t.join().unwrap(), 7);
        let panicked = spawn(256 * 1024, Start::Here, || -> u8 { panic!("on purpose") }).unwrap();
        assert!(panicked.join().is_err(), "a panic is reported, not lost");
        let (tx, rx) = std::sync::mpsc::channel();
        drop(spawn(256 * 1024, Start::Here, move || tx.send(1u8).unwrap()).unwrap());
        assert_eq!(rx.recv().unwrap(), 1);
    }
}
