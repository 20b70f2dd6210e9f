//! The program with a search in front of each filter answers every syscall exactly as the plain
//! chain does: both are run by a classic BPF interpreter over syscall numbers, architectures
//! and argument vectors built from every constant the program compares with.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use super::*;

/// `struct seccomp_data`.
#[derive(Clone, Copy, Debug)]
struct Data {
    nr: u32,
    arch: u32,
    ip: u64,
    args: [u64; 6],
}

impl Data {
    /// The 32-bit word at `off` (x86-64 is little-endian: the low half of a u64 comes first).
    fn word(&self, off: u32) -> u32 {
        let half = |v: u64, high: bool| if high { (v >> 32) as u32 } else { v as u32 };
        match off {
            0 => self.nr,
            4 => self.arch,
            8 | 12 => half(self.ip, off == 12),
            16..=60 if off.is_multiple_of(4) => {
                half(self.args[(off as usize - 16) / 8], (off - 16) % 8 == 4)
            }
            _ => panic!("load from offset {off}"),
        }
    }
}

/// Run `p` on `d` as the kernel would; panics on what seccomp's checker would refuse or what
/// these programs never contain.
fn run(p: &[sock_filter], d: &Data) -> u32 {
    steps(p, d).0
}

/// The answer, and how many instructions ran to reach it.
fn steps(p: &[sock_filter], d: &Data) -> (u32, usize) {
    let (mut pc, mut a) = (0usize, 0u32);
    for n in 1.. {
        let i = &p[pc];
        let cond = |c: bool| usize::from(if c { i.jt } else { i.jf });
        match i.code {
            BPF_LD_W_ABS => a = d.word(i.k),
            0x54 => a &= i.k, // BPF_ALU | BPF_AND | BPF_K
            BPF_JMP_JA => pc += i.k as usize,
            BPF_JMP_JEQ_K => pc += cond(a == i.k),
            0x25 => pc += cond(a > i.k), // BPF_JGT
            BPF_JMP_JGE_K => pc += cond(a >= i.k),
            0x45 => pc += cond(a & i.k != 0), // BPF_JSET
            BPF_RET_K => return (i.k, n),
            c => panic!("opcode {c:#x} at {pc}"),
        }
        pc += 1;
    }
    unreachable!("a program of at most {BPF_MAXINSNS} forward jumps ends")
}

/// What the kernel's checker demands of the shape: every jump lands inside, a `ret` last.
fn check(p: &[sock_filter]) {
    assert!(
        !p.is_empty() && p.len() <= BPF_MAXINSNS,
        "{} insns",
        p.len()
    );
    assert_eq!(p[p.len() - 1].code, BPF_RET_K, "last instruction");
    for (pc, i) in p.iter().enumerate() {
        if i.code & 0x07 == 0x05 {
            let (t, f) = if i.code == BPF_JMP_JA {
                (i.k as usize, i.k as usize)
            } else {
                (usize::from(i.jt), usize::from(i.jf))
            };
            assert!(pc + 1 + t.max(f) < p.len(), "jump out at {pc}");
        }
    }
}

const ARCHES: [u32; 6] = [
    AUDIT_ARCH_X86_64,
    0x4000_0003,
    0xc000_00b7,
    0,
    u32::MAX,
    0x4000_003e,
];

/// Syscall numbers: 0..=1023, x32 ones, the top of the range, and some random ones.
fn numbers(rng: &mut Rng) -> Vec<u32> {
    let mut n: Vec<u32> = (0..=1023).collect();
    n.extend((0..1100).step_by(7).map(|i| 0x4000_0000 | i));
    n.extend([0x3fff_ffff, 0x7fff_ffff, 0x8000_0000, 0xbfff_ffff]);
    n.extend((0..16).map(|i| u32::MAX - i));
    n.extend((0..64).map(|_| rng.next() as u32));
    n
}

/// Every constant `p` compares or masks with, each ±1, and the extremes.
fn constants(p: &[sock_filter]) -> Vec<u32> {
    let mut c = BTreeSet::from([0, 1, u32::MAX, 0x8000_0000, 0x7fff_ffff]);
    for i in p {
        if i.code & 0x07 == 0x05 && i.code != BPF_JMP_JA || i.code == 0x54 {
            c.extend([i.k, i.k.wrapping_add(1), i.k.wrapping_sub(1)]);
        }
    }
    c.into_iter().collect()
}

