//! The default seccomp policy, compiled and installed the way the shim does it, against real
//! syscalls. Each probe runs in a forked child that installs the filter and makes one call; the
//! parent reads the outcome from the child's exit status (or the signal that killed it).
//!
//! Probes use invalid arguments wherever they can (as in bubblewrap's `try-syscall.c`): a call
//! that gets past the filter fails inside the kernel with EFAULT, EBADF, EINVAL…, so nothing
//! happens to the machine running the tests even as root. To prove an EPERM came from the
//! filter and not from the kernel (a call that needs a capability answers EPERM too), every
//! denied probe also runs under the same policy with its errnos swapped for ones no kernel path
//! returns here.
#![cfg(target_arch = "x86_64")]

use std::sync::OnceLock;

use seccompiler::BpfProgram;
use shim::seccomp::{compile, install};
use shim::spec::SeccompSpec;

const DEFAULT_POLICY: &str = include_str!("../../seccomp-policies/policies/default.json");
/// Stand-ins for EPERM and ENOSYS in the marked policy: EHWPOISON and ERFKILL.
const MARK_EPERM: i32 = libc::EHWPOISON;
const MARK_ENOSYS: i32 = libc::ERFKILL;

/// What happened to the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The call returned without error.
    Ok,
    Errno(i32),
    /// The child died of this signal.
    Killed(i32),
}
use Outcome::*;

fn default_filter() -> &'static BpfProgram {
    static PROG: OnceLock<BpfProgram> = OnceLock::new();
    PROG.get_or_init(|| {
        compile(&SeccompSpec {
            name: "default".into(),
            json: DEFAULT_POLICY.into(),
        })
        .expect("the default policy compiles")
    })
}

/// The default policy with its EPERM answers replaced by MARK_EPERM and ENOSYS by MARK_ENOSYS.
fn marked_filter() -> &'static BpfProgram {
    static PROG: OnceLock<BpfProgram> = OnceLock::new();
    PROG.get_or_init(|| {
        let mut policy: serde_json::Value = serde_json::from_str(DEFAULT_POLICY).unwrap();
        for filter in policy.as_object_mut().unwrap().values_mut() {
            let errno = &mut filter["match_action"]["errno"];
            *errno = match errno.as_i64().map(|e| e as i32) {
                Some(libc::EPERM) => MARK_EPERM.into(),
                Some(libc::ENOSYS) => MARK_ENOSYS.into(),
                other => panic!("unexpected errno {other:?} in the default policy"),
            };
        }
        compile(&SeccompSpec {
            name: "default-marked".into(),
            json: policy.to_string(),
        })
        .expect("the marked policy compiles")
    })
}

/// Exit code of a child whose filter could not be installed.
const INSTALL_FAILED: i32 = 200;

/// Fork; in the child install `prog` (if any) and run `probe`, whose raw syscall result is
/// turned into the exit code (0 for success, else errno). The child only makes syscalls after
/// the fork: no allocation, no locks, safe in a multi-threaded test process.
fn run(prog: Option<&BpfProgram>, probe: impl Fn() -> libc::c_long) -> Outcome {
    // SAFETY: the child below only makes raw syscalls and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        if let Some(prog) = prog {
            if install(prog).is_err() {
                // SAFETY: leaving the forked child without running any destructors.
                unsafe { libc::_exit(INSTALL_FAILED) };
            }
        }
        let rc = probe();
        let code = if rc == -1 {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(199)
        } else {
            0
        };
        // SAFETY: as above.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid, "waitpid: {}", std::io::Error::last_os_error());
    if libc::WIFSIGNALED(status) {
        return Killed(libc::WTERMSIG(status));
    }
    match libc::WEXITSTATUS(status) {
        0 => Ok,
        INSTALL_FAILED => panic!("the child could not install the seccomp filter"),
        errno => Errno(errno),
    }
}

fn filtered(probe: impl Fn() -> libc::c_long) -> Outcome {
    run(Some(default_filter()), probe)
}

/// Raw syscall with up to six arguments.
fn sys(nr: libc::c_long, args: [u64; 6]) -> libc::c_long {
    // SAFETY: every probe passes invalid pointers (null or 1), bad fds or bad flags: the kernel
    // validates them and writes nowhere in our memory.
    unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4], args[5]) }
}

