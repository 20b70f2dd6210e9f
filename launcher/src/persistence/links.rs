//! Paths as they are on the host at launch: a protected path that does not exist yet (named by
//! where it would be), and one that is a symlink (its whole chain, so neither the link can be
//! replaced nor what it points at be written another way).

use std::path::{Component, Path, PathBuf};

use super::host_view::{HostView, Kind};
use super::plain_path::{joined, plain, split, split_name};

/// `p` made canonical as far as it exists: the deepest existing ancestor resolved, the rest
/// appended as written (`..` after a missing component taken lexically). What
/// `std::fs::canonicalize` of the longest prefix that has one gives, with each component looked
/// up once per view.
pub fn lenient(view: &mut HostView, p: &Path) -> PathBuf {
    if !p.is_absolute() {
        return lenient_by_prefixes(p);
    }
    if plain(p) {
        return lenient_plain(view, p);
    }
    let mut out = PathBuf::from("/");
    // A component was missing: the rest is taken as written.
    let mut gone = false;
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) if gone => out.push(n),
            Component::Normal(n) => {
                // `out` is canonical and exists: `out/n` is canonical unless it is a symlink.
                let next = joined(&out, n);
                match view.kind(&next) {
                    Kind::Dir | Kind::File | Kind::Other => out = next,
                    Kind::Missing => {
                        gone = true;
                        out = next;
                    }
                    Kind::Symlink => match view.canonical(&next) {
                        Some(c) => out = c,
                        None => {
                            gone = true;
                            out = next;
                        }
                    },
                }
            }
            _ => {}
        }
    }
    out
}

/// [`lenient`] of a plain path: its directory's answer (kept by the view, so that each
/// directory of a plan's few hundred names is made once, not once per name below it) and one
/// step for its last name.
fn lenient_plain(view: &mut HostView, p: &Path) -> PathBuf {
    let Some((dir, name)) = split(p) else {
        return p.to_path_buf();
    };
    let base = if plain(dir) {
        view.lenient_dir(dir, |v| lenient_plain(v, dir))
            .unwrap_or_else(|| dir.to_path_buf())
    } else {
        PathBuf::from("/")
    };
    // `base` is canonical and exists, or the rest is taken as written: it is missing (or no
    // directory: nothing is under it), or a symlink that leads nowhere.
    let missing = matches!(view.kind(&base), Kind::Missing | Kind::Symlink);
    let mut next = base;
    next.push(name);
    if missing {
        return next;
    }
    match view.kind(&next) {
        Kind::Symlink => view.canonical(&next).unwrap_or(next),
        _ => next,
    }
}

/// [`lenient`] for a relative path (from the working directory): each prefix canonicalized.
fn lenient_by_prefixes(p: &Path) -> PathBuf {
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
pub fn named(view: &mut HostView, p: &Path) -> PathBuf {
    let p = lexically(p);
    named_elsewhere(view, &p).unwrap_or(p)
}

/// [`named`] when that is not `p` as written. Most names a plan asks are plain (a root joined
/// with a table's literal) in a directory that is canonical already: nothing to make then.
pub fn named_elsewhere(view: &mut HostView, p: &Path) -> Option<PathBuf> {
    // `p` is plain: a name in `/` or in a plain directory (see `split_name`), which a kept
    // answer for the directory shows without looking at it.
    let plain_dir = |view: &HostView, dir: &Path| {
        view.has_lenient_dir(dir) || dir.as_os_str() == "/" || plain(dir)
    };
    if let Some((dir, name)) = split_name(p).filter(|(dir, _)| plain_dir(view, dir)) {
        return view.lenient_dir(dir, |v| lenient(v, dir)).map(|mut d| {
            d.push(name);
            d
        });
    }
    let lex = lexically(p);
    let there = match (lex.parent(), lex.file_name()) {
        (Some(dir), Some(name)) => match view.lenient_dir(dir, |v| lenient(v, dir)) {
            Some(mut d) => {
                d.push(name);
                d
            }
            None => lex.clone(),
        },
        _ => lex,
    };
    (there.as_path() != p).then_some(there)
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
pub fn chain(view: &mut HostView, p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    let mut here = p.to_path_buf();
    for _ in 0..40 {
        if view.kind(&here) != Kind::Symlink {
            break;
        }
        let Ok(target) = std::fs::read_link(&here) else {
            break;
        };
        let dir = here
            .parent()
            .map(|d| lenient(view, d))
            .unwrap_or_else(|| PathBuf::from("/"));
        let next = lexically(&joined(&dir, target));
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
        assert_eq!(
            lenient(&mut HostView::new(), &p),
            tmp.join("sl-lenient-missing/b")
        );
    }

    #[test]
    fn lenient_names_each_path_as_canonicalize_of_its_longest_existing_prefix_does() {
        let base = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("sl-lenient-same-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("real/sub")).unwrap();
        std::fs::write(base.join("real/file"), "").unwrap();
        std::os::unix::fs::symlink("real", base.join("link")).unwrap();
        std::os::unix::fs::symlink("../real/sub", base.join("real/up")).unwrap();
        std::os::unix::fs::symlink("gone/x", base.join("dangling")).unwrap();
        std::os::unix::fs::symlink("loop", base.join("loop")).unwrap();
        let mut view = HostView::new();
        for rel in [
            "real",
            "real/sub",
            "real/sub/new/deeper",
            "link/sub",
            "link/file",
            "link/file/x",
            "link/file/..",
            "real/up/../file",
            "real/up/x/../y",
            "dangling",
            "dangling/x",
            "missing/../real/sub",
            "loop/x",
            "link/../real",
            "real/sub/../../link/sub/a",
            // Plain paths, made from their directory's kept answer.
            "link/sub/new/deeper",
            "real/up/more",
            "real/file/x/y",
            "dangling/x/y",
        ] {
            let p = base.join(rel);
            assert_eq!(lenient(&mut view, &p), lenient_by_prefixes(&p), "{rel}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_missing_name_is_named_elsewhere_only_below_a_symlinked_directory() {
        let base = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("sl-elsewhere-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("dotfiles/.config")).unwrap();
        std::os::unix::fs::symlink("dotfiles/.config", base.join(".config")).unwrap();
        let view = &mut HostView::new();
        assert_eq!(named_elsewhere(view, &base.join(".envrc")), None);
        assert_eq!(named_elsewhere(view, &base.join("gone/x")), None);
        assert_eq!(
            named_elsewhere(view, &base.join(".config/git/config")),
            Some(base.join("dotfiles/.config/git/config"))
        );
        let spelled = PathBuf::from(format!("{}/./.envrc", base.display()));
        assert_eq!(named_elsewhere(view, &spelled), None);
        assert_eq!(named(view, &spelled), base.join(".envrc"));
        std::fs::remove_dir_all(&base).unwrap();
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
        let view = &mut HostView::new();
        assert_eq!(
            chain(view, &base.join(".bashrc")),
            vec![
                base.join(".bashrc"),
                base.join("mid"),
                base.join("dotfiles/bashrc")
            ]
        );
        assert_eq!(
            chain(view, &base.join("dangling")),
            vec![base.join("dangling"), base.join("nowhere/x")]
        );
        assert_eq!(
            chain(view, &base.join("dotfiles")),
            vec![base.join("dotfiles")]
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