/// xorshift: reproducible "random" values without a seed to manage.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn args(&mut self) -> [u64; 6] {
        std::array::from_fn(|_| self.next())
    }
}

/// Assert that `old` and `new` answer alike. For the syscall numbers the program compares with,
/// `samples` argument vectors made of its constants (and, when `sweep`, every argument on every
/// constant with either upper half).
fn assert_same(old: &[sock_filter], new: &[sock_filter], seed: u64, samples: usize, sweep: bool) {
    check(old);
    check(new);
    let mut rng = Rng(seed | 1);
    let consts = constants(old);
    let named: BTreeSet<u32> = consts
        .iter()
        .copied()
        .filter(|c| *c < 0x4000_0000)
        .collect();
    let same = |d: &Data| {
        let (o, n) = (run(old, d), run(new, d));
        assert_eq!(o, n, "{d:x?}: plain {o:#x}, with the search {n:#x}");
    };
    for nr in numbers(&mut rng) {
        for arch in ARCHES {
            let base = Data {
                nr,
                arch,
                ip: rng.next(),
                args: [0; 6],
            };
            same(&base);
            same(&Data {
                args: [u64::MAX; 6],
                ..base
            });
            for _ in 0..4 {
                same(&Data {
                    args: rng.args(),
                    ..base
                });
            }
            if arch != AUDIT_ARCH_X86_64 || !named.contains(&nr) {
                continue;
            }
            let pick = |rng: &mut Rng| consts[rng.next() as usize % consts.len()];
            for _ in 0..samples {
                let mut args = [0u64; 6];
                for a in &mut args {
                    let hi = match rng.next() % 4 {
                        0 | 1 => 0,
                        2 => pick(&mut rng),
                        _ => rng.next() as u32,
                    };
                    *a = match rng.next() % 3 {
                        0 => 0,
                        _ => u64::from(hi) << 32 | u64::from(pick(&mut rng)),
                    };
                }
                same(&Data { args, ..base });
            }
            if !sweep {
                continue;
            }
            for i in 0..6 {
                for &lo in &consts {
                    for hi in [0, u32::MAX, lo, rng.next() as u32] {
                        let mut args = rng.args();
                        args[i] = u64::from(hi) << 32 | u64::from(lo);
                        same(&Data { args, ..base });
                        args = [0; 6];
                        args[i] = u64::from(hi) << 32 | u64::from(lo);
                        same(&Data { args, ..base });
                    }
                }
            }
        }
    }
}

fn linear(filters: Vec<BpfProgram>) -> BpfProgram {
    let mut p = front();
    p.extend(chain(filters));
    p
}

fn default_filters() -> Vec<BpfProgram> {
    let json = seccomp_policies::get("default").unwrap();
    let mut f = seccompiler::compile_from_json(json.as_bytes(), TargetArch::x86_64).unwrap();
    let main = f.remove("main").unwrap();
    let mut rest: Vec<_> = f.into_iter().collect();
    rest.sort_by(|a, b| a.0.cmp(&b.0));
    std::iter::once(main)
        .chain(rest.into_iter().map(|(_, p)| p))
        .collect()
}

#[test]
fn the_default_policy_answers_alike_with_the_search() {
    let filters = default_filters();
    let old = linear(filters.clone());
    let new = program(filters);
    assert!(new.len() < old.len(), "{} vs {}", new.len(), old.len());
    assert_same(&old, &new, 0x5eed, 4000, true);
}

#[test]
fn compile_uses_the_search_for_the_embedded_policy() {
    let spec = SeccompSpec {
        name: "default".into(),
        json: seccomp_policies::get("default").unwrap().into(),
    };
    let compiled = compile(&spec).unwrap();
    assert_eq!(compiled, program(default_filters()));
    assert_ne!(compiled, linear(default_filters()));
}

/// The kernel emulates the program for every syscall number when it is installed; a number the
/// policy does not name must not walk a chain of comparisons.
#[test]
fn an_unnamed_syscall_takes_few_steps() {
    let p = program(default_filters());
    let old = linear(default_filters());
    for nr in [libc::SYS_read, libc::SYS_getppid, 460] {
        let d = Data {
            nr: nr as u32,
            arch: AUDIT_ARCH_X86_64,
            ip: 0,
            args: [0; 6],
        };
        let (n, before) = (steps(&p, &d).1, steps(&old, &d).1);
        assert!(n <= 30, "{nr}: {n} steps (plain: {before})");
    }
}