const NS_FLAGS: [(&str, u64); 8] = [
    ("CLONE_NEWNS", libc::CLONE_NEWNS as u64),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP as u64),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS as u64),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC as u64),
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER as u64),
    ("CLONE_NEWPID", libc::CLONE_NEWPID as u64),
    ("CLONE_NEWNET", libc::CLONE_NEWNET as u64),
    ("CLONE_NEWTIME", 0x80),
];

/// Syscalls the default policy answers with EPERM, each with arguments that make it fail
/// harmlessly if it ever reached the kernel.
fn denied_probes() -> Vec<(String, libc::c_long, [u64; 6])> {
    use libc::*;
    let bad = u64::MAX; // -1 as fd, or an invalid op
    let mut probes: Vec<(String, c_long, [u64; 6])> = vec![
        ("ptrace", SYS_ptrace, [0xdead, 0, 0, 0, 0, 0]),
        ("process_vm_readv", SYS_process_vm_readv, [0; 6]),
        ("process_vm_writev", SYS_process_vm_writev, [0; 6]),
        ("pidfd_getfd", SYS_pidfd_getfd, [bad, 0, 0, 0, 0, 0]),
        ("mount", SYS_mount, [0; 6]),
        ("umount2", SYS_umount2, [0; 6]),
        ("pivot_root", SYS_pivot_root, [0; 6]),
        ("fsopen", SYS_fsopen, [0; 6]),
        ("fsmount", SYS_fsmount, [bad, 0, 0, 0, 0, 0]),
        ("fsconfig", SYS_fsconfig, [bad, 0, 0, 0, 0, 0]),
        ("fspick", SYS_fspick, [bad, 0, 0, 0, 0, 0]),
        ("move_mount", SYS_move_mount, [bad, 0, bad, 0, 0, 0]),
        ("open_tree", SYS_open_tree, [bad, 0, 0, 0, 0, 0]),
        ("mount_setattr", SYS_mount_setattr, [bad, 0, 0, 0, 0, 0]),
        ("unshare(0)", SYS_unshare, [0; 6]),
        (
            "unshare(CLONE_NEWUSER)",
            SYS_unshare,
            [CLONE_NEWUSER as u64, 0, 0, 0, 0, 0],
        ),
        ("setns", SYS_setns, [bad, 0, 0, 0, 0, 0]),
        ("keyctl", SYS_keyctl, [bad, 0, 0, 0, 0, 0]),
        ("add_key", SYS_add_key, [0; 6]),
        ("request_key", SYS_request_key, [0; 6]),
        ("bpf", SYS_bpf, [bad, 0, 0, 0, 0, 0]),
        (
            "perf_event_open",
            SYS_perf_event_open,
            [0, 0, bad, bad, 0, 0],
        ),
        ("userfaultfd", SYS_userfaultfd, [0xdead, 0, 0, 0, 0, 0]),
        ("io_uring_setup", SYS_io_uring_setup, [0; 6]),
        ("io_uring_enter", SYS_io_uring_enter, [bad, 0, 0, 0, 0, 0]),
        (
            "io_uring_register",
            SYS_io_uring_register,
            [bad, 0, 0, 0, 0, 0],
        ),
        ("kexec_load", SYS_kexec_load, [0, 0, 0, 0xdead_0000, 0, 0]),
        (
            "kexec_file_load",
            SYS_kexec_file_load,
            [bad, bad, 0, 0, 0xdead_0000, 0],
        ),
        ("init_module", SYS_init_module, [0; 6]),
        ("finit_module", SYS_finit_module, [bad, 0, 0, 0, 0, 0]),
        ("delete_module", SYS_delete_module, [0; 6]),
        (
            "open_by_handle_at",
            SYS_open_by_handle_at,
            [bad, 0, 0, 0, 0, 0],
        ),
        (
            "name_to_handle_at",
            SYS_name_to_handle_at,
            [bad, 0, 0, 0, 0, 0],
        ),
        ("acct", SYS_acct, [1, 0, 0, 0, 0, 0]),
        ("swapon", SYS_swapon, [0; 6]),
        ("swapoff", SYS_swapoff, [0; 6]),
        ("reboot", SYS_reboot, [0; 6]),
        ("syslog", SYS_syslog, [bad, 0, 0, 0, 0, 0]),
        ("quotactl", SYS_quotactl, [0; 6]),
        ("quotactl_fd", SYS_quotactl_fd, [bad, 0, 0, 0, 0, 0]),
        ("ioctl TIOCSTI", SYS_ioctl, [bad, TIOCSTI, 0, 0, 0, 0]),
        ("ioctl TIOCLINUX", SYS_ioctl, [bad, TIOCLINUX, 0, 0, 0, 0]),
        (
            "ioctl TIOCSTI | 1<<32",
            SYS_ioctl,
            [bad, 0x1_0000_0000 | TIOCSTI, 0, 0, 0, 0],
        ),
        (
            "ioctl TIOCLINUX | 0xffffffff<<32",
            SYS_ioctl,
            [bad, 0xffff_ffff_0000_0000 | TIOCLINUX, 0, 0, 0, 0],
        ),
        (
            "socket(AF_NETLINK, NETLINK_AUDIT)",
            SYS_socket,
            [
                AF_NETLINK as u64,
                SOCK_RAW as u64,
                NETLINK_AUDIT as u64,
                0,
                0,
                0,
            ],
        ),
        (
            "socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)",
            SYS_socket,
            [
                AF_NETLINK as u64,
                SOCK_DGRAM as u64,
                NETLINK_KOBJECT_UEVENT as u64,
                0,
                0,
                0,
            ],
        ),
        (
            "socket(AF_PACKET)",
            SYS_socket,
            [AF_PACKET as u64, SOCK_RAW as u64, 0, 0, 0, 0],
        ),
        (
            "socket(-1)",
            SYS_socket,
            [bad, SOCK_STREAM as u64, 0, 0, 0, 0],
        ),
        (
            "socket(1<<32 | AF_VSOCK)",
            SYS_socket,
            [
                0x1_0000_0000 | AF_VSOCK as u64,
                SOCK_STREAM as u64,
                0,
                0,
                0,
                0,
            ],
        ),
        (
            "socketpair(AF_INET)",
            SYS_socketpair,
            [AF_INET as u64, SOCK_STREAM as u64, 0, 0, 0, 0],
        ),
        (
            "socketpair(AF_NETLINK)",
            SYS_socketpair,
            [AF_NETLINK as u64, SOCK_RAW as u64, 0, 0, 0, 0],
        ),
    ]
    .into_iter()
    .map(|(n, nr, a)| (n.to_string(), nr, a))
    .collect();
    // CLONE_SIGHAND without CLONE_VM is invalid: an unfiltered call fails with EINVAL and
    // creates nothing.
    for (name, flag) in NS_FLAGS {
        let flags = flag | CLONE_SIGHAND as u64;
        probes.push((format!("clone({name})"), SYS_clone, [flags, 0, 0, 0, 0, 0]));
        // The kernel reads only the low 32 bits of the flags: high bits must not hide the flag.
        probes.push((
            format!("clone({name} | 1<<32)"),
            SYS_clone,
            [flags | 0x1_0000_0000, 0, 0, 0, 0, 0],
        ));
    }
    probes
}

