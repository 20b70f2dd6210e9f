//! Mounts placed by name as written: `SRC[:DST]` for `--bind`, `--ro-bind` and `--overlay`,
//! `DST` for `--tmpfs`. The source is a host path (`~` and relative paths as for every other
//! flag); the target is a path inside the sandbox, so it must be absolute and have no `..`.
//! Symlinks are resolved later, by the layout planner.

use std::path::Path;

use super::model::{MountKind, MountRequest};
use super::paths;

/// Parse one mount of `kind` as written in a flag or a policy file (`what` names it in errors).
pub fn parse(
    kind: MountKind,
    raw: &str,
    cwd: &Path,
    home: &Path,
    what: &str,
) -> Result<MountRequest, String> {
    let target = |t: &str| {
        paths::openshell(t).map_err(|e| {
            format!("{what} {raw}: the target {e}; it is a path inside the sandbox, e.g. /data")
        })
    };
    if kind == MountKind::Tmpfs {
        let t = target(raw)?;
        reserved(&t).map_err(|e| format!("{what} {raw}: {e}"))?;
        return Ok(MountRequest {
            kind,
            source: None,
            target: Some(t),
        });
    }
    let (src, dst) = match raw.split_once(':') {
        Some((s, d)) => (s, Some(d)),
        None => (raw, None),
    };
    let source =
        paths::relaxed(src, cwd, home).map_err(|e| format!("{what} {raw}: the source {e}"))?;
    let target = dst.map(target).transpose()?;
    if let Some(t) = &target {
        reserved(t).map_err(|e| format!("{what} {raw}: {e}"))?;
    }
    Ok(MountRequest {
        kind,
        source: Some(source),
        target,
    })
}

/// Targets the sandbox itself provides and that a mount must not replace.
pub fn reserved(target: &Path) -> Result<(), String> {
    if target == Path::new("/") {
        return Err(
            "the target is the root; for a root with only what you mount, use --empty-root".into(),
        );
    }
    for own in ["/proc", "/dev"] {
        if target.starts_with(own) {
            return Err(format!(
                "the target is in {own}, which the sandbox provides itself (a fresh {own} of its \
                 own); choose another target"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn p(kind: MountKind, raw: &str) -> Result<MountRequest, String> {
        parse(
            kind,
            raw,
            Path::new("/work/p"),
            Path::new("/home/u"),
            kind.flag(),
        )
    }

    #[test]
    fn a_source_alone_is_mounted_where_it_is_and_a_target_may_differ() {
        let m = p(MountKind::Bind, "data").unwrap();
        assert_eq!(m.source, Some(PathBuf::from("/work/p/data")));
        assert_eq!(m.target, None);
        let m = p(MountKind::RoBind, "~/cache:/cache").unwrap();
        assert_eq!(m.source, Some(PathBuf::from("/home/u/cache")));
        assert_eq!(m.target, Some(PathBuf::from("/cache")));
        let m = p(MountKind::Tmpfs, "/scratch/").unwrap();
        assert_eq!(
            (m.source, m.target),
            (None, Some(PathBuf::from("/scratch")))
        );
    }

    #[test]
    fn a_target_must_be_absolute_without_dotdot_and_not_the_sandboxs_own() {
        for (raw, says) in [
            ("/a:rel", "not absolute"),
            ("/a:/x/../etc", "`..`"),
            ("/a:/", "--empty-root"),
            ("/a:/proc/self", "/proc"),
            ("/a:/dev", "/dev"),
        ] {
            let e = p(MountKind::Bind, raw).unwrap_err();
            assert!(e.contains(says) && e.contains("--bind"), "{raw}: {e}");
        }
        assert!(p(MountKind::Tmpfs, "/dev/shm")
            .unwrap_err()
            .contains("/dev"));
    }
}
