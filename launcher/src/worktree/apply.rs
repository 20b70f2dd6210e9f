//! `apply`: the worktree's changes onto the checkout, all of them or none.
//!
//! 1. Choose: the project's files; persistence surfaces only when named
//!    (`--include-persistence PATH`, or all left out with `--skip-persistence`): one changed
//!    and not named refuses the whole apply; a git directory's own state and fifos/devices
//!    never.
//! 2. Check: every path to be touched must be on the host as it was at launch (`manifest`);
//!    anything changed meanwhile refuses the whole apply, and nothing is written.
//! 3. Stage: each new file's contents are copied from the upper layer into a staging
//!    directory inside the checkout (same filesystem), so a full disk or an unreadable file
//!    fails before the checkout changes.
//! 4. Commit: renames, in the order of the changes; what is replaced or removed is renamed
//!    into the staging directory, not deleted, and every step is journalled: a failure undoes
//!    the journal, and the checkout is as before.
//!
//! Every path is reached from a descriptor of the checkout with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` (`beneath`): a symlink the program wrote is placed as a symlink and
//! never followed, and one on the way in the checkout refuses the apply.

use std::collections::HashSet;
use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

use super::beneath::{self, Kind, Stat};
use super::changes::{Change, Class, Op};
use super::manifest::{Entry, Manifest};

/// What the caller chose for persistence surfaces.
#[derive(Debug, Default, Clone)]
pub struct Choice {
    /// Surfaces (or directories of them) to apply too.
    pub include: Vec<PathBuf>,
    /// Apply the rest and leave every surface not named in the worktree.
    pub skip_persistence: bool,
}

/// What an apply did.
#[derive(Debug, Default)]
pub struct Report {
    pub applied: usize,
    /// Persistence surfaces applied because they were named.
    pub included: Vec<PathBuf>,
    /// Persistence surfaces left in the worktree (`--skip-persistence`).
    pub skipped: Vec<PathBuf>,
    /// Entries of git directories' own state, left out.
    pub repository: usize,
    /// Fifos, sockets, devices, left out.
    pub special: Vec<PathBuf>,
    /// Directories that were to be removed but still hold what was left out.
    pub kept_dirs: Vec<PathBuf>,
}

fn named(include: &[PathBuf], rel: &Path) -> bool {
    include
        .iter()
        .any(|p| rel.starts_with(p) || p.starts_with(rel))
}

/// Step 1.
pub fn choose<'a>(changes: &'a [Change], choice: &Choice) -> Result<(Vec<&'a Change>, Report)> {
    let mut report = Report::default();
    let mut chosen = Vec::new();
    let mut unnamed: Vec<(&Path, &str)> = Vec::new();
    for inc in &choice.include {
        beneath::plain(inc).map_err(|e| anyhow!("--include-persistence: {e}"))?;
        if !changes
            .iter()
            .any(|c| matches!(c.class, Class::Persistence(_)) && c.rel.starts_with(inc))
        {
            bail!(
                "--include-persistence {}: the worktree changes no persistence surface there (`sandbox-launch diff` lists them)",
                inc.display()
            );
        }
    }
    for c in changes {
        match (&c.class, &c.op) {
            (_, Op::Special { .. }) => report.special.push(c.rel.clone()),
            (Class::Repository, _) => report.repository += 1,
            (Class::Ordinary, _) => chosen.push(c),
            (Class::Persistence(_), _) if named(&choice.include, &c.rel) => {
                report.included.push(c.rel.clone());
                chosen.push(c);
            }
            (Class::Persistence(_), _) if choice.skip_persistence => {
                report.skipped.push(c.rel.clone())
            }
            (Class::Persistence(why), _) => unnamed.push((&c.rel, why)),
        }
    }
    if !unnamed.is_empty() {
        let list: Vec<String> = unnamed
            .iter()
            .map(|(p, why)| format!("  {} ({why})", p.display()))
            .collect();
        bail!(
            "refused: the worktree changes persistence surfaces, which run code on the host later:\n{}\nreview them with `sandbox-launch diff`; then name each one you accept with --include-persistence PATH, or apply everything else with --skip-persistence; nothing was changed",
            list.join("\n")
        );
    }
    Ok((chosen, report))
}

