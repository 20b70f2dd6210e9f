//! The protections of one launch, computed per writable root — the working directory and each
//! `--allow-write` path on its own, even under a writable parent (a writable `~` must not drop
//! what protects the project inside it) — without walking any tree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use shim::create_guard::rules::{Op, Rules, Verdict};
use shim::spec::{PersistSpec, ProtectRule};

use super::git_paths;
use super::host_view::{HostView, Kind};
use super::links::{chain, named, named_elsewhere};
use super::plain_path::{self, under};
use super::{named_at_launch, table_rules};

/// What the plan needs to know of the host.
pub struct Request<'a> {
    /// Every writable root (canonical), nested ones included.
    pub roots: &'a [PathBuf],
    /// The roots asked for explicitly (`--allow-write`, `allowWrite`, `read_write`): where one
    /// is a protected path itself, or inside one, it overrides the protection, with a warning.
    pub explicit: &'a [PathBuf],
    /// `--deny-write` paths as given (absolute), existing or not.
    pub deny_write: &'a [PathBuf],
    pub home: Option<&'a Path>,
    pub cwd: &'a Path,
    /// The host's `PATH`: its directories inside a writable tree are protected.
    pub path_var: Option<&'a str>,
    /// sandbox-launch's user policy directory (`$XDG_CONFIG_HOME/sandbox-launch`, with the
    /// trusted projects): protected where it lies in a writable tree, wherever that is.
    pub user_policy_dir: Option<&'a Path>,
}

/// One protection, for `check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub path: PathBuf,
    /// Bound read-only at launch too (it exists), or guarded only.
    pub bound: bool,
    pub why: String,
}

#[derive(Debug, Default)]
pub struct Protections {
    pub spec: PersistSpec,
    /// Protected paths that exist at launch inside a writable root: bound read-only.
    pub read_only: Vec<PathBuf>,
    /// Protected paths named at launch that do not exist (looked at again when the sandbox ends).
    pub missing: Vec<PathBuf>,
    /// Explicit overrides of a protection, in words (also warnings).
    pub overrides: Vec<String>,
    /// Every protection found at launch beyond the table's patterns, for `check`.
    pub shown: Vec<Shown>,
}

fn inside(p: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| under(p, r))
}

impl Protections {
    /// Protect `path` and everything below it, and, when it is a symlink, every link of its
    /// chain and where it ends (bound read-only there when that exists in a writable root).
    fn protect(
        &mut self,
        view: &mut HostView,
        path: &Path,
        why: &str,
        roots: &[PathBuf],
        denied: bool,
    ) {
        for (i, p) in chain(view, path).into_iter().enumerate() {
            let why = if i == 0 {
                why.to_string()
            } else {
                format!("{why} (through the symlink {})", path.display())
            };
            let kind = view.kind(&p);
            let bound = kind != Kind::Symlink && kind != Kind::Missing && inside(&p, roots);
            if bound {
                self.read_only.push(p.clone());
            }
            if denied {
                self.spec.denied.push(p.clone());
            } else {
                self.spec.rules.push(ProtectRule {
                    anchor: Some(p.clone()),
                    pattern: "**".into(),
                    surface: why.as_str().into(),
                });
            }
            self.shown.push(Shown {
                path: p,
                bound,
                why,
            });
        }
    }
}