#[test]
fn every_denied_syscall_answers_eperm() {
    let mut wrong = Vec::new();
    for (name, nr, args) in denied_probes() {
        let got = filtered(|| sys(nr, args));
        if got != Errno(libc::EPERM) {
            wrong.push(format!("{name}: {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "not EPERM: {wrong:#?}");
}

#[test]
fn every_denied_syscall_is_stopped_by_the_filter_not_the_kernel() {
    let mut wrong = Vec::new();
    for (name, nr, args) in denied_probes() {
        let got = run(Some(marked_filter()), || sys(nr, args));
        if got != Errno(MARK_EPERM) {
            wrong.push(format!("{name}: {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "not answered by the filter: {wrong:#?}");
}

#[test]
fn clone3_answers_enosys_from_the_filter() {
    let probe = || sys(libc::SYS_clone3, [0; 6]);
    assert_eq!(filtered(probe), Errno(libc::ENOSYS));
    assert_eq!(run(Some(marked_filter()), probe), Errno(MARK_ENOSYS));
}

#[test]
fn fork_and_clone_without_namespace_flags_work() {
    // glibc's fork: clone(CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD).
    let fork_and_reap = || {
        // SAFETY: the grandchild exits at once.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: leaving the grandchild.
            unsafe { libc::_exit(0) };
        }
        if pid < 0 {
            return -1;
        }
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) as libc::c_long }
    };
    assert_eq!(filtered(fork_and_reap), Ok);

    let raw_clone = || {
        let pid = sys(libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]);
        if pid == 0 {
            // SAFETY: leaving the grandchild.
            unsafe { libc::_exit(0) };
        }
        if pid < 0 {
            return -1;
        }
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), 0) as libc::c_long }
    };
    assert_eq!(filtered(raw_clone), Ok);
}

/// glibc's posix_spawn (and so Rust's Command) tries clone3 first; on ENOSYS it must fall back to
/// clone(CLONE_VM | CLONE_VFORK) and still start the program.
#[test]
fn posix_spawn_falls_back_from_clone3_and_runs_a_program() {
    let path = c"/bin/true";
    let argv: [*mut libc::c_char; 2] = [path.as_ptr() as *mut _, std::ptr::null_mut()];
    let envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
    let spawn = || {
        let mut pid: libc::pid_t = 0;
        // SAFETY: argv and envp are NULL-terminated arrays of C strings that outlive the call.
        let rc = unsafe {
            libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                argv.as_ptr(),
                envp.as_ptr(),
            )
        };
        if rc != 0 {
            // posix_spawn returns the error instead of setting errno.
            // SAFETY: writing this thread's errno.
            unsafe { *libc::__errno_location() = rc };
            return -1;
        }
        let mut status = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            0
        } else {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = libc::ECHILD };
            -1
        }
    };
    assert_eq!(filtered(spawn), Ok);
}

