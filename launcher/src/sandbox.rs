//! From the command line to a running sandbox: load the policy, plan the layout, pick the
//! identity and the seccomp filter, then hand over to the supervisor.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use seccompiler::BpfProgram;
use serde_json::json;
use shim::channel::{Step, StepError};
use shim::spec::{Compat, LandlockSpec, NetworkSpec, SandboxSpec, SeccompSpec};

use crate::cli::{EgressArg, SandboxArgs};
use crate::credentials::{self, Credentials};
use crate::layout::{self, HostContext};
use crate::namespaces::Identity;
use crate::persistence;
use crate::policy::model::{LandlockCompat, NetworkMode, Policy};
use crate::policy::{self, LoadRequest};
use crate::proxy::events::EventSink;
use crate::status::StatusSink;
use crate::{control, environment, idmap, limits, proxy, supervisor, users};

/// Everything decided before the clone.
pub struct Prepared {
    pub spec: SandboxSpec,
    pub filter: BpfProgram,
    pub identity: Identity,
    pub network: NetworkMode,
    pub policy: Policy,
    pub warnings: Vec<String>,
    /// Protected paths that did not exist at launch (so could not be bound read-only without
    /// creating something on the host): checked again when the sandbox ends.
    pub unprotected_missing: Vec<PathBuf>,
    /// The proxy of `--network restricted`, started once the shim hands over its sockets.
    pub proxy: Option<proxy::Proxy>,
    /// Started as root: the detached writable trees the shim attaches (see `idmap`), open
    /// until the sandbox ends.
    pub attached: Vec<std::os::fd::OwnedFd>,
    /// The launcher holds credentials' real values: it turns non-dumpable after the clone.
    pub holds_secrets: bool,
    /// The agents' state: what is merged back when the sandbox ends (`~/.claude.json`).
    pub agents: persistence::agents::AgentState,
    /// Prepared with `defer_persistence`: the persistence plan of the writable roots, made
    /// after the clone ([`Prepared::deferred_plan`]).
    pub deferred_persistence: Option<layout::PersistInputs>,
}

impl Prepared {
    /// The persistence plan left for after the clone, as a supervisor's deferred step: it
    /// completes the spec's model (the mounts placed by name) and the agents' moved rules, and
    /// leaves the protected paths missing at launch in `watch`.
    pub fn deferred_plan<'a>(
        &mut self,
        agents: &'a persistence::agents::AgentState,
        watch: &'a RefCell<persistence::watch::Watch>,
    ) -> Option<supervisor::Deferred<'a>> {
        let inputs = self.deferred_persistence.take()?;
        let placed = self.spec.persist.clone();
        Some(Box::new(move || {
            let done = layout::complete(inputs.plan_to_send(), &placed, watch.borrow().paths());
            let mut persist = done.spec;
            let moved = persistence::agents::moved_rules(agents, &persist.rules);
            persist.rules.extend(moved);
            *watch.borrow_mut() = persistence::watch::Watch::new(done.missing);
            supervisor::DeferredPlan {
                message: shim::channel::PersistencePlan {
                    binds: done.binds,
                    persist,
                },
                warnings: done.warnings,
            }
        }))
    }
}

fn policy_error(e: anyhow::Error) -> StepError {
    StepError::new(Step::Policy, format!("{e:#}"), None)
}

pub fn load_policy(args: &SandboxArgs) -> Result<(Policy, PathBuf), StepError> {
    let cwd = match &args.cwd {
        Some(c) => c.clone(),
        None => std::env::current_dir().map_err(|e| {
            StepError::new(
                Step::Policy,
                format!("cannot read the current directory: {e}"),
                None,
            )
        })?,
    };
    let cwd = std::fs::canonicalize(&cwd).map_err(|e| {
        StepError::new(
            Step::Policy,
            format!("working directory {}: {e}", cwd.display()),
            None,
        )
    })?;
    let mut req = LoadRequest::from_env(cwd.clone()).map_err(policy_error)?;
    req.policy_file = args.policy.clone();
    req.settings_file = args.settings.clone();
    req.allow_write = args.allow_write.clone();
    req.deny_write = args.deny_write.clone();
    req.deny_read = args.deny_read.clone();
    req.allow_unix_socket = args.allow_unix_socket.clone();
    req.mounts = args.mounts();
    req.empty_root = args.empty_root;
    req.allow_domain = args.allow_domain.clone();
    req.network = args.network.map(Into::into);
    req.seccomp_policy = args.seccomp_policy.clone();
    environment::flags_fragment(&args.env, args.env_all, &mut req.runtime);
    let r = &mut req.runtime;
    r.timeout = args.timeout;
    r.memory = args.memory;
    r.pids = args.pids;
    r.cpus = args.cpus;
    r.tmp_size = args.tmp_size;
    r.rlimits = args.rlimit.clone();
    r.limits_compat = args.limits_compatibility.map(Into::into);
    r.credentials = args.credential.clone();
    let policy = policy::load(&req).map_err(policy_error)?;
    Ok((policy, cwd))
}

