//! A binary search on the syscall number in front of each filter, so installing one is cheap.
//!
//! seccompiler dispatches on the syscall number with a linear chain: one `JEQ nr` (and a few
//! jumps) per syscall the filter names, in number order, the filter's mismatch action at the
//! end. A syscall the filter does not name walks the whole chain. That costs little per call
//! (the kernel's action cache answers most syscalls without the filter), but building that cache
//! is exactly such a walk: at install the kernel emulates the filter for every syscall number
//! (`seccomp_cache_prepare`), ~240 µs for the default policy's 302 instructions, three installs
//! per launch.
//!
//! [`dispatched`] reads, for each filter, where its chain sends each syscall number it names
//! (following the chain the way the kernel would with that number in the accumulator) and
//! replaces the chain by a binary search over those numbers: a number the filter names goes
//! straight to the code seccompiler wrote for it, any other to the filter's mismatch action. The
//! code behind the chain is kept as it is, minus what nothing reaches any more (the chain, the
//! copies of the same `ret`) and minus each filter's own architecture check when the program
//! already made that check in front of every filter. Jumps are re-laid out by label; a
//! conditional jump whose target ends up more than 255 instructions away goes through an
//! unconditional one. Anything in a filter that is not the expected shape leaves that filter's
//! code as it was (still re-laid out); the caller falls back to the plain program on `None`.

use std::collections::BTreeMap;

use seccompiler::{sock_filter, BpfProgram};

// Classic BPF opcodes (linux/bpf_common.h) and seccomp constants (linux/seccomp.h): stable
// kernel ABI, and the shim's too (it builds the ABI guard and the plain chain with them).
// (This file is also compiled into build.rs, so it names no crate but seccompiler.)
pub const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
pub const BPF_JMP_JA: u16 = 0x05; // BPF_JMP | BPF_JA
pub const BPF_JMP_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
pub const BPF_JMP_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
pub const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
pub const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
/// `offsetof(struct seccomp_data, nr)` and `offsetof(struct seccomp_data, arch)`.
pub const SECCOMP_DATA_NR: u32 = 0;
pub const SECCOMP_DATA_ARCH: u32 = 4;
/// The audit arch of x86-64 (linux/audit.h).
pub const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;

/// Instruction classes (linux/bpf_common.h).
const CLASS_MASK: u16 = 0x07;
const CLASS_JMP: u16 = 0x05;
const CLASS_RET: u16 = 0x06;

/// How many syscall numbers a leaf of the search compares one after another.
const LEAF: usize = 4;

type Label = usize;

enum Op {
    /// An instruction whose own jump offsets (if any) stay valid where it is placed.
    Raw(sock_filter),
    Ja(Label),
    Cond {
        code: u16,
        k: u32,
        jt: Label,
        jf: Label,
    },
    Here(Label),
}

#[derive(Default)]
struct Asm {
    ops: Vec<Op>,
    labels: usize,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.labels += 1;
        self.labels - 1
    }

    fn here(&mut self, l: Label) {
        self.ops.push(Op::Here(l));
    }

    fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Lay the program out: every conditional jump whose target is too far for its 8-bit offset
    /// gets an unconditional jump right behind it (layout repeated until nothing moves). `None`
    /// when a jump goes backwards or nowhere.
    fn assemble(&self) -> Option<BpfProgram> {
        // Per conditional (by op index): whether its true / false side goes through a trampoline.
        let mut far = vec![(false, false); self.ops.len()];
        loop {
            let (at, _) = self.layout(&far);
            let mut changed = false;
            let mut pc = 0usize;
            for (i, op) in self.ops.iter().enumerate() {
                match op {
                    Op::Here(_) => continue,
                    Op::Cond { jt, jf, .. } => {
                        let (ft, ff) = far[i];
                        let t = at[*jt].checked_sub(pc + 1)?;
                        let f = at[*jf].checked_sub(pc + 1)?;
                        let (nt, nf) = (ft || t > 255, ff || f > 255);
                        if (nt, nf) != (ft, ff) {
                            far[i] = (nt, nf);
                            changed = true;
                        }
                        pc += 1 + usize::from(ft) + usize::from(ff);
                    }
                    _ => pc += 1,
                }
            }
            if !changed {
                break;
            }
        }
        let (at, len) = self.layout(&far);
        let mut out = Vec::with_capacity(len);
        for (i, op) in self.ops.iter().enumerate() {
            let pc = out.len();
            let to = |l: &Label, from: usize| -> Option<u32> {
                let target = at[*l];
                u32::try_from(target.checked_sub(from + 1)?).ok()
            };
            match op {
                Op::Here(_) => {}
                Op::Raw(insn) => out.push(insn.clone()),
                Op::Ja(l) => out.push(stmt(BPF_JMP_JA, to(l, pc)?)),
                Op::Cond { code, k, jt, jf } => {
                    let (ft, ff) = far[i];
                    let near = |l: &Label| -> Option<u8> { u8::try_from(to(l, pc)?).ok() };
                    let t = if ft { 0 } else { near(jt)? };
                    let f = if ff { u8::from(ft) } else { near(jf)? };
                    out.push(jump(*code, *k, t, f));
                    if ft {
                        out.push(stmt(BPF_JMP_JA, to(jt, out.len())?));
                    }
                    if ff {
                        out.push(stmt(BPF_JMP_JA, to(jf, out.len())?));
                    }
                }
            }
        }
        Some(out)
    }

    /// Where each label lands (`usize::MAX`: nowhere), and the program's length, given the
    /// trampolines in `far` (by op).
    fn layout(&self, far: &[(bool, bool)]) -> (Vec<usize>, usize) {
        let mut at = vec![usize::MAX; self.labels];
        let mut pc = 0usize;
        for (i, op) in self.ops.iter().enumerate() {
            match op {
                Op::Here(l) => at[*l] = pc,
                Op::Cond { .. } => {
                    let (ft, ff) = far[i];
                    pc += 1 + usize::from(ft) + usize::from(ff);
                }
                _ => pc += 1,
            }
        }
        (at, pc)
    }
}

