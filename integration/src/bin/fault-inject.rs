//! `fault-inject`: run a program under an outer seccomp filter that makes chosen syscalls fail,
//! to simulate kernels and containers the launcher must refuse to run on (no Landlock, user
//! namespaces forbidden, a kernel that lies about `landlock_restrict_self`, …).
//!
//! A test helper, not part of the shipped launcher (which has no fault-injection switch).
//!
//! ```text
//! fault-inject [--errno SYSCALL=ERRNO]... [--deny-clone-flags MASK=ERRNO]...
//!              [--errno-if-arg0 SYSCALL:ARG0=ERRNO]... -- PROGRAM ARGS...
//! ```
//!
//! * `--errno SYSCALL=ERRNO`: every call of SYSCALL returns -1 with errno ERRNO. ERRNO is a name
//!   (EPERM, ENOSYS, …) or a number; 0 makes the call "succeed" (return 0) without doing
//!   anything, which simulates a kernel that lies.
//! * `--deny-clone-flags MASK=ERRNO`: clone and unshare whose flags contain any bit of MASK fail
//!   with ERRNO. clone3 passes its flags in memory, out of seccomp's reach, so it then answers
//!   ENOSYS (libc falls back to clone) unless `--errno clone3=…` says otherwise.
//! * `--errno-if-arg1 SYSCALL:ARG1=ERRNO`, `--errno-if-arg2 SYSCALL:ARG2=ERRNO`,
//!   `--errno-if-arg3 SYSCALL:ARG3=ERRNO` (mount's flags): the same for the
//!   second, third and fourth arguments (e.g. the flags of `seccomp`, to fail only the install of a
//!   user-notification filter; the flags of `openat`).
//! * `--errno-if-arg0 SYSCALL:ARG0=ERRNO`: calls of SYSCALL whose first argument equals ARG0 fail
//!   (e.g. `prctl:38=EPERM` for PR_SET_NO_NEW_PRIVS). ARG0 below 2^32 is compared as 32 bits, as
//!   the kernel reads `int` arguments; larger values as 64 bits.
//!
//! SYSCALL is a name from a fixed table or a number. The filter is installed with no_new_privs
//! set, then PROGRAM is executed (searched in PATH). Usage errors exit 125, a PROGRAM that
//! cannot be executed exits 126 (127 when it is not found), like `env`.

use std::collections::BTreeMap;
use std::convert::TryInto;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

const EXIT_USAGE: i32 = 125;
const EXIT_CANNOT_EXEC: i32 = 126;
const EXIT_NOT_FOUND: i32 = 127;

const USAGE: &str =
    "usage: fault-inject [--errno SYSCALL=ERRNO]... [--deny-clone-flags MASK=ERRNO]... \
[--errno-if-arg0 SYSCALL:ARG0=ERRNO]... [--errno-if-arg1 SYSCALL:ARG1=ERRNO]... \
[--errno-if-arg2 SYSCALL:ARG2=ERRNO]... [--errno-if-arg3 SYSCALL:ARG3=ERRNO]... -- PROGRAM ARGS...";

/// The syscalls the fail-closed tests need, by name. Others can be given by number.
const SYSCALLS: &[(&str, libc::c_long)] = &[
    ("landlock_create_ruleset", libc::SYS_landlock_create_ruleset),
    ("landlock_add_rule", libc::SYS_landlock_add_rule),
    ("landlock_restrict_self", libc::SYS_landlock_restrict_self),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("clone", libc::SYS_clone),
    ("clone3", libc::SYS_clone3),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("socket", libc::SYS_socket),
    ("ioctl", libc::SYS_ioctl),
    ("seccomp", libc::SYS_seccomp),
    ("prctl", libc::SYS_prctl),
    ("setresuid", libc::SYS_setresuid),
    ("setresgid", libc::SYS_setresgid),
    ("setgroups", libc::SYS_setgroups),
    ("capset", libc::SYS_capset),
    ("sethostname", libc::SYS_sethostname),
    ("execve", libc::SYS_execve),
    ("execveat", libc::SYS_execveat),
    ("openat", libc::SYS_openat),
    ("openat2", libc::SYS_openat2),
    ("write", libc::SYS_write),
    ("pidfd_open", libc::SYS_pidfd_open),
    ("sched_setaffinity", libc::SYS_sched_setaffinity),
];

