//! The Landlock rules of the plan, and the directories the shim probes to verify that writes
//! outside the writable trees fail.

use std::path::{Path, PathBuf};

use shim::spec::{Access, LandlockRule};

use super::{resolve, within_any, Planner};

/// Device files the sandbox may read, write and ioctl.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/pts",
];

impl Planner<'_> {
    pub(super) fn emit_landlock(&mut self, rw: &[PathBuf], tmp: bool) {
        let host = self.host_readable();
        let rules = &mut self.out.landlock;
        if host {
            rules.push(LandlockRule {
                path: "/".into(),
                access: Access::Read,
            });
        } else {
            // The new root holds only the allow-listed trees, so listing its directories
            // shows nothing else; reading files still needs a rule below.
            rules.push(LandlockRule {
                path: "/".into(),
                access: Access::ListDir,
            });
            rules.push(LandlockRule {
                path: "/proc".into(),
                access: Access::Read,
            });
            for p in &self.ro {
                rules.push(LandlockRule {
                    path: p.clone(),
                    access: Access::Read,
                });
            }
        }
        for p in rw {
            rules.push(LandlockRule {
                path: p.clone(),
                access: Access::Write,
            });
        }
        if tmp {
            rules.push(LandlockRule {
                path: "/tmp".into(),
                access: Access::Write,
            });
        }
        rules.push(LandlockRule {
            path: "/dev/shm".into(),
            access: Access::Write,
        });
        for d in DEVICES {
            if Path::new(d).exists() || *d == "/dev/pts" {
                rules.push(LandlockRule {
                    path: (*d).into(),
                    access: Access::Device,
                });
            }
        }
        // Placed mounts: what is mounted writable is writable, the rest readable (a read-only
        // bind is read-only for root inside too: the mount is).
        for m in &self.placed {
            rules.push(LandlockRule {
                path: m.target.clone(),
                access: if m.writable() {
                    Access::Write
                } else {
                    Access::Read
                },
            });
        }
        for s in &self.policy.filesystem.unix_sockets {
            if let Ok(p) = resolve(&s.value) {
                rules.push(LandlockRule {
                    path: p,
                    access: Access::Write,
                });
            }
        }
    }

    /// Directories that must refuse a new file: outside every writable root.
    pub(super) fn emit_write_probes(&mut self, rw: &[PathBuf]) {
        let mut candidates: Vec<PathBuf> = vec!["/usr".into(), "/etc".into()];
        if let Some(home) = &self.ctx.home {
            candidates.push(home.clone());
        }
        if let Some(parent) = self.ctx.cwd.parent() {
            candidates.push(parent.to_path_buf());
        }
        for c in candidates {
            let Ok(c) = resolve(&c) else { continue };
            if c.is_dir()
                && self.granted(&c)
                && !self.under_placed(&c)
                && !within_any(&c, rw)
                && !within_any(&c, &self.deny_read)
            {
                if c.starts_with("/tmp") || c.starts_with("/run") || c.starts_with("/dev") {
                    continue; // private tmpfs of the sandbox
                }
                if !self.out.verify_unwritable_dirs.contains(&c) {
                    self.out.verify_unwritable_dirs.push(c);
                }
            }
        }
    }
}