/// Who the sandbox runs as; started as root, also the user's name and home.
pub(crate) struct RunAs {
    pub(crate) identity: Identity,
    pub(crate) user: String,
    pub(crate) home: Option<String>,
}

pub(crate) fn identity(
    policy: &Policy,
    env: &mut [(String, String)],
    warnings: &mut Vec<String>,
) -> Result<RunAs, StepError> {
    // SAFETY: getuid/geteuid/getgid cannot fail.
    let (uid, euid, gid) = unsafe { (libc::getuid(), libc::geteuid(), libc::getgid()) };
    if euid != 0 {
        if let Some(u) = &policy.process.run_as_user {
            warnings.push(format!(
                "process.run_as_user={u} applies only when sandbox-launch starts as root; running as uid {uid}"
            ));
        }
        return Ok(RunAs {
            identity: Identity {
                uid,
                gid,
                switch_from_root: false,
            },
            user: String::new(),
            home: None,
        });
    }
    let user = policy.process.run_as_user.as_deref().unwrap_or("nobody");
    let (target_uid, home) = match &policy.process.run_as_user {
        Some(u) => users::lookup_user(u).map_err(policy_error)?,
        None => users::default_user(),
    };
    let target_gid = match &policy.process.run_as_group {
        Some(g) => users::lookup_group(g).map_err(policy_error)?,
        None => users::default_group(),
    };
    if target_uid == 0 || target_gid == 0 {
        return Err(StepError::new(
            Step::Policy,
            "the sandbox never runs as root (uid or gid 0)",
            Some("set process.run_as_user/run_as_group to an unprivileged user"),
        ));
    }
    for (k, v) in env.iter_mut() {
        if k == "USER" || k == "LOGNAME" {
            *v = user.to_string();
        }
    }
    Ok(RunAs {
        identity: Identity {
            uid: target_uid,
            gid: target_gid,
            switch_from_root: true,
        },
        user: user.to_string(),
        home,
    })
}

/// Started as root: the writable trees the sandbox's user does not own are idmapped to it, it
/// must be able to reach each of them and the working directory, and HOME is decided by
/// `home::as_root` (the caller's when it holds or lies in a writable tree, with a read-only
/// idmapped view of it when the sandbox's user cannot go through it; else the sandbox user's).
fn root_start(
    run_as: &RunAs,
    layout: &mut layout::Layout,
    cwd: &Path,
    env: &mut [(String, String)],
    verbose: u8,
) -> Result<Vec<std::os::fd::OwnedFd>, StepError> {
    let caller_home = env
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| v.clone());
    let home = crate::home::as_root(
        caller_home.as_deref(),
        &layout.writable,
        run_as.home.as_deref(),
        run_as.identity,
        layout.mounts.host_root,
    );
    let mut attached = idmap::prepare(&layout.writable, run_as.identity, &run_as.user)?;
    idmap::prepare_placed(
        &layout.placed_writable,
        run_as.identity,
        &run_as.user,
        &mut attached,
    )?;
    if let Some(view) = &home.view {
        idmap::prepare_view(
            view,
            &layout.writable,
            run_as.identity,
            &run_as.user,
            &mut attached,
        )?;
        // Before everything mounted inside it: the writable trees, the protections, the masks.
        let at = layout
            .mounts
            .ops
            .iter()
            .position(|op| op_target(op).starts_with(view))
            .unwrap_or(layout.mounts.ops.len());
        layout.mounts.ops.insert(
            at,
            shim::spec::MountOp::ReadOnly {
                source: view.clone(),
                target: view.clone(),
            },
        );
    }
    let mut reach = layout.writable.clone();
    reach.push(cwd.to_path_buf());
    idmap::check_reachable(&reach, &attached.attach, run_as.identity, &run_as.user)?;
    layout.mounts.attach = attached.attach;
    if verbose > 0 {
        crate::say!(
            "sandbox-launch: HOME inside: {} ({})",
            home.path,
            home.whose
        );
    }
    for (k, v) in env.iter_mut() {
        if k == "HOME" {
            *v = home.path.clone();
        }
    }
    Ok(attached.fds)
}

