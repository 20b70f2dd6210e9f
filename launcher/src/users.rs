//! Who the sandbox runs as: the caller, or (when started as real root) the policy's
//! `run_as_user`/`run_as_group`, never root.
//!
//! Names are looked up in /etc/passwd and /etc/group. A dynamically linked launcher then asks
//! NSS (getpwnam/getgrnam: LDAP, sssd and the like); the statically linked one never does: NSS
//! loads its modules with dlopen, which in a static binary loads a second C library and can crash
//! it (a segfault in libnss_systemd for an unknown name) and costs up to a third of a millisecond
//! per launch. Numeric ids need no entry at all (images without /etc/passwd).

use anyhow::{bail, Result};

/// A user's uid and home, from a name or a number.
pub fn lookup_user(name: &str) -> Result<(u32, Option<String>)> {
    if let Ok(uid) = name.parse::<u32>() {
        // name:password:uid:gid:gecos:home:shell
        let home = read("/etc/passwd")
            .and_then(|t| entry_by(&t, 2, name))
            .and_then(|f| f.get(5).cloned());
        return Ok((uid, home));
    }
    if let Some(fields) = read("/etc/passwd").and_then(|t| entry_by(&t, 0, name)) {
        if let Some(uid) = fields.get(2).and_then(|u| u.parse().ok()) {
            return Ok((uid, fields.get(5).cloned()));
        }
    }
    if let Some(found) = nss::user(name) {
        return Ok(found);
    }
    bail!(
        "process.run_as_user: no user named {name:?} in /etc/passwd{}; create it, or give a \
         numeric uid (run_as_user: \"1000\")",
        nss::SUFFIX
    )
}

pub fn lookup_group(name: &str) -> Result<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    // name:password:gid:members
    if let Some(fields) = read("/etc/group").and_then(|t| entry_by(&t, 0, name)) {
        if let Some(gid) = fields.get(2).and_then(|g| g.parse().ok()) {
            return Ok(gid);
        }
    }
    if let Some(gid) = nss::group(name) {
        return Ok(gid);
    }
    bail!(
        "process.run_as_group: no group named {name:?} in /etc/group{}; create it, or give a \
         numeric gid (run_as_group: \"1000\")",
        nss::SUFFIX
    )
}

/// The home and the login shell of `uid`, as a login reads them: /etc/passwd, then (in a
/// dynamically linked launcher) NSS.
pub fn home_and_shell(uid: u32) -> Option<(String, String)> {
    // name:password:uid:gid:gecos:home:shell
    read("/etc/passwd")
        .and_then(|t| entry_by(&t, 2, &uid.to_string()))
        .and_then(|f| Some((f.get(5)?.clone(), f.get(6)?.clone())))
        .or_else(|| nss::home_and_shell(uid))
}

/// The uid that unprivileged defaults to: `nobody`, else 65534 (an image without /etc/passwd).
pub fn default_user() -> (u32, Option<String>) {
    lookup_user("nobody").unwrap_or((65534, None))
}

/// The default unprivileged group: `nogroup` on Debian, `nobody` elsewhere, else 65534.
pub fn default_group() -> u32 {
    lookup_group("nogroup")
        .or_else(|_| lookup_group("nobody"))
        .unwrap_or(65534)
}

/// The home directories of the users who can log in (their shell is not `nologin`, `false` or
/// the like; an empty one is `/bin/sh`), from /etc/passwd: their shells run the start-up files
/// there.
pub fn login_homes() -> Vec<std::path::PathBuf> {
    const NO_LOGIN: [&str; 5] = ["nologin", "false", "sync", "halt", "shutdown"];
    let Some(text) = read("/etc/passwd") else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| {
            // An empty shell is /bin/sh to login, su and sshd.
            let shell = f.get(6).map_or("", |s| s.rsplit('/').next().unwrap_or(""));
            !NO_LOGIN.contains(&shell)
        })
        .filter_map(|f| f.get(5).map(std::path::PathBuf::from))
        .filter(|h| h.is_absolute() && h.as_os_str() != "/")
        .collect()
}

fn read(file: &str) -> Option<String> {
    std::fs::read_to_string(file).ok()
}

/// The colon-separated fields of the first entry whose field `key` equals `value`.
fn entry_by(text: &str, key: usize, value: &str) -> Option<Vec<String>> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.get(key) == Some(&value))
        .map(|f| f.into_iter().map(String::from).collect())
}

