//! The program's process of a nested sandbox: forked by the launcher, it takes the nested
//! layers itself — Landlock, the resource limits, the seccomp filters — checks from inside that
//! they hold, and only then execs the program. What it found (or why it stopped) goes back to
//! the launcher as one JSON line on a pipe that the exec closes.

use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use seccompiler::BpfProgram;
use serde::{Deserialize, Serialize};
use shim::channel::{Failure, Step, StepError};
use shim::spec::Rlimit;

use super::landlock::{self, Layer};

/// Everything the program's process needs, prepared before the fork.
pub struct Program {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub layer: Layer,
    /// The policy's filter, then the nested network's, if any.
    pub filters: Vec<BpfProgram>,
    pub rlimits: Vec<Rlimit>,
    pub verify: Verify,
    /// Descriptors above 2 that cross into the program (`--preserve-fd`); every other one is
    /// closed before the exec, as a sandbox of its own closes them.
    pub preserve_fds: Vec<i32>,
}

/// What the program's process checks before its exec.
#[derive(Debug, Clone, Default)]
pub struct Verify {
    /// A file created in each must be refused.
    pub unwritable_dirs: Vec<PathBuf>,
    /// Each (a regular file) must not open for reading.
    pub unreadable: Vec<PathBuf>,
    /// No IPv4 socket may be made.
    pub no_ip: bool,
    /// A loopback port the outer sandbox may let its programs reach and this layer does not
    /// (the outer proxy's): a connect there must be refused by Landlock.
    pub refused_port: Option<u16>,
}

/// The one line the program's process sends before its exec.
#[derive(Debug, Serialize, Deserialize)]
enum Report {
    Verified(serde_json::Value),
    Failed(Failure),
}

/// Fork the program's process. Returns its pid and what it reported: the verified facts, or
/// the step that failed (the program then never ran).
pub fn spawn(p: &Program) -> Result<(libc::pid_t, serde_json::Value), StepError> {
    let program = shim::init::find_program(
        p.argv.first().map(String::as_str).unwrap_or(""),
        p.env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str()),
    )?;
    let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| StepError::new(Step::Exec, format!("pipe2 => {e}"), None))?;
    // SAFETY: the launcher is single-threaded until the program is forked (the proxy starts
    // after), so the child may allocate and run ordinary code before its exec.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(StepError::new(
            Step::Exec,
            format!("fork => {}", nix::errno::Errno::last()),
            None,
        ));
    }
    if pid == 0 {
        drop(rd);
        let mut out = std::fs::File::from(wr);
        let failure = become_program(p, &program, &mut out);
        let line = serde_json::to_string(&Report::Failed(failure.0.clone())).unwrap_or_default();
        let _ = writeln!(out, "{line}");
        // SAFETY: ending the child without running the parent's exit handlers.
        unsafe { libc::_exit(failure.0.step.exit_code()) };
    }
    drop(wr);
    let mut lines = BufReader::new(std::fs::File::from(rd)).lines();
    let ended = || {
        StepError::new(
            Step::Internal,
            "the nested sandbox's program process ended before its exec",
            None,
        )
    };
    let facts = match lines.next() {
        Some(Ok(l)) => match serde_json::from_str::<Report>(&l) {
            Ok(Report::Verified(facts)) => facts,
            Ok(Report::Failed(f)) => return Err(StepError(f)),
            Err(_) => return Err(ended()),
        },
        _ => return Err(ended()),
    };
    // The exec closes the pipe; a failed exec says why first.
    if let Some(Ok(l)) = lines.next() {
        if let Ok(Report::Failed(f)) = serde_json::from_str::<Report>(&l) {
            return Err(StepError(f));
        }
    }
    Ok((pid, facts))
}

