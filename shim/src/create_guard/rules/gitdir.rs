//! Git directories. Git runs what a repository's directory names — `hooks/*`, `config`
//! (`core.fsmonitor`, `core.hooksPath`, aliases, filters), and through `commondir`, a `.git`
//! file or `config.worktree` what another directory holds — on `git status` and `git commit`.
//! Inside a git directory, at any depth in the writable trees, a name may appear only if git
//! itself writes it in ordinary operations ([`allowed`]: objects, refs, logs, the index, HEAD and
//! its siblings, lock files, rebase state...): a creation is allowed by what git writes, not
//! refused by a list of what it should not. `config` is replaced only through a rename that the
//! guard validates (see `gitconfig`).
//!
//! A git directory is one named `.git`, or one shaped like one (git's `is_git_directory`:
//! `HEAD` plus `objects` and `refs`, or plus `commondir`) — a bare repository, a submodule's
//! `.git/modules/<name>`, a worktree's `.git/worktrees/<name>`. A directory that would become
//! one (its `HEAD`, `objects` or `refs` appears last) must hold nothing git would run.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::gitconfig;
use super::pattern::glob;

/// What a git directory's name may be created or written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitVerdict {
    Allow,
    Refuse,
    /// `config`, renamed into place: validated first.
    ValidateConfig,
}

/// Trees git writes anything into.
const TREES: &[&str] = &[
    "objects",
    "refs",
    "logs",
    "rebase-merge",
    "rebase-apply",
    "sequencer",
    "rr-cache",
    "reftable",
    "lfs",
];

/// Files git writes at the top of its directory (globs).
const FILES: &[&str] = &[
    "HEAD",
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "MERGE_MSG",
    "MERGE_MODE",
    "MERGE_AUTOSTASH",
    "MERGE_RR",
    "AUTO_MERGE",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "REBASE_HEAD",
    "BISECT_*",
    "COMMIT_EDITMSG",
    "SQUASH_MSG",
    "TAG_EDITMSG",
    "NOTES_EDITMSG",
    "NOTES_MERGE_*",
    "BRANCH_DESCRIPTION",
    "EDIT_DESCRIPTION",
    "description",
    "index",
    "index.stash.*",
    "next-index-*",
    "sharedindex.*",
    "packed-refs",
    "packed-refs.new",
    "shallow",
    "gc.pid",
    "gc.log",
    // `git init` probes for symlinks with a temporary `tXXXXXX`.
    "t??????",
];

/// Directories git makes at the top (their own contents are judged separately).
const DIRS: &[&str] = &["hooks", "info", "branches"];

/// Files git writes in `info/`.
const INFO: &[&str] = &["exclude", "sparse-checkout", "refs", "grafts"];

/// What makes a directory a git directory.
const SHAPE: &[&str] = &["HEAD", "objects", "refs"];

fn any_glob(pats: &[&str], name: &[u8]) -> bool {
    pats.iter().any(|p| glob(p.as_bytes(), name))
}

/// Whether `rel` (a path relative to a git directory) is something git writes: created as a
/// directory when `dir`, or any other way (a file, a rename onto it, a write) otherwise.
pub fn allowed(rel: &[&OsStr], dir: bool, renamed: bool) -> GitVerdict {
    let Some(first) = rel.first() else {
        return GitVerdict::Allow;
    };
    let first = first.as_bytes();
    if TREES.iter().any(|t| t.as_bytes() == first) {
        // A whole directory renamed in as `objects` or `refs` itself is not git's doing.
        return if rel.len() == 1 && renamed && dir {
            GitVerdict::Refuse
        } else {
            GitVerdict::Allow
        };
    }
    let base = |name: &[u8]| name.strip_suffix(b".lock").unwrap_or(name).to_vec();
    match rel {
        [_] => {
            if first == b"config" {
                return if renamed && !dir {
                    GitVerdict::ValidateConfig
                } else {
                    GitVerdict::Refuse
                };
            }
            let b = base(first);
            if (any_glob(FILES, &b) || (b == b"config" && first != b)) && !(renamed && dir) {
                return GitVerdict::Allow;
            }
            if DIRS.iter().any(|d| d.as_bytes() == first) && dir && !renamed {
                return GitVerdict::Allow;
            }
            GitVerdict::Refuse
        }
        [parent, name] => {
            let (parent, name) = (parent.as_bytes(), name.as_bytes());
            let ok = match parent {
                b"info" => any_glob(INFO, &base(name)),
                b"hooks" => glob(b"*.sample", name),
                _ => false,
            };
            if ok && !dir {
                GitVerdict::Allow
            } else {
                GitVerdict::Refuse
            }
        }
        _ => GitVerdict::Refuse,
    }
}

