//! The persistence model on the launcher's side: from the table of surfaces (`table`) to what
//! the sandbox enforces — the create guard's rules (in the spec) and, for what exists at launch,
//! read-only binds as a second, kernel-enforced layer.

pub mod agents;
pub mod binds;
pub mod describe;
mod git_paths;
pub mod host_view;
mod links;
mod plain_path;
pub mod plan;
mod sourced;
pub mod table;
pub mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use host_view::{HostView, Kind};
use shim::spec::ProtectRule;
use table::{Scope, SURFACES};

/// Each root's `.git/hooks` that exists at launch: bound read-only as a second layer under the
/// guard's git rules (a hooks directory holding only samples may appear later; it is no
/// surface by itself).
pub fn git_hooks_at_launch(view: &mut HostView, roots: &[PathBuf]) -> Vec<PathBuf> {
    roots
        .iter()
        .map(|r| r.join(".git/hooks"))
        .filter(|h| {
            h.parent().is_some_and(|g| view.kind(g) == Kind::Dir) && view.kind(h) == Kind::Dir
        })
        .collect()
}

/// The guard's rules for the table: `Anywhere` patterns at any depth, `Home` ones anchored at
/// the home directory. (Git directories are the guard's own rules.)
pub fn table_rules(home: Option<&Path>) -> Vec<ProtectRule> {
    rules_of(home, true)
}

/// The guard's rules for the table's `Home` patterns only, anchored at `home`.
pub fn home_rules(home: &Path) -> Vec<ProtectRule> {
    rules_of(Some(home), false)
}

fn rules_of(home: Option<&Path>, anywhere: bool) -> Vec<ProtectRule> {
    let mut out = Vec::new();
    for s in SURFACES {
        let anchor = match (s.scope, home) {
            (Scope::Anywhere, _) if anywhere => None,
            (Scope::Home, Some(h)) => Some(h.to_path_buf()),
            (Scope::Anywhere | Scope::Home, _) | (Scope::GitDir, _) => continue,
        };
        let surface: Arc<str> = format!("{}: runs on {}", s.what, s.runs).into();
        for p in s.patterns {
            out.push(ProtectRule {
                anchor: anchor.clone(),
                pattern: p.to_string(),
                surface: surface.clone(),
            });
        }
    }
    out
}

/// A pattern's path when it names one path (no globs), without a last `**`.
fn literal(pattern: &str) -> Option<&str> {
    let p = pattern.strip_suffix("/**").unwrap_or(pattern);
    (!p.contains(['*', '?'])).then_some(p)
}

/// The table's literal home paths that no writable root covers (see `plan`: a symlink there
/// can lead into one).
pub fn home_names_outside(home: &Path, roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = home_names(home, roots, false);
    plain_path::dedup(&mut out);
    out
}

/// The table's literal home paths that a writable root covers.
pub fn home_names_inside(home: &Path, roots: &[PathBuf]) -> Vec<PathBuf> {
    home_names(home, roots, true)
}

/// The table's literal home paths that a writable root covers (`covered`), or that none does.
/// Judged on the names as written in the table: the home lies in a root (all are covered), or
/// a root lies in the home (those at or below it are) — a few comparisons of short names
/// instead of one of whole paths for each name and root (a plan asks this of ~150 names).
fn home_names(home: &Path, roots: &[PathBuf], covered: bool) -> Vec<PathBuf> {
    let names = SURFACES
        .iter()
        .filter(|s| s.scope == Scope::Home)
        .flat_map(|s| s.patterns.iter().filter_map(|p| literal(p)));
    if !plain_path::plain(home) || !roots.iter().all(|r| plain_path::plain(r)) {
        return names
            .map(|p| plain_path::joined(home, p))
            .filter(|p| roots.iter().any(|r| p.starts_with(r)) == covered)
            .collect();
    }
    if roots.iter().any(|r| plain_path::under(home, r)) {
        return if covered {
            names.map(|p| plain_path::joined(home, p)).collect()
        } else {
            Vec::new()
        };
    }
    let (h, below) = (home.as_os_str().len(), std::path::MAIN_SEPARATOR as u8);
    let inside: Vec<&[u8]> = roots
        .iter()
        .filter(|r| plain_path::under(r, home))
        .map(|r| &r.as_os_str().as_encoded_bytes()[h + 1..])
        .collect();
    names
        .filter(|n| {
            let n = n.as_bytes();
            let under = |r: &&[u8]| n.starts_with(r) && (n.len() == r.len() || n[r.len()] == below);
            inside.iter().any(under) == covered
        })
        .map(|p| plain_path::joined(home, p))
        .collect()
}

