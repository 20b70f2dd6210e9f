//! Which changes are persistence surfaces, which are a git directory's own state, and which
//! are the project's files — by the same rules the create guard enforces: the persistence plan
//! of the checkout as a launch makes it (`crate::persistence::plan`: the table's `Anywhere`
//! patterns at any depth, its `Home` ones where the home directory lies in the checkout, and
//! what the checkout itself names — `core.hooksPath`, included git configuration, the targets
//! of its protected symlinks, the directories of `PATH` in it), and the table's `GitDir`
//! patterns inside every git directory — one named `.git`, or shaped like one (`HEAD` with
//! `objects` and `refs`, or with `commondir`) in the checkout or in the upper layer.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use shim::create_guard::rules::{Op as GuardOp, Rules, Verdict};
use shim::spec::PersistSpec;

use super::changes::Class;
use crate::persistence::table::{Scope, SURFACES};

pub struct Classifier {
    upper: PathBuf,
    lower: PathBuf,
    rules: Rules,
    shaped: HashMap<PathBuf, bool>,
}

fn comps(p: &Path) -> Vec<&OsStr> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// A table pattern (`a/*/b`, a last `**`) against a relative path.
fn fits(pattern: &str, path: &[&OsStr]) -> bool {
    let pat: Vec<&str> = pattern.split('/').collect();
    for (i, p) in pat.iter().enumerate() {
        if *p == "**" && i + 1 == pat.len() {
            return path.len() >= i;
        }
        let Some(c) = path.get(i) else { return false };
        if *p != "*" && OsStr::new(p) != *c {
            return false;
        }
    }
    path.len() == pat.len()
}

impl Classifier {
    /// `path_var`: the `PATH` whose directories in the checkout are surfaces (the caller's).
    pub fn new(
        upper: &Path,
        lower: &Path,
        home: Option<&Path>,
        path_var: Option<&str>,
    ) -> Classifier {
        let roots = [lower.to_path_buf()];
        let plan = crate::persistence::plan::plan(&crate::persistence::plan::Request {
            roots: &roots,
            explicit: &[],
            deny_write: &[],
            home,
            cwd: lower,
            path_var,
            // The checkout is judged for what the project holds; the user's policy directory
            // is not in it.
            user_policy_dir: None,
        });
        let rules = Rules::new(&PersistSpec {
            roots: roots.to_vec(),
            ..plan.spec
        });
        Classifier {
            upper: upper.to_path_buf(),
            lower: lower.to_path_buf(),
            rules,
            shaped: HashMap::new(),
        }
    }

    /// Whether `rel` is shaped like a git directory, in the checkout or in the upper layer.
    fn is_shaped(&mut self, rel: &Path) -> bool {
        if let Some(s) = self.shaped.get(rel) {
            return *s;
        }
        let has = |n: &str| {
            [&self.upper, &self.lower]
                .iter()
                .any(|r| std::fs::symlink_metadata(r.join(rel).join(n)).is_ok())
        };
        let s = has("HEAD") && ((has("objects") && has("refs")) || has("commondir"));
        self.shaped.insert(rel.to_path_buf(), s);
        s
    }

    /// The git directory `rel` lies in (or is), and `rel` relative to it.
    fn git_dir<'a>(&mut self, parts: &[&'a OsStr]) -> Option<(usize, Vec<&'a OsStr>)> {
        for i in (0..parts.len()).rev() {
            if parts[i] == ".git" {
                return Some((i, parts[i + 1..].to_vec()));
            }
        }
        for i in (0..parts.len()).rev() {
            let dir: PathBuf = parts[..i].iter().collect();
            if i > 0 && self.is_shaped(&dir) {
                return Some((i - 1, parts[i..].to_vec()));
            }
        }
        None
    }

    pub fn class(&mut self, rel: &Path, dir: bool) -> Class {
        let parts = comps(rel);
        if let Some((_, inside)) = self.git_dir(&parts) {
            if inside.is_empty() && !dir {
                return Class::Persistence(
                    "a .git file (it sends git to another directory)".into(),
                );
            }
            for s in SURFACES.iter().filter(|s| s.scope == Scope::GitDir) {
                if s.patterns.iter().any(|p| fits(p, &inside)) {
                    return Class::Persistence(format!("{}: runs on {}", s.what, s.runs));
                }
            }
            return Class::Repository;
        }
        let path = self.lower.join(rel);
        match self.rules.judge(GuardOp::Create { path: &path, dir }) {
            Verdict::Allow => Class::Ordinary,
            Verdict::Refuse(why) => Class::Persistence(why),
            Verdict::ValidateGitConfig => {
                Class::Persistence("git hooks and configuration (config)".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_patterns_fit_as_the_guard_reads_them() {
        let p = |s: &'static str| comps(Path::new(s));
        assert!(fits("hooks/*", &p("hooks/pre-commit")));
        assert!(!fits("hooks/*", &p("hooks")));
        assert!(fits("modules/**", &p("modules/a/b")));
        assert!(fits("config", &p("config")));
        assert!(!fits("config", &p("configx")));
        assert!(!fits("info/attributes", &p("info/exclude")));
    }

    #[test]
    fn surfaces_repository_state_and_project_files_are_told_apart() {
        let base = std::env::temp_dir().join(format!("sl-wt-classify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        for d in [
            "lower/.git/objects",
            "lower/.git/refs",
            "upper/bare/objects",
            "upper/bare/refs",
        ] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        std::fs::write(base.join("lower/.git/HEAD"), b"ref: refs/heads/main\n").unwrap();
        std::fs::write(base.join("upper/bare/HEAD"), b"ref: refs/heads/main\n").unwrap();
        let mut c = Classifier::new(&base.join("upper"), &base.join("lower"), None, None);
        let persistent = |c: &mut Classifier, p: &str, dir: bool| {
            matches!(c.class(Path::new(p), dir), Class::Persistence(_))
        };
        assert!(persistent(&mut c, ".git/hooks/pre-commit", false));
        assert!(persistent(&mut c, ".git/config", false));
        assert!(persistent(&mut c, "sub/.git", false));
        assert!(persistent(&mut c, "bare/hooks/post-checkout", false));
        assert!(persistent(&mut c, ".envrc", false));
        assert!(persistent(&mut c, "deep/er/.vscode/tasks.json", false));
        assert!(persistent(&mut c, ".claude/settings.json", false));
        assert_eq!(c.class(Path::new(".git/index"), false), Class::Repository);
        assert_eq!(c.class(Path::new(".git"), true), Class::Repository);
        assert_eq!(
            c.class(Path::new("bare/objects/ab"), true),
            Class::Repository
        );
        assert_eq!(c.class(Path::new("src/main.rs"), false), Class::Ordinary);
        assert_eq!(c.class(Path::new("hooks/x"), false), Class::Ordinary);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