const ERRNOS: &[(&str, i32)] = &[
    ("EPERM", libc::EPERM),
    ("ENOENT", libc::ENOENT),
    ("ESRCH", libc::ESRCH),
    ("EINTR", libc::EINTR),
    ("EIO", libc::EIO),
    ("E2BIG", libc::E2BIG),
    ("EBADF", libc::EBADF),
    ("ECHILD", libc::ECHILD),
    ("EAGAIN", libc::EAGAIN),
    ("ENOMEM", libc::ENOMEM),
    ("EACCES", libc::EACCES),
    ("EFAULT", libc::EFAULT),
    ("EBUSY", libc::EBUSY),
    ("EEXIST", libc::EEXIST),
    ("EXDEV", libc::EXDEV),
    ("ENODEV", libc::ENODEV),
    ("ENOTDIR", libc::ENOTDIR),
    ("EISDIR", libc::EISDIR),
    ("EINVAL", libc::EINVAL),
    ("EMFILE", libc::EMFILE),
    ("ENOTTY", libc::ENOTTY),
    ("ENOSPC", libc::ENOSPC),
    ("EROFS", libc::EROFS),
    ("ENOSYS", libc::ENOSYS),
    ("EOPNOTSUPP", libc::EOPNOTSUPP),
    ("ENOTSUP", libc::ENOTSUP),
    ("EAFNOSUPPORT", libc::EAFNOSUPPORT),
    ("EPROTONOSUPPORT", libc::EPROTONOSUPPORT),
    ("EUSERS", libc::EUSERS),
];

/// The kernel's largest errno (MAX_ERRNO).
const MAX_ERRNO: u32 = 4095;

/// What makes a call of one syscall fail.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Match {
    /// Every call.
    Always,
    /// Calls whose argument (0-based index) equals this value.
    ArgEq(u8, u64),
    /// Calls whose first argument has any bit of this mask set.
    Arg0AnyBit(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Injection {
    syscall: libc::c_long,
    when: Match,
    errno: u32,
}

#[derive(Debug)]
struct Invocation {
    injections: Vec<Injection>,
    program: Vec<OsString>,
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let invocation = match parse(&args) {
        Ok(inv) => inv,
        Err(e) => {
            eprintln!("fault-inject: {e:#}\n{USAGE}");
            std::process::exit(EXIT_USAGE);
        }
    };
    let program = match find_program(&invocation.program[0]) {
        Some(p) => p,
        None => {
            eprintln!(
                "fault-inject: {}: not found in PATH",
                invocation.program[0].to_string_lossy()
            );
            std::process::exit(EXIT_NOT_FOUND);
        }
    };
    let exec_with = match exec_syscall(&invocation.injections) {
        Ok(nr) => nr,
        Err(e) => {
            eprintln!("fault-inject: {e:#}\n{USAGE}");
            std::process::exit(EXIT_USAGE);
        }
    };
    let filter = match build_filters(&invocation.injections) {
        Ok(f) => shim::seccomp::chain(f),
        Err(e) => {
            eprintln!("fault-inject: {e:#}");
            std::process::exit(EXIT_USAGE);
        }
    };
    if let Err(e) = install(&filter) {
        eprintln!("fault-inject: {e:#}");
        std::process::exit(EXIT_CANNOT_EXEC);
    }
    let err = exec(exec_with, &program, &invocation.program);
    eprintln!(
        "fault-inject: cannot execute {}: {err}",
        program.to_string_lossy()
    );
    let code = if err.raw_os_error() == Some(libc::ENOENT) {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXEC
    };
    std::process::exit(code);
}

fn parse(args: &[OsString]) -> Result<Invocation> {
    let mut injections = Vec::new();
    let mut clone_masks: Vec<u32> = Vec::new();
    let mut clone3_given = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let arg = arg
            .to_str()
            .ok_or_else(|| anyhow!("option is not UTF-8: {arg:?}"))?;
        let mut value = |opt: &str| -> Result<String> {
            it.next()
                .and_then(|v| v.to_str())
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("{opt} needs a value"))
        };
        match arg {
            "--" => {
                let program: Vec<OsString> = it.cloned().collect();
                if program.is_empty() {
                    bail!("no PROGRAM after --");
                }
                if !clone_masks.is_empty() && !clone3_given {
                    injections.push(Injection {
                        syscall: libc::SYS_clone3,
                        when: Match::Always,
                        errno: libc::ENOSYS as u32,
                    });
                }
                return Ok(Invocation {
                    injections,
                    program,
                });
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--errno" => {
                let v = value(arg)?;
                let (name, errno) = split_once(&v, '=', arg)?;
                let syscall = syscall_number(name)?;
                clone3_given |= syscall == libc::SYS_clone3;
                injections.push(Injection {
                    syscall,
                    when: Match::Always,
                    errno: errno_number(errno)?,
                });
            }
            "--errno-if-arg0" | "--errno-if-arg1" | "--errno-if-arg2" | "--errno-if-arg3" => {
                let index = arg.as_bytes()[arg.len() - 1] - b'0';
                let v = value(arg)?;
                let (lhs, errno) = split_once(&v, '=', arg)?;
                let (name, wanted) = split_once(lhs, ':', arg)?;
                injections.push(Injection {
                    syscall: syscall_number(name)?,
                    when: Match::ArgEq(
                        index,
                        number(wanted).with_context(|| format!("{arg} {v}"))?,
                    ),
                    errno: errno_number(errno)?,
                });
            }
            "--deny-clone-flags" => {
                let v = value(arg)?;
                let (mask, errno) = split_once(&v, '=', arg)?;
                let mask = number(mask).with_context(|| format!("{arg} {v}"))?;
                let mask = u32::try_from(mask)
                    .ok()
                    .filter(|m| *m != 0)
                    .ok_or_else(|| {
                        anyhow!("{arg}: MASK must be non-zero and fit in 32 bits (clone reads only those)")
                    })?;
                clone_masks.push(mask);
                let errno = errno_number(errno)?;
                for syscall in [libc::SYS_clone, libc::SYS_unshare] {
                    injections.push(Injection {
                        syscall,
                        when: Match::Arg0AnyBit(u64::from(mask)),
                        errno,
                    });
                }
            }
            other => bail!("unknown option {other}"),
        }
    }
    bail!("missing -- PROGRAM")
}