fn op_target(op: &shim::spec::MountOp) -> &Path {
    use shim::spec::MountOp::*;
    match op {
        ReadOnly { target, .. }
        | ReadWrite { target, .. }
        | Tmpfs { target, .. }
        | Mask { target, .. }
        | File { target, .. }
        | Symlink { target, .. }
        | Worktree { target, .. }
        | Bind { target, .. }
        | Overlay { target, .. } => target,
        // Binds inside the writable roots, whose own mounts come before them.
        PersistenceBinds => Path::new("/"),
    }
}

pub(crate) fn seccomp(policy: &Policy) -> Result<SeccompSpec, StepError> {
    let name = policy.seccomp.clone().unwrap_or_else(|| "default".into());
    if let Some(json) = seccomp_policies::get(&name) {
        return Ok(SeccompSpec {
            name,
            json: json.to_string(),
        });
    }
    match std::fs::read_to_string(&name) {
        Ok(json) => Ok(SeccompSpec { name, json }),
        Err(e) => Err(StepError::new(
            Step::Policy,
            format!(
                "seccomp policy {name:?} is neither an embedded policy nor a readable file: {e}"
            ),
            Some(&format!(
                "embedded policies: {}",
                seccomp_policies::POLICIES
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        )),
    }
}

/// Plan the launch. With `defer_persistence`, the persistence plan of the writable roots is
/// left for after the clone (a supervisor's deferred step, [`Prepared::deferred_plan`]).
pub fn prepare(
    args: &SandboxArgs,
    argv: Vec<String>,
    events: Arc<EventSink>,
    defer_persistence: bool,
) -> Result<Prepared, StepError> {
    let (mut policy, cwd) = load_policy(args)?;
    let mut warnings = policy.warnings.clone();
    // Not said anywhere: restricted, with only what the policy allows (nothing, by default).
    let network = policy.network.mode.unwrap_or(NetworkMode::Restricted);
    let mut env = environment::build(
        &environment::host(),
        &policy.runtime.env,
        network,
        &mut warnings,
    );
    let run_as = identity(&policy, &mut env, &mut warnings)?;
    let identity = run_as.identity;
    let agent_home = program_home(&env, &run_as, argv.first(), &mut warnings)?;
    let agents = agent_state(
        &mut policy,
        agent_home.as_deref(),
        &mut env,
        argv.first(),
        args.verbose,
        &mut warnings,
    );
    let credentials = Credentials::from_policy(
        &policy.runtime.credentials,
        network,
        |name| std::env::var_os(name),
        &mut warnings,
    )
    .map_err(|e| StepError::new(Step::Policy, e, None))?
    .map(Arc::new);
    if credentials.is_some() {
        credentials::keep_out_of_core_files()
            .map_err(|e| StepError::new(Step::Internal, e, None))?;
    }
    let mut restricted_proxy = None;
    let mut trust_bundle = None;
    let mut resolver_conf = false;
    // Landlock's TCP rules are a second layer under the network namespace.
    let (net_spec, tcp_connect) = match network {
        NetworkMode::None => (NetworkSpec::None, Some(args.allow_loopback_port.clone())),
        NetworkMode::Full => {
            warnings.push(
                "network: full — the sandbox uses the host's network without any filtering".into(),
            );
            (NetworkSpec::Full, None)
        }
        NetworkMode::Restricted => {
            let r = proxy::launch::prepare(
                &policy.network,
                &args.allow_domain,
                &args.resolve,
                events,
                args.egress == EgressArg::Transparent,
                credentials.clone(),
            )
            .map_err(policy_error)?;
            proxy::launch::set_env(&mut env);
            let tcp_connect = r.landlock_ports(&args.allow_loopback_port);
            let mut proxy = r.proxy;
            if let Some(limit) = args.tunnel_idle_timeout {
                proxy.timeouts.tunnel_idle = limit.0;
            }
            restricted_proxy = Some(proxy);
            trust_bundle = r.trust_bundle;
            resolver_conf = r.transparent.is_some();
            (
                NetworkSpec::Restricted {
                    listen_ports: r.listen_ports,
                    transparent: r.transparent,
                },
                tcp_connect,
            )
        }
    };
    // A nested sandbox's proxy listens on these ports of our loopback; its program must reach
    // it through our Landlock layer (our network namespace holds only `lo`, redirected).
    let tcp_connect = tcp_connect.map(|mut ports| {
        ports.extend(crate::nest::PROXY_PORTS);
        ports.sort_unstable();
        ports.dedup();
        ports
    });
    if network != NetworkMode::Restricted {
        warnings.extend(proxy::launch::ignored_flags(
            &args.allow_domain,
            &args.resolve,
        ));
    }
    let ctx = host_context(cwd.clone());
    let mut layout = if defer_persistence {
        layout::plan_deferring(&policy, &ctx)
    } else {
        layout::plan(&policy, &ctx)
    }
    .map_err(policy_error)?;
    if layout.deferred_persistence.is_none() {
        let moved = persistence::agents::moved_rules(&agents, &layout.persist.rules);
        layout.persist.rules.extend(moved);
    }
    if resolver_conf {
        proxy::launch::bind_resolv_conf(&mut layout.mounts, &mut layout.landlock);
    }
    if let Some(bundle) = trust_bundle {
        proxy::launch::trust_env(&mut env);
        warnings.extend(proxy::launch::bind_trust_bundle(&mut layout.mounts, bundle));
    }
    limits::size_tmpfs(&mut layout.mounts, limits::tmp_size(&policy.runtime.limits));
    if let Some(c) = &credentials {
        c.set_env(&mut env);
    }
    warnings.extend(layout.warnings.iter().cloned());
    let attached = if identity.switch_from_root {
        root_start(&run_as, &mut layout, &cwd, &mut env, args.verbose)?
    } else {
        Vec::new()
    };
    let host_sockets = host_sockets(&layout.mounts, &policy);
    let spec = SandboxSpec {
        argv,
        env,
        cwd,
        hostname: "sandbox".into(),
        mounts: layout.mounts,
        landlock: LandlockSpec {
            compat: match policy.landlock {
                LandlockCompat::HardRequirement => Compat::HardRequirement,
                LandlockCompat::BestEffort => Compat::BestEffort,
            },
            rules: layout.landlock,
            scope: true,
            tcp_connect,
        },
        seccomp: seccomp(&policy)?,
        network: net_spec,
        uid: identity.uid,
        gid: identity.gid,
        preserve_fds: args.preserve_fd.clone(),
        verify_unreadable: layout.verify_unreadable,
        verify_unwritable_dirs: layout.verify_unwritable_dirs,
        persist: layout.persist.clone(),
        probe_only: false,
        limits: limits::process_limits(&policy.runtime.limits)?,
        host_sockets: Some(host_sockets),
        no_supplementary_groups: identity.switch_from_root,
    };
    let filter = shim::seccomp::compile(&spec.seccomp).map_err(|e| {
        StepError::new(
            Step::Seccomp,
            format!("{e:#}"),
            Some("check the seccomp policy (--seccomp-policy)"),
        )
    })?;
    Ok(Prepared {
        spec,
        identity,
        network,
        policy,
        warnings,
        unprotected_missing: layout.unprotected_missing,
        filter,
        proxy: restricted_proxy,
        attached,
        holds_secrets: credentials.is_some(),
        agents,
        deferred_persistence: layout.deferred_persistence,
    })
}

/// The home directory the agents' state is planned in: the caller's. Started as root, HOME
/// inside is the caller's only when a writable tree lies in it — the agents' state
/// directories planned here count (see `home::as_root`, decided once the layout is known).
/// When the caller's home cannot be mapped to the sandbox's user (no user namespace, a
/// filesystem that cannot be idmapped), the agents' state is not planned there: HOME inside is
/// then the sandbox user's, said in a warning — except for an agent that cannot run without
/// its state (droid, codex): that launch is refused with the cause and the fix.
fn program_home(
    env: &[(String, String)],
    run_as: &RunAs,
    program: Option<&String>,
    warnings: &mut Vec<String>,
) -> Result<Option<PathBuf>, StepError> {
    let caller = env
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| PathBuf::from(v));
    if !run_as.identity.switch_from_root {
        return Ok(caller);
    }
    let Some(home) = caller.filter(|h| h.is_dir()) else {
        return Ok(run_as.home.as_deref().map(PathBuf::from));
    };
    let name = program
        .and_then(|p| Path::new(p).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    // Nothing of the agents' would be kept there: nothing to map (the working directory or an
    // `--allow-write` in it is mapped like any writable tree, or refused with its own cause).
    if !persistence::agents::keeps_state_in(&home, &|v| std::env::var(v).ok(), name) {
        return Ok(Some(home));
    }
    let Err(cause) = idmap::probe(&home, run_as.identity) else {
        return Ok(Some(home));
    };
    if matches!(name, "droid" | "codex") {
        return Err(StepError::new(
            Step::Mounts,
            format!(
                "{name} keeps its state in HOME {}, which cannot be mapped to the sandbox's \
                 user {} (uid {}): {cause}",
                home.display(),
                run_as.user,
                run_as.identity.uid
            ),
            Some(&format!(
                "start sandbox-launch as {}'s owner rather than as root (a container: --user \
                 \"$(id -u):$(id -g)\"), or give the sandbox's user its own HOME with the \
                 agent's configuration (process.run_as_user with a home of its own)",
                home.display()
            )),
        ));
    }
    warnings.push(format!(
        "HOME inside is the sandbox user's, not {}: it cannot be mapped to the sandbox's user \
         ({cause}); the agents' state directories in it are not used in this run",
        home.display()
    ));
    Ok(run_as.home.as_deref().map(PathBuf::from))
}

/// The agents' state directories become writable (in host-readable mode), the launched
/// agent's is created when missing, and Claude Code works on a copy of `~/.claude.json` (see
/// `persistence::agents`).
fn agent_state(
    policy: &mut Policy,
    home: Option<&Path>,
    env: &mut Vec<(String, String)>,
    program: Option<&String>,
    verbose: u8,
    warnings: &mut Vec<String>,
) -> persistence::agents::AgentState {
    use crate::policy::model::{FsMode, Source, Sourced};
    if policy.filesystem.mode != FsMode::HostReadable {
        return Default::default();
    }
    let mut state = persistence::agents::plan(
        home,
        &|v| std::env::var(v).ok(),
        program.map(String::as_str).unwrap_or_default(),
    );
    for d in &state.created {
        if verbose > 0 {
            crate::say!(
                "sandbox-launch: created {} (the agent's state directory) on the host",
                d.display()
            );
        }
    }
    for d in &state.dirs {
        policy
            .filesystem
            .read_write
            .push(Sourced::new(d.clone(), Source::Default));
    }
    if let Some(c) = &mut state.claude {
        if let Err(e) = c.seed() {
            warnings.push(format!(
                "{}: cannot make the sandbox's copy ({e}); Claude Code keeps no state of \
                 {} in this run",
                c.copy.display(),
                c.host.display()
            ));
        }
    }
    env.retain(|(k, _)| !state.env.iter().any(|(n, _)| n == k));
    env.extend(state.env.iter().cloned());
    state
}

/// What the layout depends on of this host and this caller.
/// `HOME`, canonical as every path the persistence plan compares it with: a home reached
/// through a symlink (`/home` -> `var/home` on Fedora's atomic desktops) anchored no rule.
pub fn canonical_home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .map(|h| std::fs::canonicalize(&h).unwrap_or(h))
}

pub fn host_context(cwd: PathBuf) -> HostContext {
    HostContext {
        cwd,
        home: canonical_home(),
        xdg_runtime_dir: std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
        path_var: std::env::var("PATH").ok(),
        user_policy_dir: Some(crate::policy::user_dir_from_env()),
    }
}

/// What a connect may reach besides the sockets the program binds: the handed-in sockets
/// (resolved as the layout bound them) and the sandbox's own filesystems.
fn host_sockets(plan: &shim::spec::MountPlan, policy: &Policy) -> shim::spec::HostSockets {
    let mut own: Vec<PathBuf> = plan
        .ops
        .iter()
        .filter_map(|op| match op {
            shim::spec::MountOp::Tmpfs { target, .. } => Some(target.clone()),
            _ => None,
        })
        .collect();
    own.push("/dev/shm".into());
    shim::spec::HostSockets {
        handed_in: policy
            .filesystem
            .unix_sockets
            .iter()
            .filter_map(|s| std::fs::canonicalize(&s.value).ok())
            .collect(),
        own_filesystems: own,
    }
}

/// `whole-process` and `per-command` (`kind`).
pub fn run(args: &SandboxArgs, argv: Vec<String>, kind: &'static str) -> i32 {
    // Inside a sandbox: its layers stacked on ours (see `nest`), never fewer.
    if crate::nest::detect() {
        return crate::nest::run(args, argv);
    }
    let (mut status, events) = match sinks(args) {
        Ok(s) => s,
        Err(e) => {
            crate::say!("sandbox-launch: {e:#}");
            return 2;
        }
    };
    let mut registration = match control::register(args) {
        Ok(r) => r,
        Err(e) => {
            crate::say!("sandbox-launch: {e:#}");
            return 2;
        }
    };
    events.emit(json!({
        "event": "launch",
        "argv": argv,
        "launcher_pid": std::process::id(),
        "id": registration.as_ref().map(|r| &r.id),
        "name": args.name,
    }));
    // The persistence plan is made after the clone, but for a worktree, whose start changes
    // the guard's model (the checkout is not a writable tree there).
    let mut prepared = match prepare(args, argv.clone(), events.clone(), !args.worktree) {
        Ok(p) => p,
        Err(e) => return supervisor::fail(&mut status, &e),
    };
    control::hide::hide_control_dir(&mut prepared.spec, prepared.identity.switch_from_root);
    control::hide::hide_worktree_store(&mut prepared.spec, prepared.identity.switch_from_root);
    let steering = control::steer::attach(args, &mut prepared, &events);
    for note in &steering.notes {
        crate::say!("sandbox-launch: {note}");
    }
    let worktree = if args.worktree {
        match start_worktree(args, &mut prepared, registration.as_ref()) {
            Ok(w) => {
                status.emit(
                    json!({"status": "worktree", "id": w.meta.id, "name": w.meta.name,
                    "dir": w.dir, "checkout": w.meta.project}),
                );
                Some(w)
            }
            Err(e) => return supervisor::fail(&mut status, &e),
        }
    } else {
        None
    };
    for w in &prepared.warnings {
        status.warn(w);
    }
    if args.verbose > 1 {
        crate::say!(
            "sandbox-launch: effective policy:\n{}",
            crate::policy::describe(&prepared.policy)
        );
        crate::say!("sandbox-launch: plan: {:#?}", prepared.spec.mounts);
    }
    // Filled by the deferred plan, stamped once the shim has said something (`meanwhile`).
    let watch = RefCell::new(persistence::watch::Watch::new(
        prepared.unprotected_missing.clone(),
    ));
    let agents = std::mem::take(&mut prepared.agents);
    let deferred = prepared.deferred_plan(&agents, &watch);
    let limits = &prepared.policy.runtime.limits;
    let timeout = limits.timeout.as_ref().map(|t| t.value);
    let birth = match limits::make_cgroups(limits, &mut status, args.verbose) {
        Ok(c) => limits::Birth::new(c).holding_secrets(prepared.holds_secrets),
        Err(e) => return supervisor::fail(&mut status, &e),
    };
    let fs_prompts = steering.prompts.clone();
    let live = registration.as_mut().map(|r| {
        let listener = r.listener.take();
        let mut live = control::Live::new(
            r.id.clone(),
            r.name.clone(),
            argv,
            kind,
            network_name(prepared.network),
            events.clone(),
        );
        live.reloader = steering.reloader;
        live.prompts = steering.prompts;
        (listener, steering.watcher, Arc::new(live))
    });
    let settle = live.as_ref().map(|(_, _, l)| l.clone());
    let code = supervisor::run(supervisor::Launch {
        spec: prepared.spec,
        filter: prepared.filter,
        identity: prepared.identity,
        status: &mut status,
        verbose: args.verbose,
        on_listeners: prepared.proxy.map(|p| -> supervisor::OnListeners<'_> {
            Box::new(move |fds, transparent| proxy::launch::start(p, fds, transparent))
        }),
        around_clone: Some(&birth),
        timeout,
        on_spawn: Some(Box::new(|pid| {
            let (listener, watcher, live) = live?;
            live.set_shim(pid);
            control::on_demand(listener, watcher, live)
        })),
        prompts: fs_prompts,
        deferred,
        // Racing the program is fine (see `Watch::stamp`).
        meanwhile: Some(Box::new(|| watch.borrow_mut().stamp())),
    });
    events.feed().finish(std::time::Duration::from_millis(500));
    if let Some(l) = settle {
        l.settle(std::time::Duration::from_secs(2));
    }
    drop(registration);
    if let Some(c) = birth.cgroups {
        limits::finish_cgroups(c, &mut status);
    }
    if let Some(w) = worktree {
        crate::worktree::launch::finish(w, code);
    }
    report_created(&watch.into_inner(), &mut status);
    merge_agent_state(&agents, &mut status);
    if args.verbose > 0 {
        if let Some(line) = events.feed().tally().summary() {
            crate::say!("sandbox-launch: {line}");
        }
    }
    code
}

