//! Resource limits of the sandbox: cgroup limits of the whole tree (`--memory`, `--pids`,
//! `--cpus`: [`cgroup`]), resource limits of its processes (`--rlimit`: [`rlimit`]), the sizes
//! of its `/tmp` and `/dev/shm`, its standing with the OOM killer, and `--timeout` (enforced by
//! the supervisor). The quantities they are written in: [`quantity`].

pub mod cgroup;
pub mod doctor;
pub mod quantity;
pub mod rlimit;

use serde_json::json;
use shim::channel::{Step, StepError};
use shim::spec::{MountOp, MountPlan, ProcessLimits, Rlimit};

use crate::policy::runtime::{LimitsCompat, LimitsPolicy};
use crate::status::StatusSink;

/// The OOM killer's score adjustment of everything inside: the highest, so the sandbox goes
/// first and the supervisor (which stays at the caller's) never goes for it.
const OOM_SCORE_ADJ: i32 = 1000;

fn limits_error(message: String) -> StepError {
    StepError::new(
        Step::Limits,
        message,
        Some("`sandbox-launch doctor` says which limits this host can apply"),
    )
}

/// What the shim sets: the rlimits (core 0 unless asked) and the OOM score. Hard limits above
/// the launcher's own are raised here first when that is possible (root), refused otherwise.
pub fn process_limits(l: &LimitsPolicy) -> Result<ProcessLimits, StepError> {
    let wanted: Vec<(String, rlimit::Value)> = l
        .rlimits
        .iter()
        .map(|(name, v)| (name.clone(), v.value))
        .collect();
    rlimit::prepare(&wanted).map_err(limits_error)?;
    let mut rlimits = Vec::new();
    if !l.rlimits.contains_key("core") {
        rlimits.push(Rlimit {
            resource: libc::RLIMIT_CORE,
            soft: 0,
            hard: 0,
        });
    }
    for (name, v) in &wanted {
        let resource = rlimit::number(name)
            .ok_or_else(|| limits_error(format!("unknown resource limit {name:?}")))?;
        rlimits.push(Rlimit {
            resource,
            soft: v.soft,
            hard: v.hard,
        });
    }
    Ok(ProcessLimits {
        rlimits,
        oom_score_adj: OOM_SCORE_ADJ,
    })
}

/// The size of each of `/tmp` and `/dev/shm`: as asked, else a quarter of the RAM — and, with
/// a memory limit, at most half of it (tmpfs pages are charged to the sandbox's group and
/// cannot be reclaimed without swap: a /tmp as large as the limit would leave nothing to run).
pub fn tmp_size(l: &LimitsPolicy) -> u64 {
    if let Some(s) = &l.tmp_size {
        return s.value;
    }
    let quarter = ram() / 4;
    match &l.memory {
        Some(m) => quarter.min(m.value / 2),
        None => quarter,
    }
}

fn ram() -> u64 {
    // SAFETY: sysinfo fills the struct it is given.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a sysinfo struct.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return 1 << 30;
    }
    (info.totalram as u64).saturating_mul(u64::from(info.mem_unit.max(1)))
}

/// Give the plan's `/tmp` (when it has one) and `/dev/shm` their size.
pub fn size_tmpfs(plan: &mut MountPlan, bytes: u64) {
    for op in &mut plan.ops {
        if let MountOp::Tmpfs { target, size, .. } = op {
            if target == std::path::Path::new("/tmp") {
                *size = Some(bytes);
            }
        }
    }
    plan.shm_size = Some(bytes);
}

/// The cgroup limits asked for.
pub fn wanted(l: &LimitsPolicy) -> cgroup::Wanted {
    cgroup::Wanted {
        memory: l.memory.as_ref().map(|s| s.value),
        pids: l.pids.as_ref().map(|s| s.value),
        cpus: l.cpus.as_ref().map(|s| s.value),
    }
}

