//! Helpers for the integration tests: they run the real `sandbox-launch` binary, as root and as
//! an unprivileged user, against directories each test makes for itself.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

pub mod agents;
pub mod cgroups;
pub mod container;
pub mod elf;
pub mod live;
pub mod login;
pub mod mock_model;
pub mod net;
pub mod recording;

/// The unprivileged user the tests switch to when they run as root.
pub const NOBODY: u32 = 65534;

/// Who starts the launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// Whoever runs the tests. As root this exercises the container-entrypoint path (the
    /// sandbox drops to `nobody`).
    Invoker,
    /// An unprivileged user (uid 65534 via setpriv when the tests run as root; the invoker
    /// otherwise, who is then unprivileged already).
    Unprivileged,
}

/// Both ways of starting the launcher; every isolation test runs under each.
pub const CALLERS: [Caller; 2] = [Caller::Invoker, Caller::Unprivileged];

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The uid the program inside the sandbox runs as.
pub fn inside_uid(_caller: Caller) -> u32 {
    if is_root() {
        NOBODY
    } else {
        // SAFETY: getuid cannot fail.
        unsafe { libc::getuid() }
    }
}

/// The directory of the build's binaries (target/debug), from the test executable's path.
fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/debug/deps/test-xxxx -> target/debug
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// A built binary, where the unprivileged test user can run it: where it was built when every
/// directory above it lets others through, else a copy (a hard link when it can be) in a
/// directory of this test process that is removed when the process exits.
fn staged_binary(name: &str) -> PathBuf {
    let src = match std::env::var_os("SANDBOX_LAUNCH_BIN_DIR") {
        Some(d) => PathBuf::from(d).join(name),
        None => build_dir().join(name),
    };
    assert!(
        src.exists(),
        "{} is missing: build it first (scripts/test.sh runs `cargo build --workspace --all-targets`)",
        src.display()
    );
    staged_binary_at(&src)
}

fn staged_binary_at(src: &Path) -> PathBuf {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(remove_stale_stage_dirs);
    if runnable_by_others(src) {
        return src.to_path_buf();
    }
    let n = STAGED.fetch_add(1, Ordering::SeqCst);
    // One directory per binary: the static and the debug launcher have the same name.
    let dir = stage_dir().join(n.to_string());
    std::fs::create_dir(&dir).expect("create stage dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let dst = dir.join(src.file_name().expect("a file name"));
    if std::fs::hard_link(src, &dst).is_err() || !runnable_by_others(&dst) {
        let _ = std::fs::remove_file(&dst);
        std::fs::copy(src, &dst).expect("copy binary");
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755))
            .expect("chmod binary");
    }
    dst
}

/// Whether a user who is neither owner nor group can execute `path` (every directory above it
/// searchable by others, the file readable and executable by others).
fn runnable_by_others(path: &Path) -> bool {
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode())
            .unwrap_or(0)
    };
    mode(path) & 0o005 == 0o005 && path.ancestors().skip(1).all(|d| mode(d) & 0o001 != 0)
}

static STAGED: AtomicU32 = AtomicU32::new(0);

const STAGE_PREFIX: &str = "/var/tmp/sandbox-launch-test-bin-";

fn stage_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = PathBuf::from(format!("{STAGE_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("create stage dir");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755))
            .expect("chmod stage dir");
        // SAFETY: registers a plain function without captures; it runs once, at exit.
        unsafe { libc::atexit(remove_stage_dir) };
        d
    })
}

extern "C" fn remove_stage_dir() {
    let _ = std::fs::remove_dir_all(format!("{STAGE_PREFIX}{}", std::process::id()));
}

/// Stage directories of test processes that died without their exit handler (killed), or of
/// the harness before it removed them.
fn remove_stale_stage_dirs() {
    let Ok(entries) = std::fs::read_dir("/var/tmp") else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Some(pid) = path
            .to_str()
            .and_then(|p| p.strip_prefix(STAGE_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// The `sandbox-launch` binary under test.
pub fn launcher() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| staged_binary("sandbox-launch"))
}

/// The `fault-inject` helper binary.
pub fn fault_inject() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| staged_binary("fault-inject"))
}

