//! The changes as a git-style patch (`git diff --binary` format: `git apply` takes it): text
//! files as unified diffs, binary ones (a NUL in the first 8000 bytes, as git decides) as
//! `GIT binary patch` literals (zlib, git's base85), new and deleted files, mode changes,
//! symlinks (mode 120000), a type change as a deletion and an addition. Paths are quoted the
//! way git quotes them. What a patch cannot carry is said in `#` comment lines, which
//! `git apply` skips: permissions other than the executable bit, fifos and devices, the
//! repository's own state. Persistence surfaces come last, each under a comment that says so.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use anyhow::Result;
use flate2::{write::ZlibEncoder, Compression};
use sha1::{Digest, Sha1};
use similar::TextDiff;

use super::beneath::{self, Kind, Stat};
use super::changes::{bytes, Change, Class, Op};

/// Files larger than this are named, not shown (`apply` still carries them).
pub const MAX_SHOWN: u64 = 64 << 20;

const ZERO_ID: &str = "0000000000000000000000000000000000000000";

/// Where the two sides' contents are read.
pub struct Sides {
    pub old: OwnedFd,
    pub new: OwnedFd,
}

impl Sides {
    pub fn open(upper: &Path, lower: &Path) -> Result<Sides> {
        Ok(Sides {
            old: beneath::open_root(lower)?,
            new: beneath::open_root(upper)?,
        })
    }
}

/// git's mode of an entry.
fn git_mode(s: &Stat) -> u32 {
    match s.kind {
        Kind::Symlink => 0o120000,
        _ if s.mode & 0o100 != 0 => 0o100755,
        _ => 0o100644,
    }
}

