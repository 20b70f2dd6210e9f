//! Path patterns of the persistence rules: `/`-separated components, each a glob (`*` any run of
//! characters, `?` one), a last `**` for "and everything below".

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// A compiled pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    comps: Vec<Vec<u8>>,
    /// A last `**`: the path may go on below the components.
    subtree: bool,
}

/// How a path (its components from some start) relates to a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// The path is protected by the pattern.
    Inside,
    /// The path lies above something the pattern protects (a directory on the way to it).
    Above,
    /// Neither.
    Apart,
}

impl Pattern {
    pub fn new(pattern: &str) -> Pattern {
        let mut comps: Vec<Vec<u8>> = pattern
            .split('/')
            .filter(|c| !c.is_empty())
            .map(|c| c.as_bytes().to_vec())
            .collect();
        let subtree = comps.last().is_some_and(|c| c == b"**");
        if subtree {
            comps.pop();
        }
        Pattern { comps, subtree }
    }

    /// The first component when it is a plain name (no glob): for indexing.
    pub fn literal_head(&self) -> Option<&[u8]> {
        let h = self.comps.first()?;
        (!h.iter().any(|b| matches!(b, b'*' | b'?'))).then_some(h.as_slice())
    }

    /// How `path` (components, from where the pattern is anchored) relates to the pattern.
    pub fn fit(&self, path: &[&OsStr]) -> Fit {
        let n = self.comps.len();
        if !self
            .comps
            .iter()
            .zip(path)
            .all(|(pat, name)| glob(pat, name.as_bytes()))
        {
            return Fit::Apart;
        }
        if path.len() == n || (path.len() > n && self.subtree) {
            Fit::Inside
        } else if path.len() < n {
            Fit::Above
        } else {
            Fit::Apart
        }
    }
}

/// Whether `name` matches the glob `pat` (`*`, `?`; no classes).
pub fn glob(pat: &[u8], name: &[u8]) -> bool {
    // Iterative, with one backtrack point: linear in practice for these short names.
    let (mut p, mut n) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while n < name.len() {
        if p < pat.len() && (pat[p] == b'?' || pat[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pat.len() && pat[p] == b'*' {
            star = Some(p);
            mark = n;
            p += 1;
        } else if let Some(s) = star {
            p = s + 1;
            mark += 1;
            n = mark;
        } else {
            return false;
        }
    }
    while p < pat.len() && pat[p] == b'*' {
        p += 1;
    }
    p == pat.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comps(p: &str) -> Vec<&OsStr> {
        p.split('/')
            .filter(|c| !c.is_empty())
            .map(OsStr::new)
            .collect()
    }

    #[test]
    fn globs_match_within_one_component() {
        assert!(glob(b"settings*.json", b"settings.json"));
        assert!(glob(b"settings*.json", b"settings.local.json"));
        assert!(!glob(b"settings*.json", b"settings.json.bak"));
        assert!(glob(b"*.sample", b"pre-commit.sample"));
        assert!(!glob(b"*.sample", b"pre-commit"));
        assert!(glob(b"BISECT_*", b"BISECT_LOG"));
        assert!(glob(b"t??????", b"tRUEQIm"));
        assert!(!glob(b"t??????", b"tRUEQI"));
        assert!(glob(b"*", b""));
    }

    #[test]
    fn a_subtree_pattern_covers_the_directory_and_below_and_knows_what_is_above() {
        let p = Pattern::new(".git/hooks/**");
        assert_eq!(p.fit(&comps(".git/hooks")), Fit::Inside);
        assert_eq!(p.fit(&comps(".git/hooks/pre-commit")), Fit::Inside);
        assert_eq!(p.fit(&comps(".git")), Fit::Above);
        assert_eq!(p.fit(&comps(".git/objects")), Fit::Apart);
        assert_eq!(p.fit(&comps("src")), Fit::Apart);
    }

    #[test]
    fn a_file_pattern_covers_exactly_its_names() {
        let p = Pattern::new(".claude/settings*.json");
        assert_eq!(p.fit(&comps(".claude/settings.local.json")), Fit::Inside);
        assert_eq!(p.fit(&comps(".claude/settings.json/x")), Fit::Apart);
        assert_eq!(p.fit(&comps(".claude")), Fit::Above);
        assert_eq!(p.fit(&comps(".claude/projects")), Fit::Apart);
        assert_eq!(Pattern::new("").fit(&[]), Fit::Inside);
        assert_eq!(Pattern::new("**").fit(&comps("a/b")), Fit::Inside);
    }
}