/// The statically linked release build (`scripts/build.sh`, which `scripts/test.sh` runs and
/// whose output directory it passes as `SANDBOX_LAUNCH_STATIC_DIR`): what goes into container
/// images and what the benchmarks measure. Missing is a failure, never a skip.
pub fn static_launcher() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| statically_linked(&static_dir().join("sandbox-launch"), "scripts/build.sh"))
}

/// `fault-inject` of the same static build (for container images).
pub fn static_fault_inject() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| statically_linked(&static_dir().join("fault-inject"), "scripts/build.sh"))
}

fn static_dir() -> PathBuf {
    match std::env::var_os("SANDBOX_LAUNCH_STATIC_DIR") {
        Some(d) => PathBuf::from(d),
        None => build_dir().parent().expect("target/").join(format!(
            "{}-unknown-linux-gnu/release",
            std::env::consts::ARCH
        )),
    }
}

/// What `cargo install --path launcher` installed (`scripts/test.sh` installs it under
/// /var/cache/sandbox-launch-tests/cargo-install and passes `SANDBOX_LAUNCH_INSTALLED_DIR`).
pub fn installed_launcher() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = std::env::var_os("SANDBOX_LAUNCH_INSTALLED_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/var/cache/sandbox-launch-tests/cargo-install/bin".into());
        statically_linked(
            &dir.join("sandbox-launch"),
            "cargo install --locked --path launcher --root /var/cache/sandbox-launch-tests/cargo-install",
        )
    })
}

/// `bin`, checked to exist and to be statically linked, staged for the unprivileged user.
fn statically_linked(bin: &Path, how: &str) -> PathBuf {
    assert!(
        bin.exists(),
        "{} is missing: build it first ({how}; scripts/test.sh does)",
        bin.display()
    );
    let text = std::fs::read(bin).expect("read the binary");
    // A dynamically linked executable names its loader (PT_INTERP): /lib64/ld-linux-....
    assert!(
        !text.windows(8).any(|w| w == b"/ld-linu"),
        "{} is not statically linked",
        bin.display()
    );
    staged_binary_at(bin)
}

/// A directory that is removed when dropped, owned by the uid the sandbox runs as.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    /// Under /tmp (a private tmpfs inside the sandbox, so only binds make it visible).
    pub fn new(tag: &str) -> Self {
        Self::new_in("/tmp", tag)
    }

    /// Under `base`, which must exist.
    pub fn new_in(base: &str, tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let path = PathBuf::from(format!("{base}/sl-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let d = TempDir { path };
        d.give_to_sandbox_user(&d.path);
        d
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }

    /// Create a file (and its parents) owned by the sandbox's user.
    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.path.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
            self.give_to_sandbox_user(parent);
        }
        std::fs::write(&p, content).expect("write");
        self.give_to_sandbox_user(&p);
        p
    }

    pub fn mkdir(&self, rel: &str) -> PathBuf {
        let p = self.path.join(rel);
        std::fs::create_dir_all(&p).expect("mkdir");
        self.give_to_sandbox_user(&p);
        p
    }

    /// As root, hand the path (and everything below it) to the unprivileged test user.
    pub fn give_to_sandbox_user(&self, p: &Path) {
        if is_root() {
            let status = Command::new("chown")
                .arg("-R")
                .arg(format!("{NOBODY}:{NOBODY}"))
                .arg(p)
                .status()
                .expect("chown");
            assert!(status.success());
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A command that starts the launcher as `caller` in `cwd`.
pub fn command(caller: Caller, cwd: &Path, args: &[&str]) -> Command {
    command_with(launcher(), caller, cwd, args)
}

/// Like `command`, for any program (e.g. `fault-inject ... -- sandbox-launch ...`).
pub fn command_with(program: &Path, caller: Caller, cwd: &Path, args: &[&str]) -> Command {
    let mut cmd = if caller == Caller::Unprivileged && is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            &NOBODY.to_string(),
            "--regid",
            &NOBODY.to_string(),
            "--clear-groups",
            "--",
        ]);
        c.arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.args(args).current_dir(cwd).stdin(Stdio::null());
    cmd.env("HOME", cwd);
    cmd.env("XDG_RUNTIME_DIR", runtime_dir(caller));
    cmd
}

