//! `Authorization: Basic base64(user:password)`, as git and curl send credentials from a URL or
//! a credential helper: a placeholder inside is only visible once decoded.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// The decoded `user:password` of a Basic header value, if it is one.
pub fn decode(value: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, token) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    STANDARD.decode(token.trim()).ok()
}

/// A Basic header value for `credentials` (`user:password`).
pub fn encode(credentials: &[u8]) -> String {
    format!("Basic {}", STANDARD.encode(credentials))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_what_git_sends() {
        // `git clone http://u:pw@host/` sends this after the server's 401.
        assert_eq!(decode(b"Basic dTpwdw==").unwrap(), b"u:pw");
        assert_eq!(decode(b"basic  dTpwdw== ").unwrap(), b"u:pw");
        assert_eq!(encode(b"u:pw"), "Basic dTpwdw==");
        assert!(decode(b"Bearer dTpwdw==").is_none());
        assert!(decode(b"Basic !!!").is_none());
    }
}
