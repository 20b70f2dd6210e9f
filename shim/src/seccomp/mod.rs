//! seccomp-bpf: compile a seccompiler JSON policy into one BPF program and install it.
//!
//! A policy file is a seccompiler JSON object of named filters. The filter `"main"` is required;
//! any others follow it in name order. seccompiler gives each filter a single answer for the
//! syscalls it matches, so a policy that answers with two different errnos (EPERM for most,
//! ENOSYS for `clone3`) needs two filters. They are chained into a single program: where one
//! filter would allow a syscall, the next one decides; the first answer other than "allow" wins.
//!
//! In front of the chain sits a guard this module adds itself, whatever the policy says: on
//! x86-64 it kills the process for any syscall made through another ABI (see [`abi_guard`]),
//! and no mode may hold the set-user-ID or set-group-ID bit (see [`setid`]).
//! Each filter gets a binary search on the syscall number in front of its code (see
//! `seccomp_policies::dispatch`), which makes installing the program several times cheaper.

#[cfg(test)]
mod equivalence;
pub mod setid;

use std::collections::HashMap;
use std::convert::TryInto;
use std::io;

use anyhow::{anyhow, bail, Context, Result};
use seccompiler::{sock_filter, BpfProgram};

use crate::spec::SeccompSpec;

/// The filter every policy must have; it runs first.
const MAIN_FILTER: &str = "main";

#[cfg(target_arch = "x86_64")]
use seccomp_policies::dispatch::AUDIT_ARCH_X86_64;
use seccomp_policies::dispatch::{
    jump, stmt, BPF_JMP_JA, BPF_JMP_JEQ_K, BPF_JMP_JGE_K, BPF_LD_W_ABS, BPF_RET_K,
    SECCOMP_DATA_ARCH, SECCOMP_DATA_NR, SECCOMP_RET_ALLOW, SECCOMP_RET_KILL_PROCESS,
};
/// The audit arch [`abi_guard`] requires (every other is killed before the first filter).
#[cfg(target_arch = "x86_64")]
const GUARD_ARCH: Option<u32> = Some(AUDIT_ARCH_X86_64);
#[cfg(not(target_arch = "x86_64"))]
const GUARD_ARCH: Option<u32> = None;
/// The kernel refuses longer classic BPF programs.
const BPF_MAXINSNS: usize = 4096;

/// Compile the policy in `spec` into the program [`install`] loads: the ABI guard, then the
/// policy's `"main"` filter, then its other filters in name order.
pub fn compile(spec: &SeccompSpec) -> Result<BpfProgram> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| anyhow!("seccomp: unsupported architecture: {e:?}"))?;
    // An embedded policy was compiled and chained when the binary was built, for the guard
    // this module puts in front on x86-64 (`chained` assumes it); only other JSON is compiled now.
    #[cfg(target_arch = "x86_64")]
    if let Some(chained) = seccomp_policies::chained(&spec.json) {
        let mut program = front();
        program.extend(
            chained
                .iter()
                .map(|&(code, jt, jf, k)| sock_filter { code, jt, jf, k }),
        );
        return Ok(program);
    }
    let mut filters: HashMap<String, BpfProgram> = match seccomp_policies::precompiled(&spec.json) {
        Some(built) => built
            .iter()
            .map(|(name, insns)| {
                let prog = insns
                    .iter()
                    .map(|&(code, jt, jf, k)| seccompiler::sock_filter { code, jt, jf, k })
                    .collect();
                (name.to_string(), prog)
            })
            .collect(),
        None => seccompiler::compile_from_json(spec.json.as_bytes(), arch)
            .with_context(|| format!("seccomp policy '{}'", spec.name))?,
    };
    let main = filters.remove(MAIN_FILTER).ok_or_else(|| {
        anyhow!(
            "seccomp policy '{}' has no filter named \"{MAIN_FILTER}\"",
            spec.name
        )
    })?;
    let mut others: Vec<(String, BpfProgram)> = filters.into_iter().collect();
    others.sort_by(|a, b| a.0.cmp(&b.0));
    let filters: Vec<BpfProgram> = std::iter::once(main)
        .chain(others.into_iter().map(|(_, p)| p))
        .collect();

    let program = program(filters);
    if program.len() > BPF_MAXINSNS {
        bail!(
            "seccomp policy '{}' compiles to {} BPF instructions; the kernel accepts at most {BPF_MAXINSNS}",
            spec.name,
            program.len()
        );
    }
    Ok(program)
}