fn same(now: Option<Stat>, then: Option<&Entry>) -> bool {
    match (now, then) {
        (None, None) => true,
        (Some(n), Some(t)) => Entry::of(&n) == *t,
        _ => false,
    }
}

/// Step 2: the paths that changed on the host since the launch.
pub fn conflicts(root: &OwnedFd, chosen: &[&Change], base: &Manifest) -> Vec<String> {
    let mut out = Vec::new();
    let mut freed: HashSet<&Path> = HashSet::new();
    for c in chosen {
        if matches!(c.op, Op::Add { .. }) && freed.contains(c.rel.as_path()) {
            continue; // checked as the deletion before it
        }
        if matches!(c.op, Op::Delete { .. }) {
            freed.insert(&c.rel);
        }
        let now = match beneath::lstat(root.as_raw_fd(), &c.rel) {
            Ok(s) => s,
            Err(e) => {
                out.push(format!("{}: {e}", c.rel.display()));
                continue;
            }
        };
        let then = base.get(&c.rel);
        if !same(now, then) {
            let how = match (now, then) {
                (Some(_), None) => "created on the host since the launch",
                (None, Some(_)) => "deleted on the host since the launch",
                _ => "changed on the host since the launch",
            };
            out.push(format!("{}: {how}", c.rel.display()));
        }
    }
    out
}

fn c(name: &OsStr) -> Result<CString> {
    Ok(CString::new(name.as_bytes())?)
}

fn os(r: libc::c_int, what: &str) -> Result<()> {
    if r < 0 {
        return Err(std::io::Error::last_os_error()).context(what.to_string());
    }
    Ok(())
}

/// One undoable step.
enum Step {
    /// `rel` was renamed to `stash` in the staging directory.
    Moved { rel: PathBuf, stash: String },
    /// `rel` was made from `staged` (renamed from the staging directory).
    Placed { rel: PathBuf, staged: String },
    /// The directory `rel` was made.
    MadeDir { rel: PathBuf },
    /// The empty directory `rel` (mode) was removed.
    RemovedDir { rel: PathBuf, mode: u32 },
    /// `rel`'s mode was `mode`.
    Chmod { rel: PathBuf, mode: u32 },
}

struct Commit<'a> {
    root: &'a OwnedFd,
    stage: OwnedFd,
    stage_name: String,
    journal: Vec<Step>,
    n: usize,
}