/// In the child: take every layer, verify, say so on `out`, exec. Returns only on failure.
fn become_program(p: &Program, program: &Path, out: &mut std::fs::File) -> StepError {
    match layers_then_verify(p) {
        Ok(facts) => {
            // A descriptor the outer program held open (to a file this sandbox denies reading)
            // must not reach the program: all but the report pipe (closed by the exec) and
            // those named with --preserve-fd are closed, as a sandbox of its own closes them.
            if let Err(e) = shim::run::close_stray_fds(out.as_raw_fd(), &p.preserve_fds) {
                return StepError::new(
                    Step::Internal,
                    format!("closing the inherited descriptors: {e}"),
                    None,
                );
            }
            let line = serde_json::to_string(&Report::Verified(facts)).unwrap_or_default();
            if writeln!(out, "{line}").is_err() {
                return StepError::new(Step::Internal, "cannot report to the launcher", None);
            }
            exec(program, &p.argv, &p.env)
        }
        Err(e) => e,
    }
}

fn layers_then_verify(p: &Program) -> Result<serde_json::Value, StepError> {
    // The launcher blocks the signals it forwards; the program starts with none blocked.
    // SAFETY: an empty set, fully initialised.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
    shim::sys::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        "PR_SET_PDEATHSIG",
    )
    .map_err(|e| StepError::new(Step::Internal, e.to_string(), None))?;
    std::env::set_current_dir(&p.cwd).map_err(|e| {
        StepError::new(
            Step::Exec,
            format!("working directory {}: {e}", p.cwd.display()),
            None,
        )
    })?;
    let landlock = landlock::apply(&p.layer).map_err(|e| {
        StepError::new(
            Step::Landlock,
            format!("{e:#}"),
            Some("a nested sandbox needs Landlock ABI 6 (Linux 6.12) with every right enforced"),
        )
    })?;
    for r in &p.rlimits {
        let lim = libc::rlimit {
            rlim_cur: r.soft,
            rlim_max: r.hard,
        };
        // SAFETY: setrlimit with a valid resource number and struct.
        if unsafe { libc::setrlimit(r.resource as _, &lim) } != 0 {
            return Err(StepError::new(
                Step::Limits,
                format!(
                    "setrlimit({}) => {}",
                    r.resource,
                    std::io::Error::last_os_error()
                ),
                None,
            ));
        }
    }
    verify_files(&p.verify)?;
    verify_landlock(&p.verify)?;
    let before = filter_count();
    for f in &p.filters {
        shim::seccomp::install(f)
            .map_err(|e| StepError::new(Step::Seccomp, format!("{e:#}"), None))?;
    }
    // Each filter must be in force, not only said to be installed.
    if filter_count() != before + p.filters.len() as u32 {
        return Err(verify_error(&format!(
            "{} seccomp filter(s) installed, but the kernel counts {} more",
            p.filters.len(),
            filter_count().saturating_sub(before)
        )));
    }
    if let Some(port) = p.verify.refused_port {
        verify_no_fast_open(port)?;
    }
    if p.verify.no_ip {
        // SAFETY: socket(2) with constant arguments; closed at once if it succeeds.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        if fd >= 0 {
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
            return Err(verify_error("an IPv4 socket could still be made"));
        }
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    if field("Seccomp:") != "2" || field("NoNewPrivs:") != "1" {
        return Err(verify_error(
            "seccomp mode 2 with no_new_privs is not in force",
        ));
    }
    Ok(serde_json::json!({
        "nested": true,
        "seccomp_mode": 2,
        "seccomp_filters": field("Seccomp_filters:").parse::<u32>().unwrap_or(0),
        "no_new_privs": true,
        "landlock": landlock,
        "unwritable_dirs_checked": p.verify.unwritable_dirs.len(),
        "unreadable_checked": p.verify.unreadable.len(),
        "signal_scoped": true,
        "tcp_refused_port": p.verify.refused_port,
        "no_ip_sockets": p.verify.no_ip,
    }))
}

