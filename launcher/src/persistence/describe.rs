//! The persistence model of one launch in words (`sandbox-launch check`): the writable trees,
//! the table's surfaces the guard protects in them, what else was found at launch (symlink
//! targets, PATH directories, core.hooksPath, includes, --deny-write), what is bound read-only,
//! and every override.

use std::fmt::Write;
use std::path::Path;

use super::plan::Protections;
use super::table::{Scope, SURFACES};

pub fn describe(prot: &Protections, home: Option<&Path>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "persistence (what could run on the host later):");
    if prot.spec.roots.is_empty() {
        let _ = writeln!(out, "  no writable tree of the host: nothing to protect");
        return out;
    }
    let _ = writeln!(
        out,
        "  writable trees, each protected at any depth by the create guard:"
    );
    for r in &prot.spec.roots {
        let _ = writeln!(out, "    {}", r.display());
    }
    let covered = home.filter(|h| {
        prot.spec
            .roots
            .iter()
            .any(|r| r.starts_with(h) || h.starts_with(r))
    });
    let _ = writeln!(out, "  protected surfaces (README: Persistence surfaces):");
    for s in SURFACES {
        let where_ = match (s.scope, covered) {
            (Scope::Anywhere, _) => "at any depth".to_string(),
            (Scope::GitDir, _) => "in every git directory; only what git writes".to_string(),
            (Scope::Home, Some(h)) => format!("in {}", h.display()),
            (Scope::Home, None) => continue,
        };
        let _ = writeln!(out, "    {} ({where_}): {}", s.what, s.patterns.join(" "));
    }
    if !prot.shown.is_empty() {
        let _ = writeln!(out, "  found at launch:");
        for s in &prot.shown {
            let layer = if s.bound {
                "read-only bind + guard"
            } else {
                "guard"
            };
            let _ = writeln!(out, "    {} — {} [{layer}]", s.path.display(), s.why);
        }
    }
    let bound: Vec<_> = prot
        .read_only
        .iter()
        .filter(|p| !prot.shown.iter().any(|s| &s.path == *p))
        .collect();
    if !bound.is_empty() {
        let _ = writeln!(out, "  bound read-only at launch (they exist):");
        for p in bound {
            let _ = writeln!(out, "    {}", p.display());
        }
    }
    if prot.overrides.is_empty() {
        let _ = writeln!(out, "  overrides: none");
    } else {
        let _ = writeln!(
            out,
            "  overrides (explicit --allow-write of a protected path):"
        );
        for o in &prot.overrides {
            let _ = writeln!(out, "    {o}");
        }
    }
    out
}
