//! What may be created where: the protected paths that did not exist at launch.

use std::path::{Path, PathBuf};

/// What a syscall would create at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Creates {
    Directory,
    /// A file, symlink, node or hard link.
    NonDirectory,
    /// Whatever is renamed there.
    Renamed,
}

/// An operation, as the rules see it: where it puts content.
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    /// A new entry at `path`: a directory, or anything else (file, symlink, node, socket, link).
    Create { path: &'a Path, dir: bool },
    /// Whatever is renamed to `path`.
    RenameTo { path: &'a Path },
    /// An existing object written (opened for writing, truncated) or given a new name (the
    /// source of a hard link).
    Write { path: &'a Path },
}

/// May `full` be created as `what`? `guards` are the protected paths that did not exist.
/// Refused: a guarded path itself; and at an ancestor of a guarded path anything but a real
/// directory (a symlink or a `.git` file there would redirect the guarded path elsewhere).
pub fn allowed(guards: &[PathBuf], full: &Path, what: Creates) -> bool {
    for g in guards {
        if g == full {
            return false;
        }
        if g.starts_with(full) && what != Creates::Directory {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn a_guarded_path_cannot_be_created_in_any_way() {
        let guards = g(&["/w/.envrc", "/w/.git/hooks"]);
        for what in [Creates::Directory, Creates::NonDirectory, Creates::Renamed] {
            assert!(!allowed(&guards, Path::new("/w/.envrc"), what));
            assert!(!allowed(&guards, Path::new("/w/.git/hooks"), what));
        }
    }

    #[test]
    fn above_a_guarded_path_only_a_real_directory_may_appear() {
        let guards = g(&["/w/.git/hooks"]);
        assert!(allowed(&guards, Path::new("/w/.git"), Creates::Directory));
        assert!(!allowed(
            &guards,
            Path::new("/w/.git"),
            Creates::NonDirectory
        ));
        assert!(!allowed(&guards, Path::new("/w/.git"), Creates::Renamed));
    }

    #[test]
    fn everything_else_is_allowed() {
        let guards = g(&["/w/.envrc"]);
        for p in ["/w/.envrc2", "/w/x/.envrc", "/w/src", "/elsewhere/.envrc"] {
            assert!(allowed(&guards, Path::new(p), Creates::NonDirectory), "{p}");
        }
    }
}