fn exists(p: &Path) -> bool {
    std::fs::metadata(p).is_ok()
}

/// Whether `dir` is shaped like a git directory (as git's `is_git_directory` sees it, minus
/// the check of HEAD's contents: stricter).
pub fn shaped(dir: &Path) -> bool {
    exists(&dir.join("HEAD"))
        && ((exists(&dir.join("objects")) && exists(&dir.join("refs")))
            || exists(&dir.join("commondir")))
}

/// The git directory `path` lies in, if any: the nearest ancestor named `.git` or shaped like a
/// git directory. A shaped one is looked for two levels up (where everything git would run
/// lies: `config`, `hooks/x`) and all the way up to a `.git` above (so that
/// `.git/modules/sub/objects/ab/x` belongs to `modules/sub`).
pub fn containing(path: &Path) -> Option<PathBuf> {
    let dotgit_above = path
        .ancestors()
        .skip(1)
        .position(|a| a.file_name() == Some(OsStr::new(".git")));
    for (up, a) in path.ancestors().skip(1).enumerate() {
        if a.file_name() == Some(OsStr::new(".git")) {
            return Some(a.to_path_buf());
        }
        let look = up < 2 || dotgit_above.is_some_and(|d| up < d);
        if !look {
            return None;
        }
        if a.parent().is_some() && shaped(a) {
            return Some(a.to_path_buf());
        }
    }
    None
}