impl Commit<'_> {
    fn at(&self, rel: &Path) -> Result<(OwnedFd, CString)> {
        let (dir, name) = beneath::parent(self.root.as_raw_fd(), rel)
            .with_context(|| format!("{}", rel.display()))?;
        Ok((dir, c(&name)?))
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.n += 1;
        format!("{prefix}{}", self.n)
    }

    fn rename(&self, fd1: i32, n1: &CString, fd2: i32, n2: &CString, what: &str) -> Result<()> {
        // SAFETY: valid descriptors and C strings; NOREPLACE: nothing is overwritten silently.
        let r =
            unsafe { libc::renameat2(fd1, n1.as_ptr(), fd2, n2.as_ptr(), libc::RENAME_NOREPLACE) };
        os(r, what)
    }

    fn stash(&mut self, rel: &Path) -> Result<()> {
        let (dir, name) = self.at(rel)?;
        let stash = self.fresh("old-");
        self.rename(
            dir.as_raw_fd(),
            &name,
            self.stage.as_raw_fd(),
            &CString::new(stash.clone())?,
            &format!("move {} aside", rel.display()),
        )?;
        self.journal.push(Step::Moved {
            rel: rel.to_path_buf(),
            stash,
        });
        Ok(())
    }

    fn place(&mut self, rel: &Path, staged: String) -> Result<()> {
        let (dir, name) = self.at(rel)?;
        self.rename(
            self.stage.as_raw_fd(),
            &CString::new(staged.clone())?,
            dir.as_raw_fd(),
            &name,
            &format!("put {} in place", rel.display()),
        )?;
        self.journal.push(Step::Placed {
            rel: rel.to_path_buf(),
            staged,
        });
        Ok(())
    }

    fn chmod(&mut self, rel: &Path, old: u32, new: u32) -> Result<()> {
        let (dir, name) = self.at(rel)?;
        let st = beneath::stat_at(dir.as_raw_fd(), OsStr::from_bytes(name.as_bytes()))?;
        if st.kind != Kind::Dir {
            bail!("{}: no longer a directory", rel.display());
        }
        // SAFETY: valid descriptor and C string (a directory just checked, not a symlink).
        os(
            unsafe { libc::fchmodat(dir.as_raw_fd(), name.as_ptr(), new & 0o777, 0) },
            &format!("chmod {}", rel.display()),
        )?;
        self.journal.push(Step::Chmod {
            rel: rel.to_path_buf(),
            mode: old,
        });
        Ok(())
    }

    /// Undo every step, last first. Best effort: what cannot be undone is said.
    fn undo(&mut self) -> Vec<String> {
        let mut failed = Vec::new();
        while let Some(step) = self.journal.pop() {
            let r = (|| -> Result<()> {
                match &step {
                    Step::Moved { rel, stash } => {
                        let (dir, name) = self.at(rel)?;
                        self.rename(
                            self.stage.as_raw_fd(),
                            &CString::new(stash.clone())?,
                            dir.as_raw_fd(),
                            &name,
                            "restore",
                        )
                    }
                    Step::Placed { rel, staged } => {
                        let (dir, name) = self.at(rel)?;
                        self.rename(
                            dir.as_raw_fd(),
                            &name,
                            self.stage.as_raw_fd(),
                            &CString::new(staged.clone())?,
                            "take back",
                        )
                    }
                    Step::MadeDir { rel } => {
                        let (dir, name) = self.at(rel)?;
                        // SAFETY: valid descriptor and C string.
                        os(
                            unsafe {
                                libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR)
                            },
                            "rmdir",
                        )
                    }
                    Step::RemovedDir { rel, mode } => {
                        let (dir, name) = self.at(rel)?;
                        // SAFETY: valid descriptor and C string.
                        os(
                            unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), *mode) },
                            "mkdir",
                        )
                    }
                    Step::Chmod { rel, mode } => {
                        let (dir, name) = self.at(rel)?;
                        // SAFETY: valid descriptor and C string.
                        os(
                            unsafe { libc::fchmodat(dir.as_raw_fd(), name.as_ptr(), *mode, 0) },
                            "chmod",
                        )
                    }
                }
            })();
            if let Err(e) = r {
                let rel = match &step {
                    Step::Moved { rel, .. }
                    | Step::Placed { rel, .. }
                    | Step::MadeDir { rel }
                    | Step::RemovedDir { rel, .. }
                    | Step::Chmod { rel, .. } => rel,
                };
                failed.push(format!("{}: {e:#}", rel.display()));
            }
        }
        failed
    }
}

