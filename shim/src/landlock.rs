//! Landlock: every filesystem right the running kernel knows is handled; readable roots get
//! read+execute, writable roots every right, device files read/write/ioctl. Where the ABI has them,
//! abstract unix sockets and signals are scoped to the sandbox and TCP connect is limited.

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use nix::errno::Errno;
use serde::Serialize;

use crate::channel::{AtStep, Step, StepError};
use crate::spec::{Access as Want, Compat, LandlockSpec};

/// What Landlock ended up enforcing, for the status report.
#[derive(Debug, Clone, Serialize)]
pub struct LandlockFacts {
    pub abi: i32,
    pub enforced: bool,
    pub scoped: bool,
    pub tcp_restricted: bool,
    /// Whether reading, executing and truncating are rights of the ruleset (not when a rule grants
    /// reading everywhere, as in host-readable mode, where `denyRead` is enforced by the mounts
    /// and truncation outside the writable trees by their read-only mounts).
    pub reads_handled: bool,
    pub skipped_paths: Vec<String>,
}

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The kernel's Landlock ABI version, or the errno that says why there is none.
pub fn kernel_abi() -> Result<i32, Errno> {
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns a number.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret as i32)
    }
}

/// The `landlock` crate's ABI for the version the kernel reported (0 or less: none).
pub fn abi_enum(v: i32) -> ABI {
    match v {
        i32::MIN..=0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        7 => ABI::V7,
        8 => ABI::V8,
        _ => ABI::V9,
    }
}

/// A ruleset made and filled ([`prepare`]), not yet applied ([`Ready::restrict_self`]).
pub struct Ready {
    /// None: no Landlock here, and best effort allows that.
    created: Option<RulesetCreated>,
    hard: bool,
    facts: LandlockFacts,
}

