//! The guard's BPF program: which syscalls go to init.
//!
//! Everything that can put content at a name: creating an entry (open/creat with O_CREAT, mkdir,
//! mknod, symlink, link, rename), opening an existing file for writing (O_WRONLY, O_RDWR,
//! O_TRUNC: a file of a nested repository or an agent's directory is not known at launch, so no
//! read-only bind covers it), truncate(2), and bind(2) (a pathname unix socket is a new name).
//! `umask` is seen too (and let through), so init knows each process's mask. `openat2` answers
//! ENOSYS (its flags live in memory, out of the filter's reach); callers fall back to `openat`.
//!
//! Every way to reach a socket by its address goes to init too (which socket it reaches:
//! `host_sockets`): `connect`, `sendmsg` and `sendmmsg` (their address lies in memory, out of
//! the filter's reach), and `sendto` when it names an address (a non-null `dest_addr`; a
//! `send`, which is `sendto` without one, stays in the kernel).
//!
//! Adding a syscall is one more entry in [`ALWAYS`] and one more decoder in `decode`.

/// Syscalls that always go to init (x86-64 numbers; other ABIs are killed by the main policy's
/// guard).
#[cfg(target_arch = "x86_64")]
const ALWAYS: &[libc::c_long] = &[
    libc::SYS_creat,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_mknod,
    libc::SYS_mknodat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_truncate,
    libc::SYS_bind,
    libc::SYS_connect,
    libc::SYS_sendmsg,
    libc::SYS_sendmmsg,
    // Not a creation: seen (and let through) so init knows each process's umask without
    // reading /proc/PID/status on every creation.
    libc::SYS_umask,
];

/// Open flags that make an open go to init: it creates, writes or truncates.
pub const OPEN_FLAGS_SEEN: u32 =
    (libc::O_CREAT | libc::O_WRONLY | libc::O_RDWR | libc::O_TRUNC) as u32;