/// The ABI guard, then `filters` chained, each behind a search on the syscall number; the plain
/// chain when that cannot be built (a filter of an unexpected shape, or too long a program).
fn program(filters: Vec<BpfProgram>) -> BpfProgram {
    let mut program = front();
    match seccomp_policies::dispatch::dispatched(&filters, GUARD_ARCH) {
        Some(p) if program.len() + p.len() <= BPF_MAXINSNS => program.extend(p),
        _ => program.extend(chain(filters)),
    }
    program
}

/// Load `prog` as this thread's seccomp filter (it is inherited by every child and kept across
/// execve). Sets no_new_privs first (the kernel demands it of an unprivileged caller; it is
/// already set in the shim).
pub fn install(prog: &BpfProgram) -> Result<()> {
    install_with(prog, 0)
}

/// Load `prog` as the filter of every thread of this process at once (SECCOMP_FILTER_FLAG_TSYNC):
/// one program for all of them, compiled once by the kernel. Refused when another thread
/// already has a filter this one does not descend from.
pub fn install_for_all_threads(prog: &BpfProgram) -> Result<()> {
    install_with(prog, libc::SECCOMP_FILTER_FLAG_TSYNC)
}

fn install_with(prog: &BpfProgram, flags: libc::c_ulong) -> Result<()> {
    if prog.is_empty() || prog.len() > BPF_MAXINSNS {
        bail!(
            "cannot install a seccomp filter of {} instructions (must be 1..={BPF_MAXINSNS})",
            prog.len()
        );
    }
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error()).context("prctl(PR_SET_NO_NEW_PRIVS, 1)");
    }
    let fprog = libc::sock_fprog {
        // Cannot truncate: checked against BPF_MAXINSNS above.
        len: prog.len() as libc::c_ushort,
        // seccompiler's sock_filter is #[repr(C)] with the kernel's layout, as is libc's.
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: the kernel copies the program out of `fprog` during the call; both outlive it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc > 0 {
        // TSYNC: the id of a thread that could not take the filter.
        bail!(
            "seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): thread {rc} of this process cannot take \
             the filter (it has one of its own)"
        );
    }
    if rc != 0 {
        let err = io::Error::last_os_error();
        let hint = match err.raw_os_error() {
            Some(libc::EINVAL) => {
                ": the kernel rejected the program or does not support seccomp filters (CONFIG_SECCOMP_FILTER)"
            }
            Some(libc::EACCES) => ": no_new_privs is not set and the caller lacks CAP_SYS_ADMIN",
            Some(libc::ENOMEM) => ": too many filters are already stacked on this process",
            _ => "",
        };
        return Err(err).context(format!(
            "seccomp(SECCOMP_SET_MODE_FILTER) with {} instructions{hint}",
            prog.len()
        ));
    }
    Ok(())
}

/// One line per denied syscall and rule, for `-v` and doctor-like reports: which filter, which
/// syscall, under which argument conditions, answered how.
pub fn describe(json: &str) -> Result<Vec<String>> {
    let policy: serde_json::Value = serde_json::from_str(json).context("parse seccomp policy")?;
    let filters = policy
        .as_object()
        .ok_or_else(|| anyhow!("a seccomp policy is a JSON object of filters"))?;
    let mut names: Vec<&String> = filters.keys().collect();
    names.sort_by_key(|n| (n.as_str() != MAIN_FILTER, n.as_str()));
    let mut lines = Vec::new();
    for name in names {
        let filter = &filters[name];
        let action = filter
            .get("match_action")
            .or_else(|| filter.get("filter_action"))
            .map(|a| a.to_string())
            .unwrap_or_default();
        let rules = filter.get("filter").and_then(|f| f.as_array());
        for rule in rules.into_iter().flatten() {
            let syscall = rule.get("syscall").and_then(|s| s.as_str()).unwrap_or("?");
            let args = rule.get("args").and_then(|a| a.as_array());
            let conds: Vec<String> = args
                .into_iter()
                .flatten()
                .map(|c| {
                    format!(
                        "arg{} {} {} {}",
                        c.get("index").unwrap_or(&serde_json::Value::Null),
                        c.get("type").and_then(|t| t.as_str()).unwrap_or("?"),
                        c.get("op").unwrap_or(&serde_json::Value::Null),
                        c.get("val").unwrap_or(&serde_json::Value::Null),
                    )
                })
                .collect();
            let when = if conds.is_empty() {
                String::new()
            } else {
                format!(" when {}", conds.join(" and "))
            };
            lines.push(format!("{name}: {syscall}{when} -> {action}"));
        }
    }
    Ok(lines)
}

