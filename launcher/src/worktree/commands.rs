//! `sandbox-launch worktrees`, `diff`, `apply` and `discard`. Each returns the command's exit
//! code: 0 done, 1 refused or failed (what and why on stderr).

use std::io::Write;

use anyhow::Result;

use super::apply::{self, Choice};
use super::beneath;
use super::changes::{self, Change, Class, Op};
use super::manifest::Manifest;
use super::patch::{self, Sides};
use super::store::{Store, Worktree};

fn report(r: Result<i32>) -> i32 {
    r.unwrap_or_else(|e| {
        crate::say!("sandbox-launch: {e:#}");
        1
    })
}

fn scan(w: &Worktree) -> Result<Vec<Change>> {
    changes::scan(
        &w.upper(),
        &w.meta.project,
        crate::sandbox::canonical_home().as_deref(),
    )
}

/// `worktrees [--json]`.
pub fn list(as_json: bool) -> i32 {
    report((|| {
        let store = Store::locate()?;
        let all = store.list();
        if as_json {
            let rows: Vec<serde_json::Value> = all
                .iter()
                .map(|w| {
                    let mut v = serde_json::to_value(&w.meta).unwrap_or_default();
                    v["running"] = w.running().into();
                    v["dir"] = w.dir.display().to_string().into();
                    v
                })
                .collect();
            println!("{}", serde_json::Value::Array(rows));
            return Ok(0);
        }
        println!(
            "{:<8}  {:<16}  {:<7}  {:<40}  PROGRAM",
            "ID", "NAME", "STATE", "CHECKOUT"
        );
        for w in &all {
            println!(
                "{:<8}  {:<16}  {:<7}  {:<40}  {}",
                w.meta.id,
                w.meta.name.as_deref().unwrap_or("-"),
                if w.running() { "running" } else { "ended" },
                w.meta.project.display(),
                w.meta.program.join(" ")
            );
        }
        Ok(0)
    })())
}