/// `--worktree`: the worktree (named by the sandbox's id) and the overlay in the plan.
fn start_worktree(
    args: &SandboxArgs,
    prepared: &mut Prepared,
    registration: Option<&control::registration::Registration>,
) -> Result<crate::worktree::store::Worktree, StepError> {
    let id = registration
        .map(|r| r.id.clone())
        .unwrap_or_else(control::registration::new_id);
    let deny_write: Vec<PathBuf> = prepared
        .policy
        .filesystem
        .deny_write
        .iter()
        .filter_map(|s| std::fs::canonicalize(&s.value).ok())
        .collect();
    let owner = prepared
        .identity
        .switch_from_root
        .then_some((prepared.identity.uid, prepared.identity.gid));
    let launched = crate::worktree::launch::prepare(
        &mut prepared.spec,
        &id,
        args.name.as_deref(),
        &deny_write,
        owner,
    )?;
    prepared.attached.extend(launched.fds);
    Ok(launched.worktree)
}

/// Claude Code's copy of `~/.claude.json` goes back, without what names commands.
fn merge_agent_state(agents: &persistence::agents::AgentState, status: &mut StatusSink) {
    let Some(c) = &agents.claude else { return };
    let text = match c.merge_back() {
        Ok(dropped) if dropped.is_empty() => return,
        Ok(dropped) => format!(
            "{}: changes made inside to {} were not kept (they can run commands on the host: \
             make them outside the sandbox): {}",
            c.host.display(),
            dropped.len(),
            dropped.join(", ")
        ),
        Err(e) => format!("Claude Code's state was not merged back: {e}"),
    };
    status.warn(&text);
}