/// git's blob id.
pub fn blob_id(data: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", data.len()).as_bytes());
    h.update(data);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// `prefix` + path, quoted as git does when it holds a byte that needs it.
pub fn quote(prefix: &str, path: &[u8]) -> String {
    let needs = path
        .iter()
        .any(|&b| !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\');
    let mut s = String::new();
    if !needs {
        s.push_str(prefix);
        s.push_str(&String::from_utf8_lossy(path));
        return s;
    }
    s.push('"');
    s.push_str(prefix);
    for &b in path {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            0x07 => s.push_str("\\a"),
            0x08 => s.push_str("\\b"),
            0x0b => s.push_str("\\v"),
            0x0c => s.push_str("\\f"),
            b if !(0x20..0x7f).contains(&b) => s.push_str(&format!("\\{b:03o}")),
            b => s.push(b as char),
        }
    }
    s.push('"');
    s
}

fn is_binary(data: &[u8]) -> bool {
    data[..data.len().min(8000)].contains(&0)
}

const B85: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

/// One `literal` block of a git binary patch.
fn literal(out: &mut Vec<u8>, data: &[u8]) -> Result<()> {
    let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
    z.write_all(data)?;
    let z = z.finish()?;
    writeln!(out, "literal {}", data.len())?;
    for chunk in z.chunks(52) {
        let n = chunk.len();
        out.push(if n <= 26 {
            b'A' + n as u8 - 1
        } else {
            b'a' + n as u8 - 27
        });
        for group in chunk.chunks(4) {
            let mut v: u32 = 0;
            for i in 0..4 {
                v = (v << 8) | u32::from(group.get(i).copied().unwrap_or(0));
            }
            let mut digits = [0u8; 5];
            for d in digits.iter_mut().rev() {
                *d = B85[(v % 85) as usize];
                v /= 85;
            }
            out.extend_from_slice(&digits);
        }
        out.push(b'\n');
    }
    out.push(b'\n');
    Ok(())
}

/// One side of a file: its mode and contents (`None`: absent).
struct Side {
    mode: u32,
    data: Vec<u8>,
}

fn content(root: &OwnedFd, rel: &Path, st: &Stat) -> Result<Vec<u8>> {
    Ok(match st.kind {
        Kind::Symlink => beneath::readlink(root.as_raw_fd(), rel)?,
        _ => beneath::read(root.as_raw_fd(), rel)?,
    })
}

/// The diff of one path between `old` and `new` (either may be absent, not both).
fn file_diff(out: &mut Vec<u8>, rel: &Path, old: Option<Side>, new: Option<Side>) -> Result<()> {
    let p = bytes(rel);
    let (a, b) = (quote("a/", p), quote("b/", p));
    writeln!(out, "diff --git {a} {b}")?;
    let empty = Vec::new();
    let (od, nd) = (
        old.as_ref().map_or(&empty, |s| &s.data),
        new.as_ref().map_or(&empty, |s| &s.data),
    );
    let (oid, nid) = (
        old.as_ref()
            .map_or(ZERO_ID.to_string(), |s| blob_id(&s.data)),
        new.as_ref()
            .map_or(ZERO_ID.to_string(), |s| blob_id(&s.data)),
    );
    match (&old, &new) {
        (None, Some(n)) => writeln!(out, "new file mode {:o}", n.mode)?,
        (Some(o), None) => writeln!(out, "deleted file mode {:o}", o.mode)?,
        (Some(o), Some(n)) if o.mode != n.mode => {
            writeln!(out, "old mode {:o}\nnew mode {:o}", o.mode, n.mode)?
        }
        _ => {}
    }
    if oid == nid {
        return Ok(());
    }
    match (&old, &new) {
        (Some(o), Some(n)) if o.mode == n.mode => writeln!(out, "index {oid}..{nid} {:o}", o.mode)?,
        _ => writeln!(out, "index {oid}..{nid}")?,
    }
    if is_binary(od) || is_binary(nd) {
        writeln!(out, "GIT binary patch")?;
        literal(out, nd)?;
        literal(out, od)?;
        return Ok(());
    }
    let diff = TextDiff::configure()
        .timeout(std::time::Duration::from_secs(5))
        .diff_lines(od.as_slice(), nd.as_slice());
    let (from, to) = (
        if old.is_some() { a } else { "/dev/null".into() },
        if new.is_some() { b } else { "/dev/null".into() },
    );
    writeln!(out, "--- {from}\n+++ {to}")?;
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        hunk.to_writer(&mut *out)?;
    }
    Ok(())
}