#[test]
fn harmless_ioctls_still_reach_the_kernel() {
    // TIOCGWINSZ on a bad fd: the kernel answers EBADF, the filter does not answer.
    let winsz = || sys(libc::SYS_ioctl, [u64::MAX, libc::TIOCGWINSZ, 0, 0, 0, 0]);
    assert_eq!(filtered(winsz), Errno(libc::EBADF));
    // FIONREAD, used by every terminal program.
    let fionread = || sys(libc::SYS_ioctl, [u64::MAX, libc::FIONREAD, 0, 0, 0, 0]);
    assert_eq!(filtered(fionread), Errno(libc::EBADF));
}

#[test]
fn socket_families_other_than_unix_inet_inet6_netlink_are_denied() {
    const ALLOWED: [i32; 4] = [
        libc::AF_UNIX,
        libc::AF_INET,
        libc::AF_INET6,
        libc::AF_NETLINK,
    ];
    let mut wrong = Vec::new();
    for family in 0..=45 {
        // Netlink needs a datagram-like type; for the others the type does not matter to the
        // filter, only to the kernel once the filter has let the call through.
        let ty = if family == libc::AF_NETLINK {
            libc::SOCK_RAW
        } else {
            libc::SOCK_DGRAM
        };
        let got = filtered(|| sys(libc::SYS_socket, [family as u64, ty as u64, 0, 0, 0, 0]));
        let ok = if ALLOWED.contains(&family) {
            got != Errno(libc::EPERM)
        } else {
            got == Errno(libc::EPERM)
        };
        if !ok {
            wrong.push(format!("family {family}: {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn allowed_sockets_are_created() {
    let socket = |family: i32, ty: i32, proto: i32| {
        move || {
            let fd = sys(
                libc::SYS_socket,
                [family as u64, ty as u64, proto as u64, 0, 0, 0],
            );
            if fd >= 0 {
                // SAFETY: closing the socket just created.
                unsafe { libc::close(fd as i32) };
                0
            } else {
                fd
            }
        }
    };
    assert_eq!(filtered(socket(libc::AF_UNIX, libc::SOCK_STREAM, 0)), Ok);
    assert_eq!(filtered(socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0)), Ok);
    assert_eq!(filtered(socket(libc::AF_INET, libc::SOCK_STREAM, 0)), Ok);
    assert_eq!(filtered(socket(libc::AF_INET, libc::SOCK_DGRAM, 0)), Ok);
    assert_eq!(
        filtered(socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW,
            libc::NETLINK_ROUTE
        )),
        Ok
    );
    // IPv6 may be disabled on the test host (EAFNOSUPPORT); it must not be the filter saying no.
    assert_ne!(
        filtered(socket(libc::AF_INET6, libc::SOCK_STREAM, 0)),
        Errno(libc::EPERM)
    );
    let pair = || {
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors.
        let rc = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) };
        rc as libc::c_long
    };
    assert_eq!(filtered(pair), Ok);
}

