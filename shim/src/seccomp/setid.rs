//! No set-user-ID file, and no file made set-group-ID: a guard in front of every policy's
//! filters.
//!
//! A file the sandbox makes in a writable tree is the host's file afterwards, owned there by the
//! tree's owner. Started as root, a launch maps a tree of root's to the sandbox's user (`idmap`
//! in the launcher), so `chmod 4755` inside made a set-user-ID root program on the host that
//! any local user could run (the mounts' `nosuid` covers only the sandbox's own view). So the
//! mode a syscall gives is looked at, as systemd's `RestrictSUIDSGID=` does: `chmod`, `fchmod`,
//! `fchmodat` and `fchmodat2` with `S_ISUID` in their mode, and `mknod`, `mknodat`, `creat`,
//! and `open`/`openat` that create (`O_CREAT`, or `O_TMPFILE`) with `S_ISUID` or `S_ISGID`,
//! answer EPERM. `openat2` passes its flags and mode in memory, out of the filter's reach: it
//! answers ENOSYS, and libc falls back to `openat`. (A directory made with `mkdir` never gets
//! these bits from its mode; `chown` clears them.)
//!
//! `S_ISGID` is allowed in a changed mode: a filter cannot tell a directory from a file, and on
//! a directory the bit only gives new entries its group — git sets it on every directory of a
//! shared repository (`core.sharedRepository`), GNU `chmod` keeps it on a directory, `cp -a`
//! copies it. So `chmod g+s` of a program can give it the group of its tree (README, Threat
//! model); a set-group-ID program that is there is not written (the create guard).
//!
//! Not a policy's: it holds whatever `--seccomp-policy` says, and runs before it.

use seccomp_policies::dispatch::{
    jump, stmt, BPF_JMP_JA, BPF_JMP_JEQ_K, BPF_JMP_JGE_K, BPF_LD_W_ABS, BPF_RET_K, SECCOMP_DATA_NR,
};
use seccompiler::{sock_filter, BpfProgram};

/// The bits refused in the mode of a file being made.
pub const SET_ID: u32 = libc::S_ISUID | libc::S_ISGID;
/// The bit refused in a changed mode: set-group-ID is allowed there, for directories (see the
/// module's documentation).
const SET_UID: u32 = libc::S_ISUID;
/// Open flags that create a file with the call's mode (`__O_TMPFILE`, which `O_TMPFILE`
/// includes, and `O_CREAT`).
const CREATES: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;

const BPF_JMP_JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

/// What a syscall's arguments are looked at for.
#[derive(Clone, Copy)]
enum Check {
    /// A file is made with the mode in argument `n`: no set-ID bit.
    Made(u32),
    /// The mode in argument `n` is given to what exists: no set-user-ID bit.
    Changed(u32),
    /// It creates when argument `flags` holds [`CREATES`]; then the mode is argument `mode`.
    Open { flags: u32, mode: u32 },
    /// Answered ENOSYS.
    Enosys,
}

/// The syscalls looked at, by number (ascending).
fn checked() -> Vec<(u32, Check)> {
    let mut out: Vec<(libc::c_long, Check)> = vec![
        (libc::SYS_fchmod, Check::Changed(1)),
        (libc::SYS_fchmodat, Check::Changed(2)),
        (libc::SYS_fchmodat2, Check::Changed(2)),
        (libc::SYS_mknodat, Check::Made(2)),
        (libc::SYS_openat, Check::Open { flags: 2, mode: 3 }),
        (libc::SYS_openat2, Check::Enosys),
    ];
    #[cfg(target_arch = "x86_64")]
    out.extend([
        (libc::SYS_chmod, Check::Changed(1)),
        (libc::SYS_mknod, Check::Made(1)),
        (libc::SYS_creat, Check::Made(1)),
        (libc::SYS_open, Check::Open { flags: 1, mode: 2 }),
    ]);
    let mut out: Vec<(u32, Check)> = out.into_iter().map(|(n, c)| (n as u32, c)).collect();
    out.sort_by_key(|(n, _)| *n);
    out
}

/// The low 32 bits of argument `i` in `struct seccomp_data` (the kernel reads a mode and open
/// flags as 32-bit values).
const fn arg(i: u32) -> u32 {
    16 + 8 * i
}

