//! The methods a server may take a request for. Besides the request line's own, frameworks
//! honour a method named elsewhere when the client cannot send it directly: the
//! `X-HTTP-Method-Override` header (Express's method-override, Rack, Symfony/Laravel, Google's
//! APIs), `X-HTTP-Method` (OData), `X-Method-Override`, and a `_method` query parameter
//! (Symfony/Laravel). A request rule must hold for each of them, or a `POST` the rules allow
//! carries a `DELETE` a deny rule refuses.
//!
//! A `_method` in a form body is not seen (bodies are streamed, never buffered): README says so.

use hyper::header::HeaderMap;

/// The headers that name another method.
pub const OVERRIDE_HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// The query parameter that names another method.
pub const OVERRIDE_PARAM: &str = "_method";

/// A method another part of the request names, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// Upper-case, as the frameworks compare it.
    pub method: String,
    /// `X-HTTP-Method-Override header` or `_method query parameter`.
    pub via: String,
}

/// Every method the headers and the decoded query parameters name, besides the request line's;
/// an error when one of them is not a method token (a server's reading cannot be known).
pub fn overrides(
    headers: &HeaderMap,
    params: &[(String, String)],
) -> Result<Vec<Override>, String> {
    let mut out = Vec::new();
    // By name with `_` read as `-`: a server that reads headers as CGI does
    // (`HTTP_X_HTTP_METHOD_OVERRIDE`: Python's wsgiref, CGI and WSGI stacks, Rack) takes
    // `X_HTTP_Method_Override` for the same header.
    for (name, value) in headers {
        let Some(known) = OVERRIDE_HEADERS
            .iter()
            .find(|o| same_name(name.as_str(), o))
        else {
            continue;
        };
        let text = String::from_utf8_lossy(value.as_bytes());
        out.push(named(&text, format!("{known} header"))?);
    }
    for (k, v) in params {
        if k == OVERRIDE_PARAM {
            out.push(named(v, format!("{OVERRIDE_PARAM} query parameter"))?);
        }
    }
    Ok(out)
}

/// Whether a header's name (lower-case, as hyper keeps it) is `known` with `_` read as `-`.
fn same_name(name: &str, known: &str) -> bool {
    name.len() == known.len()
        && name
            .bytes()
            .zip(known.bytes())
            .all(|(a, b)| a == b || (a == b'_' && b == b'-'))
}

fn named(value: &str, via: String) -> Result<Override, String> {
    let method = value.trim();
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if method.is_empty() || !method.bytes().all(token) {
        let shown: String = method
            .chars()
            .take(40)
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        return Err(format!(
            "the {via} names `{shown}`, which is not an HTTP method"
        ));
    }
    Ok(Override {
        method: method.to_ascii_uppercase(),
        via,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn methods(h: &HeaderMap, params: &[(&str, &str)]) -> Result<Vec<String>, String> {
        let params: Vec<(String, String)> = params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        overrides(h, &params).map(|o| o.into_iter().map(|o| o.method).collect())
    }

    #[test]
    fn each_override_convention_names_a_method() {
        let h = headers(&[
            ("X-HTTP-Method-Override", "delete"),
            ("x-http-method", " PUT "),
            ("X-Method-Override", "PATCH"),
            ("x-http-method-override", "GET"),
        ]);
        assert_eq!(
            methods(&h, &[("_method", "Delete"), ("method", "TRACE")]).unwrap(),
            ["DELETE", "GET", "PUT", "PATCH", "DELETE"]
        );
        assert_eq!(
            methods(&HeaderMap::new(), &[]).unwrap(),
            Vec::<String>::new()
        );
    }

    /// CGI-style servers read `X_HTTP_METHOD_OVERRIDE` as `X-HTTP-Method-Override`
    /// (`HTTP_X_HTTP_METHOD_OVERRIDE`); a name that only looks alike is no override.
    #[test]
    fn an_override_spelled_with_underscores_is_one() {
        let h = headers(&[
            ("X_HTTP_METHOD_OVERRIDE", "DELETE"),
            ("x_http-method", "put"),
            ("x-method_override", "patch"),
            ("x-http-method-overrides", "TRACE"),
            ("x.http.method", "TRACE"),
        ]);
        assert_eq!(methods(&h, &[]).unwrap(), ["DELETE", "PUT", "PATCH"]);
    }

    #[test]
    fn an_override_that_is_not_a_method_is_an_error() {
        for bad in ["", "DELETE, GET", "DEL ETE", "DELETE\tX"] {
            let h = headers(&[("x-http-method-override", bad)]);
            assert!(methods(&h, &[]).is_err(), "{bad:?}");
        }
        assert!(methods(&HeaderMap::new(), &[("_method", "")]).is_err());
    }
}
