//! The checkout's state at launch (the `base` file): for every entry, its type, mode, size,
//! inode and change time — no contents are read. `apply` compares each path it would touch
//! with it: anything that differs (an edit, a chmod, a file replaced, a new file, a deletion)
//! was changed on the host meanwhile, and the whole apply is refused. The change time moves on
//! every change of content or metadata and only the kernel sets it, so an edit that restores
//! the mtime is still seen.
//!
//! The bulk of git's object store (`.git/objects`) is not recorded: `apply` never writes inside
//! a git directory's own state (see `classify`).
//!
//! One line per entry: `KIND MODE SIZE INO CTIME_S CTIME_NS PATH`, the path relative to the
//! checkout with bytes outside printable ASCII, `%` and space written `%XX`.

use std::collections::HashMap;
use std::io::{BufRead, BufWriter, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::beneath::{Kind, Stat};

/// The recorded state of one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub kind: char,
    pub mode: u32,
    pub size: u64,
    pub ino: u64,
    pub ctime: (i64, i64),
}

impl Entry {
    pub fn of(st: &Stat) -> Entry {
        Entry {
            kind: kind_char(st.kind),
            mode: st.mode,
            size: st.size,
            ino: st.ino,
            ctime: st.ctime,
        }
    }
}

fn kind_char(k: Kind) -> char {
    match k {
        Kind::File => 'f',
        Kind::Dir => 'd',
        Kind::Symlink => 'l',
        Kind::Whiteout => 'w',
        Kind::Special(_) => 's',
    }
}

pub fn escape(path: &[u8]) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path {
        if b <= b' ' || b == b'%' || b >= 0x7f {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

pub fn unescape(s: &str) -> Result<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).context("truncated escape")?;
            out.push(u8::from_str_radix(hex, 16).context("bad escape")?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Whether the walk skips `rel` (a directory): a git directory's object store.
fn skipped(rel: &Path) -> bool {
    rel.file_name().is_some_and(|n| n == "objects")
        && rel
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == ".git")
}

/// Record the checkout `root` into `out`; returns the number of entries.
pub fn record(root: &Path, out: &Path) -> Result<usize> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    let mut w = BufWriter::new(file);
    let mut n = 0;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            // Unreadable here is unreadable inside too: nothing below it can change.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => continue,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("cannot read {} (recording the checkout)", dir.display())
                })
            }
        };
        let mut names: Vec<_> = entries.flatten().map(|e| e.file_name()).collect();
        names.sort();
        for name in names {
            let r = rel.join(&name);
            let path = root.join(&r);
            let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
            // SAFETY: stat is plain old data; lstat fills it.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: a valid C string; the result is checked.
            if unsafe { libc::lstat(c.as_ptr(), &mut st) } != 0 {
                continue; // gone since the listing
            }
            let st = Stat::from_raw(&st);
            let e = Entry::of(&st);
            writeln!(
                w,
                "{} {:o} {} {} {} {} {}",
                e.kind,
                e.mode,
                e.size,
                e.ino,
                e.ctime.0,
                e.ctime.1,
                escape(r.as_os_str().as_bytes())
            )?;
            n += 1;
            if st.kind == Kind::Dir && !skipped(&r) {
                stack.push(r);
            }
        }
    }
    w.flush()?;
    w.get_ref().sync_all()?;
    Ok(n)
}

/// The recorded state, by path.
pub struct Manifest {
    entries: HashMap<Vec<u8>, Entry>,
}

impl Manifest {
    pub fn load(path: &Path) -> Result<Manifest> {
        let f = std::fs::File::open(path).with_context(|| {
            format!(
                "cannot read the checkout's state at launch {}",
                path.display()
            )
        })?;
        let mut entries = HashMap::new();
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = line?;
            let parse = || -> Result<(Vec<u8>, Entry)> {
                let f: Vec<&str> = line.splitn(7, ' ').collect();
                if f.len() != 7 || f[0].len() != 1 {
                    bail!("malformed");
                }
                Ok((
                    unescape(f[6])?,
                    Entry {
                        kind: f[0].chars().next().unwrap_or('?'),
                        mode: u32::from_str_radix(f[1], 8)?,
                        size: f[2].parse()?,
                        ino: f[3].parse()?,
                        ctime: (f[4].parse()?, f[5].parse()?),
                    },
                ))
            };
            let (p, e) = parse().with_context(|| format!("{}:{}", path.display(), i + 1))?;
            entries.insert(p, e);
        }
        Ok(Manifest { entries })
    }

    /// The state of `rel` at launch (`None`: it did not exist).
    pub fn get(&self, rel: &Path) -> Option<&Entry> {
        self.entries.get(rel.as_os_str().as_bytes())
    }

    /// The recorded paths below `rel` (for messages and tests).
    pub fn paths(&self) -> impl Iterator<Item = PathBuf> + '_ {
        self.entries
            .keys()
            .map(|k| PathBuf::from(std::ffi::OsString::from_vec(k.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_names_survive_the_round_trip() {
        for name in [
            &b"plain.txt"[..],
            b"with space",
            b"100%",
            b"new\nline",
            b"\xff\xfe",
        ] {
            assert_eq!(unescape(&escape(name)).unwrap(), name);
            assert!(!escape(name).contains([' ', '\n']));
        }
    }

    #[test]
    fn the_record_names_every_entry_but_git_objects() {
        let base = std::env::temp_dir().join(format!("sl-wt-manifest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("p/.git/objects/ab")).unwrap();
        std::fs::create_dir_all(base.join("p/d")).unwrap();
        std::fs::write(base.join("p/.git/objects/ab/cd"), b"x").unwrap();
        std::fs::write(base.join("p/d/f"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc", base.join("p/l")).unwrap();
        let n = record(&base.join("p"), &base.join("base")).unwrap();
        let m = Manifest::load(&base.join("base")).unwrap();
        let mut got: Vec<PathBuf> = m.paths().collect();
        got.sort();
        let want: Vec<PathBuf> = [".git", ".git/objects", "d", "d/f", "l"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(got, want);
        assert_eq!(n, 5);
        assert_eq!(m.get(Path::new("l")).unwrap().kind, 'l');
        assert_eq!(m.get(Path::new("d/f")).unwrap().size, 1);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
