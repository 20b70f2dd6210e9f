//! The mounts of the plan, in order: the private `/tmp` and emptied socket directories, the
//! allow-list mode's tree, the writable roots, handed-in sockets, the protections of the
//! persistence model, and the deny-read masks last.

use std::path::{Path, PathBuf};

use anyhow::Result;
use shim::spec::MountOp;

use super::{depth, resolve, root_symlinks, skip_special, within_any, Planner};
use crate::policy::model::MountKind;

impl Planner<'_> {
    pub(super) fn emit(&mut self) -> Result<()> {
        let mut ops = Vec::new();
        let host = self.host_readable();
        self.out.mounts.host_root = host;

        // Private /tmp, and the host's socket directories emptied.
        let tmp_wanted = host
            || self
                .policy
                .filesystem
                .read_write
                .iter()
                .any(|s| s.value == Path::new("/tmp"));
        if tmp_wanted {
            ops.push(MountOp::Tmpfs {
                target: "/tmp".into(),
                mode: 0o1777,
                size: None,
            });
        }
        let mut emptied: Vec<PathBuf> = Vec::new();
        if host {
            for dir in ["/run", "/var/run"] {
                let p = Path::new(dir);
                if p.is_dir() && std::fs::read_link(p).is_err() {
                    emptied.push(p.to_path_buf());
                }
            }
            if let Some(x) = &self.ctx.xdg_runtime_dir {
                if let Ok(x) = resolve(x) {
                    if !within_any(&x, &emptied) && x.is_dir() {
                        emptied.push(x);
                    }
                }
            }
            for dir in &emptied {
                ops.push(MountOp::Tmpfs {
                    target: dir.clone(),
                    mode: 0o755,
                    size: None,
                });
            }
            // Name resolution configured through /run (systemd-resolved) keeps working.
            if let Ok(target) = resolve(Path::new("/etc/resolv.conf")) {
                if within_any(&target, &emptied) {
                    ops.push(MountOp::ReadOnly {
                        source: target.clone(),
                        target,
                    });
                }
            }
        } else {
            for (link_path, link) in root_symlinks() {
                let Ok(target) = resolve(&link_path) else {
                    continue;
                };
                if self.shown_as_itself(&target)
                    && !self.symlinks.iter().any(|(p, _)| *p == link_path)
                {
                    self.symlinks.push((link_path, link));
                }
            }
            self.symlinks.sort();
            for (target, link) in &self.symlinks {
                ops.push(MountOp::Symlink {
                    target: target.clone(),
                    link: link.clone(),
                });
            }
            let mut ro = self.ro.clone();
            ro.sort_by_key(|p| depth(p));
            for p in ro {
                if skip_special(&p) || within_any(&p, &self.rw) {
                    continue;
                }
                ops.push(MountOp::ReadOnly {
                    source: p.clone(),
                    target: p,
                });
            }
        }

        let mut rw = self.rw.clone();
        rw.sort_by_key(|p| depth(p));
        for p in &rw {
            if skip_special(p) {
                continue;
            }
            ops.push(MountOp::ReadWrite {
                source: p.clone(),
                target: p.clone(),
            });
        }
        for s in &self.policy.filesystem.unix_sockets {
            let p = resolve(&s.value).map_err(|e| {
                anyhow::anyhow!("unix socket {} cannot be handed in: {e}", s.value.display())
            })?;
            ops.push(MountOp::ReadWrite {
                source: p.clone(),
                target: p,
            });
        }

        // The mounts placed by name, over the base (and under the protections and masks).
        let mut base_rw: Vec<(PathBuf, String)> = rw
            .iter()
            .map(|p| {
                let why = if *p == self.ctx.cwd {
                    "the working directory, writable"
                } else {
                    "a writable path"
                };
                (p.clone(), why.to_string())
            })
            .collect();
        for s in &self.policy.filesystem.unix_sockets {
            if let Ok(p) = resolve(&s.value) {
                base_rw.push((p, "a socket handed in with --allow-unix-socket".into()));
            }
        }
        self.check_placed(&base_rw)?;
        let size = crate::limits::tmp_size(&self.policy.runtime.limits);
        for m in &self.placed {
            let same = m.kind == MountKind::Bind
                && base_rw
                    .iter()
                    .any(|(r, _)| Some(r) == m.source.as_ref() && *r == m.target);
            if same {
                continue; // already there, writable
            }
            ops.push(m.op(size));
        }

        // What would run on the host later, per writable root: the guard's rules, and for what
        // exists at launch read-only binds (planned now, or after the clone).
        self.emit_persistence(&mut ops, &rw);
        ops.extend(self.protect_placed());

        // Masks last: deny read beats everything.
        let private: Vec<PathBuf> = tmp_wanted
            .then(|| PathBuf::from("/tmp"))
            .into_iter()
            .chain(emptied)
            .collect();
        let bound: Vec<PathBuf> = ops
            .iter()
            .filter_map(|op| match op {
                MountOp::ReadOnly { target, .. } | MountOp::ReadWrite { target, .. } => {
                    Some(target.clone())
                }
                _ => None,
            })
            .collect();
        let mut masks = self.deny_read.clone();
        masks.sort_by_key(|p| depth(p));
        let views: Vec<(PathBuf, bool)> = masks
            .iter()
            .flat_map(|p| {
                self.placed_views(p)
                    .into_iter()
                    .map(move |v| (v, p.is_dir()))
            })
            .collect();
        for (p, dir) in views {
            ops.push(MountOp::Mask {
                target: p.clone(),
                dir,
            });
            self.out.verify_unreadable.push(p);
        }
        for p in masks {
            if !self.granted(&p) || self.under_placed(&p) {
                continue; // not in the sandbox at all, or not at this path
            }
            if let Some(dir) = private.iter().find(|d| p.starts_with(d)) {
                if !within_any(&p, &bound) {
                    self.out.warnings.push(format!(
                        "deny-read {}: nothing to deny: the sandbox has a private {} of its \
                         own, so the host's is not in it",
                        p.display(),
                        dir.display()
                    ));
                    continue;
                }
            }
            let dir = p.is_dir();
            ops.push(MountOp::Mask {
                target: p.clone(),
                dir,
            });
            self.out.verify_unreadable.push(p);
        }
        self.out.mounts.ops = ops;
        self.emit_landlock(&rw, tmp_wanted);
        self.emit_write_probes(&rw);
        Ok(())
    }
}