fn network_name(mode: NetworkMode) -> &'static str {
    match mode {
        NetworkMode::None => "none",
        NetworkMode::Restricted => "restricted",
        NetworkMode::Full => "full",
    }
}

/// `--json-status-fd` and `--events`; the events stream also gets every status line (the
/// sandbox's lifecycle: warnings, verified, running, exited, failed) besides network decisions.
pub(crate) fn sinks(args: &SandboxArgs) -> anyhow::Result<(StatusSink, Arc<EventSink>)> {
    let events = Arc::new(match &args.events {
        Some(target) => EventSink::open(target)?,
        None => EventSink::none(),
    });
    let status = StatusSink::from_fd(args.json_status_fd)?.with_events(events.clone());
    Ok((status, events))
}

/// Should a protected path that did not exist at launch appear anyway (the create guard
/// refuses them; this is the second line), say so loudly: such files run code outside the
/// sandbox later (direnv, editor tasks, agent configuration).
fn report_created(watch: &persistence::watch::Watch, status: &mut StatusSink) {
    for p in watch.appeared() {
        let text = format!(
            "{} was created inside the sandbox; it is a protected path (it can run code \
             outside the sandbox later): review it before trusting this directory",
            p.display()
        );
        crate::say!("sandbox-launch: warning: {text}");
        status.emit(json!({"status": "warning", "warning": text, "created": p}));
    }
}