fn split_once<'a>(s: &'a str, sep: char, opt: &str) -> Result<(&'a str, &'a str)> {
    s.split_once(sep)
        .ok_or_else(|| anyhow!("{opt} {s}: expected '{sep}'"))
}

/// Decimal or 0x-prefixed hexadecimal.
fn number(s: &str) -> Result<u64> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| anyhow!("not a number: {s:?}"))
}

fn syscall_number(name: &str) -> Result<libc::c_long> {
    if let Some((_, nr)) = SYSCALLS.iter().find(|(n, _)| *n == name) {
        return Ok(*nr);
    }
    match number(name) {
        Ok(nr) if nr < 0x4000_0000 => Ok(nr as libc::c_long),
        _ => {
            let known: Vec<&str> = SYSCALLS.iter().map(|(n, _)| *n).collect();
            bail!(
                "unknown syscall {name:?}; known names: {}; or give a number",
                known.join(", ")
            )
        }
    }
}

fn errno_number(s: &str) -> Result<u32> {
    if let Some((_, e)) = ERRNOS.iter().find(|(n, _)| *n == s) {
        return Ok(*e as u32);
    }
    match number(s) {
        Ok(e) if e <= u64::from(MAX_ERRNO) => Ok(e as u32),
        _ => bail!("not an errno: {s:?} (a name like EPERM, or a number 0..={MAX_ERRNO})"),
    }
}

/// One seccompiler filter per errno (a filter has one answer), each allowing what it does not
/// match, chained into one program by [`shim::seccomp::chain`].
fn build_filters(injections: &[Injection]) -> Result<Vec<BpfProgram>> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| anyhow!("unsupported architecture: {e:?}"))?;
    let mut by_errno: BTreeMap<u32, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    // Unconditional injections: an empty rule list matches every call of the syscall.
    let mut always: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    for inj in injections {
        let rules = by_errno
            .entry(inj.errno)
            .or_default()
            .entry(inj.syscall)
            .or_default();
        match &inj.when {
            Match::Always => always.entry(inj.errno).or_default().push(inj.syscall),
            Match::ArgEq(i, v) => rules.push(SeccompRule::new(vec![arg_eq(*i, *v)?])?),
            Match::Arg0AnyBit(mask) => {
                for bit in (0..64).map(|i| 1u64 << i).filter(|b| mask & b != 0) {
                    rules.push(SeccompRule::new(vec![arg0_has_bit(bit)?])?);
                }
            }
        }
    }
    for (errno, syscalls) in always {
        let rules = by_errno.entry(errno).or_default();
        for nr in syscalls {
            rules.insert(nr, Vec::new());
        }
    }
    by_errno
        .into_iter()
        .map(|(errno, rules)| {
            let filter = SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(errno),
                arch,
            )?;
            Ok(BpfProgram::try_from(filter)?)
        })
        .collect()
}

