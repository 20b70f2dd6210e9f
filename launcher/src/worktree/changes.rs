//! What the program changed: the upper layer read back against the checkout (the lower
//! layer), entry by entry, in the order `apply` carries them out (for a path: what was there
//! goes first, children before their directory; then what comes in its place, a directory
//! before its children).
//!
//! Only what the program inside could not forge decides: an entry's type, a whiteout (a
//! character device 0:0, which overlayfs alone makes: `mknod` of one through the overlay is
//! refused) and the `user.overlay.opaque` attribute (through the overlay, `user.overlay.*`
//! attributes are refused or stored escaped as `user.overlay.overlay.*`). Redirect, metacopy
//! and xattr-whiteout records are never made by a worktree's mount (`userxattr` turns
//! redirect_dir and metacopy off): an upper layer that holds one is refused, not interpreted.

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::beneath::{self, Kind, Stat};

/// One change at a path (relative to the checkout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// The entry is removed from the checkout (one of a removed tree's entries, listed
    /// children first).
    Delete { old: Stat },
    /// A file, symlink or directory appears where nothing is (any `Delete` of the same path
    /// comes before it).
    Add { new: Stat },
    /// A file's or symlink's content or permissions changed (the type is the same).
    Modify { old: Stat, new: Stat },
    /// A directory's permissions changed.
    DirMode { old: Stat, new: Stat },
    /// A fifo, socket or device: nothing a checkout holds; never applied.
    Special { new: Stat, what: &'static str },
}

/// What a change touches, which decides whether `apply` carries it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// The project's own files.
    Ordinary,
    /// A persistence surface (the surface and what runs it): shown apart, applied only when
    /// named.
    Persistence(String),
    /// A git directory's own state (objects, refs, index, logs): what git did inside;
    /// never applied.
    Repository,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub rel: PathBuf,
    pub op: Op,
    pub class: Class,
}

/// The overlay records a worktree's mount never makes.
const FOREIGN_XATTRS: &[&[u8]] = &[
    b"user.overlay.redirect",
    b"user.overlay.metacopy",
    b"user.overlay.whiteout",
    b"user.overlay.lowerdata",
];

struct Scan {
    upper: OwnedFd,
    lower: OwnedFd,
    out: Vec<Change>,
    classify: super::classify::Classifier,
}

/// Every change of the worktree whose upper layer is `upper` over the checkout `lower`.
pub fn scan(upper: &Path, lower: &Path, home: Option<&Path>) -> Result<Vec<Change>> {
    let path_var = std::env::var("PATH").ok();
    let mut s = Scan {
        upper: beneath::open_root(upper).with_context(|| format!("{}", upper.display()))?,
        lower: beneath::open_root(lower).with_context(|| format!("{}", lower.display()))?,
        out: Vec::new(),
        classify: super::classify::Classifier::new(upper, lower, home, path_var.as_deref()),
    };
    s.dir(Path::new(""), true, false)?;
    Ok(s.out)
}

impl Scan {
    fn push(&mut self, rel: PathBuf, op: Op) {
        let dir = match &op {
            Op::Delete { old: s } | Op::Add { new: s } | Op::Special { new: s, .. } => {
                s.kind == Kind::Dir
            }
            Op::Modify { .. } => false,
            Op::DirMode { .. } => true,
        };
        let class = self.classify.class(&rel, dir);
        self.out.push(Change { rel, op, class });
    }

