//! Starting the target: the program's process between its clone and its exec.
//!
//! It shares init's memory (CLONE_VM, as posix_spawn does): no page tables are copied for it
//! and none are torn down at its exec — init's fork of itself and the exec of that copy were
//! ~0.1 ms each on the launch's critical path. So, until its exec, the child runs on a stack of
//! its own, reads only what init keeps for it in [`Child`] (held by [`Spawned`] until the exec
//! or the child's end), and makes raw system calls only: no allocation (another thread of init
//! may hold the allocator's lock), none of libc's cancellation points (they write to the calling
//! thread's control block, which is init's), and errno written only by a call that fails (it is
//! init's main thread's errno too; a failure of the child fails the launch anyway).

use std::ffi::CString;
use std::os::fd::RawFd;

use crate::spec::Rlimit;

/// Why the child did not exec: written as two i32s on the status pipe.
pub const FAILED_EXEC: i32 = 1;
pub const FAILED_GUARD: i32 = 2;
/// setrlimit failed; the index of the limit is in the bits above the low byte.
pub const FAILED_RLIMIT: i32 = 3;
pub const FAILED_SECCOMP: i32 = 4;
pub const FAILED_CAPS: i32 = 5;

/// The child's stack: 256 KiB (it needs a few), above a page without access, so that an
/// overflow faults instead of writing over init's memory.
pub struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

const STACK: usize = 256 << 10;
const GUARD_PAGE: usize = 4096;

