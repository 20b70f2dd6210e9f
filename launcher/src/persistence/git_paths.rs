//! What the host's git configuration makes run from elsewhere: the directory `core.hooksPath`
//! names (husky's `.husky/`, a project's `githooks/`), the files `include.path` and
//! `includeIf.*.path` pull in, and the programs named by path in the settings whose value git
//! runs (`core.fsmonitor = scripts/fsmonitor.sh`, a `textconv`, a `filter`'s `clean`, …).
//! Read at launch, in Rust, from the configuration files git would read for the working
//! directory and each writable tree: the repository's own `config`, the user's `~/.gitconfig`
//! and `~/.config/git/config`, `/etc/gitconfig`, and what they include.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use shim::create_guard::rules::gitconfig;

use super::host_view::{HostView, Kind};
use super::links::{lenient, named};

/// What the configurations name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GitPaths {
    /// Directories named by `core.hooksPath`.
    pub hooks: BTreeSet<PathBuf>,
    /// Files named by `include.path` / `includeIf.*.path`.
    pub includes: BTreeSet<PathBuf>,
    /// Programs named by path (a `/` in the command's first word) in a setting git runs.
    pub commands: BTreeSet<PathBuf>,
}

/// Whether git runs the value of `section.[subsection.]key` as a command (a shell command, or
/// a program's path).
fn runs(section: &str, sub: bool, key: &str) -> bool {
    matches!(
        (section, sub, key),
        (
            "core",
            false,
            "fsmonitor" | "sshcommand" | "editor" | "pager" | "askpass" | "gitproxy"
        ) | ("sequence", false, "editor")
            | ("interactive", false, "difffilter")
            | ("diff", false, "external")
            | ("diff", true, "textconv" | "command")
            | ("filter", true, "clean" | "smudge" | "process")
            | ("merge", true, "driver")
            | ("mergetool" | "difftool" | "browser" | "man", true, "cmd")
            | ("credential", _, "helper")
            | ("gpg", _, "program")
            | ("gpg", true, "defaultkeycommand")
            | ("remote", true, "uploadpack" | "receivepack")
            | ("sendemail", _, "smtpserver" | "tocmd" | "cccmd")
            | ("pager", true, _)
            | ("alias", _, _)
            | ("uploadpack", false, "packobjectshook")
    )
}

/// The programs a command value names by path: every word holding a `/` (a leading `!` of a
/// shell command, quotes and shell punctuation dropped, `$HOME` read as `~`), whatever runs
/// it — `sh tools/fsmonitor.sh`, `!f() { tools/cred; }; f` — but URLs. A bare name is found on
/// `PATH`, which is protected as such; a boolean names nothing.
fn programs_of(value: &str) -> Vec<String> {
    value
        .split(|c: char| c.is_whitespace() || ";|&(){}<>`'\"=!".contains(c))
        .filter(|w| w.contains('/') && !w.contains("://"))
        .map(|w| {
            for home in ["${HOME}/", "$HOME/"] {
                if let Some(rest) = w.strip_prefix(home) {
                    return format!("~/{rest}");
                }
            }
            w.to_string()
        })
        .collect()
}

/// A repository: its working tree's top and its git directory.
struct Repo {
    top: PathBuf,
    gitdir: PathBuf,
}

/// The repository `dir` lies in, found as git finds it (a `.git` directory or file in `dir` or
/// an ancestor).
fn repository_of(view: &mut HostView, dir: &Path) -> Option<Repo> {
    for top in dir.ancestors() {
        let dotgit = top.join(".git");
        let gitdir = match view.followed(&dotgit) {
            Kind::Missing => continue,
            Kind::Dir => dotgit,
            Kind::Symlink | Kind::File | Kind::Other => {
                let text = std::fs::read_to_string(&dotgit).ok()?;
                let target = text.trim().strip_prefix("gitdir:")?.trim();
                lenient(view, &top.join(target))
            }
        };
        return Some(Repo {
            top: top.to_path_buf(),
            gitdir,
        });
    }
    None
}

/// `~/x` and relative paths, as git expands them in configuration values.
fn expand(
    view: &mut HostView,
    value: &str,
    relative_to: &Path,
    home: Option<&Path>,
) -> Option<PathBuf> {
    let p = if let Some(rest) = value.strip_prefix("~/") {
        home?.join(rest)
    } else if value == "~" {
        home?.to_path_buf()
    } else {
        relative_to.join(value)
    };
    Some(named(view, &p))
}

/// Read `file` and what it includes (at most 10 deep), collecting into `out`; relative hook
/// paths are relative to `top` (the working tree whose hooks run), includes to the including
/// file's directory.
struct Reading<'a> {
    view: &'a mut HostView,
    home: Option<&'a Path>,
    out: GitPaths,
}

