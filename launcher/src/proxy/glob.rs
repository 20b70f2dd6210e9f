//! Globs over delimiter-separated text, as OpenShell's policy engine matches request paths and
//! program paths (delimiter `/`) and query values (delimiter `.`):
//!
//! * `*` matches any run of bytes within one segment (never the delimiter), `?` one byte of a
//!   segment;
//! * `**` as a whole segment matches across segments: `/a/**` matches `/a/` and everything below
//!   it (not `/a`), `/a/**/b` matches `/a/b` and `/a/x/y/b`, `**/b` matches `b` and `x/b`; a `**`
//!   inside a segment (`a**`) is a `*`;
//! * `[abc]`, `[a-z]`, `[!a-z]` (or `[^a-z]`) match one byte of a class (`]` first is literal);
//! * `{a,b}` matches either alternative; `\x` matches `x` literally; everything else is literal
//!   and matching is case-sensitive.
//!
//! What OpenShell's engine treats in surprising ways is refused when the glob is built, so a
//! policy never means something other than it reads: `***`, an unterminated or empty `[]`/`{}`,
//! an empty alternative, `**` inside braces, a `}` with no `{`, `\` inside a class or at the end.

use std::fmt;

/// The most alternatives a glob may expand to.
const MAX_ALTERNATIVES: usize = 64;

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct Glob {
    /// One token list per alternative of the braces.
    variants: Vec<Vec<Token>>,
    delimiter: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Byte(u8),
    /// `?`
    One,
    /// `*`
    Star,
    /// `**` followed by the delimiter: nothing, or anything that ends with the delimiter.
    TreeDir,
    /// `**` at the end: anything.
    TreeRest,
    Class {
        negated: bool,
        ranges: Vec<(u8, u8)>,
    },
}

/// Why a glob was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobError(String);

impl fmt::Display for GlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GlobError {}

fn err<T>(msg: impl Into<String>) -> Result<T, GlobError> {
    Err(GlobError(msg.into()))
}

impl Glob {
    pub fn new(pattern: &str, delimiter: u8) -> Result<Glob, GlobError> {
        let mut parser = Parser {
            bytes: pattern.as_bytes(),
            pos: 0,
            delimiter,
        };
        let variants = parser.sequence(false)?;
        if parser.pos != parser.bytes.len() {
            return err("`}` without a `{` before it");
        }
        Ok(Glob {
            variants,
            delimiter,
        })
    }

    pub fn is_match(&self, text: &str) -> bool {
        let text = text.as_bytes();
        self.variants
            .iter()
            .any(|tokens| Matcher::new(tokens, text, self.delimiter).run())
    }
}

struct Parser<'p> {
    bytes: &'p [u8],
    pos: usize,
    delimiter: u8,
}