/// Creating `name` in `dir` (not yet a git directory) would make `dir` one: everything git
/// would run from it must be harmless. `Err` says what is not.
pub fn check_becoming(dir: &Path, name: &OsStr) -> Result<(), String> {
    if !SHAPE
        .iter()
        .chain(&["commondir"])
        .any(|s| OsStr::new(s) == name)
    {
        return Ok(());
    }
    if dir.file_name() == Some(OsStr::new(".git")) || shaped(dir) {
        return Ok(());
    }
    let has = |n: &str| OsStr::new(n) == name || exists(&dir.join(n));
    if !(has("HEAD") && ((has("objects") && has("refs")) || has("commondir"))) {
        return Ok(());
    }
    for bad in ["commondir", "config.worktree", "gitdir"] {
        if has(bad) {
            return Err(format!(
                "{} would make a git directory with a {bad}",
                dir.display()
            ));
        }
    }
    let config = dir.join("config");
    if let Ok(meta) = std::fs::symlink_metadata(&config) {
        if !meta.is_file() || meta.len() as usize > gitconfig::MAX_CONFIG {
            return Err(format!("{}: not a plain, small file", config.display()));
        }
        let bytes = std::fs::read(&config).map_err(|e| format!("{}: {e}", config.display()))?;
        gitconfig::validate(&bytes, None).map_err(|key| {
            format!(
                "{} would make a git directory whose config sets {key}",
                dir.display()
            )
        })?;
    }
    let hooks = dir.join("hooks");
    if let Ok(entries) = std::fs::read_dir(&hooks) {
        for (i, e) in entries.enumerate() {
            let Ok(e) = e else { continue };
            if i > 256 || !glob(b"*.sample", e.file_name().as_bytes()) {
                return Err(format!(
                    "{} would make a git directory with hooks",
                    dir.display()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(p: &str) -> Vec<&OsStr> {
        p.split('/').map(OsStr::new).collect()
    }

    #[test]
    fn what_git_writes_is_allowed_in_its_directory() {
        for p in [
            "HEAD",
            "HEAD.lock",
            "index.lock",
            "ORIG_HEAD",
            "AUTO_MERGE.lock",
            "BISECT_LOG",
            "index.stash.123",
            "packed-refs.lock",
            "config.lock",
            "objects/ab/cdef",
            "objects/pack/tmp_pack_x",
            "refs/heads/feature/x.lock",
            "logs/refs/heads/main",
            "rebase-merge/git-rebase-todo",
            "info/exclude",
            "hooks/pre-commit.sample",
            "tRUEQIm",
            "description",
        ] {
            assert_eq!(allowed(&rel(p), false, false), GitVerdict::Allow, "{p}");
            assert_eq!(
                allowed(&rel(p), false, true),
                GitVerdict::Allow,
                "{p} renamed"
            );
        }
        for d in [
            "hooks",
            "info",
            "branches",
            "objects",
            "refs/tags",
            "rebase-merge",
        ] {
            assert_eq!(allowed(&rel(d), true, false), GitVerdict::Allow, "{d}");
        }
    }

    #[test]
    fn what_runs_or_redirects_is_refused() {
        for p in [
            "hooks/pre-commit",
            "hooks/post-checkout",
            "config",
            "config.worktree",
            "commondir",
            "gitdir",
            "info/attributes",
            "modules/sub/config",
            "worktrees/w/commondir",
            "fsmonitor--daemon.ipc",
            "hooks/x/pre-commit.sample",
        ] {
            assert_eq!(allowed(&rel(p), false, false), GitVerdict::Refuse, "{p}");
        }
        assert_eq!(
            allowed(&rel("config"), false, true),
            GitVerdict::ValidateConfig
        );
        // Whole directories renamed in, or made where git makes none.
        assert_eq!(allowed(&rel("hooks"), true, true), GitVerdict::Refuse);
        assert_eq!(allowed(&rel("objects"), true, true), GitVerdict::Refuse);
        assert_eq!(allowed(&rel("modules"), true, false), GitVerdict::Refuse);
        assert_eq!(allowed(&rel("worktrees"), true, false), GitVerdict::Refuse);
        assert_eq!(allowed(&rel("HEAD"), true, true), GitVerdict::Refuse);
    }

    #[test]
    fn a_directory_is_a_git_directory_by_name_or_by_shape() {
        let base = std::env::temp_dir().join(format!("sl-gitdir-{}", std::process::id()));
        let bare = base.join("repo.git");
        for d in ["objects/ab", "refs/heads", "hooks"] {
            std::fs::create_dir_all(bare.join(d)).unwrap();
        }
        std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert!(shaped(&bare));
        assert_eq!(
            containing(&bare.join("hooks/pre-commit")),
            Some(bare.clone())
        );
        assert_eq!(containing(&bare.join("config")), Some(bare.clone()));
        assert_eq!(containing(&base.join("src/x")), None);
        assert_eq!(
            containing(Path::new("/w/.git/objects/ab/cd")),
            Some(PathBuf::from("/w/.git"))
        );
        // A directory that would become one is checked when its last piece appears.
        let x = base.join("x");
        for d in ["objects", "refs"] {
            std::fs::create_dir_all(x.join(d)).unwrap();
        }
        std::fs::write(x.join("config"), "[core]\n\tfsmonitor = touch /tmp/pwned\n").unwrap();
        assert!(check_becoming(&x, OsStr::new("HEAD")).is_err());
        assert!(check_becoming(&x, OsStr::new("README")).is_ok());
        std::fs::write(x.join("config"), "[core]\n\tbare = true\n").unwrap();
        assert!(check_becoming(&x, OsStr::new("HEAD")).is_ok());
        std::fs::create_dir_all(x.join("hooks")).unwrap();
        std::fs::write(x.join("hooks/pre-commit"), "evil").unwrap();
        assert!(check_becoming(&x, OsStr::new("HEAD")).is_err());
        // HEAD first, then a commondir pointing elsewhere: the commondir is refused.
        let y = base.join("y");
        std::fs::create_dir_all(&y).unwrap();
        std::fs::write(y.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert!(check_becoming(&y, OsStr::new("commondir")).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