/// Kill the process for a syscall of another ABI, before the policy sees it.
///
/// seccompiler's own prologue kills on an AUDIT_ARCH other than the native one, which covers
/// i386 syscalls (`int 0x80`, AUDIT_ARCH_I386). x32 syscalls do not change the audit arch: they
/// arrive as AUDIT_ARCH_X86_64 with the syscall number or'ed with `__X32_SYSCALL_BIT`
/// (0x40000000). A denylist keyed on x86-64 numbers would let `0x40000000 | nr` through to the
/// same kernel function, so on x86-64 every number at or above that bit is killed here
/// (SECCOMP_RET_KILL_PROCESS: the whole process dies of SIGSYS). A kernel without x32 support
/// answers such numbers with ENOSYS anyway; killing them costs nothing legitimate.
///
/// The guard does its own arch check first, so it holds whatever the compiled policy contains.
/// What the shim puts in front of every policy: the ABI guard, then the set-ID guard
/// ([`setid`]).
fn front() -> BpfProgram {
    let mut p = abi_guard();
    p.extend(setid::guard());
    p
}

fn abi_guard() -> BpfProgram {
    #[cfg(target_arch = "x86_64")]
    {
        const X32_SYSCALL_BIT: u32 = 0x4000_0000;
        vec![
            stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
            jump(BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
            stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
            stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
            jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
            stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
        ]
    }
    // Other architectures have a single syscall ABI per audit arch; seccompiler's arch check
    // suffices.
    #[cfg(not(target_arch = "x86_64"))]
    {
        Vec::new()
    }
}

/// Concatenate filters so that each one's "allow" hands the syscall to the next filter instead.
///
/// Every filter is a self-contained program whose jumps stay inside it (classic BPF only jumps
/// forward). Replacing each `ret ALLOW` of a filter by an unconditional jump to the first
/// instruction after that filter keeps every other jump valid, since no instruction moves. The
/// last filter's "allow" stays a real allow. Unconditional jumps and constant returns are what
/// the kernel's seccomp action cache understands, so a syscall no filter inspects still ends
/// up in the cache as "always allowed".
pub fn chain(filters: impl IntoIterator<Item = BpfProgram>) -> BpfProgram {
    let filters: Vec<BpfProgram> = filters.into_iter().collect();
    let last = filters.len().saturating_sub(1);
    let mut out = BpfProgram::new();
    for (i, mut filter) in filters.into_iter().enumerate() {
        if i != last {
            let len = filter.len();
            for (pc, insn) in filter.iter_mut().enumerate() {
                if insn.code == BPF_RET_K && insn.k == SECCOMP_RET_ALLOW {
                    // Lands on the instruction right after this filter.
                    let skip = u32::try_from(len - pc - 1).unwrap_or(u32::MAX);
                    *insn = stmt(BPF_JMP_JA, skip);
                }
            }
        }
        out.extend(filter);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> SeccompSpec {
        SeccompSpec {
            name: "test".into(),
            json: json.into(),
        }
    }

    #[test]
    fn policy_without_main_filter_is_refused() {
        let err = compile(&spec(
            r#"{"other": {"mismatch_action": "allow", "match_action": {"errno": 1}, "filter": []}}"#,
        ))
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("no filter named \"main\""),
            "{err:#}"
        );
    }

    #[test]
    fn unknown_syscall_name_is_refused_with_the_policy_name() {
        let err = compile(&spec(
            r#"{"main": {"mismatch_action": "allow", "match_action": {"errno": 1}, "filter": [{"syscall": "no_such_call"}]}}"#,
        ))
        .unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("'test'") && msg.contains("no_such_call"),
            "{msg}"
        );
    }

    #[test]
    fn chained_filters_jump_past_their_end_on_allow() {
        let a = vec![stmt(BPF_RET_K, SECCOMP_RET_ALLOW), stmt(BPF_RET_K, 5)];
        let b = vec![stmt(BPF_RET_K, SECCOMP_RET_ALLOW)];
        let out = chain([a, b]);
        assert_eq!(out[0].code, BPF_JMP_JA);
        // pc 0 + 1 + 1 = 2, the first instruction of b.
        assert_eq!(out[0].k, 1);
        assert_eq!(out[1].k, 5);
        assert_eq!((out[2].code, out[2].k), (BPF_RET_K, SECCOMP_RET_ALLOW));
    }

    #[test]
    fn describe_lists_each_rule() {
        let lines = describe(
            r#"{"main": {"mismatch_action": "allow", "match_action": {"errno": 1},
                "filter": [{"syscall": "ptrace"},
                           {"syscall": "ioctl", "args": [{"index": 1, "type": "dword", "op": "eq", "val": 21522}]}]}}"#,
        )
        .unwrap();
        assert_eq!(
            lines,
            vec![
                r#"main: ptrace -> {"errno":1}"#.to_string(),
                r#"main: ioctl when arg1 dword "eq" 21522 -> {"errno":1}"#.to_string(),
            ]
        );
    }
}
