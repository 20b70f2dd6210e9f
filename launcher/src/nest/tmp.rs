//! A nested sandbox's private tmpfs trees (`/tmp`, `/dev/shm`) cannot be made: it gets the
//! outer sandbox's instead. Those are not the host's, so writing there narrows nothing away —
//! unless the outer sandbox has host trees mounted below them (its working directory under
//! `/tmp`, say). A Landlock rule on `/tmp` would then reach those trees, and Landlock cannot take
//! a subtree back out of a rule. So the nested sandbox gets a fresh directory of its own inside
//! the outer tree instead (`TMPDIR` for `/tmp`), and the outer tree itself is read-only to it.

use std::path::{Path, PathBuf};

use shim::spec::{Access, LandlockRule, MountOp};

use crate::mountinfo::unescape;

/// A private tree replaced by a directory of its own.
#[derive(Debug, Clone)]
pub struct Replaced {
    pub tree: PathBuf,
    pub dir: PathBuf,
}

/// Mount points of this process's mount namespace (octal escapes undone).
fn mount_points() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .collect()
}

/// The mount points strictly below `tree`.
fn mounted_below(tree: &Path, points: &[PathBuf]) -> Vec<PathBuf> {
    points
        .iter()
        .filter(|p| p.starts_with(tree) && p.as_path() != tree)
        .cloned()
        .collect()
}

/// For each private tmpfs of the plan that the rules make writable and that has mounts below
/// it here: a new directory in it, which takes its place in `rules` (and in `TMPDIR` for
/// `/tmp`). Said in `warnings`.
pub fn replace(
    ops: &[MountOp],
    rules: &mut [LandlockRule],
    env: &mut Vec<(String, String)>,
    warnings: &mut Vec<String>,
) -> std::io::Result<Vec<Replaced>> {
    let points = mount_points();
    let mut replaced = Vec::new();
    for op in ops {
        let MountOp::Tmpfs { target, .. } = op else {
            continue;
        };
        let Some(rule) = rules
            .iter_mut()
            .find(|r| r.path == *target && r.access == Access::Write)
        else {
            continue;
        };
        let below = mounted_below(target, &points);
        if below.is_empty() {
            continue;
        }
        let dir = make_dir(target)?;
        rule.path = dir.clone();
        if target == Path::new("/tmp") {
            env.retain(|(k, _)| k != "TMPDIR");
            env.push(("TMPDIR".into(), dir.display().to_string()));
        }
        warnings.push(format!(
            "{}: the outer sandbox has {} mounted below it, so this sandbox writes only in {}{} \
             ({} itself is read-only here)",
            target.display(),
            below
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            dir.display(),
            if target == Path::new("/tmp") {
                " (TMPDIR)"
            } else {
                ""
            },
            target.display()
        ));
        replaced.push(Replaced {
            tree: target.clone(),
            dir,
        });
    }
    Ok(replaced)
}

/// A new directory of this launcher's in `tree`, private to its user.
fn make_dir(tree: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let pid = std::process::id();
    let mut last = None;
    for n in 0..100 {
        let dir = tree.join(format!(".sandbox-launch-nested-{pid}-{n}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free name")))
}

/// Remove the directories made (when the program has ended).
pub fn remove(replaced: &[Replaced]) {
    for r in replaced {
        let _ = std::fs::remove_dir_all(&r.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mounts_strictly_below_count() {
        let points: Vec<PathBuf> = ["/", "/tmp", "/tmp/work", "/tmpx", "/dev/shm"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(
            mounted_below(Path::new("/tmp"), &points),
            vec![PathBuf::from("/tmp/work")]
        );
        assert!(mounted_below(Path::new("/dev/shm"), &points).is_empty());
    }
}