    /// The upper directory `rel`: `lower_visible` when the checkout's `rel` shows through it,
    /// `opaque` when the checkout's entries below it that the upper lacks are gone.
    fn dir(&mut self, rel: &Path, lower_visible: bool, opaque: bool) -> Result<()> {
        let udir = beneath::open(
            self.upper.as_raw_fd(),
            rel,
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .with_context(|| format!("upper layer: {}", rel.display()))?;
        let names = beneath::names(&udir)?;
        for name in &names {
            let r = rel.join(name);
            let st = beneath::stat_at(udir.as_raw_fd(), name)?;
            self.foreign(udir.as_raw_fd(), name, &r)?;
            let low = if lower_visible {
                beneath::lstat(self.lower.as_raw_fd(), &r)
                    .with_context(|| format!("checkout: {}", r.display()))?
            } else {
                None
            };
            match st.kind {
                Kind::Whiteout => {
                    if low.is_some() {
                        self.delete_tree(&r)?;
                    }
                }
                Kind::Dir => {
                    let own_opaque = beneath::xattr(udir.as_raw_fd(), name, "user.overlay.opaque")?;
                    match own_opaque.as_deref() {
                        None | Some(b"y") => {}
                        Some(v) => bail!(
                            "upper layer: {}: user.overlay.opaque={:?}, which a worktree's mount never writes; refusing to read this worktree",
                            r.display(),
                            String::from_utf8_lossy(v)
                        ),
                    }
                    let opaque_here = opaque || own_opaque.is_some();
                    match low {
                        Some(l) if l.kind == Kind::Dir => {
                            if l.mode != st.mode {
                                self.push(r.clone(), Op::DirMode { old: l, new: st });
                            }
                            self.dir(&r, true, opaque_here)?;
                        }
                        Some(_) => {
                            self.delete_tree(&r)?;
                            self.push(r.clone(), Op::Add { new: st });
                            self.dir(&r, false, false)?;
                        }
                        None => {
                            self.push(r.clone(), Op::Add { new: st });
                            self.dir(&r, false, false)?;
                        }
                    }
                }
                Kind::File | Kind::Symlink => match low {
                    Some(l) if l.kind == st.kind => {
                        if l.mode != st.mode || !self.same_content(&r, st.kind)? {
                            self.push(r, Op::Modify { old: l, new: st });
                        }
                    }
                    Some(_) => {
                        self.delete_tree(&r)?;
                        self.push(r, Op::Add { new: st });
                    }
                    None => self.push(r, Op::Add { new: st }),
                },
                Kind::Special(what) => self.push(r, Op::Special { new: st, what }),
            }
        }
        if opaque && lower_visible {
            if let Ok(ldir) = beneath::open(
                self.lower.as_raw_fd(),
                rel,
                libc::O_PATH | libc::O_DIRECTORY,
                0,
            ) {
                for name in beneath::names(&ldir)? {
                    if !names.contains(&name) {
                        self.delete_tree(&rel.join(name))?;
                    }
                }
            }
        }
        Ok(())
    }

    fn foreign(&self, dir: RawFd, name: &OsStr, rel: &Path) -> Result<()> {
        for x in beneath::xattr_names(dir, name)? {
            if FOREIGN_XATTRS.contains(&x.as_slice()) {
                bail!(
                    "upper layer: {}: {} is an overlayfs record a worktree's mount never makes; refusing to read this worktree (`sandbox-launch discard` it)",
                    rel.display(),
                    String::from_utf8_lossy(&x)
                );
            }
        }
        Ok(())
    }

    /// The checkout's `rel` and everything below it go (children first).
    fn delete_tree(&mut self, rel: &Path) -> Result<()> {
        let Some(st) = beneath::lstat(self.lower.as_raw_fd(), rel)? else {
            return Ok(());
        };
        if st.kind == Kind::Dir {
            let d = beneath::open(
                self.lower.as_raw_fd(),
                rel,
                libc::O_PATH | libc::O_DIRECTORY,
                0,
            )?;
            for name in beneath::names(&d)? {
                self.delete_tree(&rel.join(name))?;
            }
        }
        self.push(rel.to_path_buf(), Op::Delete { old: st });
        Ok(())
    }

    fn same_content(&self, rel: &Path, kind: Kind) -> Result<bool> {
        if kind == Kind::Symlink {
            return Ok(beneath::readlink(self.upper.as_raw_fd(), rel)?
                == beneath::readlink(self.lower.as_raw_fd(), rel)?);
        }
        let open = |root: &OwnedFd| -> Result<std::fs::File> {
            Ok(std::fs::File::from(beneath::open(
                root.as_raw_fd(),
                rel,
                libc::O_RDONLY,
                0,
            )?))
        };
        let (mut a, mut b) = (open(&self.upper)?, open(&self.lower)?);
        if a.metadata()?.len() != b.metadata()?.len() {
            return Ok(false);
        }
        let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
        loop {
            let n = read_full(&mut a, &mut ba)?;
            let m = read_full(&mut b, &mut bb)?;
            if n != m || ba[..n] != bb[..m] {
                return Ok(false);
            }
            if n == 0 {
                return Ok(true);
            }
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// A path as git writes it in a patch (`/`-separated bytes).
pub fn bytes(rel: &Path) -> &[u8] {
    rel.as_os_str().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn whiteout(p: &Path) {
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string; a 0:0 character device is what overlayfs writes.
        assert_eq!(unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) }, 0);
    }

    fn set_xattr(p: &Path, name: &str, value: &[u8]) {
        let c = CString::new(p.as_os_str().as_bytes()).unwrap();
        let n = CString::new(name).unwrap();
        // SAFETY: valid C strings and a value of the length passed.
        let r = unsafe {
            libc::setxattr(
                c.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    }

    fn ops(changes: &[Change]) -> Vec<(String, &'static str)> {
        changes
            .iter()
            .map(|c| {
                let k = match c.op {
                    Op::Delete { .. } => "delete",
                    Op::Add { .. } => "add",
                    Op::Modify { .. } => "modify",
                    Op::DirMode { .. } => "dirmode",
                    Op::Special { .. } => "special",
                };
                (c.rel.display().to_string(), k)
            })
            .collect()
    }

    #[test]
    fn whiteouts_and_opaque_directories_read_as_deletions() {
        let base = std::env::temp_dir().join(format!("sl-wt-changes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (l, u) = (base.join("lower"), base.join("upper"));
        for d in ["lower/d/sub", "upper/d", "upper/f2d"] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        for (p, c) in [
            ("lower/a", "a"),
            ("lower/d/x", "x"),
            ("lower/d/y", "y"),
            ("lower/d/sub/s", "s"),
            ("lower/f2d", "file"),
            ("lower/same", "same"),
            ("upper/d/x", "x"),
            ("upper/d/z", "z"),
            ("upper/f2d/in", "in"),
            ("upper/same", "same"),
        ] {
            std::fs::write(base.join(p), c).unwrap();
        }
        whiteout(&u.join("a"));
        set_xattr(&u.join("d"), "user.overlay.opaque", b"y");
        let got = ops(&scan(&u, &l, None).unwrap());
        let want: Vec<(String, &str)> = [
            ("a", "delete"),
            ("d/z", "add"),
            ("d/sub/s", "delete"),
            ("d/sub", "delete"),
            ("d/y", "delete"),
            ("f2d", "delete"),
            ("f2d", "add"),
            ("f2d/in", "add"),
        ]
        .iter()
        .map(|(p, k)| (p.to_string(), *k))
        .collect();
        assert_eq!(got, want);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn an_overlay_record_a_worktree_never_makes_is_refused() {
        let base = std::env::temp_dir().join(format!("sl-wt-forged-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("lower/secret")).unwrap();
        std::fs::create_dir_all(base.join("upper/d")).unwrap();
        set_xattr(&base.join("upper/d"), "user.overlay.redirect", b"/secret");
        let e = scan(&base.join("upper"), &base.join("lower"), None).unwrap_err();
        assert!(format!("{e:#}").contains("user.overlay.redirect"), "{e:#}");
        // The escaped form (what the program's own setxattr through the overlay leaves) is
        // just an attribute.
        std::fs::remove_dir_all(base.join("upper/d")).unwrap();
        std::fs::create_dir_all(base.join("upper/d")).unwrap();
        set_xattr(&base.join("upper/d"), "user.overlay.overlay.opaque", b"y");
        let got = ops(&scan(&base.join("upper"), &base.join("lower"), None).unwrap());
        assert_eq!(got, [("d".to_string(), "add")]);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
