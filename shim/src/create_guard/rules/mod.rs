//! The persistence rules: may this operation put content at this path? Judged on the real path
//! init will act on, inside the writable trees backed by the host (elsewhere the kernel
//! decides: init acts in the target's mount namespace and Landlock domain, so a read-only mount
//! answers EROFS as it would to the target).
//!
//! In order: an explicit `--allow-write` of a protected path overrides every rule below it; the
//! protected paths of the table and of the launcher's plan (`pattern`: at any depth, or anchored
//! at a directory) refuse writes at and below them, and anything but a directory on the way to
//! them (a symlink or a `.git` file there would redirect what they protect); then git
//! directories allow only what git writes (`gitdir`), and `config` through a validated rename
//! (`gitconfig`).

pub mod gitconfig;
mod gitdir;
mod pattern;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::spec::PersistSpec;
use gitdir::GitVerdict;
use pattern::{Fit, Pattern};

pub use gitconfig::{validate as validate_git_config, MAX_CONFIG};
pub use pattern::glob;

/// An operation, as the rules see it: where it puts content.
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    /// A new entry at `path`: a directory, or anything else (file, symlink, node, socket, link).
    Create { path: &'a Path, dir: bool },
    /// Whatever is renamed to `path` (a directory or not).
    RenameTo { path: &'a Path, dir: bool },
    /// An existing object written (opened for writing, truncated) or given a new name (the
    /// source of a hard link).
    Write { path: &'a Path },
}

impl<'a> Op<'a> {
    /// The same operation at another path.
    pub fn at<'b>(&self, path: &'b Path) -> Op<'b> {
        match *self {
            Op::Create { dir, .. } => Op::Create { path, dir },
            Op::RenameTo { dir, .. } => Op::RenameTo { path, dir },
            Op::Write { .. } => Op::Write { path },
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            Op::Create { path, .. } | Op::RenameTo { path, .. } | Op::Write { path } => path,
        }
    }

    /// Only a new directory may appear on the way to a protected path.
    fn is_mkdir(&self) -> bool {
        matches!(self, Op::Create { dir: true, .. })
    }
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Refused; the surface it would have written, in words.
    Refuse(String),
    /// A git directory's `config` renamed into place: allowed once its content is validated.
    ValidateGitConfig,
}

struct Rule {
    pattern: Pattern,
    surface: Arc<str>,
}

/// The rules of one sandbox, compiled from its spec.
pub struct Rules {
    roots: Vec<PathBuf>,
    overrides: Vec<PathBuf>,
    denied: Vec<PathBuf>,
    /// By anchor (the home directory's rules share one).
    anchored: Vec<(PathBuf, Vec<Rule>)>,
    /// Rules matched at any depth, by their first component (`None`: a glob there).
    anywhere: HashMap<Option<Vec<u8>>, Vec<Rule>>,
}

fn components(p: &Path) -> Vec<&OsStr> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

impl Rules {
    pub fn new(spec: &PersistSpec) -> Rules {
        let mut anchored: Vec<(PathBuf, Vec<Rule>)> = Vec::new();
        let mut anywhere: HashMap<Option<Vec<u8>>, Vec<Rule>> = HashMap::new();
        for r in &spec.rules {
            let rule = Rule {
                pattern: Pattern::new(&r.pattern),
                surface: r.surface.clone(),
            };
            match &r.anchor {
                Some(a) => match anchored.iter_mut().find(|(b, _)| b == a) {
                    Some((_, rules)) => rules.push(rule),
                    None => anchored.push((a.clone(), vec![rule])),
                },
                None => {
                    let head = rule.pattern.literal_head().map(<[u8]>::to_vec);
                    anywhere.entry(head).or_default().push(rule);
                }
            }
        }
        Rules {
            roots: spec.roots.clone(),
            overrides: spec.overrides.clone(),
            denied: spec.denied.clone(),
            anchored,
            anywhere,
        }
    }