/// `filters` (seccompiler's programs, in the order they run, each one's "allow" handing the
/// syscall to the next) as one program with a search on the syscall number in front of each.
/// `arch_checked`: the audit arch the caller's program already requires in front of the first
/// filter (any other is killed there), so the filters' own checks of it can go.
pub fn dispatched(filters: &[BpfProgram], arch_checked: Option<u32>) -> Option<BpfProgram> {
    let mut asm = Asm::default();
    let starts: Vec<Label> = filters.iter().map(|_| asm.label()).collect();
    for (i, p) in filters.iter().enumerate() {
        let next = starts.get(i + 1).copied();
        filter(&mut asm, p, starts[i], next, arch_checked)?;
    }
    asm.assemble()
}

/// Where control goes from an instruction of a filter, once jumps to jumps are followed.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Dest {
    Pc(usize),
    /// The next filter ("allow" in a filter that is not the last).
    Next,
}

fn filter(
    asm: &mut Asm,
    p: &[sock_filter],
    start: Label,
    next: Option<Label>,
    arch_checked: Option<u32>,
) -> Option<()> {
    asm.here(start);
    let mut pc0 = 0;
    if p.len() > 3
        && p[0] == stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH)
        && (p[1].code, p[1].jt, p[1].jf) == (BPF_JMP_JEQ_K, 1, 0)
        && p[2] == stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS)
    {
        if arch_checked != Some(p[1].k) {
            // Kept as it is: its jump lands on what comes right after it either way.
            for insn in &p[..3] {
                asm.push(Op::Raw(insn.clone()));
            }
        }
        pc0 = 3;
    }
    // The last `ret` of each value: every jump to a `ret` goes to that one.
    let mut last_ret: Vec<(u32, usize)> = Vec::new();
    for (pc, insn) in p.iter().enumerate() {
        if insn.code == BPF_RET_K {
            match last_ret.iter_mut().find(|(k, _)| *k == insn.k) {
                Some(r) => r.1 = pc,
                None => last_ret.push((insn.k, pc)),
            }
        }
    }
    let dest = |mut pc: usize| -> Option<Dest> {
        loop {
            let insn = p.get(pc)?;
            match insn.code {
                BPF_JMP_JA => pc = pc.checked_add(1 + usize::try_from(insn.k).ok()?)?,
                BPF_RET_K if insn.k == SECCOMP_RET_ALLOW && next.is_some() => {
                    return Some(Dest::Next)
                }
                BPF_RET_K => {
                    let last = last_ret.iter().find(|(k, _)| *k == insn.k)?;
                    return Some(Dest::Pc(last.1));
                }
                _ => return Some(Dest::Pc(pc)),
            }
        }
    };

    // The label of each instruction something jumps to.
    let mut labels: Vec<Option<Label>> = vec![None; p.len()];
    let label_of = |asm: &mut Asm, labels: &mut [Option<Label>], d: Dest| match d {
        Dest::Next => next,
        Dest::Pc(pc) => Some(*labels[pc].get_or_insert_with(|| asm.label())),
    };
    // Where the code behind the search is entered.
    let mut entries: Vec<usize> = Vec::new();
    match chain(p, pc0) {
        Some((named, mismatch)) => {
            let mismatch = dest(mismatch)?;
            entries.extend(match mismatch {
                Dest::Pc(pc) => Some(pc),
                Dest::Next => None,
            });
            let default = label_of(asm, &mut labels, mismatch)?;
            let mut keys = Vec::with_capacity(named.len());
            for (nr, pc) in named {
                let d = dest(pc)?;
                if let Dest::Pc(pc) = d {
                    entries.push(pc);
                }
                keys.push((nr, label_of(asm, &mut labels, d)?));
            }
            if keys.is_empty() {
                asm.push(Op::Ja(default));
            } else {
                asm.push(Op::Raw(stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR)));
                search(asm, &keys, default);
            }
        }
        // Not the expected shape: the code runs from where it started.
        None => entries.push(pc0),
    }

    // Every instruction something still reaches, in the order seccompiler wrote them.
    let mut reached = vec![false; p.len()];
    while let Some(pc) = entries.pop() {
        if std::mem::replace(reached.get_mut(pc)?, true) {
            continue;
        }
        let insn = &p[pc];
        match insn.code & CLASS_MASK {
            CLASS_RET => {}
            CLASS_JMP if insn.code == BPF_JMP_JA => {
                entries.extend(pc_of(dest(pc)?));
            }
            CLASS_JMP => {
                entries.extend(pc_of(dest(pc + 1 + usize::from(insn.jt))?));
                entries.extend(pc_of(dest(pc + 1 + usize::from(insn.jf))?));
            }
            // Falls through to the very next instruction, whatever it is.
            _ => entries.push(pc + 1),
        }
    }
    for (pc, insn) in p.iter().enumerate() {
        if !reached[pc] {
            continue;
        }
        if let Some(l) = labels[pc] {
            asm.here(l);
        }
        let op = match insn.code & CLASS_MASK {
            CLASS_JMP if insn.code == BPF_JMP_JA => {
                let d = dest(pc)?;
                Op::Ja(label_of(asm, &mut labels, d)?)
            }
            CLASS_JMP => {
                let t = dest(pc + 1 + usize::from(insn.jt))?;
                let f = dest(pc + 1 + usize::from(insn.jf))?;
                Op::Cond {
                    code: insn.code,
                    k: insn.k,
                    jt: label_of(asm, &mut labels, t)?,
                    jf: label_of(asm, &mut labels, f)?,
                }
            }
            CLASS_RET if insn.k == SECCOMP_RET_ALLOW && next.is_some() => Op::Ja(next?),
            _ => Op::Raw(insn.clone()),
        };
        asm.push(op);
    }
    // Every label stands on an instruction that was emitted (`assemble` checks it is ahead).
    let placed = labels.iter().zip(&reached).all(|(l, r)| l.is_none() || *r);
    placed.then_some(())
}

