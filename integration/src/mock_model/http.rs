//! A minimal HTTP/1.1 server on std sockets: one thread per connection, keep-alive, bodies by
//! `Content-Length` or chunked. Enough for the model clients the agents use (Bun's fetch, Node's
//! undici, reqwest), directly or through the sandbox's proxy (absolute-form request targets).

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

/// One request as the server read it.
pub struct Request {
    pub method: String,
    /// Origin-form path with query (`/v1/messages?beta=true`), also when the client sent the
    /// absolute form through a proxy.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// What the handler answers.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        Response {
            status,
            content_type: "application/json",
            body: value.to_string().into_bytes(),
        }
    }

    pub fn sse(body: String) -> Self {
        Response {
            status: 200,
            content_type: "text/event-stream",
            body: body.into_bytes(),
        }
    }
}

pub type Handler = Arc<dyn Fn(Request) -> Response + Send + Sync>;

/// Serve `listener` on a background thread until the process ends.
pub fn serve(listener: TcpListener, handler: Handler) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let handler = handler.clone();
            std::thread::spawn(move || {
                let _ = connection(stream, &handler);
            });
        }
    });
}

fn connection(stream: TcpStream, handler: &Handler) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    while let Some(request) = read_request(&mut reader)? {
        let close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let response = handler(request);
        write!(
            writer,
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-cache\r\nConnection: {}\r\n\r\n",
            response.status,
            reason(response.status),
            response.content_type,
            response.body.len(),
            if close { "close" } else { "keep-alive" },
        )?;
        writer.write_all(&response.body)?;
        writer.flush()?;
        if close {
            break;
        }
    }
    Ok(())
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        _ => "Error",
    }
}

fn read_request(reader: &mut impl BufRead) -> io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = origin_form(parts.next().unwrap_or("/"));
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut request = Request {
        method,
        target,
        headers,
        body: Vec::new(),
    };
    if request
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        request.body = read_chunked(reader)?;
    } else if let Some(len) = request.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad content-length"))?;
        request.body = vec![0; len];
        reader.read_exact(&mut request.body)?;
    }
    Ok(Some(request))
}

fn read_chunked(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
        if size == 0 {
            // Trailers up to the empty line.
            loop {
                let mut t = String::new();
                if reader.read_line(&mut t)? == 0 || t.trim_end().is_empty() {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        reader.read_exact(&mut crlf)?;
    }
}

/// `http://host:port/p?q` -> `/p?q`; an origin-form target is returned as it is.
fn origin_form(target: &str) -> String {
    match target.split_once("://") {
        Some((_, rest)) => match rest.find('/') {
            Some(i) => rest[i..].to_string(),
            None => "/".to_string(),
        },
        None => target.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_form_targets_become_origin_form() {
        assert_eq!(
            origin_form("http://mock.test:8080/v1/messages?beta=true"),
            "/v1/messages?beta=true"
        );
        assert_eq!(origin_form("http://mock.test"), "/");
        assert_eq!(origin_form("/v1/responses"), "/v1/responses");
    }

    #[test]
    fn chunked_and_sized_bodies_are_read_whole() {
        let raw = b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n\
POST /b HTTP/1.1\r\nContent-Length: 4\r\n\r\nwxyz";
        let mut r = BufReader::new(&raw[..]);
        let a = read_request(&mut r).unwrap().unwrap();
        assert_eq!((a.path(), a.body.as_slice()), ("/a", &b"abcde"[..]));
        let b = read_request(&mut r).unwrap().unwrap();
        assert_eq!((b.path(), b.body.as_slice()), ("/b", &b"wxyz"[..]));
        assert!(read_request(&mut r).unwrap().is_none());
    }
}