/// `diff --stat`'s lines: one per path that changes (directories only when nothing below
/// them is listed), a deletion followed by an addition of the same path as one `T`.
fn stat_lines(all: &[Change]) -> Vec<String> {
    let mut rows: Vec<(Vec<u8>, char, String)> = Vec::new();
    for c in all.iter().filter(|c| c.class != Class::Repository) {
        let (letter, dir) = match &c.op {
            Op::Add { new } => ('A', new.kind == beneath::Kind::Dir),
            Op::Delete { old } => ('D', old.kind == beneath::Kind::Dir),
            Op::Modify { .. } => ('M', false),
            Op::DirMode { .. } => ('M', true),
            Op::Special { .. } => ('X', false),
        };
        let key = changes::bytes(&c.rel).to_vec();
        if let Some(row) = rows.iter_mut().find(|r| r.0 == key) {
            row.1 = 'T';
            continue;
        }
        let note = match &c.class {
            Class::Persistence(_) => "\tpersistence".to_string(),
            _ => String::new(),
        };
        let shown = format!("{}{}", patch::quote("", &key), if dir { "/" } else { "" });
        rows.push((key, letter, format!("{shown}{note}")));
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows.into_iter()
        .map(|(_, l, rest)| format!("{l}\t{rest}"))
        .collect()
}

/// `diff ID|NAME [--stat]`: the patch (or one line per path) on stdout, a summary on stderr.
pub fn diff(target: &str, stat: bool) -> i32 {
    report((|| {
        let w = Store::locate()?.find(target)?;
        if w.running() {
            crate::say!(
                "sandbox-launch: warning: worktree {} is in use by a running sandbox: this is what it has written so far",
                w.label()
            );
        }
        let all = scan(&w)?;
        let mut out = std::io::stdout().lock();
        if stat {
            for line in stat_lines(&all) {
                writeln!(out, "{line}")?;
            }
            out.flush()?;
            summary(&w, &all);
            return Ok(0);
        }
        let sides = Sides::open(&w.upper(), &w.meta.project)?;
        out.write_all(&patch::render(&all, &sides, false)?)?;
        let surfaces = patch::render(&all, &sides, true)?;
        out.write_all(&surfaces)?;
        let repo = all.iter().filter(|c| c.class == Class::Repository).count();
        if repo > 0 {
            writeln!(
                out,
                "# git directories: {repo} entries of their own state (objects, refs, index, logs) changed inside: not part of the patch; apply leaves the repository as it is"
            )?;
        }
        out.flush()?;
        summary(&w, &all);
        Ok(0)
    })())
}

/// What `diff` and `apply` say on stderr: counts, surfaces, conflicts so far.
fn summary(w: &Worktree, all: &[Change]) {
    let files = all
        .iter()
        .filter(|c| c.class == Class::Ordinary)
        .filter(|c| match &c.op {
            Op::Special { .. } | Op::DirMode { .. } => false,
            Op::Add { new: s } | Op::Delete { old: s } => s.kind != beneath::Kind::Dir,
            Op::Modify { .. } => true,
        })
        .count();
    let surfaces: Vec<&Change> = all
        .iter()
        .filter(|c| matches!(c.class, Class::Persistence(_)))
        .collect();
    crate::say!(
        "sandbox-launch: worktree {} of {}: {files} files changed, {} persistence surfaces",
        w.label(),
        w.meta.project.display(),
        surfaces.len()
    );
    for c in surfaces {
        if let Class::Persistence(why) = &c.class {
            crate::say!(
                "sandbox-launch: persistence surface changed (apply leaves it unless named with --include-persistence): {} — {why}",
                c.rel.display()
            );
        }
    }
}

/// `apply ID|NAME [--include-persistence PATH]... [--skip-persistence]`.
pub fn apply(target: &str, choice: &Choice) -> i32 {
    report((|| {
        let w = Store::locate()?.find(target)?;
        w.check_ended("apply it")?;
        let all = scan(&w)?;
        let (chosen, mut rep) = apply::choose(&all, choice)?;
        let root = beneath::open_root(&w.meta.project)?;
        let base = Manifest::load(&w.base())?;
        let conflicts = apply::conflicts(&root, &chosen, &base);
        if !conflicts.is_empty() {
            let n = conflicts.len();
            let shown: Vec<String> = conflicts
                .into_iter()
                .take(20)
                .map(|c| format!("  {c}"))
                .collect();
            anyhow::bail!(
                "refused: {n} path(s) the worktree changes were changed in the checkout since the sandbox started:\n{}{}\nnothing was changed; look with `sandbox-launch diff {target}`, settle the checkout, or discard the worktree",
                shown.join("\n"),
                if n > 20 { "\n  ..." } else { "" }
            );
        }
        let upper = beneath::open_root(&w.upper())?;
        for p in &rep.included {
            crate::say!(
                "sandbox-launch: warning: applying persistence surface {} as asked (it can run code on the host)",
                p.display()
            );
        }
        apply::commit(
            &root,
            &upper,
            &chosen,
            &format!(".sandbox-launch-apply-{}", w.meta.id),
            &mut rep,
        )?;
        crate::say!(
            "sandbox-launch: applied {} change(s) of worktree {} to {}",
            rep.applied,
            w.label(),
            w.meta.project.display()
        );
        for p in &rep.skipped {
            crate::say!(
                "sandbox-launch: left in the worktree (persistence surface): {}",
                p.display()
            );
        }
        for p in &rep.special {
            crate::say!(
                "sandbox-launch: not applied (not a file, directory or symlink): {}",
                p.display()
            );
        }
        for p in &rep.kept_dirs {
            crate::say!(
                "sandbox-launch: kept directory {} (it still holds what was not applied)",
                p.display()
            );
        }
        if rep.repository > 0 {
            crate::say!(
                "sandbox-launch: {} entries of git directories' own state were not applied (the repository is as it was)",
                rep.repository
            );
        }
        crate::say!(
            "sandbox-launch: the worktree is kept: `sandbox-launch discard {}` removes it",
            target
        );
        Ok(0)
    })())
}

/// `discard ID|NAME`.
pub fn discard(target: &str) -> i32 {
    report((|| {
        let w = Store::locate()?.find(target)?;
        w.check_ended("discard it")?;
        let label = w.label();
        w.remove()?;
        crate::say!("sandbox-launch: discarded worktree {label}");
        Ok(0)
    })())
}
