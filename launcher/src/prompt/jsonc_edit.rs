//! Small edits to a JSON-with-comments text that keep everything else as it was written:
//! comments, order, indentation, trailing commas. Used for the lasting prompt answers, which
//! add an entry to a list in the user's settings file or remove one from it.
//!
//! A scanner finds where a value lies (the byte span of the value at a key path); an edit is
//! one insertion or one removal at such a place. The caller checks the result by loading it
//! as settings before writing it.

use anyhow::{bail, Result};

/// A value's place in the text: `start..end` (for arrays and objects, from the opening to past
/// the closing bracket), and for arrays the spans of their elements.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
    elements: Vec<(usize, usize)>,
    /// Object members: key (unescaped) and the value's span.
    members: Vec<(String, Span)>,
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn skip_blank(&mut self) {
        loop {
            match (self.b.get(self.i), self.b.get(self.i + 1)) {
                (Some(c), _) if c.is_ascii_whitespace() => self.i += 1,
                (Some(b'/'), Some(b'/')) => {
                    while self.i < self.b.len() && self.b[self.i] != b'\n' {
                        self.i += 1;
                    }
                }
                (Some(b'/'), Some(b'*')) => {
                    self.i += 2;
                    while self.i + 1 < self.b.len()
                        && !(self.b[self.i] == b'*' && self.b[self.i + 1] == b'/')
                    {
                        self.i += 1;
                    }
                    self.i = (self.i + 2).min(self.b.len());
                }
                _ => return,
            }
        }
    }

    fn string(&mut self) -> Result<String> {
        let start = self.i;
        self.i += 1;
        while let Some(&c) = self.b.get(self.i) {
            match c {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    let raw = std::str::from_utf8(&self.b[start..self.i])?;
                    return Ok(serde_json::from_str(raw)?);
                }
                _ => self.i += 1,
            }
        }
        bail!("unterminated string")
    }

    fn value(&mut self) -> Result<Span> {
        self.skip_blank();
        let start = self.i;
        let mut span = Span {
            start,
            end: start,
            elements: Vec::new(),
            members: Vec::new(),
        };
        match self.b.get(self.i) {
            Some(b'"') => {
                self.string()?;
            }
            Some(b'[') => {
                self.i += 1;
                loop {
                    self.skip_blank();
                    match self.b.get(self.i) {
                        Some(b']') => {
                            self.i += 1;
                            break;
                        }
                        Some(b',') => self.i += 1,
                        Some(_) => {
                            let e = self.value()?;
                            span.elements.push((e.start, e.end));
                        }
                        None => bail!("unterminated array"),
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                loop {
                    self.skip_blank();
                    match self.b.get(self.i) {
                        Some(b'}') => {
                            self.i += 1;
                            break;
                        }
                        Some(b',') => self.i += 1,
                        Some(b'"') => {
                            let key = self.string()?;
                            self.skip_blank();
                            if self.b.get(self.i) != Some(&b':') {
                                bail!("expected `:` after {key:?}");
                            }
                            self.i += 1;
                            let v = self.value()?;
                            span.members.push((key, v));
                        }
                        _ => bail!("unexpected character in an object"),
                    }
                }
            }
            Some(_) => {
                while let Some(&c) = self.b.get(self.i) {
                    if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.') {
                        self.i += 1;
                    } else {
                        break;
                    }
                }
                if self.i == start {
                    bail!("unexpected character at byte {start}");
                }
            }
            None => bail!("unexpected end of text"),
        }
        span.end = self.i;
        Ok(span)
    }
}

fn parse(text: &str) -> Result<Span> {
    let mut s = Scanner {
        b: text.as_bytes(),
        i: 0,
    };
    s.value()
}

fn member<'s>(span: &'s Span, key: &str) -> Option<&'s Span> {
    span.members.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// The indentation of the line `at` is on.