    /// Whether `path` lies in a writable tree backed by the host.
    pub fn guards(&self, path: &Path) -> bool {
        self.roots.iter().any(|r| path.starts_with(r))
    }

    pub fn judge(&self, op: Op<'_>) -> Verdict {
        let path = op.path();
        if !self.guards(path) {
            return Verdict::Allow;
        }
        for d in &self.denied {
            if path.starts_with(d) || (d.starts_with(path) && !op.is_mkdir()) {
                return Verdict::Refuse(format!("--deny-write {}", d.display()));
            }
        }
        if self.overrides.iter().any(|o| path.starts_with(o)) {
            return Verdict::Allow;
        }
        if let Some(why) = self.protected(path, op.is_mkdir()) {
            return Verdict::Refuse(why);
        }
        self.git(op)
    }

    /// The surface `path` would write, if a rule protects it (or a directory on the way to
    /// what one protects, when `mkdir` is false).
    fn protected(&self, path: &Path, mkdir: bool) -> Option<String> {
        let verdict = |fit: Fit, rule: &Rule| match fit {
            Fit::Inside => Some(rule.surface.to_string()),
            Fit::Above if !mkdir => Some(format!("{} (on the way to it)", rule.surface)),
            _ => None,
        };
        let comps = components(path);
        for (anchor, rules) in &self.anchored {
            if let Ok(rest) = path.strip_prefix(anchor) {
                let rest = components(rest);
                for rule in rules {
                    if let Some(why) = verdict(rule.pattern.fit(&rest), rule) {
                        return Some(why);
                    }
                }
            } else if anchor.starts_with(path) && !mkdir {
                return Some(format!("{} (on the way to it)", rules[0].surface));
            }
        }
        for i in 0..comps.len() {
            let here = &comps[i..];
            let by_name = self.anywhere.get(&Some(comps[i].as_bytes().to_vec()));
            let globbed = self.anywhere.get(&None);
            for rule in by_name.into_iter().chain(globbed).flatten() {
                if let Some(why) = verdict(rule.pattern.fit(here), rule) {
                    return Some(why);
                }
            }
        }
        None
    }

