//! seccomp filters as data: seccompiler JSON files under `policies/`, embedded at build time.
//!
//! A policy is a seccompiler JSON object of named filters. `"main"` is required and runs first;
//! other filters follow in name order, each deciding only what the previous ones allowed (the
//! shim chains them into one BPF program). seccompiler gives a filter one answer for all it
//! matches, so a second filter is how a policy answers with a second errno: `default` denies with
//! EPERM in `"main"` and answers `clone3` with ENOSYS in `"enosys"`. See `policies/README.md`.

pub mod dispatch;

/// The embedded policies, by name.
pub const POLICIES: &[(&str, &str)] = &[("default", include_str!("../policies/default.json"))];

/// One BPF instruction: `(code, jt, jf, k)`.
pub type Insn = (u16, u8, u8, u32);
/// A policy's filters by name.
pub type Filters = &'static [(&'static str, &'static [Insn])];

include!(concat!(env!("OUT_DIR"), "/compiled.rs"));

/// The filters of the embedded policy whose JSON is `json`, compiled at build time for the
/// target architecture, by filter name: `(code, jt, jf, k)` BPF instructions. `None` for any
/// other JSON (or an architecture seccompiler does not know).
pub fn precompiled(json: &str) -> Option<Filters> {
    let (name, _) = POLICIES.iter().find(|(_, j)| *j == json)?;
    COMPILED.iter().find(|(n, _)| n == name).map(|(_, f)| *f)
}

/// The filters of the embedded policy whose JSON is `json`, chained into one program (`"main"`
/// first, the others in name order; each one's "allow" hands over to the next) with a search on
/// the syscall number in front of each ([`dispatch::dispatched`]), built at build time for a
/// program that kills every audit arch but x86-64 in front of them. `None` for any other JSON or
/// architecture.
pub fn chained(json: &str) -> Option<&'static [Insn]> {
    let (name, _) = POLICIES.iter().find(|(_, j)| *j == json)?;
    CHAINED.iter().find(|(n, _)| n == name).map(|(_, p)| *p)
}

/// The JSON of the embedded policy called `name`.
pub fn get(name: &str) -> Option<&'static str> {
    POLICIES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, json)| *json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use seccompiler::TargetArch;

    /// What the build compiled is what compiling the JSON now gives.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_precompiled_filters_match_the_json() {
        for (name, json) in POLICIES {
            let now = seccompiler::compile_from_json(json.as_bytes(), TargetArch::x86_64).unwrap();
            let built = precompiled(json).unwrap_or_else(|| panic!("{name} is not precompiled"));
            assert_eq!(built.len(), now.len());
            for (filter, insns) in built {
                let expected: Vec<Insn> = now[*filter]
                    .iter()
                    .map(|i| (i.code, i.jt, i.jf, i.k))
                    .collect();
                assert_eq!(&expected[..], *insns, "{name}/{filter}");
            }
        }
        assert!(precompiled("{}").is_none());
    }

    /// A launch with an embedded policy does not build its search: the build did (the shim's
    /// tests hold it to what the shim would build at run time).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_embedded_policies_are_chained_at_build_time() {
        for (name, json) in POLICIES {
            assert!(chained(json).is_some(), "{name} is not chained");
        }
        assert!(chained("{}").is_none());
    }

    /// The policies are data read at run time: a syscall name missing on one architecture would
    /// only show up there. Compile every policy for every architecture seccompiler knows.
    #[test]
    fn every_policy_compiles_on_x86_64_and_aarch64() {
        for (name, json) in POLICIES {
            for arch in [TargetArch::x86_64, TargetArch::aarch64] {
                let filters = seccompiler::compile_from_json(json.as_bytes(), arch)
                    .unwrap_or_else(|e| panic!("policy {name} on {arch:?}: {e}"));
                assert!(
                    filters.contains_key("main"),
                    "policy {name} has no main filter"
                );
            }
        }
    }

    #[test]
    fn default_policy_is_a_denylist_answering_eperm_and_enosys() {
        let policy: serde_json::Value = serde_json::from_str(get("default").unwrap()).unwrap();
        assert_eq!(policy["main"]["mismatch_action"], "allow");
        assert_eq!(policy["main"]["match_action"]["errno"], libc::EPERM);
        assert_eq!(policy["enosys"]["match_action"]["errno"], libc::ENOSYS);
    }

    /// Frequent syscalls must carry no rule at all, so the kernel's seccomp cache can answer
    /// them without running the filter.
    #[test]
    fn frequent_syscalls_carry_no_rules() {
        let policy: serde_json::Value = serde_json::from_str(get("default").unwrap()).unwrap();
        let frequent = [
            "read",
            "write",
            "readv",
            "writev",
            "pread64",
            "pwrite64",
            "futex",
            "mmap",
            "munmap",
            "mprotect",
            "brk",
            "close",
            "openat",
            "newfstatat",
            "fstat",
            "statx",
            "lseek",
            "rt_sigaction",
            "rt_sigprocmask",
            "rt_sigreturn",
            "getpid",
            "gettid",
            "clock_gettime",
            "epoll_wait",
            "epoll_pwait",
            "poll",
            "ppoll",
            "select",
            "pselect6",
            "recvfrom",
            "sendto",
            "recvmsg",
            "sendmsg",
            "getdents64",
            "fcntl",
            "dup3",
            "pipe2",
            "wait4",
            "execve",
            "exit_group",
            "madvise",
            "sched_yield",
            "nanosleep",
            "getrandom",
        ];
        for filter in policy.as_object().unwrap().values() {
            for rule in filter["filter"].as_array().unwrap() {
                let syscall = rule["syscall"].as_str().unwrap();
                assert!(!frequent.contains(&syscall), "{syscall} has a rule");
            }
        }
    }
}
