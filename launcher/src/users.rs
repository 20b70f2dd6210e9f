//! Who the sandbox runs as: the caller, or (when started as real root) the policy's
//! `run_as_user`/`run_as_group`, never root.
//!
//! Names are looked up in /etc/passwd and /etc/group first and only then through NSS
//! (getpwnam/getgrnam, for LDAP, sssd and the like): in the statically linked launcher NSS loads
//! its modules with dlopen, which cost up to a third of a millisecond per launch as root.

use std::ffi::{CStr, CString};

use anyhow::{bail, Result};

/// A user's uid and home, from a name or a number.
pub fn lookup_user(name: &str) -> Result<(u32, Option<String>)> {
    if let Ok(uid) = name.parse::<u32>() {
        return Ok((uid, None));
    }
    if let Some(fields) = find_in("/etc/passwd", name) {
        // name:password:uid:gid:gecos:home:shell
        if let Some(uid) = fields.get(2).and_then(|u| u.parse().ok()) {
            return Ok((uid, fields.get(5).map(|h| h.to_string())));
        }
    }
    let c = CString::new(name)?;
    // SAFETY: getpwnam returns a pointer into static storage or NULL; we copy out at once and the
    // launcher is single-threaded here.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        bail!("process.run_as_user: no user named {name:?} on this host");
    }
    // SAFETY: pw is non-null and points to a valid passwd entry.
    let (uid, dir) = unsafe {
        (
            (*pw).pw_uid,
            CStr::from_ptr((*pw).pw_dir).to_string_lossy().into_owned(),
        )
    };
    Ok((uid, Some(dir)))
}

pub fn lookup_group(name: &str) -> Result<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    if let Some(fields) = find_in("/etc/group", name) {
        // name:password:gid:members
        if let Some(gid) = fields.get(2).and_then(|g| g.parse().ok()) {
            return Ok(gid);
        }
    }
    let c = CString::new(name)?;
    // SAFETY: as in lookup_user.
    let gr = unsafe { libc::getgrnam(c.as_ptr()) };
    if gr.is_null() {
        bail!("process.run_as_group: no group named {name:?} on this host");
    }
    // SAFETY: gr is non-null.
    Ok(unsafe { (*gr).gr_gid })
}

/// The default unprivileged group: `nogroup` on Debian, `nobody` elsewhere, else 65534.
pub fn default_group() -> u32 {
    lookup_group("nogroup")
        .or_else(|_| lookup_group("nobody"))
        .unwrap_or(65534)
}

/// The colon-separated fields of `name`'s entry in a passwd-format file.
fn find_in(file: &str, name: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(file).ok()?;
    entry(&text, name)
}

fn entry(text: &str, name: &str) -> Option<Vec<String>> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&name))
        .map(|f| f.into_iter().map(String::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_exact_name() {
        let passwd = "# comment\nnobodyx:x:1:1::/x:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
        let f = entry(passwd, "nobody").unwrap();
        assert_eq!((f[2].as_str(), f[5].as_str()), ("65534", "/nonexistent"));
        assert!(entry(passwd, "nobod").is_none());
        assert!(entry(passwd, "# comment").is_none());
    }

    #[test]
    fn files_agree_with_nss_for_this_hosts_users() {
        let (uid, home) = lookup_user("root").unwrap();
        assert_eq!((uid, home.as_deref()), (0, Some("/root")));
        // SAFETY: getpwnam with a valid name; read at once.
        let pw = unsafe { libc::getpwnam(c"nobody".as_ptr()) };
        if !pw.is_null() {
            // SAFETY: non-null entry.
            assert_eq!(lookup_user("nobody").unwrap().0, unsafe { (*pw).pw_uid });
        }
        assert_eq!(lookup_group("0").unwrap(), 0);
        assert!(lookup_user("no-such-user-here").is_err());
    }
}
