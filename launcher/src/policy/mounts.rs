//! Mounts placed by name as written: `SRC[:DST]` for `--bind`, `--ro-bind` and `--overlay`,
//! `DST` for `--tmpfs`. The source is a host path (`~` and relative paths as for every other
//! flag); the target is a path inside the sandbox, so it must be absolute and have no `..`.
//! Symlinks are resolved later, by the layout planner.

use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use super::document::{Doc, KeyPath};
use super::model::{MountKind, MountRequest};
use super::paths;
use super::runtime::Style;
use super::shape::{Field, Shape};

/// One entry of a policy file's `mounts` list: `{bind: "SRC[:DST]"}` and the like.
pub const ENTRY_SNAKE: Shape = Shape::Fields(&[
    Field::value("bind"),
    Field::value("ro_bind"),
    Field::value("overlay"),
    Field::value("tmpfs"),
]);

/// The same in camelCase (agent settings): `roBind`.
pub const ENTRY_CAMEL: Shape = Shape::Fields(&[
    Field::value("bind"),
    Field::value("roBind"),
    Field::value("overlay"),
    Field::value("tmpfs"),
]);

/// Read a `mounts` list at `at`. Without `base` (OpenShell), sources must be absolute; with
/// it, `~` and relative paths are taken as the command line takes them.
pub fn read(
    doc: &Doc,
    v: &Value,
    at: &KeyPath,
    style: Style,
    base: Option<(&Path, &Path)>,
) -> Result<Vec<MountRequest>> {
    let ro = match style {
        Style::Snake => "ro_bind",
        Style::Camel => "roBind",
    };
    let names = [
        ("bind", MountKind::Bind),
        (ro, MountKind::RoBind),
        ("overlay", MountKind::Overlay),
        ("tmpfs", MountKind::Tmpfs),
    ];
    let mut out = Vec::new();
    for (i, entry) in doc.list(v, at)?.iter().enumerate() {
        let e_at = at.index(i);
        let map = doc.object(entry, &e_at)?;
        let mut said = names
            .iter()
            .filter_map(|(n, k)| map.get(*n).map(|v| (*n, *k, v)));
        let (Some((name, kind, value)), None) = (said.next(), said.next()) else {
            return Err(doc.error(
                &e_at,
                format!("one of {ro}, bind, overlay or tmpfs (exactly one per entry)"),
            ));
        };
        let k_at = e_at.key(name);
        let raw = doc.string(value, &k_at)?;
        let (cwd, home) = match base {
            Some(b) => b,
            None => {
                if !raw.starts_with('/') {
                    return Err(doc.error(
                        &k_at,
                        format!("{raw:?}: the source is not absolute (paths must start with `/`)"),
                    ));
                }
                (Path::new("/"), Path::new("/"))
            }
        };
        out.push(parse(kind, raw, cwd, home, name).map_err(|e| doc.error(&k_at, e))?);
    }
    Ok(out)
}

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

    fn openshell(text: &str) -> anyhow::Result<crate::policy::fragment::Fragment> {
        crate::policy::openshell::parse(
            text,
            Path::new("p.yaml"),
            crate::policy::model::Source::PolicyFile("p.yaml".into()),
        )
    }

    fn settings(text: &str) -> anyhow::Result<crate::policy::fragment::Fragment> {
        crate::policy::agent_settings::parse(
            text,
            Path::new("s.json"),
            crate::policy::model::Source::SettingsFile("s.json".into()),
            Path::new("/work/p"),
            Path::new("/home/u"),
        )
    }

    #[test]
    fn policy_files_place_mounts_in_their_own_spelling() {
        let f = openshell(
            "version: 1\nmounts:\n  - bind: /srv/a:/a\n  - ro_bind: /opt\n  - overlay: /src:/w\n  - tmpfs: /scratch\n",
        )
        .unwrap();
        let kinds: Vec<MountKind> = f.mounts.iter().map(|m| m.kind).collect();
        assert_eq!(
            kinds,
            [
                MountKind::Bind,
                MountKind::RoBind,
                MountKind::Overlay,
                MountKind::Tmpfs
            ]
        );
        assert_eq!(f.mounts[0].target, Some(PathBuf::from("/a")));
        assert!(f.fs_mode.is_none(), "mounts alone keep the host view");
        let f =
            settings(r#"{"sandbox": {"filesystem": {"mounts": [{"roBind": "~/data:/data"}]}}}"#)
                .unwrap();
        assert_eq!(f.mounts[0].kind, MountKind::RoBind);
        assert_eq!(f.mounts[0].source, Some(PathBuf::from("/home/u/data")));
    }

    #[test]
    fn a_mount_entry_names_exactly_one_known_kind_and_openshell_sources_are_absolute() {
        for (text, says) in [
            (
                "version: 1\nmounts:\n  - bind: /a\n    tmpfs: /b\n",
                "exactly one",
            ),
            ("version: 1\nmounts:\n  - {}\n", "exactly one"),
            ("version: 1\nmounts:\n  - bind_mount: /a\n", "bind_mount"),
            ("version: 1\nmounts:\n  - bind: rel:/a\n", "not absolute"),
            ("version: 1\nmounts:\n  - ro_bind: /a:/proc/x\n", "/proc"),
        ] {
            let e = format!("{:#}", openshell(text).unwrap_err());
            assert!(e.contains(says) && e.contains("mounts"), "{text}: {e}");
        }
        let e = format!(
            "{:#}",
            settings(r#"{"sandbox": {"filesystem": {"mounts": [{"ro_bind": "/a"}]}}}"#)
                .unwrap_err()
        );
        assert!(e.contains("ro_bind"), "{e}");
    }
}
