//! Plain paths — absolute, with no `.`, `..`, doubled or trailing slash — taken apart and
//! compared by their bytes. For them `Path`'s component-wise answers (`starts_with`, `==`,
//! `Ord`) are the bytes' answers, without parsing components: a plan asks a few thousand of
//! those per launch, and the parsing was a quarter of its time. Any other path gets `Path`'s
//! own answer.

use std::cmp::Ordering;
use std::ffi::OsStr;
use std::hash::BuildHasherDefault;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::host_view::Quick;

/// `base.join(rel)` in one allocation: `Path::join` copies `base` exactly and then grows the
/// copy for `rel` (a second allocation and a copy), and a plan joins a few hundred names.
pub fn joined(base: &Path, rel: impl AsRef<Path>) -> PathBuf {
    let rel = rel.as_ref();
    let mut p = PathBuf::with_capacity(base.as_os_str().len() + 1 + rel.as_os_str().len());
    p.push(base);
    p.push(rel);
    p
}

/// An absolute path with no `.`, `..`, doubled or trailing slash: its last component is what a
/// lookup in its parent directory finds (`a/link/` would follow the link). (`/` is not one.)
///
/// Asked of every path at every step of a plan (a few thousand times per launch): eight bytes
/// at a time, a separator followed by another or by a dot is found, and only there is the
/// component behind it looked at (most are hidden names, `/.config`, not `.` or `..`).
pub fn plain(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    if b.len() < 2 || b[0] != b'/' || b[b.len() - 1] == b'/' {
        return false;
    }
    // Positions at..at+8, each with the byte after it; the last word overlaps the one before
    // (a position looked at twice is only looked at again). The last byte is no separator.
    let last = b.len() - 1;
    if last < 8 {
        return (0..last).all(|j| !ends_a_component_badly(b, j));
    }
    let word = |from: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[from..from + 8]);
        u64::from_le_bytes(w)
    };
    let mut at = 0;
    loop {
        // `/` and `.` differ in their lowest bit only.
        let followed = bytes_equal(word(at + 1) | ONES, b'/');
        let mut candidates = bytes_equal(word(at), b'/') & followed;
        while candidates != 0 {
            let j = at + (candidates.trailing_zeros() / 8) as usize;
            if ends_a_component_badly(b, j) {
                return false;
            }
            candidates &= candidates - 1;
        }
        if at + 8 == last {
            return true;
        }
        at = (at + 8).min(last - 8);
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;

/// The high bit of each byte of `w` that may equal `c`: set for every byte that does, and
/// perhaps for some above one that does (a borrow): candidates, each checked on its own.
fn bytes_equal(w: u64, c: u8) -> u64 {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let x = w ^ (ONES * u64::from(c));
    x.wrapping_sub(ONES) & !x & HIGH
}

/// `b[j]` is a separator and what follows it is another one, or `.` or `..` up to the next
/// one or the end: not a plain path.
fn ends_a_component_badly(b: &[u8], j: usize) -> bool {
    if b[j] != b'/' {
        return false;
    }
    let at = |k: usize| b.get(k).copied();
    matches!(
        (at(j + 1), at(j + 2), at(j + 3)),
        (Some(b'/'), _, _)
            | (Some(b'.'), None | Some(b'/'), _)
            | (Some(b'.'), Some(b'.'), None | Some(b'/'))
    )
}

/// [`plain`] as its definition says it, component by component (the tests' reference).
#[cfg(test)]
fn plain_by_components(p: &Path) -> bool {
    let b = p.as_os_str().as_bytes();
    b.len() > 1
        && b[0] == b'/'
        && b[b.len() - 1] != b'/'
        && b[1..]
            .split(|c| *c == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..")
}

/// A plain path's directory and last name, by its bytes.
pub fn split(p: &Path) -> Option<(&Path, &OsStr)> {
    let b = p.as_os_str().as_bytes();
    let i = b.iter().rposition(|c| *c == b'/')?;
    let dir = if i == 0 { &b[..1] } else { &b[..i] };
    Some((
        Path::new(OsStr::from_bytes(dir)),
        OsStr::from_bytes(&b[i + 1..]),
    ))
}

/// [`split`], only where the name is one a plain path can end with (not empty, `.` or `..`)
/// and a single separator stands before it: then `p` is plain exactly when its directory is
/// `/` or plain — a question of a directory, which a plan asks of a few, not of each of the
/// hundreds of names in them.
pub fn split_name(p: &Path) -> Option<(&Path, &OsStr)> {
    let b = p.as_os_str().as_bytes();
    let i = b.iter().rposition(|c| *c == b'/')?;
    let name = &b[i + 1..];
    if name.is_empty() || name == b"." || name == b".." || (i > 0 && b[i - 1] == b'/') {
        return None;
    }
    let dir = if i == 0 { &b[..1] } else { &b[..i] };
    Some((Path::new(OsStr::from_bytes(dir)), OsStr::from_bytes(name)))
}

/// `p.starts_with(root)`: `root` itself or a path below it.
pub fn under(p: &Path, root: &Path) -> bool {
    if !(plain(p) && plain(root)) {
        return p.starts_with(root);
    }
    let (p, r) = (p.as_os_str().as_bytes(), root.as_os_str().as_bytes());
    p.starts_with(r) && (p.len() == r.len() || p[r.len()] == b'/')
}

/// Whether every path of `paths` is plain: a plan's lists are a few hundred names in a few
/// directories, in runs of the same directory, which is looked at once per run.
fn all_plain(paths: &[PathBuf]) -> bool {
    let mut last_dir: Option<&OsStr> = None;
    paths.iter().all(|p| match split_name(p) {
        Some((d, _)) if Some(d.as_os_str()) == last_dir => true,
        Some((d, _)) if d.as_os_str() == "/" || plain(d) => {
            last_dir = Some(d.as_os_str());
            true
        }
        _ => false,
    })
}

/// Sort `paths` in `Path`'s order and drop repeated ones, as `sort()` then `dedup()` do.
pub fn sort_dedup(paths: &mut Vec<PathBuf>) {
    if !all_plain(paths) {
        paths.sort();
        paths.dedup();
        return;
    }
    paths.sort_by(|a, b| cmp_plain(a.as_os_str().as_bytes(), b.as_os_str().as_bytes()));
    paths.dedup_by(|a, b| a.as_os_str() == b.as_os_str());
}

/// Drop repeated paths, each kept at its first place (a set of their bytes, not a sort: a plan
/// names a few hundred paths whose order nothing needs). Paths that are not all plain are
/// sorted and deduplicated instead.
pub fn dedup(paths: &mut Vec<PathBuf>) {
    if !all_plain(paths) {
        sort_dedup(paths);
        return;
    }
    let keep: Vec<bool> = {
        let mut seen: std::collections::HashSet<&[u8], BuildHasherDefault<Quick>> =
            std::collections::HashSet::with_capacity_and_hasher(paths.len(), Default::default());
        paths
            .iter()
            .map(|p| seen.insert(p.as_os_str().as_bytes()))
            .collect()
    };
    let mut i = 0;
    paths.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

/// `Path`'s order of two plain paths' bytes: component by component, a shorter component
/// before a longer one it begins — the bytes' order with the separator below every byte a name
/// can hold.
fn cmp_plain(a: &[u8], b: &[u8]) -> Ordering {
    let i = common_prefix(a, b);
    let rank = |c: u8| if c == b'/' { 0 } else { u16::from(c) + 1 };
    match (a.get(i), b.get(i)) {
        (Some(&x), Some(&y)) => rank(x).cmp(&rank(y)),
        _ => a.len().cmp(&b.len()),
    }
}

/// How many bytes `a` and `b` begin with alike, eight at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let word = |s: &[u8]| u64::from_le_bytes(s[i..i + 8].try_into().unwrap_or([0; 8]));
        let diff = word(a) ^ word(b);
        if diff != 0 {
            return i + (diff.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `joined` is `Path::join`: an absolute second part replaces, an empty one adds a
    /// separator, a relative one is appended with exactly one.
    #[test]
    fn joined_is_path_join() {
        let bases = ["/", "/a", "/a/", "a", "", "/a/b.c"];
        let rels = ["b", "b/c", "/abs", "", ".git/hooks", "../x"];
        for b in bases {
            for r in rels {
                // Byte for byte: the plan keys its answers by a path's bytes.
                assert_eq!(
                    joined(Path::new(b), r).as_os_str(),
                    Path::new(b).join(r).as_os_str(),
                    "{b:?} + {r:?}"
                );
            }
        }
    }

    /// Paths that are plain and paths that are not, with the names that order differently by
    /// bytes and by components (`a.b` and `a/b`, `a` and `a-`, `a` and `a/`), a separator's
    /// neighbours in ASCII and bytes above ASCII.
    fn paths() -> Vec<PathBuf> {
        let names = [
            "a", "a.b", "a-", "a0", "a/b", "a/b/c", "ab", "b", "\u{e9}", "a\u{1}",
        ];
        let mut out = vec![PathBuf::from("/"), PathBuf::from("")];
        for n in names {
            for prefix in ["/", "/x/", "/x/./", "/x//", "/x/../", "x/"] {
                out.push(PathBuf::from(format!("{prefix}{n}")));
                out.push(PathBuf::from(format!("{prefix}{n}/")));
            }
        }
        out
    }

    #[test]
    fn dedup_keeps_each_paths_first_place() {
        let all = paths();
        let mut some: Vec<PathBuf> = all.iter().chain(all.iter().rev()).cloned().collect();
        some.retain(|p| plain(p));
        let mut got = some.clone();
        dedup(&mut got);
        let mut want: Vec<PathBuf> = Vec::new();
        for p in some {
            if !want.contains(&p) {
                want.push(p);
            }
        }
        assert_eq!(got, want);
        // Not all plain: sorted and deduplicated as `Path` does.
        let mut mixed = vec![
            PathBuf::from("/b"),
            PathBuf::from("/a/./x"),
            PathBuf::from("/a/x"),
        ];
        dedup(&mut mixed);
        assert_eq!(mixed, vec![PathBuf::from("/a/./x"), PathBuf::from("/b")]);
    }

    #[test]
    fn every_answer_is_the_answer_of_path_itself() {
        let all = paths();
        for a in &all {
            for b in &all {
                assert_eq!(under(a, b), a.starts_with(b), "{a:?} under {b:?}");
                if plain(a) && plain(b) {
                    let (x, y) = (a.as_os_str().as_bytes(), b.as_os_str().as_bytes());
                    assert_eq!(cmp_plain(x, y), a.cmp(b), "{a:?} cmp {b:?}");
                }
            }
        }
        // Sorted and deduplicated as `Path` does, plain or not, from any order, with repeats.
        for (i, shift) in [0usize, 7, 13, 29].into_iter().enumerate() {
            let mut some: Vec<PathBuf> = all
                .iter()
                .cycle()
                .skip(shift)
                .take(all.len() * 2)
                .cloned()
                .collect();
            if i % 2 == 1 {
                some.retain(|p| plain(p));
            }
            let mut expected = some.clone();
            expected.sort();
            expected.dedup();
            sort_dedup(&mut some);
            assert_eq!(some, expected);
        }
    }

    #[test]
    fn the_common_prefix_is_found_within_and_across_words() {
        let a = b"/home/someone/.config/git/config";
        for i in 0..a.len() {
            let mut b = a.to_vec();
            b[i] ^= 1;
            assert_eq!(common_prefix(a, &b), i);
            assert_eq!(common_prefix(a, &a[..i]), i);
        }
        assert_eq!(common_prefix(a, a), a.len());
    }

    #[test]
    fn only_absolute_paths_without_dots_or_doubled_or_trailing_slashes_are_plain() {
        for p in ["/a", "/a/b", "/a.b/.c", "/..a/b..", "/a/b/c"] {
            assert!(plain(Path::new(p)), "{p}");
        }
        for p in [
            "/", "", "a", "a/b", "/a/", "/a//b", "/a/./b", "/a/../b", "/.", "/..",
        ] {
            assert!(!plain(Path::new(p)), "{p}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// The word-at-a-time `plain` says what the components say, for paths made of names
        /// that are and are not `.` and `..` (of every length, so that each lands across the
        /// eight-byte words), with or without a slash at the end.
        #[test]
        fn plain_is_its_definition_for_paths_of_names(
            names in proptest::collection::vec(proptest::sample::select(vec![
                "", ".", "..", "...", "a", ".a", "..a", "a.", "a..", "abcdefg", ".abcdefgh",
                "\u{e9}", "\u{0}", "a/", "/.",
            ]), 1..10),
            slash_at_end in proptest::bool::ANY,
        ) {
            let mut path = format!("/{}", names.join("/"));
            if slash_at_end {
                path.push('/');
            }
            let p = Path::new(&path);
            proptest::prop_assert_eq!(plain(p), plain_by_components(p), "{:?}", p);
        }

        /// And for any bytes: separators, dots, and their neighbours.
        #[test]
        fn plain_is_its_definition(b in proptest::collection::vec(
            proptest::sample::select(vec![b'/', b'.', b'a', b'-', 0, 1, 0x2e ^ 0x80, 0xe9]), 0..40)) {
            let p = Path::new(OsStr::from_bytes(&b));
            proptest::prop_assert_eq!(plain(p), plain_by_components(p), "{:?}", p);
        }
    }

    proptest::proptest! {
        /// A path is plain exactly when `split_name` takes a name from it and its directory is
        /// `/` or plain.
        #[test]
        fn a_plain_path_is_a_name_in_a_plain_directory(b in proptest::collection::vec(
            proptest::sample::select(vec![b'/', b'.', b'a', b'-']), 0..16)) {
            let p = Path::new(OsStr::from_bytes(&b));
            let by_name = split_name(p)
                .is_some_and(|(d, _)| d.as_os_str() == "/" || plain(d));
            proptest::prop_assert_eq!(by_name, plain(p), "{:?}", p);
        }

        /// `all_plain` is `all(plain)`, over lists with runs of one directory.
        #[test]
        fn all_plain_is_every_path_plain(bs in proptest::collection::vec(
            proptest::collection::vec(proptest::sample::select(vec![b'/', b'.', b'a']), 0..8),
            0..8)) {
            let paths: Vec<PathBuf> = bs
                .iter()
                .flat_map(|b| {
                    let p = PathBuf::from(OsStr::from_bytes(b));
                    [p.clone(), p.join("x"), p]
                })
                .collect();
            proptest::prop_assert_eq!(all_plain(&paths), paths.iter().all(|p| plain(p)));
        }
    }

    #[test]
    fn a_plain_path_splits_into_its_directory_and_name() {
        assert_eq!(
            split(Path::new("/a/b/c")),
            Some((Path::new("/a/b"), OsStr::new("c")))
        );
        assert_eq!(
            split(Path::new("/a")),
            Some((Path::new("/"), OsStr::new("a")))
        );
    }
}
