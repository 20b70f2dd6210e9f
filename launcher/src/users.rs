//! Who the sandbox runs as: the caller, or (when started as real root) the policy's
//! `run_as_user`/`run_as_group`, never root.

use std::ffi::{CStr, CString};

use anyhow::{bail, Result};

/// A user's uid and home, from a name or a number.
pub fn lookup_user(name: &str) -> Result<(u32, Option<String>)> {
    if let Ok(uid) = name.parse::<u32>() {
        return Ok((uid, None));
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