/// Copy the upper layer's `rel` (a file or symlink) into the staging directory.
fn stage_one(upper: &OwnedFd, commit: &mut Commit<'_>, rel: &Path, st: &Stat) -> Result<String> {
    let name = commit.fresh("new-");
    let cname = CString::new(name.clone())?;
    if st.kind == Kind::Symlink {
        let target = CString::new(beneath::readlink(upper.as_raw_fd(), rel)?)?;
        // SAFETY: valid C strings and descriptor.
        os(
            unsafe { libc::symlinkat(target.as_ptr(), commit.stage.as_raw_fd(), cname.as_ptr()) },
            "symlink",
        )?;
        return Ok(name);
    }
    let src = beneath::open(upper.as_raw_fd(), rel, libc::O_RDONLY, 0)
        .with_context(|| format!("upper layer: {}", rel.display()))?;
    if beneath::stat_fd(src.as_raw_fd())?.kind != Kind::File {
        bail!("upper layer: {}: no longer a regular file", rel.display());
    }
    // SAFETY: valid descriptor and C string; the result is checked and owned.
    let fd = unsafe {
        libc::openat(
            commit.stage.as_raw_fd(),
            cname.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o600,
        )
    };
    os(fd, "create a staged file")?;
    // SAFETY: a fresh descriptor we own.
    let dst = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    super::sparse::copy(&std::fs::File::from(src), &dst)
        .with_context(|| format!("copy {}", rel.display()))?;
    // Permissions as the program left them, without set-id or sticky bits.
    // SAFETY: a valid descriptor.
    os(
        unsafe { libc::fchmod(dst.as_raw_fd(), st.mode & 0o777) },
        "chmod a staged file",
    )?;
    dst.sync_all()?;
    Ok(name)
}

/// Steps 3 and 4 (the choice and the checks done): `stage_name` is the staging directory's
/// name at the checkout's top.
pub fn commit(
    root: &OwnedFd,
    upper: &OwnedFd,
    chosen: &[&Change],
    stage_name: &str,
    report: &mut Report,
) -> Result<()> {
    let cstage = CString::new(stage_name)?;
    // SAFETY: valid descriptor and C string.
    os(
        unsafe { libc::mkdirat(root.as_raw_fd(), cstage.as_ptr(), 0o700) },
        &format!(
            "create the staging directory {stage_name} in the checkout (if a previous apply was interrupted, what it replaced is in there: look, then remove it)"
        ),
    )?;
    let stage = beneath::open(
        root.as_raw_fd(),
        Path::new(stage_name),
        libc::O_PATH | libc::O_DIRECTORY,
        0,
    )?;
    let mut k = Commit {
        root,
        stage,
        stage_name: stage_name.to_string(),
        journal: Vec::new(),
        n: 0,
    };
    let result = (|| -> Result<()> {
        let mut staged = Vec::with_capacity(chosen.len());
        for ch in chosen {
            staged.push(match &ch.op {
                Op::Add { new } | Op::Modify { new, .. } if new.kind != Kind::Dir => {
                    Some(stage_one(upper, &mut k, &ch.rel, new)?)
                }
                _ => None,
            });
        }
        let mut modes: Vec<(&Path, u32, u32)> = Vec::new();
        for (ch, staged) in chosen.iter().zip(staged) {
            match (&ch.op, staged) {
                (Op::Delete { old }, _) if old.kind == Kind::Dir => {
                    let (dir, name) = k.at(&ch.rel)?;
                    // SAFETY: valid descriptor and C string.
                    let r = unsafe {
                        libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR)
                    };
                    if r < 0
                        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOTEMPTY)
                    {
                        report.kept_dirs.push(ch.rel.clone());
                        continue;
                    }
                    os(r, &format!("remove {}", ch.rel.display()))?;
                    k.journal.push(Step::RemovedDir {
                        rel: ch.rel.clone(),
                        mode: old.mode & 0o777,
                    });
                }
                (Op::Delete { .. }, _) => k.stash(&ch.rel)?,
                (Op::Add { new }, None) => {
                    let (dir, name) = k.at(&ch.rel)?;
                    // SAFETY: valid descriptor and C string.
                    os(
                        unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o700) },
                        &format!("mkdir {}", ch.rel.display()),
                    )?;
                    k.journal.push(Step::MadeDir {
                        rel: ch.rel.clone(),
                    });
                    modes.push((&ch.rel, 0o700, new.mode));
                }
                (Op::Add { .. }, Some(s)) => k.place(&ch.rel, s)?,
                (Op::Modify { .. }, Some(s)) => {
                    k.stash(&ch.rel)?;
                    k.place(&ch.rel, s)?;
                }
                (Op::DirMode { old, new }, _) => modes.push((&ch.rel, old.mode, new.mode)),
                _ => continue,
            }
            report.applied += 1;
        }
        // Directories' permissions last, deepest first (one without write permission would
        // refuse what goes into it).
        modes.sort_by_key(|(p, _, _)| std::cmp::Reverse(p.components().count()));
        for (rel, old, new) in modes {
            k.chmod(rel, old, new)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        let failed = k.undo();
        let _ = super::store::remove_tree(&stage_path(root, &k.stage_name));
        if failed.is_empty() {
            return Err(e.context("apply failed; the checkout was put back as it was"));
        }
        return Err(e.context(format!(
            "apply failed, and putting the checkout back failed too for: {} (what was replaced is kept in {})",
            failed.join("; "),
            k.stage_name
        )));
    }
    let _ = super::store::remove_tree(&stage_path(root, &k.stage_name));
    Ok(())
}

