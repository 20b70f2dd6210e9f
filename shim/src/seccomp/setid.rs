//! No set-user-ID or set-group-ID file: a guard in front of every policy's filters.
//!
//! A file the sandbox makes in a writable tree is the host's file afterwards, owned there by the
//! tree's owner. Started as root, a launch maps a tree of root's to the sandbox's user (`idmap`
//! in the launcher), so `chmod 4755` inside made a set-user-ID root program on the host that
//! any local user could run (the mounts' `nosuid` covers only the sandbox's own view). So the
//! mode a syscall gives is looked at, as systemd's `RestrictSUIDSGID=` does: `chmod`, `fchmod`,
//! `fchmodat`, `fchmodat2`, `mknod`, `mknodat` and `creat` with `S_ISUID` or `S_ISGID` in their
//! mode, and `open`/`openat` that create (`O_CREAT`, or `O_TMPFILE`) with one, answer EPERM.
//! `openat2` passes its flags and mode in memory, out of the filter's reach: it answers ENOSYS,
//! and libc falls back to `openat`. (A directory made with `mkdir` never gets these bits from
//! its mode; `chown` clears them.)
//!
//! Not a policy's: it holds whatever `--seccomp-policy` says, and runs before it.

use seccomp_policies::dispatch::{
    jump, stmt, BPF_JMP_JA, BPF_JMP_JEQ_K, BPF_JMP_JGE_K, BPF_LD_W_ABS, BPF_RET_K, SECCOMP_DATA_NR,
};
use seccompiler::{sock_filter, BpfProgram};

/// The bits refused in a mode.
pub const SET_ID: u32 = libc::S_ISUID | libc::S_ISGID;
/// Open flags that create a file with the call's mode (`__O_TMPFILE`, which `O_TMPFILE`
/// includes, and `O_CREAT`).
const CREATES: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;

const BPF_JMP_JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

/// What a syscall's arguments are looked at for.
#[derive(Clone, Copy)]
enum Check {
    /// The mode is argument `n`.
    Mode(u32),
    /// It creates when argument `flags` holds [`CREATES`]; then the mode is argument `mode`.
    Open { flags: u32, mode: u32 },
    /// Answered ENOSYS.
    Enosys,
}

/// The syscalls looked at, by number (ascending).
fn checked() -> Vec<(u32, Check)> {
    let mut out: Vec<(libc::c_long, Check)> = vec![
        (libc::SYS_fchmod, Check::Mode(1)),
        (libc::SYS_fchmodat, Check::Mode(2)),
        (libc::SYS_fchmodat2, Check::Mode(2)),
        (libc::SYS_mknodat, Check::Mode(2)),
        (libc::SYS_openat, Check::Open { flags: 2, mode: 3 }),
        (libc::SYS_openat2, Check::Enosys),
    ];
    #[cfg(target_arch = "x86_64")]
    out.extend([
        (libc::SYS_chmod, Check::Mode(1)),
        (libc::SYS_mknod, Check::Mode(1)),
        (libc::SYS_creat, Check::Mode(1)),
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
    /// The test of argument `n` for [`SET_ID`].
    ModeArg(u32),
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
            Check::Mode(n) => To::ModeArg(n),
            Check::Open { .. } => To::Check(i),
            Check::Enosys => To::Enosys,
        };
        ops.push(Jump(BPF_JMP_JEQ_K, *nr, to, To::Next));
    }
    ops.push(Jump(BPF_JMP_JA, 0, To::End, To::End));
    let mut mode_args: Vec<u32> = Vec::new();
    for (i, (_, check)) in calls.iter().enumerate() {
        match *check {
            Check::Mode(n) => mode_args.push(n),
            Check::Open { flags, mode } => {
                ops.push(Here(To::Check(i)));
                ops.push(Load(arg(flags)));
                ops.push(Jump(BPF_JMP_JSET_K, CREATES, To::ModeArg(mode), To::End));
                mode_args.push(mode);
            }
            Check::Enosys => {}
        }
    }
    mode_args.sort_unstable();
    mode_args.dedup();
    for n in mode_args {
        ops.push(Here(To::ModeArg(n)));
        ops.push(Load(arg(n)));
        ops.push(Jump(BPF_JMP_JSET_K, SET_ID, To::Eperm, To::End));
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