impl Parser<'_> {
    /// Tokens up to the end (or, inside braces, up to a `,` or `}` at this level), as the list of
    /// alternatives they expand to.
    fn sequence(&mut self, in_braces: bool) -> Result<Vec<Vec<Token>>, GlobError> {
        let mut variants: Vec<Vec<Token>> = vec![Vec::new()];
        while let Some(&b) = self.bytes.get(self.pos) {
            match b {
                b',' | b'}' if in_braces => break,
                b'}' => return err("`}` without a `{` before it"),
                b'{' => {
                    self.pos += 1;
                    let alternatives = self.braces()?;
                    let mut next = Vec::new();
                    for v in &variants {
                        for a in &alternatives {
                            let mut t = v.clone();
                            t.extend(a.iter().cloned());
                            next.push(t);
                        }
                    }
                    if next.len() > MAX_ALTERNATIVES {
                        return err(format!(
                            "braces expand to more than {MAX_ALTERNATIVES} alternatives"
                        ));
                    }
                    variants = next;
                }
                _ => {
                    let at_segment_start = self.at_segment_start(&variants);
                    let token = self.token(in_braces, at_segment_start)?;
                    for v in &mut variants {
                        v.push(token.clone());
                    }
                }
            }
        }
        Ok(variants)
    }

    /// After a `{`: the alternatives up to the matching `}`.
    fn braces(&mut self) -> Result<Vec<Vec<Token>>, GlobError> {
        let mut alternatives = Vec::new();
        loop {
            let start = self.pos;
            let mut alt = self.sequence(true)?;
            if self.pos == start {
                return err("an empty alternative in `{}`");
            }
            alternatives.append(&mut alt);
            match self.bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(alternatives);
                }
                _ => return err("`{` without a closing `}`"),
            }
        }
    }

    /// Whether the next token starts a segment in every alternative built so far.
    fn at_segment_start(&self, variants: &[Vec<Token>]) -> bool {
        variants.iter().all(|v| match v.last() {
            None | Some(Token::TreeDir) => true,
            Some(Token::Byte(b)) => *b == self.delimiter,
            _ => false,
        })
    }

    fn token(&mut self, in_braces: bool, at_segment_start: bool) -> Result<Token, GlobError> {
        let b = self.bytes[self.pos];
        self.pos += 1;
        Ok(match b {
            b'\\' => match self.bytes.get(self.pos) {
                Some(&next) => {
                    self.pos += 1;
                    Token::Byte(next)
                }
                None => return err("`\\` at the end escapes nothing"),
            },
            b'?' => Token::One,
            b'[' => self.class()?,
            b'*' => {
                let mut stars = 1;
                while self.bytes.get(self.pos) == Some(&b'*') {
                    stars += 1;
                    self.pos += 1;
                }
                if stars > 2 {
                    return err("`***`: use `*` (one segment) or `**` (any depth)");
                }
                if stars == 1 {
                    return Ok(Token::Star);
                }
                let next = self.bytes.get(self.pos).copied();
                let ends_segment = next.is_none()
                    || next == Some(self.delimiter)
                    || in_braces && matches!(next, Some(b',' | b'}'));
                let whole_segment = at_segment_start && ends_segment;
                if whole_segment && in_braces {
                    return err(
                        "`**` inside `{}`: write each alternative's `**` outside the braces",
                    );
                }
                if !whole_segment {
                    Token::Star
                } else if next.is_none() {
                    Token::TreeRest
                } else {
                    self.pos += 1;
                    Token::TreeDir
                }
            }
            other => Token::Byte(other),
        })
    }

    /// After a `[`: the class up to its `]`.
    fn class(&mut self) -> Result<Token, GlobError> {
        let negated = matches!(self.bytes.get(self.pos), Some(b'!' | b'^'));
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        let mut first = true;
        loop {
            let Some(&b) = self.bytes.get(self.pos) else {
                return err("`[` without a closing `]`");
            };
            self.pos += 1;
            match b {
                b']' if !first => break,
                b'\\' => return err("`\\` inside `[]`: put `]` first to match it literally"),
                _ => {}
            }
            first = false;
            let is_range = self.bytes.get(self.pos) == Some(&b'-')
                && self.bytes.get(self.pos + 1).is_some_and(|&c| c != b']');
            if is_range {
                let hi = self.bytes[self.pos + 1];
                self.pos += 2;
                if hi < b {
                    return err(format!(
                        "the range `{}-{}` is backwards",
                        b as char, hi as char
                    ));
                }
                ranges.push((b, hi));
            } else {
                ranges.push((b, b));
            }
        }
        Ok(Token::Class { negated, ranges })
    }
}

/// Matching one token list against a text, remembering failed positions so that no glob takes
/// more than (tokens × text) steps.
struct Matcher<'a> {
    tokens: &'a [Token],
    text: &'a [u8],
    delimiter: u8,
    failed: Vec<bool>,
}

impl<'a> Matcher<'a> {
    fn new(tokens: &'a [Token], text: &'a [u8], delimiter: u8) -> Self {
        Matcher {
            tokens,
            text,
            delimiter,
            failed: vec![false; (tokens.len() + 1) * (text.len() + 1)],
        }
    }

    fn run(&mut self) -> bool {
        self.at(0, 0)
    }

    fn at(&mut self, t: usize, s: usize) -> bool {
        let slot = t * (self.text.len() + 1) + s;
        if self.failed[slot] {
            return false;
        }
        let ok = self.step(t, s);
        if !ok {
            self.failed[slot] = true;
        }
        ok
    }