    fn git(&self, op: Op<'_>) -> Verdict {
        let path = op.path();
        let (dir, renamed) = match op {
            Op::Create { dir, .. } => (dir, false),
            Op::RenameTo { dir, .. } => (dir, true),
            Op::Write { .. } => (false, false),
        };
        if path.file_name() == Some(OsStr::new(".git")) {
            // A directory renamed to `.git` becomes a git directory whose contents nobody
            // checked; a `.git` that is not a directory (a gitlink) sends git elsewhere.
            if renamed && dir {
                return Verdict::Refuse("a git directory (renamed into place)".into());
            }
            if !op.is_mkdir() {
                return Verdict::Refuse("a .git file (it sends git to another directory)".into());
            }
        }
        if !matches!(op, Op::Write { .. }) {
            if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
                if let Err(why) = gitdir::check_becoming(parent, name) {
                    return Verdict::Refuse(why);
                }
            }
        }
        let Some(g) = gitdir::containing(path) else {
            return Verdict::Allow;
        };
        let Ok(rel) = path.strip_prefix(&g) else {
            return Verdict::Allow;
        };
        match gitdir::allowed(&components(rel), dir, renamed) {
            GitVerdict::Allow => Verdict::Allow,
            GitVerdict::ValidateConfig => Verdict::ValidateGitConfig,
            GitVerdict::Refuse => Verdict::Refuse(format!(
                "git directory {}: only what git itself writes",
                g.display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ProtectRule;

    fn rules(anywhere: &[&str], anchored: &[(&str, &str)], overrides: &[&str]) -> Rules {
        let mut r: Vec<ProtectRule> = anywhere
            .iter()
            .map(|p| ProtectRule {
                anchor: None,
                pattern: p.to_string(),
                surface: (*p).into(),
            })
            .collect();
        r.extend(anchored.iter().map(|(a, p)| ProtectRule {
            anchor: Some(a.into()),
            pattern: p.to_string(),
            surface: format!("{a}/{p}").into(),
        }));
        Rules::new(&PersistSpec {
            roots: vec!["/w".into(), "/home/u/.claude".into()],
            rules: r,
            overrides: overrides.iter().map(PathBuf::from).collect(),
            denied: vec!["/w/locked".into()],
        })
    }

    fn create(r: &Rules, p: &str, dir: bool) -> bool {
        r.judge(Op::Create {
            path: Path::new(p),
            dir,
        }) == Verdict::Allow
    }

    #[test]
    fn names_are_protected_at_any_depth_in_every_writable_tree() {
        let r = rules(
            &[".envrc", ".vscode/**", ".claude/settings*.json"],
            &[],
            &[],
        );
        for p in [
            "/w/.envrc",
            "/w/a/b/.envrc",
            "/w/.vscode",
            "/w/x/.vscode/tasks.json",
            "/w/x/.claude/settings.local.json",
            "/home/u/.claude/settings.json",
        ] {
            assert!(!create(&r, p, false), "{p}");
        }
        for p in [
            "/w/.envrc.bak",
            "/w/src/main.rs",
            "/home/u/.claude/projects/x.jsonl",
        ] {
            assert!(create(&r, p, false), "{p}");
        }
        // Outside the writable trees the kernel decides.
        assert!(create(&r, "/etc/.envrc", false));
    }

    #[test]
    fn on_the_way_to_a_protected_path_only_a_real_directory_may_appear() {
        let r = rules(&[".claude/settings*.json"], &[("/w/sub", ".husky/**")], &[]);
        assert!(create(&r, "/w/x/.claude", true));
        assert!(!create(&r, "/w/x/.claude", false));
        let renamed = r.judge(Op::RenameTo {
            path: Path::new("/w/x/.claude"),
            dir: true,
        });
        assert!(matches!(renamed, Verdict::Refuse(_)));
        // Above an anchored rule: the anchor's own ancestors.
        assert!(!create(&r, "/w/sub", false));
        assert!(create(&r, "/w/sub", true));
        assert!(!create(&r, "/w/sub/.husky/pre-commit", false));
    }

    #[test]
    fn an_explicit_override_beats_the_rules_below_it_and_only_there() {
        let r = rules(&[".vscode/**"], &[], &["/w/.vscode", "/w"]);
        assert!(create(&r, "/w/.vscode/tasks.json", false));
        let r = rules(&[".vscode/**"], &[], &["/w/.vscode"]);
        assert!(!create(&r, "/w/other/.vscode/tasks.json", false));
    }

    #[test]
    fn deny_write_beats_every_override_whether_or_not_the_path_exists() {
        let r = rules(&[], &[], &["/w"]);
        assert!(!create(&r, "/w/locked", false));
        assert!(!create(&r, "/w/locked/new", true));
        assert!(create(&r, "/w/free", false));
    }

    #[test]
    fn git_directories_allow_what_git_writes_and_validate_config() {
        let r = rules(&[], &[], &[]);
        assert!(create(&r, "/w/.git/objects/ab/cd", false));
        assert!(create(&r, "/w/.git/index.lock", false));
        assert!(!create(&r, "/w/.git/hooks/pre-commit", false));
        assert!(!create(&r, "/w/sub/.git/commondir", false));
        assert_eq!(
            r.judge(Op::RenameTo {
                path: Path::new("/w/.git/config"),
                dir: false
            }),
            Verdict::ValidateGitConfig
        );
        assert!(matches!(
            r.judge(Op::Write {
                path: Path::new("/w/.git/config")
            }),
            Verdict::Refuse(_)
        ));
        assert!(matches!(
            r.judge(Op::RenameTo {
                path: Path::new("/w/x/.git"),
                dir: true
            }),
            Verdict::Refuse(_)
        ));
    }
}