fn pc_of(d: Dest) -> Option<usize> {
    match d {
        Dest::Pc(pc) => Some(pc),
        Dest::Next => None,
    }
}

/// seccompiler's chain, read from `pc` on the way the kernel runs it for a syscall number the
/// filter does not name: loads of the number, `JEQ` on it, unconditional jumps, up to a `ret`.
/// Returns, for each number compared, where its first `JEQ` would send it (with the number in
/// the accumulator, as it is after the search), and the `ret` reached for any other number.
/// `None` for anything else on the way.
fn chain(p: &[sock_filter], mut pc: usize) -> Option<(BTreeMap<u32, usize>, usize)> {
    let mut named = BTreeMap::new();
    let mut nr_loaded = false;
    loop {
        let insn = p.get(pc)?;
        match insn.code {
            BPF_LD_W_ABS if insn.k == SECCOMP_DATA_NR => {
                nr_loaded = true;
                pc += 1;
            }
            BPF_JMP_JEQ_K if nr_loaded => {
                named.entry(insn.k).or_insert(pc + 1 + usize::from(insn.jt));
                pc += 1 + usize::from(insn.jf);
            }
            BPF_JMP_JA => pc = pc.checked_add(1 + usize::try_from(insn.k).ok()?)?,
            BPF_RET_K => return Some((named, pc)),
            _ => return None,
        }
    }
}

/// A binary search over `keys` (sorted, unique) on the syscall number in the accumulator: a
/// number among them goes to its label, any other to `default`.
fn search(asm: &mut Asm, keys: &[(u32, Label)], default: Label) {
    if keys.len() <= LEAF {
        for (i, (nr, to)) in keys.iter().enumerate() {
            if i + 1 == keys.len() {
                asm.push(Op::Cond {
                    code: BPF_JMP_JEQ_K,
                    k: *nr,
                    jt: *to,
                    jf: default,
                });
            } else {
                let on = asm.label();
                asm.push(Op::Cond {
                    code: BPF_JMP_JEQ_K,
                    k: *nr,
                    jt: *to,
                    jf: on,
                });
                asm.here(on);
            }
        }
        return;
    }
    let (low, high) = keys.split_at(keys.len() / 2);
    let (below, above) = (asm.label(), asm.label());
    asm.push(Op::Cond {
        code: BPF_JMP_JGE_K,
        k: high[0].0,
        jt: above,
        jf: below,
    });
    asm.here(below);
    search(asm, low, default);
    asm.here(above);
    search(asm, high, default);
}

/// An instruction without jumps.
pub fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// A conditional jump.
pub fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}
