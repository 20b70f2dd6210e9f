//! JSON with `//` and `/* */` comments and trailing commas, as agent settings files are often
//! written. A pre-pass turns it into plain JSON of the same length and line structure (comments
//! and the trailing commas become spaces), so serde_json's line and column numbers still point
//! at the original text.

/// Blank out comments and trailing commas outside strings. An unterminated block comment is
/// left for serde_json to report.
pub fn strip(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    // The most recent comma outside a string, until something other than whitespace or a
    // comment follows it.
    let mut pending_comma: Option<usize> = None;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                pending_comma = None;
                i = skip_string(bytes, i);
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let Some(len) = text[i + 2..].find("*/") else {
                    break;
                };
                let end = i + 2 + len + 2;
                for b in &mut out[i..end] {
                    if *b != b'\n' {
                        *b = b' ';
                    }
                }
                i = end;
            }
            b',' => {
                pending_comma = Some(i);
                i += 1;
            }
            b'}' | b']' => {
                if let Some(c) = pending_comma.take() {
                    out[c] = b' ';
                }
                i += 1;
            }
            b if b.is_ascii_whitespace() => i += 1,
            _ => {
                pending_comma = None;
                i += 1;
            }
        }
    }
    // Only ASCII bytes were replaced by ASCII spaces, so the text is still UTF-8.
    String::from_utf8(out).unwrap_or_else(|_| text.to_string())
}

/// The index just past the string that starts at `start` (a `"`).
fn skip_string(bytes: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parse(text: &str) -> Value {
        serde_json::from_str(&strip(text)).unwrap()
    }

    #[test]
    fn comments_and_trailing_commas_are_accepted() {
        let text = r#"{
            // a line comment
            "a": [1, 2, 3,], /* a block
               comment */
            "b": {"c": "d",},
        }"#;
        assert_eq!(parse(text), json!({"a": [1, 2, 3], "b": {"c": "d"}}));
    }

    #[test]
    fn comment_markers_and_commas_inside_strings_are_kept() {
        let text = r#"{"url": "https://x.example/*y*/", "s": "a,]", "q": "\"//\",}"}"#;
        assert_eq!(
            parse(text),
            json!({"url": "https://x.example/*y*/", "s": "a,]", "q": "\"//\",}"})
        );
    }

    #[test]
    fn line_numbers_survive_the_pre_pass() {
        let text = "{\n /* one\n two */\n \"a\": nope\n}";
        let err = serde_json::from_str::<Value>(&strip(text)).unwrap_err();
        assert_eq!(err.line(), 4);
    }

    #[test]
    fn a_comma_before_a_comment_and_a_bracket_is_trailing() {
        assert_eq!(parse("[1, // x\n]"), json!([1]));
        assert_eq!(parse("{\"a\": 1 /* x */ , /* y */ }"), json!({"a": 1}));
    }

    #[test]
    fn a_doubled_comma_is_still_an_error() {
        assert!(serde_json::from_str::<Value>(&strip("[1,,]")).is_err());
    }
}