/// Per syscall number, its rules: each a list of (argument, qword, operator, value).
type Rules = Vec<(u16, Vec<Vec<(u8, bool, u8, u64)>>)>;

/// A filter seccompiler could build, from proptest's values.
fn filter_of(rules: Rules, actions: (u8, u8)) -> Option<BpfProgram> {
    let action = |a: u8| match a % 6 {
        0 => SeccompAction::Allow,
        1 => SeccompAction::Errno(u32::from(a)),
        2 => SeccompAction::KillProcess,
        3 => SeccompAction::Trap,
        4 => SeccompAction::Log,
        _ => SeccompAction::Trace(u32::from(a)),
    };
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, conds) in rules {
        let entry = map.entry(i64::from(nr)).or_default();
        for rule in conds {
            let conds = rule
                .into_iter()
                .map(|(arg, qword, op, val)| {
                    let len = if qword {
                        SeccompCmpArgLen::Qword
                    } else {
                        SeccompCmpArgLen::Dword
                    };
                    let op = match op % 7 {
                        0 => SeccompCmpOp::Eq,
                        1 => SeccompCmpOp::Ge,
                        2 => SeccompCmpOp::Gt,
                        3 => SeccompCmpOp::Le,
                        4 => SeccompCmpOp::Lt,
                        5 => SeccompCmpOp::Ne,
                        _ => SeccompCmpOp::MaskedEq(val.rotate_left(7)),
                    };
                    SeccompCondition::new(arg % 6, len, op, val).unwrap()
                })
                .collect();
            entry.push(SeccompRule::new(conds).unwrap());
        }
    }
    let (mismatch, matched) = (action(actions.0), action(actions.1));
    let f = SeccompFilter::new(map, mismatch, matched, TargetArch::x86_64).ok()?;
    BpfProgram::try_from(f).ok()
}

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..4,
        Just(u64::from(u32::MAX)),
        any::<u32>().prop_map(u64::from),
        any::<u64>(),
    ]
}

fn rules(max: usize) -> impl Strategy<Value = Rules> {
    let cond = (0u8..6, any::<bool>(), any::<u8>(), value());
    let rule = prop::collection::vec(cond, 1..3);
    prop::collection::vec((0u16..520, prop::collection::vec(rule, 0..3)), 0..max)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random policies of one to three filters, each naming up to 40 syscalls.
    #[test]
    fn random_policies_answer_alike(
        filters in prop::collection::vec((rules(40), (any::<u8>(), any::<u8>())), 1..4),
        seed in any::<u64>(),
    ) {
        let filters: Vec<BpfProgram> =
            filters.into_iter().filter_map(|(r, a)| filter_of(r, a)).collect();
        prop_assume!(!filters.is_empty());
        assert_same(&linear(filters.clone()), &program(filters), seed, 300, false);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// Policies that name hundreds of syscalls: the search's jumps are farther than a
    /// conditional jump reaches.
    #[test]
    fn large_policies_answer_alike(
        filters in prop::collection::vec((rules(300), (any::<u8>(), any::<u8>())), 1..3),
        seed in any::<u64>(),
    ) {
        let filters: Vec<BpfProgram> =
            filters.into_iter().filter_map(|(r, a)| filter_of(r, a)).collect();
        prop_assume!(!filters.is_empty());
        let old = linear(filters.clone());
        prop_assume!(old.len() <= BPF_MAXINSNS);
        assert_same(&old, &program(filters), seed, 40, false);
    }
}

/// A filter that names every number up to 400 with no conditions: only trampolines reach.
#[test]
fn a_search_wider_than_a_jump_goes_through_trampolines() {
    let rules: Rules = (0..400).map(|nr| (nr, Vec::new())).collect();
    let f = filter_of(rules, (1, 0)).unwrap();
    let tail = filter_of(vec![(7, Vec::new())], (0, 2)).unwrap();
    let old = linear(vec![f.clone(), tail.clone()]);
    let new = program(vec![f, tail]);
    assert!(new.len() < old.len());
    assert!(new.iter().any(|i| i.code == BPF_JMP_JA));
    assert_same(&old, &new, 7, 20, false);
}
