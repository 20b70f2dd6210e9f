//! Paths as they are on the host at launch: a protected path that does not exist yet (named by
//! where it would be), and one that is a symlink (its whole chain, so neither the link can be
//! replaced nor what it points at be written another way).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// `p` made canonical as far as it exists: the deepest existing ancestor resolved, the rest
/// appended as written (`..` after a missing component taken lexically).
pub fn lenient(p: &Path) -> PathBuf {
    if let Ok(c) = std::fs::canonicalize(p) {
        return c;
    }
    let comps: Vec<Component> = p.components().collect();
    for split in (1..comps.len()).rev() {
        let base: PathBuf = comps[..split].iter().collect();
        if let Ok(mut out) = std::fs::canonicalize(&base) {
            for c in &comps[split..] {
                match c {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::Normal(n) => out.push(n),
                    _ => {}
                }
            }
            return out;
        }
    }
    p.to_path_buf()
}

/// `p` with its directory made canonical (as far as it exists) but its last component kept
/// as it is: a symlink there stays the link, for [`chain`] to follow.
pub fn named(p: &Path) -> PathBuf {
    named_in(p, &mut HashMap::new())
}

/// [`named`], with the directories resolved so far in `resolved` (one launch's plan asks for
/// hundreds of names in a handful of directories; each costs a `realpath` per ancestor).
pub fn named_in(p: &Path, resolved: &mut HashMap<PathBuf, PathBuf>) -> PathBuf {
    let p = lexically(p);
    match (p.parent(), p.file_name()) {
        (Some(dir), Some(name)) => resolved
            .entry(dir.to_path_buf())
            .or_insert_with(|| lenient(dir))
            .join(name),
        _ => p,
    }
}

/// `.` and `..` taken away as written, no symlink followed.
fn lexically(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// Every path a symlink at `p` leads through: `p` itself, each link's target in turn, and the
/// final path. Just `[p]` when `p` is no symlink. At most 40 hops.
pub fn chain(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    let mut here = p.to_path_buf();
    for _ in 0..40 {
        let Ok(target) = std::fs::read_link(&here) else {
            break;
        };
        let dir = here
            .parent()
            .map(lenient)
            .unwrap_or_else(|| PathBuf::from("/"));
        let next = lexically(&dir.join(target));
        if out.contains(&next) {
            break;
        }
        out.push(next.clone());
        here = next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_is_named_where_it_would_be() {
        let tmp = std::env::temp_dir().canonicalize().unwrap();
        let p = tmp.join("sl-lenient-missing/a/../b");
        assert_eq!(lenient(&p), tmp.join("sl-lenient-missing/b"));
    }

    #[test]
    fn a_symlink_chain_is_followed_to_its_end() {
        let base = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("sl-chain-{}", std::process::id()));
        std::fs::create_dir_all(base.join("dotfiles")).unwrap();
        std::fs::write(base.join("dotfiles/bashrc"), "").unwrap();
        std::os::unix::fs::symlink("dotfiles/bashrc", base.join("mid")).unwrap();
        std::os::unix::fs::symlink("mid", base.join(".bashrc")).unwrap();
        std::os::unix::fs::symlink("nowhere/x", base.join("dangling")).unwrap();
        assert_eq!(
            chain(&base.join(".bashrc")),
            vec![
                base.join(".bashrc"),
                base.join("mid"),
                base.join("dotfiles/bashrc")
            ]
        );
        assert_eq!(
            chain(&base.join("dangling")),
            vec![base.join("dangling"), base.join("nowhere/x")]
        );
        assert_eq!(chain(&base.join("dotfiles")), vec![base.join("dotfiles")]);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