fn read(r: &mut Reading<'_>, file: &Path, top: &Path, depth: usize) {
    if depth > 10 || r.view.followed(file) == Kind::Missing {
        return;
    }
    let Ok(meta) = std::fs::metadata(file) else {
        return;
    };
    if !meta.is_file() || meta.len() as usize > gitconfig::MAX_CONFIG {
        return;
    }
    let Ok(bytes) = std::fs::read(file) else {
        return;
    };
    let Ok(entries) = gitconfig::parse(&bytes) else {
        return;
    };
    let dir = file.parent().unwrap_or(Path::new("/"));
    for e in entries {
        let Some(value) = e.value.as_deref() else {
            continue;
        };
        match (e.section.as_str(), e.key.as_str()) {
            ("core", "hookspath") if e.subsection.is_none() => {
                if let Some(p) = expand(r.view, value, top, r.home) {
                    r.out.hooks.insert(p);
                }
            }
            ("include" | "includeif", "path") => {
                if let Some(p) = expand(r.view, value, dir, r.home) {
                    if r.out.includes.insert(p.clone()) {
                        read(r, &p, top, depth + 1);
                    }
                }
            }
            // Copied into every repository git makes from then on, hooks included.
            ("init", "templatedir") if e.subsection.is_none() => {
                if let Some(p) = expand(r.view, value, top, r.home) {
                    r.out.commands.insert(p);
                }
            }
            (section, key) if runs(section, e.subsection.is_some(), key) => {
                // Relative to the working tree's top, where git runs it.
                for w in programs_of(value) {
                    if let Some(p) = expand(r.view, &w, top, r.home) {
                        r.out.commands.insert(p);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Everything the configurations git reads for `dirs` (the working directory and the writable
/// roots) make run from elsewhere.
pub fn discover(view: &mut HostView, dirs: &[PathBuf], home: Option<&Path>) -> GitPaths {
    let mut globals: Vec<PathBuf> = vec![PathBuf::from("/etc/gitconfig")];
    if let Some(h) = home {
        globals.push(h.join(".gitconfig"));
        let xdg = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| h.join(".config"));
        globals.push(xdg.join("git/config"));
    }
    let mut seen = BTreeSet::new();
    let mut r = Reading {
        view,
        home,
        out: GitPaths::default(),
    };
    for dir in dirs {
        let Some(repo) = repository_of(r.view, dir) else {
            continue;
        };
        if !seen.insert(repo.gitdir.clone()) {
            continue;
        }
        read(&mut r, &repo.gitdir.join("config"), &repo.top, 0);
        if let Ok(common) = std::fs::read_to_string(repo.gitdir.join("commondir")) {
            let common = lenient(r.view, &repo.gitdir.join(common.trim()));
            read(&mut r, &common.join("config"), &repo.top, 0);
        }
        for g in &globals {
            read(&mut r, g, &repo.top, 0);
        }
    }
    r.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_path_and_includes_are_found_in_the_repository_and_the_global_files() {
        let base = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("sl-gitpaths-{}", std::process::id()));
        let repo = base.join("proj");
        let home = base.join("home");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(
            repo.join(".git/config"),
            "[core]\n\thooksPath = .husky\n[include]\n\tpath = ../extra.inc\n",
        )
        .unwrap();
        std::fs::write(repo.join("extra.inc"), "[core]\n\thooksPath = ~/hooks\n").unwrap();
        std::fs::write(
            home.join(".gitconfig"),
            "[includeIf \"gitdir:~/\"]\n\tpath = ~/.gitconfig.work\n",
        )
        .unwrap();
        std::fs::write(
            repo.join(".git/info-extra.inc"),
            "[core]\n\tfsmonitor = scripts/fsmon.sh\n[diff \"tc\"]\n\ttextconv = !./tools/tc --x\n\
             [filter \"f\"]\n\tclean = cat\n[alias]\n\tx = !~/bin/x.sh arg\n[core]\n\tpager = less\n\
             [credential]\n\thelper = \"!f() { tools/cred get; }; f\"\n[core]\n\tgitProxy = sh gp/proxy\n\
             [gpg \"ssh\"]\n\tdefaultKeyCommand = $HOME/kc\n[remote \"o\"]\n\turl = https://example.invalid/x\n",
        )
        .unwrap();
        std::fs::write(
            repo.join(".git/config"),
            "[core]\n\thooksPath = .husky\n[include]\n\tpath = ../extra.inc\n\tpath = info-extra.inc\n",
        )
        .unwrap();
        let found = discover(&mut HostView::new(), &[repo.join("src")], Some(&home));
        for named in [
            repo.join("scripts/fsmon.sh"),
            repo.join("tools/tc"),
            home.join("bin/x.sh"),
            repo.join("tools/cred"),
            repo.join("gp/proxy"),
            home.join("kc"),
        ] {
            assert!(
                found.commands.contains(&named),
                "{named:?}: {:?}",
                found.commands
            );
        }
        assert_eq!(
            found.commands.len(),
            6,
            "bare names are PATH's: {:?}",
            found.commands
        );
        assert!(found.hooks.contains(&repo.join(".husky")));
        assert!(found.hooks.contains(&home.join("hooks")));
        assert!(found.includes.contains(&repo.join("extra.inc")));
        assert!(found.includes.contains(&home.join(".gitconfig.work")));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