/// Other users' homes in a writable tree: the homes of the users who can log in that lie in a
/// writable root (started as root, the working directory may be anyone's home: `cd
/// /home/alice` then a launch, or a `run_as_user` working in its own home), canonical, the
/// caller's own left out. Their shells run what the table protects there as much as the
/// caller's do.
pub fn other_homes(view: &mut HostView, roots: &[PathBuf], home: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for h in crate::users::login_homes() {
        let h = links::lenient(view, &h);
        let inside = roots.iter().any(|r| plain_path::under(&h, r));
        // Missing too: made inside, with its start-up files, it would be the user's at the
        // first login (pam_mkhomedir, and `useradd` without -m, keep a home that exists).
        let can_be = matches!(view.kind(&h), Kind::Dir | Kind::Missing);
        if inside && Some(h.as_path()) != home && can_be {
            out.push(h);
        }
    }
    plain_path::sort_dedup(&mut out);
    out
}

/// The protected paths that can be named at launch without walking a tree: the table's
/// literal patterns at the top of each writable root and in the home directory (where a root
/// covers it), and each root's `.git` file (a gitlink). Whether each exists is for the caller
/// to see.
pub fn named_at_launch(
    view: &mut HostView,
    roots: &[PathBuf],
    home: Option<&Path>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in roots {
        for s in SURFACES.iter().filter(|s| s.scope == Scope::Anywhere) {
            out.extend(
                s.patterns
                    .iter()
                    .filter_map(|p| literal(p))
                    .map(|p| plain_path::joined(root, p)),
            );
        }
        let dotgit = root.join(".git");
        if view.followed(&dotgit) == Kind::File {
            out.push(dotgit);
        }
    }
    if let Some(home) = home {
        out.extend(home_names_inside(home, roots));
    }
    // Roots inside others, and the home's names inside a root, name some paths twice.
    plain_path::dedup(&mut out);
    out
}