/// Make the ruleset and add every rule of `spec`, without applying it: init does this while
/// its network's thread ends, and applies it once its privileges are dropped. Best-effort
/// downgrades are appended to `warnings`.
pub fn prepare(spec: &LandlockSpec, warnings: &mut Vec<String>) -> Result<Ready, StepError> {
    let hard = spec.compat == Compat::HardRequirement;
    let abi_num = match kernel_abi() {
        Ok(v) => v,
        Err(errno) => {
            let why = match errno {
                Errno::ENOSYS => {
                    "the kernel has no Landlock (landlock_create_ruleset => ENOSYS)".to_string()
                }
                Errno::EOPNOTSUPP => {
                    "Landlock is built but disabled at boot (landlock_create_ruleset => EOPNOTSUPP)"
                        .to_string()
                }
                other => format!("landlock_create_ruleset => {other}"),
            };
            if hard {
                return Err(StepError::new(
                    Step::Landlock,
                    why,
                    Some("enable Landlock (boot with lsm=...,landlock) or set `landlock: {compatibility: best_effort}` in the policy to run without it"),
                ));
            }
            warnings.push(format!(
                "Landlock not enforced: {why} (compatibility: best_effort)"
            ));
            return Ok(Ready {
                created: None,
                hard,
                facts: LandlockFacts {
                    abi: 0,
                    enforced: false,
                    scoped: false,
                    tcp_restricted: false,
                    reads_handled: false,
                    skipped_paths: Vec::new(),
                },
            });
        }
    };
    let abi = abi_enum(abi_num);
    let level = if hard {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    // Host-readable mode (a rule granting read and execute on `/`): handling those rights is pure
    // cost, since every open for reading would walk up to the root to find that rule. The same
    // holds for TRUNCATE, which Landlock checks on every open: outside the writable trees every
    // mount is read-only (truncate fails with EROFS), inside them it is allowed. Leaving these
    // unhandled keeps the policy and lets a read-only open skip Landlock's path walk; writing,
    // creating, removing, renaming and linking stay handled everywhere.
    let reads_everywhere = spec
        .rules
        .iter()
        .any(|r| r.path == std::path::Path::new("/") && r.access == Want::Read);
    let fs_all = if reads_everywhere {
        AccessFs::from_all(abi) & !(AccessFs::from_read(abi) | AccessFs::Truncate)
    } else {
        AccessFs::from_all(abi)
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(level)
        .handle_access(fs_all)
        .at(Step::Landlock)?;

    let tcp_restricted = spec.tcp_connect.is_some() && abi_num >= 4;
    if spec.tcp_connect.is_some() && !tcp_restricted {
        warnings.push(format!(
            "Landlock ABI {abi_num} has no TCP rules (needs 4): TCP connect is limited by the network namespace only"
        ));
    }
    if tcp_restricted {
        ruleset = ruleset
            .handle_access(AccessNet::ConnectTcp)
            .at(Step::Landlock)?;
    }
    let scoped = spec.scope && abi_num >= 6;
    if spec.scope && !scoped {
        warnings.push(format!(
            "Landlock ABI {abi_num} cannot scope abstract unix sockets and signals (needs 6): the namespaces still isolate them"
        ));
    }
    if scoped {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .at(Step::Landlock)?;
    }
    let mut created = ruleset.create().at(Step::Landlock)?;

    let read = AccessFs::from_read(abi) & fs_all;
    let device = (read | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev) & fs_all;
    let mut skipped = Vec::new();
    for rule in &spec.rules {
        let fd = match PathFd::new(&rule.path) {
            Ok(fd) => fd,
            Err(e) => {
                if hard {
                    return Err(StepError::new(
                        Step::Landlock,
                        format!("cannot open {} for a Landlock rule: {e}", rule.path.display()),
                        Some("every path of the policy must exist under landlock.compatibility: hard_requirement"),
                    ));
                }
                warnings.push(format!(
                    "Landlock rule for {} skipped: {e}",
                    rule.path.display()
                ));
                skipped.push(rule.path.display().to_string());
                continue;
            }
        };
        let mut access = match rule.access {
            Want::Read => read,
            Want::Write => fs_all,
            Want::Device => device,
            Want::ListDir => AccessFs::ReadDir.into(),
        };
        let is_dir = std::fs::metadata(&rule.path)
            .map(|m| m.is_dir())
            .unwrap_or(false);
        if !is_dir {
            access &= AccessFs::from_file(abi);
        }
        // Only ask for what this kernel knows and the ruleset handles; with HardRequirement,
        // asking for more is an error.
        access &= fs_all;
        if access.is_empty() {
            continue; // a read rule where reads are not handled
        }
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .at(Step::Landlock)?;
    }
    if tcp_restricted {
        for port in spec.tcp_connect.iter().flatten() {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                .at(Step::Landlock)?;
        }
    }
    // The caller's own terminal or files behind stdin/stdout/stderr: reopening them through
    // /dev/stdout or /proc/self/fd/N must keep working (the host's pts is not under our /dev).
    for fd in 0..=2 {
        let path = format!("/proc/self/fd/{fd}");
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        use std::os::unix::fs::FileTypeExt;
        let ft = meta.file_type();
        if !(ft.is_char_device() || ft.is_file()) {
            continue;
        }
        let Ok(pfd) = PathFd::new(&path) else {
            continue;
        };
        let access = (device & AccessFs::from_file(abi)) & fs_all;
        created = created
            .add_rule(PathBeneath::new(pfd, access))
            .at(Step::Landlock)?;
    }
    Ok(Ready {
        created: Some(created),
        hard,
        facts: LandlockFacts {
            abi: abi_num,
            enforced: false,
            scoped,
            tcp_restricted,
            reads_handled: !reads_everywhere,
            skipped_paths: skipped,
        },
    })
}

impl Ready {
    /// Apply the ruleset to this thread (init's main thread, alone by then) and so to
    /// everything it will start.
    pub fn restrict_self(self, warnings: &mut Vec<String>) -> Result<LandlockFacts, StepError> {
        let Ready {
            created,
            hard,
            mut facts,
        } = self;
        let Some(created) = created else {
            return Ok(facts);
        };
        let status = created.restrict_self().at(Step::Landlock)?;
        facts.enforced = enforced(status.ruleset, hard, warnings)?;
        Ok(facts)
    }
}

/// Whether the ruleset is enforced, as the kernel says and the compatibility allows.
fn enforced(
    status: RulesetStatus,
    hard: bool,
    warnings: &mut Vec<String>,
) -> Result<bool, StepError> {
    let enforced = match status {
        RulesetStatus::FullyEnforced => true,
        RulesetStatus::PartiallyEnforced if !hard => {
            warnings.push("Landlock only partially enforced (compatibility: best_effort)".into());
            true
        }
        RulesetStatus::NotEnforced if !hard => {
            warnings.push("Landlock not enforced (compatibility: best_effort)".into());
            false
        }
        other => {
            return Err(StepError::new(
                Step::Landlock,
                format!("Landlock is {other:?}"),
                Some(
                    "set `landlock: {compatibility: best_effort}` to run with partial enforcement",
                ),
            ))
        }
    };
    Ok(enforced)
}