/// Where a jump of the program goes.
#[derive(Clone, Copy, PartialEq)]
enum To {
    Next,
    /// The instruction right after the guard: the policy's filters.
    End,
    /// The check of the `i`th syscall of [`checked`].
    Check(usize),
    /// The test of argument `n` for these bits.
    ModeArg(u32, u32),
    Eperm,
    Enosys,
    /// The second half of the search.
    Upper,
}

enum Op {
    Load(u32),
    Jump(u16, u32, To, To),
    Ret(u32),
    Here(To),
}

/// The guard's program. It falls through to what follows it (and leaves the accumulator
/// holding whatever it loaded last: a filter after it loads what it needs).
pub fn guard() -> BpfProgram {
    use Op::*;
    let calls = checked();
    // A search in two halves, each a chain of comparisons: at most eight instructions on the
    // way of a syscall not looked at (the kernel walks each number's way once, at install).
    let half = calls.len() / 2;
    let mut ops = vec![
        Load(SECCOMP_DATA_NR),
        Jump(BPF_JMP_JGE_K, calls[half].0, To::Upper, To::Next),
    ];
    for (i, (nr, check)) in calls.iter().enumerate() {
        if i == half {
            ops.push(Jump(BPF_JMP_JA, 0, To::End, To::End));
            ops.push(Here(To::Upper));
        }
        let to = match *check {
            Check::Made(n) => To::ModeArg(n, SET_ID),
            Check::Changed(n) => To::ModeArg(n, SET_UID),
            Check::Open { .. } => To::Check(i),
            Check::Enosys => To::Enosys,
        };
        ops.push(Jump(BPF_JMP_JEQ_K, *nr, to, To::Next));
    }
    ops.push(Jump(BPF_JMP_JA, 0, To::End, To::End));
    let mut mode_args: Vec<(u32, u32)> = Vec::new();
    for (i, (_, check)) in calls.iter().enumerate() {
        match *check {
            Check::Made(n) => mode_args.push((n, SET_ID)),
            Check::Changed(n) => mode_args.push((n, SET_UID)),
            Check::Open { flags, mode } => {
                ops.push(Here(To::Check(i)));
                ops.push(Load(arg(flags)));
                ops.push(Jump(
                    BPF_JMP_JSET_K,
                    CREATES,
                    To::ModeArg(mode, SET_ID),
                    To::End,
                ));
                mode_args.push((mode, SET_ID));
            }
            Check::Enosys => {}
        }
    }
    mode_args.sort_unstable();
    mode_args.dedup();
    for (n, bits) in mode_args {
        ops.push(Here(To::ModeArg(n, bits)));
        ops.push(Load(arg(n)));
        ops.push(Jump(BPF_JMP_JSET_K, bits, To::Eperm, To::End));
    }
    ops.extend([
        Here(To::Eperm),
        Ret(SECCOMP_RET_ERRNO | libc::EPERM as u32),
        Here(To::Enosys),
        Ret(SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        Here(To::End),
    ]);
    assemble(&ops)
}

/// Lay `ops` out, turning each label into a forward offset.
fn assemble(ops: &[Op]) -> BpfProgram {
    let mut at: Vec<(To, usize)> = Vec::new();
    let mut n = 0;
    for op in ops {
        match op {
            Op::Here(l) => at.push((*l, n)),
            _ => n += 1,
        }
    }
    let place = |l: To| at.iter().find(|(k, _)| *k == l).map(|(_, p)| *p);
    let mut out: Vec<sock_filter> = Vec::with_capacity(n);
    for op in ops {
        let here = out.len();
        let offset = |t: To| -> u32 {
            match t {
                To::Next => 0,
                l => {
                    let target = place(l).expect("every label is placed");
                    assert!(target > here, "jumps go forward");
                    (target - here - 1) as u32
                }
            }
        };
        let insn = match op {
            Op::Here(_) => continue,
            Op::Load(off) => stmt(BPF_LD_W_ABS, *off),
            Op::Ret(k) => stmt(BPF_RET_K, *k),
            Op::Jump(BPF_JMP_JA, _, t, _) => stmt(BPF_JMP_JA, offset(*t)),
            Op::Jump(code, k, t, f) => {
                let small = |o: u32| u8::try_from(o).expect("a short program");
                jump(*code, *k, small(offset(*t)), small(offset(*f)))
            }
        };
        out.push(insn);
    }
    out
}
