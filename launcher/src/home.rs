//! Which HOME the program has inside, and what makes it usable there.
//!
//! Started by an unprivileged caller, HOME is the caller's. Started as root (a container's
//! entrypoint), the sandbox runs as `run_as_user` (`nobody`), and HOME is:
//! * the caller's when a writable tree lies in it or it lies in one — the working directory,
//!   an `--allow-write`, or an agent's state directory (`~/.factory`, `~/.claude`, `~/.codex`
//!   are writable by default): the agents then find their configuration and keep their state
//!   where they would without the sandbox. When the sandbox's user cannot go through it (root's
//!   `/root` is 0700), the home is attached as a read-only view idmapped to that user, so what
//!   root owns there reads as the sandbox user's; the writable trees in it are idmapped on top
//!   of it (files keep root's ownership on the host), and the deny-read masks on top of those.
//! * else the sandbox user's own (from the password database).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::namespaces::Identity;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeInside {
    /// HOME inside, as it will be set.
    pub path: String,
    /// Whose it is and why, in words.
    pub whose: String,
    /// The caller's home, to be attached read-only and idmapped to the sandbox's user.
    pub view: Option<PathBuf>,
}

/// Decide HOME inside for a launch as root. `caller` is the caller's HOME, `writable` every
/// writable tree (canonical), `own` the sandbox user's home from the password database.
/// `host_root`: the sandbox sees the host's tree (a view is made only there; in allow-list
/// mode the path to each granted tree is made for the sandbox).
pub fn as_root(
    caller: Option<&str>,
    writable: &[PathBuf],
    own: Option<&str>,
    id: Identity,
    host_root: bool,
) -> HomeInside {
    let own = || own.unwrap_or("/").to_string();
    let Some((given, home)) = caller.and_then(|c| Some((c, std::fs::canonicalize(c).ok()?))) else {
        return HomeInside {
            path: own(),
            whose: "the sandbox user's: the caller has no HOME directory".into(),
            view: None,
        };
    };
    if !home.is_dir() {
        return HomeInside {
            path: own(),
            whose: format!("the sandbox user's: {} is no directory", home.display()),
            view: None,
        };
    }
    if writable.iter().any(|w| home.starts_with(w)) {
        return HomeInside {
            path: given.to_string(),
            whose: "the caller's, writable in the sandbox".into(),
            view: None,
        };
    }
    let inside: Vec<&PathBuf> = writable.iter().filter(|w| w.starts_with(&home)).collect();
    if inside.is_empty() {
        return HomeInside {
            path: own(),
            whose: format!(
                "the sandbox user's: no writable tree lies in the caller's ({})",
                home.display()
            ),
            view: None,
        };
    }
    let trees = inside
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let view = (host_root && !passable(&home, id)).then(|| home.clone());
    let whose = match &view {
        Some(_) => format!(
            "the caller's, which holds writable trees ({trees}); read-only, and mapped to the \
             sandbox's user (it cannot go through it otherwise)"
        ),
        None => format!("the caller's, which holds writable trees ({trees}); read-only"),
    };
    HomeInside {
        path: given.to_string(),
        whose,
        view,
    }
}

/// Whether `id` (with no supplementary groups) may search the directory `dir`.
fn passable(dir: &Path, id: Identity) -> bool {
    let Ok(meta) = std::fs::metadata(dir) else {
        return false;
    };
    let bit = if meta.uid() == id.uid {
        0o100
    } else if meta.gid() == id.gid {
        0o010
    } else {
        0o001
    };
    meta.mode() & bit != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const NOBODY: Identity = Identity {
        uid: 65534,
        gid: 65534,
        switch_from_root: true,
    };

    fn dir(mode: u32) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let d = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("sl-home-{}-{n}", std::process::id()));
        std::fs::create_dir_all(d.join(".factory")).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        d
    }

    #[test]
    fn a_home_that_holds_a_writable_tree_is_the_callers() {
        let h = dir(0o700);
        let hs = h.to_str().unwrap();
        let got = as_root(
            Some(hs),
            &[h.join(".factory")],
            Some("/nonexistent"),
            NOBODY,
            true,
        );
        assert_eq!(got.path, hs);
        // Whoever runs the unit tests owns it; only uid 65534 itself could pass a 0700 home.
        assert_eq!(got.view.is_some(), nix::unistd::geteuid().as_raw() != 65534);
        std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o755)).unwrap();
        let got = as_root(
            Some(hs),
            &[h.join(".factory")],
            Some("/nonexistent"),
            NOBODY,
            true,
        );
        assert_eq!(got.view, None, "a passable home needs no view");
        std::fs::remove_dir_all(&h).unwrap();
    }

    #[test]
    fn a_home_with_nothing_writable_in_it_is_the_sandbox_users() {
        let h = dir(0o700);
        let hs = h.to_str().unwrap();
        let got = as_root(
            Some(hs),
            &[PathBuf::from("/elsewhere")],
            Some("/nonexistent"),
            NOBODY,
            true,
        );
        assert_eq!(got.path, "/nonexistent");
        assert_eq!(got.view, None);
        assert!(got.whose.contains("no writable tree"), "{}", got.whose);
        // Inside a writable tree: the caller's, no view.
        let got = as_root(
            Some(hs),
            std::slice::from_ref(&h),
            Some("/nonexistent"),
            NOBODY,
            true,
        );
        assert_eq!((got.path.as_str(), got.view), (hs, None));
        let got = as_root(
            None,
            std::slice::from_ref(&h),
            Some("/nonexistent"),
            NOBODY,
            true,
        );
        assert_eq!(got.path, "/nonexistent");
        std::fs::remove_dir_all(&h).unwrap();
    }
}
