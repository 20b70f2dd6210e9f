//! Containers for the tests: one image per test run, built from scratch with no registry — the
//! static release launcher and Debian's busybox-static, nothing else (no /etc/passwd, /etc/group
//! or /etc/resolv.conf) — and podman, rootful or rootless as a user the test makes and removes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use crate::{explain, static_fault_inject, static_launcher};

/// The README's flags (README: Containers).
pub const RECIPE: [&str; 4] = [
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "systempaths=unconfined",
];

pub const IMAGE: &str = "localhost/sandbox-launch-test:latest";

/// Where the build context is assembled (outside /tmp and /var/tmp), removed after the build.
const CONTEXT: &str = "/var/cache/sandbox-launch-tests/image-context";

/// busybox applets the tests use inside the image.
const APPLETS: &[&str] = &[
    "sh", "id", "cat", "ls", "echo", "mkdir", "touch", "stat", "grep", "env", "wget", "nslookup",
    "true", "hostname", "sleep",
];

/// The image, built once per test process (podman caches the layer across runs: the same
/// files give the same layer).
pub fn image() -> &'static str {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(build_image);
    IMAGE
}

fn build_image() {
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.exists(),
        "/bin/busybox is missing: scripts/install-deps.sh --tests installs busybox-static"
    );
    let ctx = PathBuf::from(CONTEXT);
    let _ = std::fs::remove_dir_all(&ctx);
    let rootfs = ctx.join("rootfs");
    for dir in ["bin", "usr/local/bin"] {
        std::fs::create_dir_all(rootfs.join(dir)).expect("create the image's directories");
    }
    // /work belongs to the sandbox's user (65534), as the README's Dockerfile makes it.
    std::fs::create_dir_all(ctx.join("empty")).expect("create an empty directory");
    let tmp = rootfs.join("tmp");
    std::fs::create_dir_all(&tmp).expect("create /tmp of the image");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).expect("chmod /tmp");
    std::fs::copy(busybox, rootfs.join("bin/busybox")).expect("copy busybox");
    for applet in APPLETS {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).expect("symlink");
    }
    std::fs::copy(
        static_launcher(),
        rootfs.join("usr/local/bin/sandbox-launch"),
    )
    .expect("copy the static launcher");
    // The test-only fault injector of the same static build.
    std::fs::copy(
        static_fault_inject(),
        rootfs.join("usr/local/bin/fault-inject"),
    )
    .expect("copy the static fault-inject");
    // One dynamically linked glibc program with its libraries (glibc's own resolver, which
    // asks 127.0.0.1 when there is no /etc/resolv.conf).
    copy_with_libraries(Path::new("/usr/bin/getent"), &rootfs);
    std::fs::write(
        ctx.join("Containerfile"),
        "FROM scratch\nLABEL sandbox-launch-test=1\nCOPY rootfs/ /\n\
         COPY --chown=65534:65534 empty/ /work/\nWORKDIR /work\n\
         ENTRYPOINT [\"/usr/local/bin/sandbox-launch\"]\n",
    )
    .expect("write the Containerfile");
    let out = Command::new("podman")
        .args(["build", "-q", "-t", IMAGE])
        .arg(&ctx)
        .stdin(Stdio::null())
        .output()
        .expect("run podman build (scripts/install-deps.sh --tests installs podman)");
    let _ = std::fs::remove_dir_all(&ctx);
    assert!(out.status.success(), "podman build: {}", explain(&out));
    // The images of earlier runs (another launcher binary), now untagged.
    let _ = Command::new("podman")
        .args([
            "image",
            "prune",
            "-f",
            "--filter",
            "label=sandbox-launch-test=1",
        ])
        .output();
}

/// `program` and the shared objects `ldd` lists for it, each at its own path under `rootfs`.
fn copy_with_libraries(program: &Path, rootfs: &Path) {
    let out = Command::new("ldd").arg(program).output().expect("run ldd");
    assert!(
        out.status.success(),
        "ldd {}: {}",
        program.display(),
        explain(&out)
    );
    let libs = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)"
            let path = l.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect::<Vec<_>>();
    for file in std::iter::once(program.to_path_buf()).chain(libs) {
        let dst = rootfs.join(file.strip_prefix("/").expect("absolute"));
        std::fs::create_dir_all(dst.parent().expect("a parent")).expect("mkdir");
        // Follows symlinks: the file itself under the name the loader asks for.
        std::fs::copy(&file, &dst).expect("copy a library");
    }
}