/// `Seccomp_filters` of /proc/self/status: how many filters this thread is under.
fn filter_count() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp_filters:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The Landlock domain is in force, seen from what it refuses that the outer sandbox allows:
/// a signal to the launcher (outside the domain: scoped), and a connect to the outer proxy's
/// port when this layer limits TCP.
fn verify_landlock(v: &Verify) -> Result<(), StepError> {
    // SAFETY: getppid cannot fail; kill with signal 0 only checks permission.
    let r = unsafe { libc::kill(libc::getppid(), 0) };
    if r == 0 || nix::errno::Errno::last() != nix::errno::Errno::EPERM {
        return Err(verify_error(
            "the launcher can still be signalled: the Landlock layer is not in force",
        ));
    }
    if let Some(port) = v.refused_port {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)) {
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {}
            Ok(_) => {
                return Err(verify_error(&format!(
                    "127.0.0.1:{port} could be reached: Landlock's TCP rules are not in force"
                )))
            }
            Err(e) => {
                return Err(verify_error(&format!(
                    "a connect to 127.0.0.1:{port} gave {e}, not Landlock's EACCES"
                )))
            }
        }
    }
    Ok(())
}

/// A TCP Fast Open send to the port Landlock refuses (which it does not check there) must be
/// refused by the nested network filter.
fn verify_no_fast_open(port: u16) -> Result<(), StepError> {
    // SAFETY: socket(2) with constant arguments; the descriptor is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Ok(()); // no IP socket at all: nothing to send with
    }
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a valid address of its own size, no data; our own descriptor, closed at once.
    let (sent, errno) = unsafe {
        let r = libc::sendto(
            fd,
            std::ptr::null(),
            0,
            libc::MSG_FASTOPEN,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        let errno = nix::errno::Errno::last();
        libc::close(fd);
        (r, errno)
    };
    if sent >= 0 || errno != nix::errno::Errno::EOPNOTSUPP {
        return Err(verify_error(&format!(
            "a TCP Fast Open send to 127.0.0.1:{port} gave {}, not the filter's EOPNOTSUPP",
            if sent >= 0 {
                "success".to_string()
            } else {
                errno.to_string()
            }
        )));
    }
    Ok(())
}

fn verify_error(what: &str) -> StepError {
    StepError::new(
        Step::Verify,
        format!("nested sandbox: {what}"),
        Some("run `sandbox-launch doctor` outside the sandbox and report this"),
    )
}

/// Writes outside the nested writable trees are refused (by the nested Landlock layer, and for
/// creations by the outer guard, where this launcher registered them); denied files do not open.
fn verify_files(v: &Verify) -> Result<(), StepError> {
    for dir in &v.unwritable_dirs {
        let probe = dir.join(format!(".sandbox-launch-probe-{}", std::process::id()));
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe);
        if created.is_ok() {
            let _ = std::fs::remove_file(&probe);
            return Err(verify_error(&format!(
                "{} is writable, though outside every writable tree",
                dir.display()
            )));
        }
    }
    for path in &v.unreadable {
        if std::fs::File::open(path).is_ok() {
            return Err(verify_error(&format!(
                "{} is readable, though denied",
                path.display()
            )));
        }
    }
    Ok(())
}

fn exec(program: &Path, argv: &[String], env: &[(String, String)]) -> StepError {
    let c = |s: &[u8]| CString::new(s).unwrap_or_default();
    let path = c(program.as_os_str().as_bytes());
    let args: Vec<CString> = argv.iter().map(|a| c(a.as_bytes())).collect();
    let vars: Vec<CString> = env
        .iter()
        .map(|(k, v)| c(format!("{k}={v}").as_bytes()))
        .collect();
    let ptrs = |v: &[CString]| -> Vec<*const libc::c_char> {
        v.iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let (a, e) = (ptrs(&args), ptrs(&vars));
    // SAFETY: NUL-terminated strings and NULL-terminated arrays that outlive the call.
    unsafe { libc::execve(path.as_ptr(), a.as_ptr(), e.as_ptr()) };
    StepError::new(
        Step::Exec,
        format!("{}: {}", program.display(), std::io::Error::last_os_error()),
        None,
    )
}