/// i386 syscalls via `int 0x80` carry AUDIT_ARCH_I386: seccompiler's arch check kills them.
#[test]
fn i386_syscall_kills_the_process() {
    let int80 = || {
        let ret: i64;
        // SAFETY: i386 getpid (20) takes no arguments and touches no memory.
        unsafe {
            std::arch::asm!("int 0x80", inlateout("rax") 20i64 => ret, options(nostack));
        }
        ret
    };
    assert_eq!(filtered(int80), Killed(libc::SIGSYS));
}

const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;

/// x32 syscalls carry AUDIT_ARCH_X86_64 with bit 30 set in the number: the shim's guard kills
/// them (a denylist keyed on x86-64 numbers would not see them).
#[test]
fn x32_syscall_kills_the_process() {
    let x32_getpid = || sys(X32_SYSCALL_BIT | libc::SYS_getpid, [0; 6]);
    assert_eq!(filtered(x32_getpid), Killed(libc::SIGSYS));
    let x32_unshare = || sys(X32_SYSCALL_BIT | libc::SYS_unshare, [0; 6]);
    assert_eq!(filtered(x32_unshare), Killed(libc::SIGSYS));
}

/// Why the guard exists: a plain seccompiler denylist of getpid does not stop x32 getpid.
#[test]
fn x32_syscall_slips_past_a_bare_seccompiler_denylist() {
    let arch = std::env::consts::ARCH.try_into().unwrap();
    let bare = seccompiler::compile_from_json(
        br#"{"main": {"mismatch_action": "allow", "match_action": {"errno": 1}, "filter": [{"syscall": "getpid"}]}}"#
            .as_slice(),
        arch,
    )
    .unwrap()
    .remove("main")
    .unwrap();
    assert_eq!(
        run(Some(&bare), || sys(libc::SYS_getpid, [0; 6])),
        Errno(libc::EPERM)
    );
    let x32 = run(Some(&bare), || {
        sys(X32_SYSCALL_BIT | libc::SYS_getpid, [0; 6])
    });
    // Ok where the kernel has x32 support, ENOSYS where it has not: never stopped by the filter.
    assert!(matches!(x32, Ok | Errno(libc::ENOSYS)), "{x32:?}");
}

/// Ordinary programs keep working: a shell pipeline starts, forks and exits 0.
#[test]
fn a_shell_runs_under_the_filter() {
    let sh = c"/bin/sh";
    let dash_c = c"-c";
    let script = c"echo x | cat >/dev/null && ls / >/dev/null";
    let argv: [*const libc::c_char; 4] = [
        sh.as_ptr(),
        dash_c.as_ptr(),
        script.as_ptr(),
        std::ptr::null(),
    ];
    let got = filtered(|| {
        // SAFETY: forked child; execv replaces the image, NULL-terminated argv.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above.
            unsafe {
                libc::execv(sh.as_ptr(), argv.as_ptr());
                libc::_exit(127);
            }
        }
        let mut status = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            0
        } else {
            // SAFETY: writing this thread's errno.
            unsafe { *libc::__errno_location() = libc::ECHILD };
            -1
        }
    });
    assert_eq!(got, Ok);
}

/// A classic-BPF walk like the kernel's `seccomp_is_const_allow`: the action for syscall `nr`
/// when it does not depend on the arguments, `None` when the program reads an argument.
fn constant_action(prog: &BpfProgram, nr: u32) -> Option<u32> {
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    let mut acc = 0u32;
    let mut pc = 0usize;
    while pc < prog.len() {
        let insn = &prog[pc];
        let (code, k) = (insn.code, insn.k);
        pc += 1;
        match code {
            0x20 => {
                acc = match k {
                    0 => nr,
                    4 => AUDIT_ARCH_X86_64,
                    _ => return None,
                }
            }
            0x06 => return Some(k),
            0x05 => pc += k as usize,
            0x15 | 0x35 | 0x25 | 0x45 => {
                let taken = match code {
                    0x15 => acc == k,
                    0x35 => acc >= k,
                    0x25 => acc > k,
                    _ => acc & k != 0,
                };
                pc += if taken { insn.jt } else { insn.jf } as usize;
            }
            0x54 => acc &= k,
            other => panic!("unexpected BPF opcode {other:#x}"),
        }
    }
    panic!("fell off the end of the program");
}