fn indent_of(text: &str, at: usize) -> &str {
    let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
    let line = &text[line_start..];
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

/// Insert `item` (JSON text) as the first entry of the array or object that opens at `open`;
/// `first_child` is where its current first entry starts, if any. Entries on lines of their
/// own get a line of their own, at the same indentation.
fn insert_first(text: &str, open: usize, first_child: Option<usize>, item: &str) -> String {
    let after = open + 1;
    match first_child {
        None => format!("{}{item}{}", &text[..after], &text[after..]),
        Some(child) if text[after..child].contains('\n') => format!(
            "{}\n{}{item},{}",
            &text[..after],
            indent_of(text, child),
            &text[after..]
        ),
        Some(child) => format!("{}{item}, {}", &text[..child], &text[child..]),
    }
}

/// Add `entry` to the string list at `path` (creating the objects and the list on the way),
/// unless it is there already. `None`: nothing to change.
pub fn add_to_list(text: &str, path: &[&str], entry: &str) -> Result<Option<String>> {
    let root = parse(text)?;
    if root.members.is_empty() && !text[root.start..].starts_with('{') {
        bail!("the top level is not an object");
    }
    let mut span = &root;
    for (depth, key) in path.iter().enumerate() {
        match member(span, key) {
            Some(next) => span = next,
            None => {
                // Build what is missing from here down, as one member of `span`.
                let mut value = serde_json::json!([entry]);
                for k in path[depth + 1..].iter().rev() {
                    value = serde_json::json!({ *k: value });
                }
                let item = format!("{}: {}", serde_json::json!(key), value);
                let first = span.members.first().map(|(_, v)| key_start(text, v.start));
                return Ok(Some(insert_first(text, span.start, first, &item)));
            }
        }
    }
    if !text[span.start..].starts_with('[') {
        bail!("{} is not a list", path.join("."));
    }
    let present = span
        .elements
        .iter()
        .any(|&(s, e)| serde_json::from_str::<String>(&text[s..e]).is_ok_and(|v| v == entry));
    if present {
        return Ok(None);
    }
    let first = span.elements.first().map(|&(s, _)| s);
    Ok(Some(insert_first(
        text,
        span.start,
        first,
        &serde_json::json!(entry).to_string(),
    )))
}

/// Where the key of the member whose value starts at `value_start` begins.
fn key_start(text: &str, value_start: usize) -> usize {
    let before = &text[..value_start];
    let colon = before.rfind(':').unwrap_or(0);
    let key_end = before[..colon].rfind('"').unwrap_or(0);
    before[..key_end].rfind('"').unwrap_or(key_end)
}

/// Remove the entries equal to one of `entries` from the string list at `path`; `None` when
/// none is there.
pub fn remove_from_list(text: &str, path: &[&str], entries: &[String]) -> Result<Option<String>> {
    let root = parse(text)?;
    let mut span = &root;
    for key in path {
        match member(span, key) {
            Some(next) => span = next,
            None => return Ok(None),
        }
    }
    let doomed: Vec<(usize, usize)> = span
        .elements
        .iter()
        .copied()
        .filter(|&(s, e)| {
            serde_json::from_str::<String>(&text[s..e]).is_ok_and(|v| entries.contains(&v))
        })
        .collect();
    if doomed.is_empty() {
        return Ok(None);
    }
    let mut out = text.to_string();
    // From the last, so earlier offsets stay valid.
    for &(s, e) in doomed.iter().rev() {
        let (cut_from, cut_to) = removal_range(&out, s, e);
        out.replace_range(cut_from..cut_to, "");
    }
    Ok(Some(out))
}

/// The range that removes the element at `s..e` with its separating comma: the comma after it
/// (and the blanks up to the next element) or, for the last element, the comma before it.
fn removal_range(text: &str, s: usize, e: usize) -> (usize, usize) {
    let b = text.as_bytes();
    let mut j = e;
    while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
        j += 1;
    }
    if b.get(j) == Some(&b',') {
        j += 1;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        // Keep the next element's own line break and indentation.
        let line_start = text[..s].rfind('\n').map_or(0, |n| n + 1);
        if text[line_start..s].trim().is_empty() && text[e..j].contains('\n') {
            let next_line = text[..j].rfind('\n').map_or(j, |n| n + 1);
            return (line_start, next_line);
        }
        return (s, j);
    }
    // The last element: take the comma before it, if any.
    let mut k = s;
    while k > 0 && b[k - 1].is_ascii_whitespace() {
        k -= 1;
    }
    if k > 0 && b[k - 1] == b',' {
        return (k - 1, e);
    }
    (s, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: [&str; 3] = ["sandbox", "network", "allowedDomains"];

    fn values(text: &str) -> serde_json::Value {
        serde_json::from_str(&crate::policy::jsonc::strip(text)).unwrap()
    }

    #[test]
    fn an_entry_joins_a_list_and_every_comment_stays() {
        let text = r#"{
  // my settings
  "sandbox": {
    "network": {
      /* reviewed */ "allowedDomains": [
        "github.com", // code
        "example.com",
      ],
    },
  },
  "theme": "dark"
}
"#;
        let out = add_to_list(text, &PATH, "*.npmjs.org").unwrap().unwrap();
        assert!(out.contains("// my settings") && out.contains("/* reviewed */"));
        assert!(out.contains("// code"));
        assert_eq!(
            values(&out)["sandbox"]["network"]["allowedDomains"],
            serde_json::json!(["*.npmjs.org", "github.com", "example.com"])
        );
        assert!(
            out.contains("\n        \"*.npmjs.org\",\n        \"github.com\""),
            "{out}"
        );
        assert_eq!(add_to_list(&out, &PATH, "github.com").unwrap(), None);
    }

    #[test]
    fn missing_objects_and_lists_are_made() {
        for text in [
            "{}",
            "{\"theme\": \"dark\"}",
            "{\n  \"sandbox\": {\n    \"enabled\": true\n  }\n}",
            "{\"sandbox\": {\"network\": {\"deniedDomains\": []}}}",
            "{\"sandbox\": {\"network\": {\"allowedDomains\": []}}}",
        ] {
            let out = add_to_list(text, &PATH, "*.npmjs.org").unwrap().unwrap();
            assert_eq!(
                values(&out)["sandbox"]["network"]["allowedDomains"],
                serde_json::json!(["*.npmjs.org"]),
                "{text} -> {out}"
            );
        }
    }

    #[test]
    fn an_entry_leaves_a_list_with_its_comma() {
        let path = ["sandbox", "network", "deniedDomains"];
        let cases: [(&str, &str, Vec<&str>); 4] = [
            (r#"{"sandbox":{"network":{"deniedDomains":["a.test","b.test"]}}}"#, "a.test", vec!["b.test"]),
            (r#"{"sandbox":{"network":{"deniedDomains":["a.test", "b.test"]}}}"#, "b.test", vec!["a.test"]),
            ("{\"sandbox\":{\"network\":{\"deniedDomains\":[\n  \"x.test\",\n  \"b.test\", // why\n  \"y.test\"\n]}}}", "b.test", vec!["x.test", "y.test"]),
            (r#"{"sandbox":{"network":{"deniedDomains":["b.test"]}}}"#, "b.test", vec![]),
        ];
        for (text, gone, left) in cases {
            let out = remove_from_list(text, &path, &[gone.to_string()])
                .unwrap()
                .unwrap();
            assert_eq!(
                values(&out)["sandbox"]["network"]["deniedDomains"],
                serde_json::json!(left),
                "{text} -> {out}"
            );
        }
        assert_eq!(remove_from_list("{}", &path, &["a".into()]).unwrap(), None);
    }
}