/// A private `XDG_RUNTIME_DIR` per test process and caller, never the invoker's own: the
/// sandboxes' control sockets go there (a launcher that a test kills leaves its socket behind),
/// and it is removed with the stage directory when the test process exits.
pub fn runtime_dir(caller: Caller) -> PathBuf {
    let uid = if caller == Caller::Unprivileged && is_root() {
        NOBODY
    } else {
        // SAFETY: getuid cannot fail.
        unsafe { libc::getuid() }
    };
    let dir = stage_dir().join(format!("run-{uid}"));
    // Made whole (owner, mode) before another thread of the tests may use it.
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(e) = std::fs::create_dir(&dir) {
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        return dir;
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    // The launchers' control directory, made here so that a test injecting mkdir failures
    // fails only what it aims at.
    let control = dir.join("sandbox-launch");
    std::fs::create_dir(&control).expect("create the control directory");
    std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    if is_root() {
        for d in [&dir, &control] {
            let c = std::ffi::CString::new(d.to_str().expect("UTF-8 path")).expect("no NUL");
            // SAFETY: chown of a directory we just created, with a valid C string.
            assert_eq!(unsafe { libc::chown(c.as_ptr(), uid, uid) }, 0, "chown");
        }
    }
    dir
}

/// Run `sh -c script` in the sandbox (extra launcher options first) and collect the output.
pub fn sh(caller: Caller, cwd: &Path, opts: &[&str], script: &str) -> Output {
    let mut args = vec!["whole-process"];
    args.extend_from_slice(opts);
    args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
    command(caller, cwd, &args)
        .output()
        .expect("run sandbox-launch")
}

/// `sandbox-launch doctor --json` as `caller`, under `fault-inject FAULTS -- ...` when faults
/// are given.
pub fn doctor(caller: Caller, cwd: &Path, faults: &[&str]) -> Output {
    let out = if faults.is_empty() {
        command(caller, cwd, &["doctor", "--json"]).output()
    } else {
        let launcher = launcher().to_str().unwrap();
        let mut args = faults.to_vec();
        args.extend_from_slice(&["--", launcher, "doctor", "--json"]);
        command_with(fault_inject(), caller, cwd, &args).output()
    };
    out.expect("run sandbox-launch doctor")
}

/// The whole `doctor --json` report.
pub fn doctor_report(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("doctor --json: {}", explain(out)))
}

/// The check named `name` in a `doctor --json` report.
pub fn doctor_check(out: &Output, name: &str) -> serde_json::Value {
    doctor_report(out)["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name:?} check: {}", explain(out)))
}

/// Write `input` to the child's stdin and close it. A child that exits
/// without reading (a refused launch, a usage error) closes the pipe first:
/// that is an outcome the caller's assertions judge, not a test failure.
pub fn feed_stdin(child: &mut std::process::Child, input: &[u8]) {
    use std::io::Write;
    let mut stdin = child.stdin.take().expect("stdin was piped");
    if let Err(e) = stdin.write_all(input) {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "writing stdin: {e}"
        );
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The CPUs a process may run on, from its `/proc/PID/status` text.
pub fn cpus_allowed(status: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
}

/// Panic with everything the run printed.
pub fn explain(o: &Output) -> String {
    format!(
        "status: {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        stdout(o),
        stderr(o)
    )
}

/// In a `pre_exec` hook: make `src` available as `dst` in the exec'd program. `dup2` onto itself
/// would keep FD_CLOEXEC (and the descriptor would silently vanish), so clear it instead.
///
/// # Safety
/// Only between fork and exec (async-signal-safe calls only).
pub unsafe fn place_fd(src: i32, dst: i32) -> std::io::Result<()> {
    let r = if src == dst {
        libc::fcntl(dst, libc::F_SETFD, 0)
    } else {
        libc::dup2(src, dst)
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}