#[test]
fn frequent_syscalls_are_constant_allows_for_the_seccomp_cache() {
    use libc::*;
    const ALLOW: u32 = 0x7fff_0000;
    let prog = default_filter();
    for nr in [
        SYS_read,
        SYS_write,
        SYS_readv,
        SYS_writev,
        SYS_pread64,
        SYS_futex,
        SYS_mmap,
        SYS_munmap,
        SYS_mprotect,
        SYS_brk,
        SYS_close,
        SYS_newfstatat,
        SYS_statx,
        SYS_lseek,
        SYS_rt_sigaction,
        SYS_rt_sigprocmask,
        SYS_getpid,
        SYS_clock_gettime,
        SYS_epoll_wait,
        SYS_poll,
        SYS_recvfrom,
        SYS_sendto,
        SYS_getdents64,
        SYS_fcntl,
        SYS_wait4,
        SYS_execve,
        SYS_exit_group,
        SYS_getrandom,
    ] {
        assert_eq!(
            constant_action(prog, nr as u32),
            Some(ALLOW),
            "syscall {nr}"
        );
    }
    // The argument-checked ones cannot be cached; the plain denials are constant. (`openat`
    // is looked at for a set-ID mode; the create guard looks at its flags anyway.)
    assert_eq!(constant_action(prog, SYS_openat as u32), None);
    assert_eq!(constant_action(prog, SYS_ioctl as u32), None);
    assert_eq!(constant_action(prog, SYS_socket as u32), None);
    assert_eq!(constant_action(prog, SYS_clone as u32), None);
    assert_eq!(
        constant_action(prog, SYS_ptrace as u32),
        Some(0x0005_0000 | 1)
    );
    assert_eq!(
        constant_action(prog, SYS_clone3 as u32),
        Some(0x0005_0000 | 38)
    );
    assert_eq!(
        constant_action(prog, 0x4000_0000 | SYS_read as u32),
        Some(0x8000_0000)
    );
}

