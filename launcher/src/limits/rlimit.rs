//! Resource limits of the program (`--rlimit NAME=SOFT[:HARD]`, `limits.rlimits` in the policy
//! files): the names `prlimit(1)` uses, values as counts or sizes, `unlimited` for none.
//!
//! They are set in the program's process just before its exec, so init (the shim) is not bound
//! by them. Lowering is always allowed; raising a hard limit above the launcher's own needs
//! root, which the launcher checks before anything starts (a limit asked for is never quietly
//! not applied).

use super::quantity;

/// `RLIM_INFINITY`.
pub const UNLIMITED: u64 = u64::MAX;

/// One resource: its name, the kernel's number, and whether values are sizes in bytes.
struct Resource {
    name: &'static str,
    number: libc::__rlimit_resource_t,
    bytes: bool,
    what: &'static str,
}

const RESOURCES: &[Resource] = &[
    Resource {
        name: "as",
        number: libc::RLIMIT_AS,
        bytes: true,
        what: "address space",
    },
    Resource {
        name: "core",
        number: libc::RLIMIT_CORE,
        bytes: true,
        what: "core file size",
    },
    Resource {
        name: "cpu",
        number: libc::RLIMIT_CPU,
        bytes: false,
        what: "CPU seconds",
    },
    Resource {
        name: "data",
        number: libc::RLIMIT_DATA,
        bytes: true,
        what: "data segment",
    },
    Resource {
        name: "fsize",
        number: libc::RLIMIT_FSIZE,
        bytes: true,
        what: "file size",
    },
    Resource {
        name: "locks",
        number: libc::RLIMIT_LOCKS,
        bytes: false,
        what: "file locks",
    },
    Resource {
        name: "memlock",
        number: libc::RLIMIT_MEMLOCK,
        bytes: true,
        what: "locked memory",
    },
    Resource {
        name: "msgqueue",
        number: libc::RLIMIT_MSGQUEUE,
        bytes: true,
        what: "POSIX message queues",
    },
    Resource {
        name: "nice",
        number: libc::RLIMIT_NICE,
        bytes: false,
        what: "nice ceiling",
    },
    Resource {
        name: "nofile",
        number: libc::RLIMIT_NOFILE,
        bytes: false,
        what: "open files",
    },
    Resource {
        name: "nproc",
        number: libc::RLIMIT_NPROC,
        bytes: false,
        what: "processes of the user",
    },
    Resource {
        name: "rss",
        number: libc::RLIMIT_RSS,
        bytes: true,
        what: "resident set (ignored by Linux)",
    },
    Resource {
        name: "rtprio",
        number: libc::RLIMIT_RTPRIO,
        bytes: false,
        what: "real-time priority",
    },
    Resource {
        name: "rttime",
        number: libc::RLIMIT_RTTIME,
        bytes: false,
        what: "real-time CPU microseconds",
    },
    Resource {
        name: "sigpending",
        number: libc::RLIMIT_SIGPENDING,
        bytes: false,
        what: "queued signals",
    },
    Resource {
        name: "stack",
        number: libc::RLIMIT_STACK,
        bytes: true,
        what: "stack size",
    },
];

/// Soft and hard limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Value {
    pub soft: u64,
    pub hard: u64,
}

