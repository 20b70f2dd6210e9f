//! What the launcher's process sets up before anything else, in place of Rust's runtime start-up.
//!
//! `main.rs` is the C `main` (`#![no_main]`): Rust's start-up (`lang_start`) is not run. It
//! costs every launch ~60 µs before the first line of `main` on the development VM (a static
//! binary doing nothing: 432 µs with it, 371 µs without, 3,000 runs each, interleaved), mostly
//! its stack-overflow handler for the main thread — the main thread's stack is found by reading
//! `/proc/self/maps`, and an alternate signal stack is mapped — none of which the launch needs.
//! Two of the things it does are needed, and done here, the same way: the standard descriptors
//! are made sure to be open (else the first file opened would become stdout), and SIGPIPE is
//! ignored (a write to a closed pipe or socket fails with EPIPE instead of killing the
//! launcher). Without the handler (which std also gives only then to the threads it starts),
//! a stack overflow on any thread ends the process by SIGSEGV without a message; a panic on the main thread is named `<unnamed>` rather than `main`, and still ends
//! the process with exit code 101 (see `main.rs`). Where `/dev/null` cannot be opened, Rust's
//! start-up aborted without a word; this says why and exits 110.

/// Open `/dev/null` on whichever of 0, 1 and 2 is closed, and ignore SIGPIPE.
pub fn prepare() {
    for fd in closed_standard_descriptors() {
        // SAFETY: open with a constant path; the lowest free descriptor is `fd`, as the ones
        // below it are open (they come in order, each closed one opened here).
        let opened = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if opened != fd {
            refuse_without_dev_null(fd, std::io::Error::last_os_error());
        }
    }
    // SAFETY: setting a signal's disposition to ignore.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Which of 0, 1 and 2 are closed, in order: one `poll`, or where it fails (no memory, or a
/// sandbox that refuses it) a `fcntl` each, as Rust's start-up asks.
fn closed_standard_descriptors() -> Vec<libc::c_int> {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: poll on a local array of three entries, without waiting.
    if unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } >= 0 {
        return fds
            .iter()
            .filter(|p| p.revents & libc::POLLNVAL != 0)
            .map(|p| p.fd)
            .collect();
    }
    (0..3)
        .filter(|&fd| {
            // SAFETY: F_GETFD only reads the descriptor's flags.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            flags == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
        })
        .collect()
}

/// Descriptor `fd` is closed and `/dev/null` cannot take its place: whatever the launcher
/// opened next would. Said on stderr when that is open (a plain write: nothing else is set up),
/// and the launcher ends with the internal-error code before it has done anything.
fn refuse_without_dev_null(fd: libc::c_int, why: std::io::Error) -> ! {
    let text = format!(
        "sandbox-launch: descriptor {fd} (standard {}) is closed and /dev/null cannot be opened \
         in its place ({why}); start sandbox-launch with descriptors 0, 1 and 2 open\n",
        ["input", "output", "error"][fd as usize]
    );
    // SAFETY: writing a local buffer to descriptor 2; EBADF when it is closed, and then there
    // is no one to tell.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
    std::process::exit(110)
}