/// A scratch directory of a test's, removed when dropped.
struct Scratch(std::path::PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(tag: &str) -> Scratch {
    let p = std::env::temp_dir().join(format!("sl-setid-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    Scratch(p)
}

fn c_path(p: &std::path::Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Every way to give a file a set-user-ID or set-group-ID mode, under `prog`; each probe on
/// a file of the caller's own, so that without a filter each one succeeds.
fn set_id_probes(prog: Option<&BpfProgram>) -> Vec<(&'static str, Outcome)> {
    use libc::*;
    let dir = scratch("probes");
    let file = dir.0.join("file");
    std::fs::write(&file, "").unwrap();
    let (file, dirc) = (c_path(&file), c_path(&dir.0));
    let fresh: Vec<std::ffi::CString> = (0..6)
        .map(|i| c_path(&dir.0.join(format!("new-{i}"))))
        .collect();
    let mut out = Vec::new();
    let p = |s: &std::ffi::CString| s.as_ptr() as u64;
    let suid = u64::from(S_ISUID | 0o755);
    let sgid = u64::from(S_ISGID | 0o755);
    let probes: Vec<(&'static str, libc::c_long, [u64; 6])> = vec![
        ("chmod 4755", SYS_chmod, [p(&file), suid, 0, 0, 0, 0]),
        (
            "fchmodat 4755",
            SYS_fchmodat,
            [AT_FDCWD as u64, p(&file), suid, 0, 0, 0],
        ),
        (
            "fchmodat2 4755",
            SYS_fchmodat2,
            [AT_FDCWD as u64, p(&file), suid, 0, 0, 0],
        ),
        ("creat 4755", SYS_creat, [p(&fresh[0]), suid, 0, 0, 0, 0]),
        (
            "open O_CREAT 4755",
            SYS_open,
            [p(&fresh[1]), (O_CREAT | O_WRONLY) as u64, suid, 0, 0, 0],
        ),
        (
            "openat O_CREAT 2755",
            SYS_openat,
            [
                AT_FDCWD as u64,
                p(&fresh[2]),
                (O_CREAT | O_WRONLY) as u64,
                sgid,
                0,
                0,
            ],
        ),
        (
            "openat O_TMPFILE 4755",
            SYS_openat,
            [
                AT_FDCWD as u64,
                p(&dirc),
                (O_TMPFILE | O_WRONLY) as u64,
                suid,
                0,
                0,
            ],
        ),
        (
            "mknod S_IFREG|4755",
            SYS_mknod,
            [p(&fresh[3]), u64::from(S_IFREG) | suid, 0, 0, 0, 0],
        ),
        (
            "mknodat S_IFREG|2755",
            SYS_mknodat,
            [
                AT_FDCWD as u64,
                p(&fresh[4]),
                u64::from(S_IFREG) | sgid,
                0,
                0,
                0,
            ],
        ),
    ];
    for (name, nr, args) in probes {
        // fchmod: a descriptor opened in the child, on the file.
        out.push((name, run(prog, || sys(nr, args))));
    }
    let fd_file = file.clone();
    out.push((
        "fchmod 4755",
        run(prog, move || {
            // SAFETY: open and fchmod of a path we own; the descriptor dies with the child.
            let fd = unsafe { libc::open(fd_file.as_ptr(), O_RDONLY) };
            if fd < 0 {
                return -1;
            }
            sys(SYS_fchmod, [fd as u64, suid, 0, 0, 0, 0])
        }),
    ));
    drop(dir);
    out
}

#[test]
fn no_file_gets_a_set_user_or_group_id_mode() {
    let without = set_id_probes(None);
    for (name, outcome) in &without {
        assert_eq!(
            *outcome, Ok,
            "{name} without a filter (the probe itself must work)"
        );
    }
    for (name, outcome) in set_id_probes(Some(default_filter())) {
        assert_eq!(outcome, Errno(libc::EPERM), "{name}");
    }
}

/// The allowed twins: the same calls with ordinary modes, and opens that create nothing.
#[test]
fn ordinary_modes_and_opens_are_allowed() {
    use libc::*;
    let dir = scratch("twins");
    let file = dir.0.join("file");
    std::fs::write(&file, "").unwrap();
    let (file, dirc) = (c_path(&file), c_path(&dir.0));
    let fresh = c_path(&dir.0.join("new"));
    let p = |s: &std::ffi::CString| s.as_ptr() as u64;
    for (name, nr, args) in [
        ("chmod 1777", SYS_chmod, [p(&file), 0o1777, 0, 0, 0, 0]),
        // Set-group-ID in a changed mode: a directory's (git's shared repositories, GNU chmod
        // keeping it) cannot be told from a file's by a filter (see `seccomp::setid`).
        ("chmod 2775 dir", SYS_chmod, [p(&dirc), 0o2775, 0, 0, 0, 0]),
        (
            "fchmodat 0755",
            SYS_fchmodat,
            [AT_FDCWD as u64, p(&file), 0o755, 0, 0, 0],
        ),
        (
            "openat O_CREAT 0644",
            SYS_openat,
            [
                AT_FDCWD as u64,
                p(&fresh),
                (O_CREAT | O_WRONLY) as u64,
                0o644,
                0,
                0,
            ],
        ),
        // No O_CREAT: the mode argument is garbage and means nothing.
        (
            "openat O_RDONLY",
            SYS_openat,
            [AT_FDCWD as u64, p(&file), O_RDONLY as u64, 0o7777, 0, 0],
        ),
    ] {
        assert_eq!(filtered(|| sys(nr, args)), Ok, "{name}");
    }
}

#[test]
fn openat2_answers_enosys_so_libc_falls_back_to_openat() {
    let probe = || sys(libc::SYS_openat2, [libc::AT_FDCWD as u64, 1, 1, 24, 0, 0]);
    assert_eq!(run(None, probe), Errno(libc::EFAULT));
    assert_eq!(filtered(probe), Errno(libc::ENOSYS));
}

/// A policy of the user's own keeps the guard, even one whose answer for everything it does
/// not name is something other than "allow" (the first such answer would otherwise win).
#[test]
fn a_policy_of_its_own_keeps_the_set_id_guard() {
    for mismatch in ["allow", "log"] {
        let json = format!(
            r#"{{"main": {{"mismatch_action": "{mismatch}", "match_action": {{"errno": 1}},
                "filter": [{{"syscall": "acct"}}]}}}}"#
        );
        let prog = compile(&SeccompSpec {
            name: "own".into(),
            json,
        })
        .unwrap();
        let outcomes = set_id_probes(Some(&prog));
        for (name, outcome) in outcomes {
            assert_eq!(
                outcome,
                Errno(libc::EPERM),
                "{name} under mismatch {mismatch}"
            );
        }
    }
}