/// Make the sandbox's cgroups. A limit that cannot be applied stops the launch unless the
/// policy says `best_effort`; then it is reported on `status` and left out.
pub fn make_cgroups(
    l: &LimitsPolicy,
    status: &mut StatusSink,
    verbose: u8,
) -> Result<Option<cgroup::Cgroups>, StepError> {
    let mut warnings = Vec::new();
    let best_effort = l.compat == LimitsCompat::BestEffort;
    let made = cgroup::apply(&wanted(l), best_effort, &mut warnings).map_err(limits_error)?;
    for w in warnings {
        crate::say!("sandbox-launch: warning: {w}");
        status.emit(json!({"status": "warning", "warning": w}));
    }
    if let (Some(c), true) = (&made, verbose > 0) {
        crate::say!("sandbox-launch: cgroup limits in {}", c.describe());
    }
    Ok(made)
}

/// Once the sandbox has ended: say which limits it ran into, and remove its groups.
pub fn finish_cgroups(c: cgroup::Cgroups, status: &mut StatusSink) {
    for r in c.reached() {
        crate::say!("sandbox-launch: {}", r.text);
        status.emit(json!({
            "status": "limit_reached",
            "limit": r.limit,
            "count": r.count,
            "message": r.text,
        }));
    }
    for problem in c.remove() {
        crate::say!("sandbox-launch: warning: {problem}");
        status.emit(json!({"status": "warning", "warning": problem}));
    }
}

/// Where init is born: with the OOM score of the sandbox, in the sandbox's cgroups. The
/// launcher takes both on just for the clone (the child inherits them) and gives them back
/// right after, so neither a race with init's first steps nor a privilege is needed: raising
/// one's own OOM score and going back to the old one are allowed to everyone (init itself
/// could not, as root's sandbox: its change of uid makes its /proc files root's).
pub struct Birth {
    pub cgroups: Option<cgroup::Cgroups>,
    own_oom_score_adj: std::cell::RefCell<Option<String>>,
    /// The launcher holds credentials: once the clone is done (the child needs its own /proc
    /// files writable, which a non-dumpable parent's are not), it turns non-dumpable.
    secrets: bool,
}

const OOM_FILE: &str = "/proc/self/oom_score_adj";

impl Birth {
    pub fn new(cgroups: Option<cgroup::Cgroups>) -> Self {
        Birth {
            cgroups,
            own_oom_score_adj: std::cell::RefCell::new(None),
            secrets: false,
        }
    }

    pub fn holding_secrets(mut self, secrets: bool) -> Self {
        self.secrets = secrets;
        self
    }

    fn restore_oom_score(&self) -> Result<(), StepError> {
        match self.own_oom_score_adj.borrow_mut().take() {
            Some(old) => std::fs::write(OOM_FILE, &old).map_err(|e| {
                limits_error(format!(
                    "cannot set the launcher's oom_score_adj back to {}: {e}",
                    old.trim()
                ))
            }),
            None => Ok(()),
        }
    }
}

impl crate::supervisor::AroundClone for Birth {
    fn before(&self) -> Result<(), StepError> {
        let old = shim::sys::read_proc(OOM_FILE)
            .map_err(|e| limits_error(format!("cannot read {OOM_FILE}: {e}")))?;
        std::fs::write(OOM_FILE, OOM_SCORE_ADJ.to_string())
            .map_err(|e| limits_error(format!("cannot raise {OOM_FILE}: {e}")))?;
        *self.own_oom_score_adj.borrow_mut() = Some(old);
        if let Some(c) = &self.cgroups {
            if let Err(e) = c.enter() {
                self.restore_oom_score()?;
                return Err(limits_error(e));
            }
        }
        Ok(())
    }

    fn after(&self) -> Result<(), StepError> {
        if let Some(c) = &self.cgroups {
            c.leave().map_err(|e| {
                limits_error(format!(
                    "the launcher could not leave the sandbox's cgroup: {e}"
                ))
            })?;
        }
        self.restore_oom_score()?;
        if self.secrets {
            crate::credentials::protect_supervisor()
                .map_err(|e| StepError::new(Step::Internal, e, None))?;
        }
        Ok(())
    }

    fn wait_for_init(&self) -> bool {
        self.cgroups.is_some()
    }
}