fn arg_eq(index: u8, value: u64) -> Result<SeccompCondition> {
    let len = if value <= u64::from(u32::MAX) {
        SeccompCmpArgLen::Dword
    } else {
        SeccompCmpArgLen::Qword
    };
    Ok(SeccompCondition::new(index, len, SeccompCmpOp::Eq, value)?)
}

fn arg0_has_bit(bit: u64) -> Result<SeccompCondition> {
    let len = if bit <= u64::from(u32::MAX) {
        SeccompCmpArgLen::Dword
    } else {
        SeccompCmpArgLen::Qword
    };
    Ok(SeccompCondition::new(
        0,
        len,
        SeccompCmpOp::MaskedEq(bit),
        bit,
    )?)
}

/// Set no_new_privs and load `program` (nothing to load when it is empty).
fn install(program: &BpfProgram) -> Result<()> {
    // SAFETY: integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error()).context("prctl(PR_SET_NO_NEW_PRIVS, 1)");
    }
    if program.is_empty() {
        return Ok(());
    }
    if program.len() > 4096 {
        bail!(
            "the filter has {} instructions; the kernel accepts at most 4096",
            program.len()
        );
    }
    seccompiler::apply_filter(program).context("install the seccomp filter")
}

/// The filter applies to our own exec of PROGRAM too: when execve is injected, exec through
/// execveat instead (and the other way round).
fn exec_syscall(injections: &[Injection]) -> Result<libc::c_long> {
    let blocks = |nr| {
        injections
            .iter()
            .any(|i| i.syscall == nr && i.when == Match::Always)
    };
    match (blocks(libc::SYS_execve), blocks(libc::SYS_execveat)) {
        (false, _) => Ok(libc::SYS_execve),
        (true, false) => Ok(libc::SYS_execveat),
        (true, true) => bail!("with both execve and execveat failing, PROGRAM cannot be started"),
    }
}

/// PROGRAM as given when it contains a slash, else the first executable match in PATH.
fn find_program(program: &OsString) -> Option<PathBuf> {
    let path = Path::new(program);
    if program.as_bytes().contains(&b'/') {
        return Some(path.to_path_buf());
    }
    let search = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&search)
        .map(|dir| dir.join(path))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: c is a NUL-terminated path.
    let ok = unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0;
    ok && path.is_file()
}