    fn step(&mut self, t: usize, s: usize) -> bool {
        let Some(token) = self.tokens.get(t) else {
            return s == self.text.len();
        };
        let here = self.text.get(s).copied();
        match token {
            Token::Byte(b) => here == Some(*b) && self.at(t + 1, s + 1),
            Token::One => here.is_some_and(|c| c != self.delimiter) && self.at(t + 1, s + 1),
            Token::Class { negated, ranges } => {
                let Some(c) = here else { return false };
                let inside = ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi);
                let ok = if *negated {
                    !inside && c != self.delimiter
                } else {
                    inside
                };
                ok && self.at(t + 1, s + 1)
            }
            Token::Star => {
                let mut end = s;
                loop {
                    if self.at(t + 1, end) {
                        return true;
                    }
                    match self.text.get(end) {
                        Some(&c) if c != self.delimiter => end += 1,
                        _ => return false,
                    }
                }
            }
            Token::TreeRest => true,
            Token::TreeDir => {
                if self.at(t + 1, s) {
                    return true;
                }
                let delimiter = self.delimiter;
                let ends: Vec<usize> = (s..self.text.len())
                    .filter(|&i| self.text[i] == delimiter)
                    .collect();
                ends.into_iter().any(|i| self.at(t + 1, i + 1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(pattern: &str, text: &str) -> bool {
        Glob::new(pattern, b'/').unwrap().is_match(text)
    }

    #[test]
    fn a_star_stays_within_one_segment() {
        assert!(path("/repos/*/issues", "/repos/x/issues"));
        assert!(!path("/repos/*/issues", "/repos/x/y/issues"));
        assert!(path("/a/*", "/a/"));
        assert!(!path("/a/*", "/a/b/c"));
        assert!(!path("*", "/b"));
        assert!(path("/*.json", "/x.y.json"));
        assert!(!path("/usr/bin/*", "/usr/bin/a/b"));
    }

    #[test]
    fn a_double_star_segment_crosses_segments() {
        assert!(path("/api/**", "/api/"));
        assert!(path("/api/**", "/api/a/b"));
        assert!(!path("/api/**", "/api"));
        assert!(path("**", "/a/b"));
        assert!(path("**", ""));
        assert!(path("/**", "/"));
        assert!(path("/**/info/refs*", "/a/b.git/info/refs"));
        assert!(path("/**/info/refs*", "/info/refs"));
        assert!(path("/a/**/b", "/a/b"));
        assert!(path("/a/**/b", "/a/x/y/b"));
        assert!(path("**/b", "b"));
        assert!(path("**/b", "/b"));
        assert!(path("/**/", "/"));
        assert!(path("/**/", "//"));
        assert!(path("/**/*", "/a"));
        assert!(!path("/*/**", "/a"));
    }

    #[test]
    fn a_double_star_inside_a_segment_is_a_star() {
        assert!(path("/a**", "/a"));
        assert!(path("/a**", "/abc"));
        assert!(!path("/a**", "/ab/c"));
        assert!(path("/**a", "/ya"));
        assert!(!path("/**a", "/x/ya"));
        assert!(!path("/x**/y", "/xa/b/y"));
    }

    #[test]
    fn classes_alternatives_and_escapes() {
        assert!(path("/[a-c]", "/b"));
        assert!(path("/[!a-c]", "/d"));
        assert!(path("/[^a-c]", "/d"));
        assert!(!path("/[!a-c]", "/b"));
        assert!(path("/[]]", "/]"));
        assert!(path("/[a-]", "/-"));
        assert!(path("/[-a]", "/-"));
        assert!(path("/{a,b}c", "/bc"));
        assert!(path("/{a,{b,c}}", "/c"));
        assert!(path("/{a,b/c}", "/b/c"));
        assert!(path("/a\\*", "/a*"));
        assert!(!path("/a\\*", "/ab"));
        assert!(path("/a\\b", "/ab"));
        assert!(!path("/[A-Z]", "/a"));
        assert!(!path("/a?b", "/ab"));
        assert!(!path("/a?", "/a/"));
    }

    #[test]
    fn other_punctuation_is_literal() {
        for p in [
            "/a$b", "/<a>", "/(a)", "/a,b", "/a:b", "/a]", "/a b", "/a%20b",
        ] {
            assert!(path(p, p), "{p}");
        }
        assert!(!path("/a$b", "/ab"));
        assert!(!path("/<a>", "/a"));
    }

    #[test]
    fn surprising_globs_are_refused() {
        for bad in [
            "/***", "/[a", "/a}", "/{a", "/[]", "/[!]", "/{a,}", "/{,a}", "/{}", "/{**,x}", "/a\\",
            "/[a\\]]", "/[z-a]",
        ] {
            assert!(Glob::new(bad, b'/').is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn the_query_delimiter_is_a_dot() {
        let g = Glob::new("v1.*", b'.').unwrap();
        assert!(g.is_match("v1.2"));
        assert!(!g.is_match("v1.2.3"));
        assert!(Glob::new("NVIDIA/*", b'.').unwrap().is_match("NVIDIA/x/y"));
        assert!(Glob::new("git-*", b'.')
            .unwrap()
            .is_match("git-upload-pack"));
    }

    #[test]
    fn many_stars_stay_fast() {
        let g = Glob::new("/*a*a*a*a*a*a*a*a*b", b'/').unwrap();
        let text = format!("/{}", "a".repeat(4000));
        let start = std::time::Instant::now();
        assert!(!g.is_match(&text));
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }
}