/// The patch of the file-level changes (directories are implicit, as in git), with comments
/// for what it cannot carry.
pub fn render(changes: &[Change], sides: &Sides, persistence: bool) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut sorted: Vec<&Change> = changes
        .iter()
        .filter(|c| matches!(c.class, Class::Persistence(_)) == persistence)
        .filter(|c| c.class != Class::Repository)
        .collect();
    // git's order: by path; a deletion before an addition of the same path.
    sorted.sort_by(|x, y| {
        bytes(&x.rel)
            .cmp(bytes(&y.rel))
            .then(matches!(y.op, Op::Delete { .. }).cmp(&matches!(x.op, Op::Delete { .. })))
    });
    for c in sorted {
        if let Class::Persistence(why) = &c.class {
            writeln!(
                out,
                "# persistence surface, not applied unless named (apply --include-persistence {}): {why}",
                quote("", bytes(&c.rel))
            )?;
        }
        let side = |root: &OwnedFd, st: &Stat| -> Result<Option<Side>> {
            if st.size > MAX_SHOWN {
                return Ok(None);
            }
            Ok(Some(Side {
                mode: git_mode(st),
                data: content(root, &c.rel, st)?,
            }))
        };
        let too_big = |st: &Stat| st.kind == Kind::File && st.size > MAX_SHOWN;
        match &c.op {
            Op::Delete { old } | Op::Add { new: old } if old.kind == Kind::Dir => {}
            Op::Delete { old } if too_big(old) => writeln!(
                out,
                "# deleted {}: {} bytes, too large to show",
                quote("", bytes(&c.rel)),
                old.size
            )?,
            Op::Add { new } | Op::Modify { new, .. } if too_big(new) => writeln!(
                out,
                "# {}: {} bytes, too large to show (apply carries it)",
                quote("", bytes(&c.rel)),
                new.size
            )?,
            Op::Delete { old } => file_diff(&mut out, &c.rel, side(&sides.old, old)?, None)?,
            Op::Add { new } => file_diff(&mut out, &c.rel, None, side(&sides.new, new)?)?,
            Op::Modify { old, new } => {
                if old.mode != new.mode && git_mode(old) == git_mode(new) {
                    writeln!(
                        out,
                        "# {}: permissions {:o} -> {:o} (a patch carries only the executable bit; apply sets them)",
                        quote("", bytes(&c.rel)),
                        old.mode,
                        new.mode
                    )?;
                }
                file_diff(
                    &mut out,
                    &c.rel,
                    side(&sides.old, old)?,
                    side(&sides.new, new)?,
                )?;
                if out.ends_with(b"\n") {
                    // A same-content, same-git-mode change left only its `diff --git` line.
                    let last = out[..out.len() - 1]
                        .iter()
                        .rposition(|b| *b == b'\n')
                        .map_or(0, |i| i + 1);
                    if out[last..].starts_with(b"diff --git ") {
                        out.truncate(last);
                    }
                }
            }
            Op::DirMode { old, new } => writeln!(
                out,
                "# {}/: directory permissions {:o} -> {:o} (apply sets them)",
                quote("", bytes(&c.rel)),
                old.mode,
                new.mode
            )?,
            Op::Special { what, .. } => writeln!(
                out,
                "# {}: a {what}, which a checkout does not hold: not applied",
                quote("", bytes(&c.rel))
            )?,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_ids_are_gits() {
        // `printf 'hello\n' | git hash-object --stdin`; the empty blob.
        assert_eq!(
            blob_id(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        assert_eq!(blob_id(b""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
    }

    #[test]
    fn paths_are_quoted_like_git() {
        assert_eq!(quote("a/", b"src/main.rs"), "a/src/main.rs");
        assert_eq!(quote("a/", b"caf\xc3\xa9"), "\"a/caf\\303\\251\"");
        assert_eq!(quote("b/", b"t\"ab\tx"), "\"b/t\\\"ab\\tx\"");
    }

    /// git's decoding of a `literal` block: base85 lines back to zlib, then inflated.
    fn decode(block: &[u8]) -> Vec<u8> {
        use std::io::Read;
        let text = std::str::from_utf8(block).unwrap();
        let mut lines = text.lines();
        let size: usize = lines
            .next()
            .unwrap()
            .strip_prefix("literal ")
            .unwrap()
            .parse()
            .unwrap();
        let mut z = Vec::new();
        for line in lines.take_while(|l| !l.is_empty()) {
            let b = line.as_bytes();
            let n = match b[0] {
                c @ b'A'..=b'Z' => (c - b'A' + 1) as usize,
                c => (c - b'a' + 27) as usize,
            };
            let mut bytes = Vec::new();
            for group in b[1..].chunks(5) {
                let mut v: u32 = 0;
                for &d in group {
                    v = v * 85 + B85.iter().position(|x| *x == d).unwrap() as u32;
                }
                bytes.extend_from_slice(&v.to_be_bytes());
            }
            z.extend_from_slice(&bytes[..n]);
        }
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(&z[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out.len(), size);
        out
    }

    #[test]
    fn binary_literals_decode_back_as_git_reads_them() {
        let big: Vec<u8> = (0..5000u32).map(|i| (i * 7919 % 251) as u8).collect();
        for data in [&b""[..], b"\0\x01\x02", &big] {
            let mut out = Vec::new();
            literal(&mut out, data).unwrap();
            assert!(out.ends_with(b"\n\n"));
            assert_eq!(decode(&out), data);
        }
    }
}