pub fn plan(req: &Request<'_>) -> Protections {
    let mut out = Protections::default();
    let roots: Vec<PathBuf> = req.roots.to_vec();
    out.spec.roots = roots.clone();
    out.spec.rules = table_rules(req.home);
    // One view of the host for the whole plan: each directory asked about read once.
    let view = &mut HostView::new();
    // Other users' homes in a writable tree: their start-up files are protected as the
    // caller's are.
    let others = super::other_homes(view, &roots, req.home);
    for h in &others {
        out.spec.rules.extend(super::home_rules(h));
    }
    // The table's literal paths at the top of every root and in a covered home: bound when
    // they exist, their symlinks followed.
    let mut named_here = named_at_launch(view, &roots, req.home);
    if !others.is_empty() {
        for h in &others {
            named_here.extend(super::home_names_inside(h, &roots));
        }
        plain_path::dedup(&mut named_here);
    }
    view.expect(&named_here);
    for p in named_here {
        match view.kind(&p) {
            Kind::Symlink => {
                let why = format!("{} is a protected path", p.display());
                out.protect(view, &p, &why, &roots, false)
            }
            Kind::Dir | Kind::File | Kind::Other => out.read_only.push(p),
            Kind::Missing => {
                // Missing below a symlinked directory (a stow-managed `~/.config ->
                // dotfiles/.config`): it would be created where the link leads, which its own
                // name must not reach either. (What exists is bound there already.)
                if let Some(there) = named_elsewhere(view, &p) {
                    let why = format!("{} is a protected path", p.display());
                    out.protect(view, &there, &why, &roots, false);
                }
                out.missing.push(p)
            }
        }
    }
    // The home's protected names outside every writable tree (the home is not writable): one
    // that is a symlink into a writable tree (a stow-managed `~/.bashrc -> dotfiles/bashrc`,
    // `~/.config/git -> ../dotfiles/git`), or missing below a symlinked directory that leads
    // into one, has where it ends written by its name when the host starts a shell.
    if let Some(home) = req.home.filter(|_| !roots.is_empty()) {
        let outside = super::home_names_outside(home, &roots);
        view.expect(&outside);
        for p in outside {
            // What to protect (its chain followed), and where it ends.
            let (at, end) = match view.kind(&p) {
                Kind::Symlink => (Some(p.clone()), chain(view, &p).pop()),
                Kind::Missing => {
                    let there = named_elsewhere(view, &p);
                    (there.clone(), there)
                }
                _ => (None, None),
            };
            if let (Some(at), true) = (at, end.is_some_and(|e| inside(&e, &roots))) {
                let why = format!("{} is a protected path", p.display());
                out.protect(view, &at, &why, &roots, false);
            }
        }
    }
    // What the home's start-up files source by a path of their own, where that lies in a
    // writable tree (see `sourced`).
    if let Some(home) = req.home.filter(|_| !roots.is_empty()) {
        for p in super::sourced::sourced_by_startup(home) {
            let p = named(view, &p);
            let end = chain(view, &p).pop().unwrap_or_else(|| p.clone());
            if inside(&end, &roots) {
                out.protect(
                    view,
                    &p,
                    "a file a shell start-up file sources",
                    &roots,
                    false,
                );
            }
        }
    }
    out.read_only
        .extend(super::git_hooks_at_launch(view, &roots));
    // A root's git directory whose hooks or config is a symlink (`.git/hooks -> hooks.real`):
    // what it points at is written by git's hooks' or config's name.
    for root in &roots {
        for name in ["hooks", "config", "info"] {
            let p = root.join(".git").join(name);
            if view.kind(&p) == Kind::Symlink {
                let why = format!("git's {name} (through {})", p.display());
                out.protect(view, &p, &why, &roots, false);
            }
        }
    }
    // Directories on the host's PATH that lie in a writable tree, and what the links directly
    // in them point at — in those directories, and in the home's own (`~/.local/bin/tool` ->
    // a writable `~/opt/tool/bin/tool`; the system's are not read: hundreds of links, and
    // none of them the user's to point anywhere). A relative entry names a directory of
    // wherever the host's shell is: the working directory's is protected, and `.` or an empty
    // entry (the current directory itself) is said.
    let path_var = req.path_var.filter(|p| !p.is_empty());
    for entry in path_var.into_iter().flat_map(|p| p.split(':')) {
        if entry.is_empty() || entry == "." || entry == "./" {
            let why = "the host's PATH holds the current directory (`.` or an empty entry): a \
                       command the program writes in any directory runs on the host when that \
                       command is run there; remove it from PATH";
            if !out.overrides.iter().any(|w| w == why) {
                out.overrides.push(why.into());
            }
            continue;
        }
        let named_dir = if entry.starts_with('/') {
            named(view, Path::new(entry))
        } else {
            named(view, &req.cwd.join(entry))
        };
        // The entry may itself be a symlink (`~/lbin -> project/bin`): where it leads is the
        // directory searched, and protected with the links on the way.
        let dir = chain(view, &named_dir)
            .pop()
            .unwrap_or_else(|| named_dir.clone());
        if inside(&dir, &roots) {
            out.protect(
                view,
                &named_dir,
                "a directory on the host's PATH",
                &roots,
                false,
            );
        } else if !req.home.is_some_and(|h| under(&dir, h)) {
            continue;
        }
        for e in std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .take(4096)
        {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_symlink()) {
                let end = chain(view, &p).pop().unwrap_or(p);
                if inside(&end, &roots) && !under(&end, &dir) {
                    out.protect(
                        view,
                        &end,
                        "a command on the host's PATH (linked from it)",
                        &roots,
                        false,
                    );
                }
            }
        }
    }
    // sandbox-launch's own user policy and trusted projects where `XDG_CONFIG_HOME` moves
    // them (the table has `~/.config/sandbox-launch`): a policy written there is obeyed by the
    // next launch.
    if let Some(dir) = req.user_policy_dir.filter(|_| !roots.is_empty()) {
        let named_dir = named(view, dir);
        let end = chain(view, &named_dir)
            .pop()
            .unwrap_or_else(|| named_dir.clone());
        let in_table = req
            .home
            .is_some_and(|h| named_dir == h.join(".config/sandbox-launch"));
        if inside(&end, &roots) && !in_table {
            out.protect(
                view,
                &named_dir,
                "sandbox-launch's user configuration (its policy, trusted projects)",
                &roots,
                false,
            );
        }
    }
    // What the host's git configuration runs from elsewhere.
    let mut dirs = vec![req.cwd.to_path_buf()];
    dirs.extend(roots.iter().cloned());
    let git = git_paths::discover(view, &dirs, req.home);
    for h in &git.hooks {
        if inside(h, &roots) {
            out.protect(view, h, "git hooks (core.hooksPath)", &roots, false);
        }
    }
    for i in &git.includes {
        if inside(i, &roots) {
            out.protect(view, i, "git configuration (included)", &roots, false);
        }
    }
    for c in &git.commands {
        if inside(c, &roots) {
            out.protect(view, c, "a program git's configuration runs", &roots, false);
        }
    }
    // --deny-write: protected whether it exists or not, and beats every override.
    for d in req.deny_write {
        let d = named(view, d);
        out.protect(view, &d, "--deny-write", &roots, true);
    }
    // An explicit allow-write of a protected path (or of a path inside one) overrides it.
    // Built for the first explicit path only: most launches name none, and the rules are
    // tens of µs of the plan, which init's network thread waits behind (see `layout::persist_plan`).
    let mut rules: Option<Rules> = None;
    for p in req.explicit {
        let rules = rules.get_or_insert_with(|| Rules::new(&out.spec));
        // A directory: is what is written in it protected? (Its parent being writable, or
        // protected paths lying below it, does not make it one.) Anything else: itself.
        let probe = p.join("sandbox-launch-probe");
        let verdict = if view.followed(p) == Kind::Dir {
            rules.judge(Op::Create {
                path: &probe,
                dir: false,
            })
        } else {
            rules.judge(Op::Write { path: p })
        };
        let protected = match verdict {
            Verdict::Refuse(why) => Some(why),
            Verdict::ValidateGitConfig => Some("a git config".into()),
            Verdict::Allow => None,
        };
        if let Some(why) = protected {
            out.spec.overrides.push(p.clone());
            out.overrides.push(format!(
                "--allow-write {}: a protected path ({why}); whatever the program writes there \
                 can run on the host later",
                p.display()
            ));
        }
    }
    out.read_only
        .retain(|p| !out.spec.overrides.iter().any(|o| under(p, o)) || inside_denied(p, &out.spec));
    let set: BTreeSet<PathBuf> = out.read_only.drain(..).collect();
    out.read_only = set.into_iter().collect();
    // Each once, in the order found (what the watch finds at the end is sorted there): sorted
    // here, the few hundred names of a developer's setting were a tenth of the plan.
    plain_path::dedup(&mut out.missing);
    out
}

fn inside_denied(p: &Path, spec: &PersistSpec) -> bool {
    spec.denied.iter().any(|d| under(p, d))
}