fn resource(name: &str) -> Result<&'static Resource, String> {
    RESOURCES
        .iter()
        .find(|r| r.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            format!(
                "unknown resource {name:?} (known: {})",
                RESOURCES
                    .iter()
                    .map(|r| r.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// The kernel's number of the resource `name` (already validated).
pub fn number(name: &str) -> Option<libc::__rlimit_resource_t> {
    resource(name).ok().map(|r| r.number)
}

/// `NAME=SOFT[:HARD]` as `--rlimit` takes it; without HARD, the hard limit is SOFT too.
pub fn parse_flag(text: &str) -> Result<(String, Value), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected NAME=SOFT[:HARD], e.g. nofile=1024:4096"))?;
    let r = resource(name)?;
    Ok((r.name.to_string(), parse_value(r.name, value)?))
}

/// `SOFT[:HARD]` for the resource `name` (a name from the table).
pub fn parse_value(name: &str, text: &str) -> Result<Value, String> {
    let r = resource(name)?;
    let one = |t: &str| -> Result<u64, String> {
        let t = t.trim();
        if matches!(t, "unlimited" | "infinity") {
            return Ok(UNLIMITED);
        }
        let n = if r.bytes {
            quantity::size(t)
        } else {
            t.parse::<u64>()
                .map_err(|_| format!("{t:?} is not a number (or `unlimited`)"))
        };
        n.map_err(|e| format!("{}: {e}", r.name))
    };
    let (soft, hard) = match text.split_once(':') {
        Some((s, h)) => (one(s)?, one(h)?),
        None => {
            let v = one(text)?;
            (v, v)
        }
    };
    if soft > hard {
        return Err(format!(
            "{}: the soft limit {} is above the hard limit {}",
            r.name,
            show(soft),
            show(hard)
        ));
    }
    Ok(Value { soft, hard })
}

fn show(v: u64) -> String {
    if v == UNLIMITED {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

/// `nofile=1024:4096 (open files)`.
pub fn describe(name: &str, v: Value) -> String {
    let what = resource(name).map(|r| r.what).unwrap_or("");
    if v.soft == v.hard {
        format!("{name}={} ({what})", show(v.soft))
    } else {
        format!("{name}={}:{} ({what})", show(v.soft), show(v.hard))
    }
}

/// The launcher's own hard limit of `name`.
fn own_hard(number: libc::__rlimit_resource_t) -> std::io::Result<u64> {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid struct.
    if unsafe { libc::getrlimit(number, &mut cur) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cur.rlim_max)
}

/// Make sure each hard limit can be set inside: the sandbox's processes cannot raise a hard
/// limit (that needs CAP_SYS_RESOURCE in the host's user namespace), so one above the launcher's
/// own is raised here — only the hard limit, so the launcher itself behaves as before — when
/// the launcher runs as root, and refused otherwise.
pub fn prepare(wanted: &[(String, Value)]) -> Result<(), String> {
    for (name, v) in wanted {
        let r = resource(name)?;
        let hard = own_hard(r.number).map_err(|e| format!("getrlimit({name}): {e}"))?;
        if v.hard <= hard {
            continue;
        }
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(format!(
                "--rlimit {name}: the hard limit {} is above this user's own ({}); only root can raise it",
                show(v.hard),
                show(hard)
            ));
        }
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit with a valid struct.
        let ok = unsafe {
            libc::getrlimit(r.number, &mut cur) == 0 && {
                cur.rlim_max = v.hard;
                libc::setrlimit(r.number, &cur) == 0
            }
        };
        if !ok {
            return Err(format!(
                "--rlimit {name}: cannot raise the hard limit to {}: {}",
                show(v.hard),
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_soft_and_hard() {
        assert_eq!(
            parse_flag("nofile=1024:4096"),
            Ok((
                "nofile".into(),
                Value {
                    soft: 1024,
                    hard: 4096
                }
            ))
        );
        assert_eq!(
            parse_flag("AS=1G"),
            Ok((
                "as".into(),
                Value {
                    soft: 1 << 30,
                    hard: 1 << 30
                }
            ))
        );
        assert_eq!(
            parse_flag("core=unlimited").map(|(_, v)| v.hard),
            Ok(UNLIMITED)
        );
    }

    #[test]
    fn bad_flags_say_what_is_allowed() {
        assert!(parse_flag("nofile").unwrap_err().contains("NAME=SOFT"));
        assert!(parse_flag("files=3")
            .unwrap_err()
            .contains("known: as, core"));
        assert!(parse_flag("nofile=10:5")
            .unwrap_err()
            .contains("above the hard"));
        assert!(parse_flag("nproc=1G").unwrap_err().contains("not a number"));
    }

    #[test]
    fn a_hard_limit_within_the_launchers_own_needs_nothing() {
        let own = own_hard(libc::RLIMIT_NOFILE).unwrap();
        let v = Value {
            soft: own.min(64),
            hard: own,
        };
        assert_eq!(prepare(&[("nofile".into(), v)]), Ok(()));
    }
}