/// `check`'s account of the persistence model for a launch with `args` (the policy it loads,
/// the layout it plans: nothing is mounted or started). A layout that cannot be planned (a path
/// the launch needs is missing) is said, not an error of the policy.
pub fn check(args: &crate::cli::SandboxArgs) -> Result<String, shim::channel::StepError> {
    let (mut policy, cwd) = crate::sandbox::load_policy(args)?;
    let ctx = crate::sandbox::host_context(cwd);
    if policy.filesystem.mode == crate::policy::model::FsMode::HostReadable {
        let state = agents::plan(ctx.home.as_deref(), &|v| std::env::var(v).ok(), "");
        for d in state.dirs {
            policy
                .filesystem
                .read_write
                .push(crate::policy::model::Sourced::new(
                    d,
                    crate::policy::model::Source::Default,
                ));
        }
    }
    // Who the sandbox runs as (started as root: the policy's run_as_user). A user that cannot
    // be found stops a launch, not `check`: said on the HOME line.
    let run_as = crate::sandbox::identity(&policy, &mut Vec::new(), &mut Vec::new());
    Ok(match crate::layout::plan(&policy, &ctx) {
        Ok(layout) => {
            let caller = ctx.home.as_deref().and_then(Path::to_str);
            let home = match run_as {
                Ok(r) if r.identity.switch_from_root => {
                    let h = crate::home::as_root(
                        caller,
                        &layout.writable,
                        r.home.as_deref(),
                        r.identity,
                        layout.mounts.host_root,
                    );
                    format!("HOME inside: {} ({})\n", h.path, h.whose)
                }
                Ok(_) => format!(
                    "HOME inside: {} (the caller's)\n",
                    caller.unwrap_or("(unset)")
                ),
                Err(e) => format!("HOME inside: not decided, a launch would stop here: {e}\n"),
            };
            home + &crate::layout::placed::describe(&layout.placed)
                + &describe::describe(&layout.protections, ctx.home.as_deref())
        }
        Err(e) => format!("persistence: not planned: a launch would stop here: {e:#}\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_patterns_are_named_at_the_top_of_each_root_and_in_a_covered_home() {
        let roots = vec![PathBuf::from("/w"), PathBuf::from("/home/u")];
        let named = named_at_launch(&mut HostView::new(), &roots, Some(Path::new("/home/u")));
        for p in [
            "/w/.envrc",
            "/w/.vscode",
            "/w/.claude/commands",
            "/w/.mcp.json",
            "/home/u/.bashrc",
            "/home/u/.ssh",
        ] {
            assert!(named.contains(&PathBuf::from(p)), "{p}");
        }
        // Globs are the guard's alone.
        assert!(!named.iter().any(|p| p.to_string_lossy().contains('*')));
        let elsewhere = named_at_launch(
            &mut HostView::new(),
            &[PathBuf::from("/w")],
            Some(Path::new("/home/u")),
        );
        assert!(!elsewhere.contains(&PathBuf::from("/home/u/.bashrc")));
    }

    /// The quick judgement of which home names a root covers is `starts_with`'s.
    #[test]
    fn home_names_are_covered_as_starts_with_says() {
        let home = Path::new("/home/u");
        let all: Vec<PathBuf> = SURFACES
            .iter()
            .filter(|s| s.scope == Scope::Home)
            .flat_map(|s| s.patterns.iter().filter_map(|p| literal(p)))
            .map(|p| plain_path::joined(home, p))
            .collect();
        for roots in [
            vec!["/home/u"],
            vec!["/home"],
            vec!["/home/u/.config"],
            vec!["/home/u/.config/git", "/home/u/.cl"],
            vec!["/home/u/.claude", "/w"],
            vec!["/home/uu", "/home/u/.ssh/x"],
            vec!["/w"],
            vec!["/home/u/./.config"],
            vec![],
        ] {
            let roots: Vec<PathBuf> = roots.into_iter().map(PathBuf::from).collect();
            for covered in [true, false] {
                let want: Vec<PathBuf> = all
                    .iter()
                    .filter(|p| roots.iter().any(|r| p.starts_with(r)) == covered)
                    .cloned()
                    .collect();
                assert_eq!(
                    home_names(home, &roots, covered),
                    want,
                    "{roots:?} {covered}"
                );
            }
        }
    }

    #[test]
    fn the_plans_sort_orders_paths_as_path_does() {
        let mut paths: Vec<PathBuf> = [
            "/w/.claude/agents",
            "/w/.claude-plugin",
            "/w/.claude",
            "/w",
            "/w/a/b",
            "/w/ab",
            "/w/a-c",
            "/w/a",
            "/v/z",
            "/w.x/y",
            "/w/.codex/.env",
            "/w/.codex",
            "rel/x",
            "/",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        let mut by_key = paths.clone();
        paths.sort();
        plain_path::sort_dedup(&mut by_key);
        assert_eq!(by_key, paths);
    }

    #[test]
    fn home_rules_are_anchored_and_the_others_match_anywhere() {
        let rules = table_rules(Some(Path::new("/home/u")));
        assert!(rules
            .iter()
            .any(|r| r.pattern == ".bashrc" && r.anchor.as_deref() == Some(Path::new("/home/u"))));
        assert!(rules
            .iter()
            .any(|r| r.pattern == ".envrc" && r.anchor.is_none()));
        assert!(!rules.iter().any(|r| r.pattern == "hooks/*"));
        assert!(!table_rules(None).iter().any(|r| r.pattern == ".bashrc"));
    }
}