/// NSS, in a dynamically linked launcher only.
#[cfg(not(target_feature = "crt-static"))]
mod nss {
    use std::ffi::{CStr, CString};

    pub const SUFFIX: &str = " or through NSS";

    pub fn user(name: &str) -> Option<(u32, Option<String>)> {
        let c = CString::new(name).ok()?;
        // SAFETY: getpwnam returns a pointer into static storage or NULL; we copy out at once
        // and the launcher is single-threaded here.
        let pw = unsafe { libc::getpwnam(c.as_ptr()) };
        if pw.is_null() {
            return None;
        }
        // SAFETY: pw is non-null and points to a valid passwd entry.
        let (uid, dir) = unsafe {
            (
                (*pw).pw_uid,
                CStr::from_ptr((*pw).pw_dir).to_string_lossy().into_owned(),
            )
        };
        Some((uid, Some(dir)))
    }

    pub fn home_and_shell(uid: u32) -> Option<(String, String)> {
        // SAFETY: as in `user`.
        let pw = unsafe { libc::getpwuid(uid) };
        if pw.is_null() {
            return None;
        }
        // SAFETY: pw is non-null and points to a valid passwd entry.
        let (dir, shell) =
            unsafe { (CStr::from_ptr((*pw).pw_dir), CStr::from_ptr((*pw).pw_shell)) };
        Some((
            dir.to_string_lossy().into_owned(),
            shell.to_string_lossy().into_owned(),
        ))
    }

    pub fn group(name: &str) -> Option<u32> {
        let c = CString::new(name).ok()?;
        // SAFETY: as in `user`.
        let gr = unsafe { libc::getgrnam(c.as_ptr()) };
        // SAFETY: gr is checked for NULL first.
        (!gr.is_null()).then(|| unsafe { (*gr).gr_gid })
    }
}

/// The static launcher reads the files only (see the module's comment).
#[cfg(target_feature = "crt-static")]
mod nss {
    pub const SUFFIX: &str = " (this statically linked build does not ask NSS)";

    pub fn user(_name: &str) -> Option<(u32, Option<String>)> {
        None
    }

    pub fn home_and_shell(_uid: u32) -> Option<(String, String)> {
        None
    }

    pub fn group(_name: &str) -> Option<u32> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_exact_name() {
        let passwd = "# comment\nnobodyx:x:1:1::/x:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
        let f = entry_by(passwd, 0, "nobody").unwrap();
        assert_eq!((f[2].as_str(), f[5].as_str()), ("65534", "/nonexistent"));
        assert!(entry_by(passwd, 0, "nobod").is_none());
        assert!(entry_by(passwd, 0, "# comment").is_none());
        assert_eq!(entry_by(passwd, 2, "1").unwrap()[0], "nobodyx");
    }

    #[test]
    fn files_agree_with_nss_for_this_hosts_users() {
        let (uid, home) = lookup_user("root").unwrap();
        assert_eq!((uid, home.as_deref()), (0, Some("/root")));
        // NSS itself only where the build may load it (a static test binary would not).
        #[cfg(not(target_feature = "crt-static"))]
        {
            // SAFETY: getpwnam with a valid name; read at once.
            let pw = unsafe { libc::getpwnam(c"nobody".as_ptr()) };
            if !pw.is_null() {
                // SAFETY: non-null entry.
                assert_eq!(lookup_user("nobody").unwrap().0, unsafe { (*pw).pw_uid });
            }
        }
        assert_eq!(lookup_group("0").unwrap(), 0);
        let (home, shell) = home_and_shell(0).unwrap();
        assert_eq!(home, "/root");
        assert!(shell.starts_with('/'), "{shell}");
    }

    #[test]
    fn a_numeric_uid_needs_no_entry_but_finds_its_home() {
        assert_eq!(lookup_user("0").unwrap(), (0, Some("/root".into())));
        assert_eq!(lookup_user("4000000000").unwrap(), (4_000_000_000, None));
    }

    #[test]
    fn an_unknown_name_is_an_error_that_suggests_a_numeric_id() {
        let e = lookup_user("no-such-user-here").unwrap_err().to_string();
        assert!(
            e.contains("no-such-user-here") && e.contains("numeric uid"),
            "{e}"
        );
        let e = lookup_group("no-such-group-here").unwrap_err().to_string();
        assert!(e.contains("numeric gid"), "{e}");
    }
}