/// Replace this process with `program`; returns only on failure.
fn exec(nr: libc::c_long, program: &Path, argv: &[OsString]) -> std::io::Error {
    let to_c =
        |s: &[u8]| CString::new(s).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL));
    let path = match to_c(program.as_os_str().as_bytes()) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let args: Result<Vec<CString>, _> = argv.iter().map(|a| to_c(a.as_bytes())).collect();
    let env: Result<Vec<CString>, _> = std::env::vars_os()
        .map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend(v.into_vec());
            to_c(&kv)
        })
        .collect();
    let (args, env) = match (args, env) {
        (Ok(a), Ok(e)) => (a, e),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let mut argp: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argp.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: path, argp and envp are NUL-terminated strings and NULL-terminated arrays that
    // outlive the call; on success the call does not return.
    unsafe {
        if nr == libc::SYS_execveat {
            libc::syscall(
                libc::SYS_execveat,
                libc::AT_FDCWD,
                path.as_ptr(),
                argp.as_ptr(),
                envp.as_ptr(),
                0,
            );
        } else {
            libc::execve(path.as_ptr(), argp.as_ptr(), envp.as_ptr());
        }
    }
    std::io::Error::last_os_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    #[test]
    fn errno_names_numbers_and_zero_are_accepted() {
        let inv = parse(&args(&[
            "--errno",
            "landlock_create_ruleset=ENOSYS",
            "--errno",
            "landlock_restrict_self=0",
            "--errno",
            "mount=13",
            "--",
            "true",
        ]))
        .unwrap();
        let errnos: Vec<u32> = inv.injections.iter().map(|i| i.errno).collect();
        assert_eq!(errnos, vec![libc::ENOSYS as u32, 0, 13]);
        assert_eq!(inv.program, args(&["true"]));
    }

    #[test]
    fn deny_clone_flags_covers_clone_unshare_and_sends_clone3_to_enosys() {
        let inv = parse(&args(&[
            "--deny-clone-flags",
            "0x10000000=EPERM",
            "--",
            "true",
        ]))
        .unwrap();
        let syscalls: Vec<libc::c_long> = inv.injections.iter().map(|i| i.syscall).collect();
        assert_eq!(
            syscalls,
            vec![libc::SYS_clone, libc::SYS_unshare, libc::SYS_clone3]
        );
        assert_eq!(inv.injections[2].errno, libc::ENOSYS as u32);
    }

    #[test]
    fn usage_errors_are_reported() {
        for bad in [
            &["--errno", "nosuchcall=EPERM", "--", "true"][..],
            &["--errno", "mount=EWHAT", "--", "true"],
            &["--errno", "mount", "--", "true"],
            &["--errno-if-arg0", "prctl=38=EPERM", "--", "true"],
            &["--deny-clone-flags", "0=EPERM", "--", "true"],
            &["--errno", "mount=EPERM"],
            &["--errno", "mount=EPERM", "--"],
            &["--bogus"],
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn filters_are_grouped_by_errno() {
        let inv = parse(&args(&[
            "--errno",
            "mount=EPERM",
            "--errno-if-arg0",
            "prctl:38=EPERM",
            "--errno",
            "landlock_restrict_self=0",
            "--",
            "true",
        ]))
        .unwrap();
        assert_eq!(build_filters(&inv.injections).unwrap().len(), 2);
    }

    /// Fork, install the filters built from `opts`, make the call, report -errno or the result.
    fn under(opts: &[&str], call: impl Fn() -> libc::c_long) -> i32 {
        let mut all = opts.to_vec();
        all.extend(["--", "true"]);
        let program =
            shim::seccomp::chain(build_filters(&parse(&args(&all)).unwrap().injections).unwrap());
        // SAFETY: the child only installs the filter, makes raw syscalls and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = match install(&program) {
                Err(_) => 255,
                Ok(()) => {
                    let rc = call();
                    if rc == -1 {
                        std::io::Error::last_os_error()
                            .raw_os_error()
                            .unwrap_or(254)
                    } else {
                        0
                    }
                }
            };
            // SAFETY: leaving the forked child.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child died: {status:#x}");
        libc::WEXITSTATUS(status)
    }

    #[test]
    fn injected_syscalls_fail_with_their_errno_and_others_work() {
        let opts = [
            "--errno",
            "seccomp=EINVAL",
            "--errno",
            "mount=EPERM",
            "--errno",
            "landlock_restrict_self=0",
            "--errno-if-arg0",
            "prctl:4=ESRCH",
            "--deny-clone-flags",
            "0x10000000=EACCES",
        ];
        // SAFETY (all calls below): invalid pointers and fds only; nothing is written.
        let sys = |nr: libc::c_long, a: [u64; 3]| unsafe { libc::syscall(nr, a[0], a[1], a[2]) };
        assert_eq!(
            under(&opts, || sys(libc::SYS_seccomp, [0, 0, 0])),
            libc::EINVAL
        );
        assert_eq!(
            under(&opts, || sys(libc::SYS_mount, [0, 0, 0])),
            libc::EPERM
        );
        // Errno 0: "succeeds" without reaching the kernel (which would say EBADF).
        assert_eq!(
            under(&opts, || sys(
                libc::SYS_landlock_restrict_self,
                [u64::MAX, 0, 0]
            )),
            0
        );
        assert_eq!(
            under(&opts, || sys(libc::SYS_prctl, [4, 1, 0])),
            libc::ESRCH
        );
        assert_eq!(under(&opts, || sys(libc::SYS_prctl, [3, 0, 0])), 0);
        let newuser = libc::CLONE_NEWUSER as u64;
        assert_eq!(
            under(&opts, || sys(libc::SYS_unshare, [newuser, 0, 0])),
            libc::EACCES
        );
        assert_eq!(
            under(&opts, || sys(
                libc::SYS_clone,
                [newuser | libc::CLONE_SIGHAND as u64, 0, 0]
            )),
            libc::EACCES
        );
        assert_eq!(
            under(&opts, || sys(libc::SYS_clone3, [0, 0, 0])),
            libc::ENOSYS
        );
        // Other namespaces and other syscalls reach the kernel.
        assert_eq!(under(&opts, || sys(libc::SYS_unshare, [0, 0, 0])), 0);
        assert_eq!(
            under(&opts, || sys(libc::SYS_setns, [u64::MAX, 0, 0])),
            libc::EBADF
        );
    }
}