/// `podman run --rm` of the image with `opts`, the launcher's arguments after the image.
/// `--network none`: the sandbox builds its own network namespace inside, and the tests
/// talk to nothing outside. Where this machine lets podman's defaults fail for reasons of its
/// own, the flags say so (they change nothing the sandbox sees).
pub fn run(podman: Command, opts: &[&str], args: &[&str]) -> Output {
    let mut cmd = podman;
    cmd.args(["--runtime", "runc", "run", "--rm", "--network", "none"]);
    cmd.args(machine_limits());
    cmd.args(opts).arg(image()).args(args).stdin(Stdio::null());
    cmd.output().expect("run podman")
}

/// Rootful podman.
pub fn podman() -> Command {
    Command::new("podman")
}

/// podman sets RLIMIT_NOFILE and RLIMIT_NPROC in every container, above what a process may
/// raise to here (a limit the machine's own supervisor sets): ask for the current hard limits,
/// which any process may keep. (crun refuses this machine's hybrid cgroup layout; runc does
/// not, hence `--runtime runc`.)
fn machine_limits() -> Vec<String> {
    if !crate::is_root() {
        return Vec::new();
    }
    let hard = |res| {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills the struct.
        unsafe { libc::getrlimit(res, &mut r) };
        r.rlim_max
    };
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    let nofile = hard(libc::RLIMIT_NOFILE);
    let nproc = hard(libc::RLIMIT_NPROC).min(pid_max);
    vec![
        "--ulimit".into(),
        format!("nofile={nofile}:{nofile}"),
        "--ulimit".into(),
        format!("nproc={nproc}:{nproc}"),
    ]
}

/// A real user for rootless podman, made with `useradd -m` (which gives it subordinate ids)
/// and removed with everything it owns when dropped: its processes (podman's pause process),
/// its home (the image storage), its subordinate ids.
pub struct RootlessUser {
    pub name: String,
    pub home: PathBuf,
    pub uid: u32,
}

impl RootlessUser {
    pub fn new() -> Self {
        assert!(crate::is_root(), "making a user needs root");
        let name = format!("slpod{}", std::process::id());
        let out = Command::new("useradd")
            .args(["-m", "-s", "/bin/sh", &name])
            .output()
            .expect("run useradd");
        assert!(out.status.success(), "useradd: {}", explain(&out));
        let home = PathBuf::from(format!("/home/{name}"));
        use std::os::unix::fs::MetadataExt;
        let uid = std::fs::metadata(&home).expect("home").uid();
        let user = RootlessUser { name, home, uid };
        let run = user.runtime_dir();
        std::fs::create_dir(&run).expect("create XDG_RUNTIME_DIR");
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::os::unix::fs::chown(&run, Some(uid), Some(uid)).expect("chown");
        // The image, from root's storage into the user's.
        let archive = user.home.join("image.tar");
        let out = podman()
            .args(["save", "-q", "-o"])
            .arg(&archive)
            .arg(image())
            .output()
            .expect("podman save");
        assert!(out.status.success(), "podman save: {}", explain(&out));
        std::os::unix::fs::chown(&archive, Some(uid), Some(uid)).expect("chown");
        let mut load = user.podman();
        load.args(["load", "-q", "-i"]).arg(&archive);
        let out = load.output().expect("podman load");
        assert!(out.status.success(), "podman load: {}", explain(&out));
        let _ = std::fs::remove_file(&archive);
        user
    }

    /// Its XDG_RUNTIME_DIR (in its home, so it goes with it).
    fn runtime_dir(&self) -> PathBuf {
        self.home.join(".run")
    }

    /// podman as this user, with a login-like environment.
    pub fn podman(&self) -> Command {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            &self.name,
            "--regid",
            &self.name,
            "--init-groups",
            "--",
        ])
        .arg("podman")
        .current_dir(&self.home)
        .env_clear()
        .env("HOME", &self.home)
        .env("USER", &self.name)
        .env("LOGNAME", &self.name)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .env("XDG_RUNTIME_DIR", self.runtime_dir());
        c
    }

    fn processes(&self) -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        use std::os::unix::fs::MetadataExt;
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == self.uid)
            })
            .filter(|pid| !is_zombie(*pid))
            .collect()
    }
}

impl Default for RootlessUser {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for RootlessUser {
    fn drop(&mut self) {
        // podman's pause process keeps the user's namespaces; it is the one left by design.
        for pid in self.processes() {
            // SAFETY: signalling a process of the user this test made.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for _ in 0..100 {
            if self.processes().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // -f: a zombie left for its parent to reap still counts as the user's process.
        let out = Command::new("userdel")
            .args(["-r", "-f", &self.name])
            .output();
        if let Ok(out) = out {
            // "mail spool not found" is not an error worth failing over.
            if !out.status.success() && out.status.code() != Some(12) {
                eprintln!("userdel {}: {}", self.name, explain(&out));
            }
        }
        // Rootless podman's lock file, named by uid, outlives the user.
        let _ = std::fs::remove_file(format!("/dev/shm/libpod_rootless_lock_{}", self.uid));
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false)
}
