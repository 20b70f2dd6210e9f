//! Globs over delimiter-separated text, as OpenShell's policy engine matches request paths and
//! program paths (delimiter `/`) and query values (delimiter `.`):
//!
//! * `*` matches any run of bytes within one segment (never the delimiter), `?` one byte of a
//!   segment;
//! * `**` as a whole segment matches across segments: `/a/**` matches `/a/` and everything below
//!   it (not `/a`), `/a/**/b` matches `/a/b` and `/a/x/y/b`, `**/b` matches `b` and `x/b`; a `**`
//!   inside a segment (`a**`) is a `*`;
//! * `[abc]`, `[a-z]`, `[!a-z]` (or `[^a-z]`) match one byte of a class (`]` first is literal;
//!   a class may match the delimiter, `[!a]` matches `/`);
//! * `{a,b}` matches either alternative; `\x` matches `x` literally; everything else is literal
//!   and matching is case-sensitive.
//!
//! What OpenShell's engine treats in surprising ways is refused when the glob is built, so a
//! policy never means something other than it reads: `***`, an unterminated or empty `[]`/`{}`,
//! an empty alternative, `**` inside braces, a trailing `**/`, a `}` with no `{`, `\` inside a
//! class or at the end.

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
    /// A glob over `delimiter`-separated segments. With a delimiter other than `/`, pattern
    /// and text are rewritten as OpenShell's engine rewrites them before matching: a `/` becomes
    /// an ordinary byte and each delimiter a segment of its own (`a.b` is `a/./b`).
    pub fn new(pattern: &str, delimiter: u8) -> Result<Glob, GlobError> {
        if delimiter != b'/' && pattern.as_bytes().contains(&PLAIN_SLASH) {
            return err("a NUL byte");
        }
        let rewritten = as_slash_segments(pattern.as_bytes(), delimiter);
        let mut parser = Parser {
            bytes: &rewritten,
            pos: 0,
            delimiter: b'/',
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
        if self.delimiter != b'/' && text.as_bytes().contains(&PLAIN_SLASH) {
            // OpenShell's engine refuses such a value (an evaluation error, so a denial).
            return false;
        }
        let text = as_slash_segments(text.as_bytes(), self.delimiter);
        self.variants
            .iter()
            .any(|tokens| matches(tokens, &text, b'/'))
    }
}

/// Stands for a `/` when `/` is not the delimiter.
const PLAIN_SLASH: u8 = 0;

/// `text` with `/` as its delimiter (see [`Glob::new`]).
fn as_slash_segments(text: &[u8], delimiter: u8) -> Vec<u8> {
    if delimiter == b'/' {
        return text.to_vec();
    }
    let mut out = Vec::with_capacity(text.len() + 8);
    for &b in text {
        match b {
            b'/' => out.push(PLAIN_SLASH),
            b if b == delimiter => out.extend_from_slice(&[b'/', b, b'/']),
            b => out.push(b),
        }
    }
    out
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
                    if self.pos == self.bytes.len() {
                        return err("a trailing `**/` (OpenShell's engine reads it inconsistently): end with `**`");
                    }
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

/// Whether `tokens` match all of `text`: dynamic programming over (token, position), from the
/// last token back, so every glob takes at most (tokens + 1) × (text + 1) steps.
fn matches(tokens: &[Token], text: &[u8], delimiter: u8) -> bool {
    let n = text.len();
    // `next[s]`: whether the tokens after the current one match `text[s..]`.
    let mut next: Vec<bool> = (0..=n).map(|s| s == n).collect();
    let mut cur = vec![false; n + 1];
    for token in tokens.iter().rev() {
        // For `TreeDir`: whether some delimiter at or after `s` is followed by a match.
        let mut after_delimiter = false;
        for s in (0..=n).rev() {
            let here = text.get(s).copied();
            let step = |ok: bool| ok && next.get(s + 1).copied().unwrap_or(false);
            cur[s] = match token {
                Token::Byte(b) => step(here == Some(*b)),
                Token::One => step(here.is_some_and(|c| c != delimiter)),
                Token::Class { negated, ranges } => step(here.is_some_and(|c| {
                    ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
                })),
                Token::Star => {
                    next[s]
                        || (here.is_some_and(|c| c != delimiter)
                            && cur.get(s + 1).copied().unwrap_or(false))
                }
                Token::TreeRest => true,
                Token::TreeDir => {
                    if here == Some(delimiter) && next[s + 1] {
                        after_delimiter = true;
                    }
                    next[s] || after_delimiter
                }
            };
        }
        std::mem::swap(&mut cur, &mut next);
    }
    next[0]
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
        assert!(path("[!a]", "/"));
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
            "/[a\\]]", "/[z-a]", "**/", "/a/**/",
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