/// Offsets in `struct seccomp_data`: `nr`, `arch`, and the low 32 bits of `args[i]`.
const NR: u32 = 0;
const ARCH: u32 = 4;
const fn arg_low(i: u32) -> u32 {
    16 + 8 * i
}
const fn arg_high(i: u32) -> u32 {
    arg_low(i) + 4
}
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Where a jump goes: the next instruction or a label.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum To {
    Next,
    Label(Label),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Label {
    Allow,
    Notify,
    Enosys,
    Open,
    Openat,
    /// sendto: to init when it names an address.
    Sendto,
    /// The end of a prefix: what follows it.
    End,
    Deny,
}

enum Insn {
    Load(u32),
    Jump(u16, u32, To, To),
    Ret(u32),
    Here(Label),
}

/// Lay out `insns`, turning labels into relative jumps.
fn assemble(insns: &[Insn]) -> Vec<libc::sock_filter> {
    let mut at = std::collections::HashMap::new();
    let mut n = 0usize;
    for i in insns {
        match i {
            Insn::Here(l) => {
                at.insert(*l, n);
            }
            _ => n += 1,
        }
    }
    let mut out = Vec::with_capacity(n);
    for i in insns {
        let here = out.len();
        let offset = |t: To| -> u8 {
            match t {
                To::Next => 0,
                To::Label(l) => {
                    let target = at[&l];
                    debug_assert!(target > here, "jumps go forward");
                    (target - here - 1) as u8
                }
            }
        };
        let (code, k, jt, jf) = match i {
            Insn::Here(_) => continue,
            Insn::Load(off) => (LD_W_ABS, *off, 0, 0),
            Insn::Jump(code, k, t, f) => (*code, *k, offset(*t), offset(*f)),
            Insn::Ret(k) => (RET, *k, 0, 0),
        };
        out.push(libc::sock_filter { code, jt, jf, k });
    }
    out
}

/// The guard's BPF program.
#[cfg(target_arch = "x86_64")]
pub fn filter() -> Vec<libc::sock_filter> {
    use Insn::*;
    use To::{Label as L, Next};
    let mut p = vec![
        Load(ARCH),
        // Another ABI: not ours to judge (the main policy kills it).
        Jump(JEQ, AUDIT_ARCH_X86_64, Next, L(Label::Allow)),
        Load(NR),
    ];
    for nr in ALWAYS {
        p.push(Jump(JEQ, *nr as u32, L(Label::Notify), Next));
    }
    p.extend([
        Jump(JEQ, libc::SYS_open as u32, L(Label::Open), Next),
        Jump(JEQ, libc::SYS_openat as u32, L(Label::Openat), Next),
        Jump(JEQ, libc::SYS_openat2 as u32, L(Label::Enosys), Next),
        Jump(JEQ, libc::SYS_sendto as u32, L(Label::Sendto), Next),
        Here(Label::Allow),
        Ret(libc::SECCOMP_RET_ALLOW),
        Here(Label::Open),
        Load(arg_low(1)),
        Jump(JSET, OPEN_FLAGS_SEEN, L(Label::Notify), Next),
        Ret(libc::SECCOMP_RET_ALLOW),
        Here(Label::Openat),
        Load(arg_low(2)),
        Jump(JSET, OPEN_FLAGS_SEEN, L(Label::Notify), Next),
        Ret(libc::SECCOMP_RET_ALLOW),
        Here(Label::Sendto),
        // dest_addr, a 64-bit pointer: either half non-zero names an address.
        Load(arg_low(4)),
        Jump(JEQ, 0, Next, L(Label::Notify)),
        Load(arg_high(4)),
        Jump(JEQ, 0, Next, L(Label::Notify)),
        Ret(libc::SECCOMP_RET_ALLOW),
        Here(Label::Notify),
        Ret(libc::SECCOMP_RET_USER_NOTIF),
        Here(Label::Enosys),
        Ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]);
    assemble(&p)
}

/// What only init's guard thread may do of what the policy denies every process of the
/// sandbox: the guard copies the asking thread's arguments out of its memory, takes a socket to
/// bind from it, and writes back the lengths a sendmmsg it performed sent.
#[cfg(target_arch = "x86_64")]
const GUARD_ONLY: [libc::c_long; 3] = [
    libc::SYS_pidfd_getfd,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
];

/// The [`GUARD_ONLY`] syscalls (of x86-64) to `then`, everything else to `otherwise`.
#[cfg(target_arch = "x86_64")]
fn guard_only(then: Label, otherwise: Label) -> Vec<Insn> {
    use Insn::*;
    use To::{Label as L, Next};
    vec![
        Load(ARCH),
        Jump(JEQ, AUDIT_ARCH_X86_64, Next, L(otherwise)),
        Load(NR),
        Jump(JEQ, GUARD_ONLY[0] as u32, L(then), Next),
        Jump(JEQ, GUARD_ONLY[1] as u32, L(then), Next),
        Jump(JEQ, GUARD_ONLY[2] as u32, L(then), L(otherwise)),
    ]
}

/// In front of the main policy's program, for init's threads (see `GuardThread`): the
/// [`GUARD_ONLY`] syscalls allowed, everything else as the policy says.
#[cfg(target_arch = "x86_64")]
pub fn guard_thread_prefix() -> Vec<libc::sock_filter> {
    use Insn::*;
    let mut p = guard_only(Label::Allow, Label::End);
    p.extend([
        Here(Label::Allow),
        Ret(libc::SECCOMP_RET_ALLOW),
        Here(Label::End),
    ]);
    assemble(&p)
}

/// Stacked on init's main thread over the program with [`guard_thread_prefix`], which it
/// shares with the guard's thread: the [`GUARD_ONLY`] syscalls denied again (EPERM, as the
/// default policy denies them), so that the main thread, and whatever it starts later, is held
/// to the policy alone. Another ABI is the policy's to judge.
#[cfg(target_arch = "x86_64")]
pub fn main_thread_denies() -> Vec<libc::sock_filter> {
    use Insn::*;
    let mut p = guard_only(Label::Deny, Label::Allow);
    p.extend([
        Here(Label::Deny),
        Ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        Here(Label::Allow),
        Ret(libc::SECCOMP_RET_ALLOW),
    ]);
    assemble(&p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run a classic BPF program (the instructions used here) on one syscall.
    fn eval(p: &[libc::sock_filter], nr: i64, arch: u32, args: [u64; 6]) -> u32 {
        let word = |off: u32| -> u32 {
            match off {
                0 => nr as u32,
                4 => arch,
                o => {
                    let i = ((o - 16) / 8) as usize;
                    if (o - 16) % 8 == 0 {
                        args[i] as u32
                    } else {
                        (args[i] >> 32) as u32
                    }
                }
            }
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = p[pc];
            match i.code {
                LD_W_ABS => acc = word(i.k),
                JEQ => {
                    pc += if acc == i.k { i.jt } else { i.jf } as usize;
                }
                JSET => {
                    pc += if acc & i.k != 0 { i.jt } else { i.jf } as usize;
                }
                RET => return i.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
            pc += 1;
        }
    }

    const X86: u32 = AUDIT_ARCH_X86_64;

    #[test]
    fn the_filter_has_consistent_jumps() {
        let p = filter();
        for (i, ins) in p.iter().enumerate() {
            if ins.code & 0x07 == libc::BPF_JMP as u16 {
                assert!(i + 1 + (ins.jt as usize) < p.len());
                assert!(i + 1 + (ins.jf as usize) < p.len());
            }
        }
    }

    #[test]
    fn every_way_to_put_content_at_a_name_goes_to_init() {
        let p = filter();
        for nr in ALWAYS {
            assert_eq!(
                eval(&p, *nr, X86, [0; 6]),
                libc::SECCOMP_RET_USER_NOTIF,
                "{nr}"
            );
        }
        for flags in [
            libc::O_CREAT,
            libc::O_WRONLY,
            libc::O_RDWR,
            libc::O_RDONLY | libc::O_TRUNC,
            libc::O_TMPFILE | libc::O_WRONLY,
        ] {
            let f = flags as u64;
            assert_eq!(
                eval(&p, libc::SYS_open, X86, [0, f, 0, 0, 0, 0]),
                libc::SECCOMP_RET_USER_NOTIF
            );
            assert_eq!(
                eval(&p, libc::SYS_openat, X86, [0, 0, f, 0, 0, 0]),
                libc::SECCOMP_RET_USER_NOTIF
            );
        }
    }

    #[test]
    fn reads_and_other_syscalls_stay_in_the_kernel() {
        let p = filter();
        let ro = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_DIRECTORY) as u64;
        assert_eq!(
            eval(&p, libc::SYS_openat, X86, [0, 0, ro, 0, 0, 0]),
            libc::SECCOMP_RET_ALLOW
        );
        assert_eq!(
            eval(&p, libc::SYS_open, X86, [0, ro, 0, 0, 0, 0]),
            libc::SECCOMP_RET_ALLOW
        );
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_unlink,
            libc::SYS_sendto,
        ] {
            assert_eq!(eval(&p, nr, X86, [0; 6]), libc::SECCOMP_RET_ALLOW);
        }
        // Another ABI is the main policy's to kill.
        assert_eq!(
            eval(&p, libc::SYS_mkdir, 0x4000_0003, [0; 6]),
            libc::SECCOMP_RET_ALLOW
        );
        assert_eq!(
            eval(&p, libc::SYS_openat2, X86, [0; 6]),
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
    }

    #[test]
    fn connects_and_sends_naming_an_address_go_to_init_and_sockets_are_made_in_the_kernel() {
        let p = filter();
        for nr in [libc::SYS_connect, libc::SYS_sendmsg, libc::SYS_sendmmsg] {
            assert_eq!(
                eval(&p, nr, X86, [0; 6]),
                libc::SECCOMP_RET_USER_NOTIF,
                "{nr}"
            );
        }
        // sendto: with a dest_addr (either half of the pointer) to init; a plain send not.
        for addr in [0x7fff_0000_1000u64, 0x1000, 0x7fff_0000_0000] {
            assert_eq!(
                eval(&p, libc::SYS_sendto, X86, [3, 0x1000, 1, 0, addr, 110]),
                libc::SECCOMP_RET_USER_NOTIF,
                "{addr:#x}"
            );
        }
        assert_eq!(
            eval(&p, libc::SYS_sendto, X86, [3, 0x1000, 1, 0, 0, 0]),
            libc::SECCOMP_RET_ALLOW
        );
        // Any socket, datagram unix ones included, is made by the kernel.
        let flags = (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64;
        for nr in [libc::SYS_socket, libc::SYS_socketpair] {
            for ty in [libc::SOCK_DGRAM, libc::SOCK_RAW, libc::SOCK_STREAM] {
                let args = [libc::AF_UNIX as u64, ty as u64 | flags, 0, 0, 0, 0];
                assert_eq!(eval(&p, nr, X86, args), libc::SECCOMP_RET_ALLOW);
            }
        }
    }

    #[test]
    fn the_guard_thread_prefix_allows_only_what_the_guard_needs_and_falls_through() {
        let mut p = guard_thread_prefix();
        let end = p.len();
        // A stand-in for the policy: deny everything with EPERM.
        p.push(libc::sock_filter {
            code: RET,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | 1,
        });
        assert_eq!(end, 7);
        for nr in [
            libc::SYS_pidfd_getfd,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
        ] {
            assert_eq!(eval(&p, nr, X86, [0; 6]), libc::SECCOMP_RET_ALLOW);
        }
        for nr in [libc::SYS_ptrace, libc::SYS_pidfd_open, libc::SYS_read] {
            assert_eq!(eval(&p, nr, X86, [0; 6]), libc::SECCOMP_RET_ERRNO | 1);
        }
        assert_eq!(
            eval(&p, libc::SYS_pidfd_getfd, 0x4000_0003, [0; 6]),
            libc::SECCOMP_RET_ERRNO | 1
        );
    }

    #[test]
    fn the_main_thread_is_denied_again_what_the_guard_thread_alone_may_do() {
        let p = main_thread_denies();
        assert_eq!(p.len(), 8);
        for nr in GUARD_ONLY {
            assert_eq!(
                eval(&p, nr, X86, [0; 6]),
                libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
                "{nr}"
            );
        }
        for nr in [
            libc::SYS_read,
            libc::SYS_ptrace,
            libc::SYS_wait4,
            libc::SYS_kill,
        ] {
            assert_eq!(eval(&p, nr, X86, [0; 6]), libc::SECCOMP_RET_ALLOW, "{nr}");
        }
        assert_eq!(
            eval(&p, libc::SYS_pidfd_getfd, 0x4000_0003, [0; 6]),
            libc::SECCOMP_RET_ALLOW
        );
    }
}