impl Stack {
    pub fn new() -> std::io::Result<Stack> {
        let len = STACK + GUARD_PAGE;
        // SAFETY: an anonymous private mapping; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of the mapping just made.
        if unsafe { libc::mprotect(base, GUARD_PAGE, libc::PROT_NONE) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// Where the child's stack pointer starts (16-byte aligned: the mapping is page-aligned).
    pub fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which a downward stack starts from.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used by any child (see `Spawned`).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Everything the child reads, prepared before the clone.
pub struct Child<'a> {
    pub path: CString,
    pub argv: Vec<CString>,
    pub env: Vec<CString>,
    pub argv_p: Vec<*const libc::c_char>,
    pub env_p: Vec<*const libc::c_char>,
    pub go: RawFd,
    pub status: RawFd,
    pub rlimits: &'a [Rlimit],
    pub policy: &'a [libc::sock_filter],
    pub guard: Option<(&'a [libc::sock_filter], RawFd)>,
    /// The stack of the create guard's helper, which the child clones the same way.
    pub helper_stack: Stack,
}

/// The child, running: what it reads stays here until [`Spawned::released`] says it no longer
/// does (its exec succeeded, or it was reaped). Dropped before that, the child is killed and
/// reaped first.
pub struct Spawned<'a> {
    pub pid: libc::pid_t,
    /// Read by the child through the pointer it was given; freed after `Drop::drop` has run.
    _child: Box<Child<'a>>,
    _stack: Stack,
    live: bool,
}

impl Spawned<'_> {
    /// The child has exec'd or has been reaped: its memory is its own, or gone.
    pub fn released(&mut self) {
        self.live = false;
    }
}

impl Drop for Spawned<'_> {
    fn drop(&mut self) {
        if self.live {
            // SAFETY: our own child, which has not exec'd: killed and reaped before the memory
            // it runs on is freed.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// Clone the child (it becomes the next pid: PID 2 when init has started nothing yet).
pub fn spawn(child: Child<'_>) -> std::io::Result<Spawned<'_>> {
    let stack = Stack::new()?;
    let child = Box::new(child);
    extern "C" fn main(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the boxed `Child` that `Spawned` keeps until the child is released.
        unsafe { (*(arg as *const Child<'_>)).exec() }
    }
    // SAFETY: the child runs `main` on its own stack, reading only `child`, which outlives it
    // (see `Spawned`); it never returns into this function's frame.
    let pid = unsafe {
        libc::clone(
            main,
            stack.top(),
            libc::CLONE_VM | libc::SIGCHLD,
            (&*child as *const Child<'_>).cast_mut().cast(),
        )
    };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Spawned {
        pid,
        _child: child,
        _stack: stack,
        live: true,
    })
}

/// Raw system calls, returning the kernel's answer (a negative errno on failure): libc's
/// wrappers of read, write, close and waitpid are cancellation points.
pub mod raw {
    use std::os::fd::RawFd;

    /// # Safety
    /// `buf` is valid for `len` bytes.
    pub unsafe fn read(fd: RawFd, buf: *mut u8, len: usize) -> isize {
        libc::syscall(libc::SYS_read, fd, buf, len) as isize
    }

    /// # Safety
    /// `buf` is valid for `len` bytes.
    pub unsafe fn write(fd: RawFd, buf: *const u8, len: usize) -> isize {
        libc::syscall(libc::SYS_write, fd, buf, len) as isize
    }

    /// # Safety
    /// Closes `fd` of the calling process's table.
    pub unsafe fn close(fd: RawFd) {
        libc::syscall(libc::SYS_close, fd);
    }

    /// # Safety
    /// `status` is valid.
    pub unsafe fn wait(pid: libc::pid_t, status: *mut libc::c_int) -> libc::pid_t {
        libc::syscall(libc::SYS_wait4, pid, status, 0, 0usize) as libc::pid_t
    }

    /// The errno of the last failed call.
    ///
    /// # Safety
    /// Reads libc's thread-local errno.
    pub unsafe fn errno() -> i32 {
        *libc::__errno_location()
    }
}

impl Child<'_> {
    fn fail(&self, kind: i32, errno: i32) -> ! {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&kind.to_ne_bytes());
        bytes[4..].copy_from_slice(&errno.to_ne_bytes());
        // SAFETY: writing a local buffer to our own pipe, then exiting.
        unsafe {
            raw::write(self.status, bytes.as_ptr(), bytes.len());
            libc::_exit(127);
        }
    }

    /// Restore default signal handling, drop the capability init's guard thread keeps, install
    /// the policy's filter and the guard's (handing the guard's listener to init), wait for
    /// init's go, and exec. Never returns.
    ///
    /// The filters go in before the go, in parallel with init's own setup: nothing the child
    /// does before its exec needs more than they allow (a read of the go pipe,
    /// setrlimit, execve), and a failure is reported on the status pipe all the same — init
    /// reads it when it would have let the child go, and the program never runs.
    ///
    /// # Safety
    /// Only in the child of [`spawn`] (see the module's rules).
    unsafe fn exec(&self) -> ! {
        // Handlers set by the Rust runtime (SIGPIPE ignored) must not leak into the target. The
        // kernel's sigaction: SIG_DFL, no flags, no restorer, an empty mask.
        let dfl = [libc::SIG_DFL, 0, 0, 0];
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::syscall(libc::SYS_rt_sigaction, sig, dfl.as_ptr(), 0usize, 8usize);
            }
        }
        let empty = 0u64;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty as *const u64,
            0usize,
            8usize,
        );
        if let Err(errno) = drop_all_capabilities() {
            self.fail(FAILED_CAPS, errno);
        }
        if let Err(errno) = install_filter(self.policy) {
            self.fail(FAILED_SECCOMP, errno);
        }
        if let Some((prog, sock)) = self.guard {
            if let Err(errno) =
                crate::create_guard::install_in_child(prog, sock, &self.helper_stack)
            {
                self.fail(FAILED_GUARD, errno);
            }
        }
        // Init builds and verifies the rest of the sandbox meanwhile (EOF: it failed).
        // Anything but the go (a probe's "p") ends it here.
        let mut go = [0u8; 1];
        if raw::read(self.go, go.as_mut_ptr(), 1) != 1 || go[0] != b'g' {
            libc::_exit(127);
        }
        if let Some((_, sock)) = self.guard {
            // Init gives the go only once it holds the listener.
            raw::close(sock);
        }
        // Last, so nothing of the above runs under the program's limits.
        for (i, r) in self.rlimits.iter().enumerate() {
            let lim = libc::rlimit {
                rlim_cur: r.soft,
                rlim_max: r.hard,
            };
            let set = libc::syscall(
                libc::SYS_prlimit64,
                0,
                r.resource,
                &lim as *const libc::rlimit,
                0usize,
            );
            if set != 0 {
                self.fail(FAILED_RLIMIT | ((i as i32) << 8), raw::errno());
            }
        }
        libc::syscall(
            libc::SYS_execve,
            self.path.as_ptr(),
            self.argv_p.as_ptr(),
            self.env_p.as_ptr(),
        );
        self.fail(FAILED_EXEC, raw::errno());
    }
}

/// Empty every capability set of the calling thread (raw capset), and check that they are.
///
/// # Safety
/// Plain syscalls on local memory.
unsafe fn drop_all_capabilities() -> Result<(), i32> {
    // linux/capability.h: _LINUX_CAPABILITY_VERSION_3 takes two data structs of three u32s
    // (effective, permitted, inheritable).
    const VERSION_3: u32 = 0x2008_0522;
    let mut header: [u32; 2] = [VERSION_3, 0];
    let zero = [0u32; 6];
    if libc::syscall(libc::SYS_capset, header.as_mut_ptr(), zero.as_ptr()) != 0 {
        return Err(raw::errno());
    }
    let mut now = [0u32; 6];
    if libc::syscall(libc::SYS_capget, header.as_mut_ptr(), now.as_mut_ptr()) != 0 {
        return Err(raw::errno());
    }
    if now != zero {
        return Err(libc::EPERM);
    }
    Ok(())
}

/// Install `prog` (no_new_privs is set already) and check that the process is in filter mode.
///
/// # Safety
/// Plain syscalls on memory that outlives them.
unsafe fn install_filter(prog: &[libc::sock_filter]) -> Result<(), i32> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    if libc::syscall(
        libc::SYS_seccomp,
        libc::SECCOMP_SET_MODE_FILTER,
        0,
        &fprog as *const libc::sock_fprog,
    ) != 0
    {
        return Err(raw::errno());
    }
    if libc::syscall(libc::SYS_prctl, libc::PR_GET_SECCOMP, 0, 0, 0, 0) != 2 {
        return Err(libc::EPERM);
    }
    Ok(())
}