/// The staging directory's host path (for removal: its entries are ours).
fn stage_path(root: &OwnedFd, name: &str) -> PathBuf {
    std::fs::read_link(format!("/proc/self/fd/{}", root.as_raw_fd()))
        .map(|p| p.join(name))
        .unwrap_or_else(|_| PathBuf::from(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(root: &OwnedFd, p: &str) -> Stat {
        beneath::lstat(root.as_raw_fd(), Path::new(p))
            .unwrap()
            .unwrap()
    }

    #[test]
    fn a_failure_midway_puts_the_checkout_back() {
        let base = std::env::temp_dir().join(format!("sl-wt-apply-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("co")).unwrap();
        std::fs::create_dir_all(base.join("up/newdir")).unwrap();
        std::fs::write(base.join("co/a"), "old").unwrap();
        std::fs::write(base.join("co/gone"), "gone").unwrap();
        std::fs::write(base.join("co/taken"), "host's").unwrap();
        std::fs::write(base.join("up/a"), "new").unwrap();
        std::fs::write(base.join("up/taken"), "program's").unwrap();
        let co = beneath::open_root(&base.join("co")).unwrap();
        let up = beneath::open_root(&base.join("up")).unwrap();
        let ch = |rel: &str, op: Op| Change {
            rel: rel.into(),
            op,
            class: Class::Ordinary,
        };
        let changes = [
            ch(
                "a",
                Op::Modify {
                    old: stat(&co, "a"),
                    new: stat(&up, "a"),
                },
            ),
            ch(
                "gone",
                Op::Delete {
                    old: stat(&co, "gone"),
                },
            ),
            ch(
                "newdir",
                Op::Add {
                    new: stat(&up, "newdir"),
                },
            ),
            // `taken` exists in the checkout: placing it fails (nothing is overwritten).
            ch(
                "taken",
                Op::Add {
                    new: stat(&up, "taken"),
                },
            ),
        ];
        let chosen: Vec<&Change> = changes.iter().collect();
        let mut report = Report::default();
        let e = commit(&co, &up, &chosen, ".stage", &mut report).unwrap_err();
        assert!(format!("{e:#}").contains("put back as it was"), "{e:#}");
        let read = |p: &str| std::fs::read_to_string(base.join("co").join(p)).unwrap();
        assert_eq!(read("a"), "old");
        assert_eq!(read("gone"), "gone");
        assert_eq!(read("taken"), "host's");
        assert!(!base.join("co/newdir").exists());
        assert!(!base.join("co/.stage").exists());
        // Without the obstacle, the same changes go through.
        std::fs::remove_file(base.join("co/taken")).unwrap();
        let mut report = Report::default();
        commit(&co, &up, &chosen, ".stage", &mut report).unwrap();
        assert_eq!(read("a"), "new");
        assert_eq!(read("taken"), "program's");
        assert!(!base.join("co/gone").exists() && base.join("co/newdir").is_dir());
        assert!(!base.join("co/.stage").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
