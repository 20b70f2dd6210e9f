//! The TLS ClientHello as a server reads it: reassembled across as many TLS records as the client
//! split it into, and parsed by rustls's server-side `Acceptor` (the parser a rustls server
//! runs), so the SNI the proxy checks is the SNI a server acts on. A hello that does not parse is
//! refused by the caller, never passed on unchecked.

use rustls::server::Acceptor;

/// A ClientHello spread over more bytes than this is not waited for (refused). Real ones are
/// 0.5-2 KiB; a post-quantum key share makes ~1.8 KiB; TLS allows 64 KiB.
pub const MAX_HELLO: usize = 64 * 1024;

/// What the bytes received so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Not a whole ClientHello yet.
    NeedMore,
    /// A whole ClientHello; `sni` is its server name (`None`: no name, or an IP address, which
    /// servers ignore as a name).
    Parsed { sni: Option<String> },
    /// Not a ClientHello a server would accept.
    Invalid(String),
}

/// Reads one client's first bytes incrementally.
#[derive(Default)]
pub struct HelloReader {
    acceptor: Acceptor,
    /// How many bytes of the client's stream rustls has been given.
    fed: usize,
    done: Option<Hello>,
}

impl HelloReader {
    /// Look at everything the client sent so far (`all`; only what is new is parsed).
    pub fn feed(&mut self, all: &[u8]) -> Hello {
        if let Some(done) = &self.done {
            return done.clone();
        }
        if all.len() > MAX_HELLO {
            return self.finish(Hello::Invalid(format!(
                "the TLS ClientHello is not complete within {} KiB",
                MAX_HELLO / 1024
            )));
        }
        while self.fed < all.len() {
            let mut rest = &all[self.fed..];
            match self.acceptor.read_tls(&mut rest) {
                Ok(0) => break,
                Ok(n) => self.fed += n,
                Err(e) => return self.finish(Hello::Invalid(format!("TLS records: {e}"))),
            }
            match self.acceptor.accept() {
                Ok(None) => continue,
                Ok(Some(accepted)) => {
                    let sni = accepted.client_hello().server_name().map(str::to_string);
                    return self.finish(Hello::Parsed { sni });
                }
                Err((e, _alert)) => {
                    return self.finish(Hello::Invalid(format!("TLS ClientHello: {e}")))
                }
            }
        }
        Hello::NeedMore
    }

    fn finish(&mut self, h: Hello) -> Hello {
        self.done = Some(h.clone());
        h
    }
}

/// Parse a whole first flight at once.
pub fn parse(all: &[u8]) -> Hello {
    HelloReader::default().feed(all)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ClientHello handshake message (not yet in records) carrying `sni` (if any) and `pad`
    /// bytes of an unknown extension.
    pub fn hello_message(sni: Option<&str>, pad: usize) -> Vec<u8> {
        // signature_algorithms (rustls, like TLS 1.2 servers, wants it): rsa_pss_rsae_sha256.
        let mut exts = vec![0, 13, 0, 4, 0, 2, 8, 4];
        if let Some(name) = sni {
            let n = name.len() as u16;
            exts.extend_from_slice(&0u16.to_be_bytes());
            exts.extend_from_slice(&(n + 5).to_be_bytes());
            exts.extend_from_slice(&(n + 3).to_be_bytes());
            exts.push(0);
            exts.extend_from_slice(&n.to_be_bytes());
            exts.extend_from_slice(name.as_bytes());
        }
        if pad > 0 {
            exts.extend_from_slice(&21u16.to_be_bytes()); // padding
            exts.extend_from_slice(&(pad as u16).to_be_bytes());
            exts.extend(std::iter::repeat_n(0u8, pad));
        }
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7u8; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0xc0, 0x2f]); // ECDHE-RSA-AES128-GCM-SHA256
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut hs = vec![1];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        hs
    }

    /// `message` in TLS handshake records, cut at the given offsets of the message.
    pub fn records(message: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut start = 0;
        for &end in cuts.iter().chain(std::iter::once(&message.len())) {
            let frag = &message[start..end];
            out.extend_from_slice(&[0x16, 3, 1]);
            out.extend_from_slice(&(frag.len() as u16).to_be_bytes());
            out.extend_from_slice(frag);
            start = end;
        }
        out
    }

    /// A ClientHello in one record.
    pub fn client_hello(sni: Option<&str>) -> Vec<u8> {
        records(&hello_message(sni, 0), &[])
    }

    #[test]
    fn sni_is_read_from_a_client_hello() {
        assert_eq!(
            parse(&client_hello(Some("api.example.com"))),
            Hello::Parsed {
                sni: Some("api.example.com".into())
            }
        );
        assert_eq!(parse(&client_hello(None)), Hello::Parsed { sni: None });
    }

    #[test]
    fn a_hello_split_across_records_at_every_offset_gives_the_same_sni() {
        let msg = hello_message(Some("evil.test"), 0);
        for cut in 1..msg.len() {
            assert_eq!(
                parse(&records(&msg, &[cut])),
                Hello::Parsed {
                    sni: Some("evil.test".into())
                },
                "cut at {cut}"
            );
        }
        // One byte a record.
        let cuts: Vec<usize> = (1..msg.len()).collect();
        assert_eq!(
            parse(&records(&msg, &cuts)),
            Hello::Parsed {
                sni: Some("evil.test".into())
            }
        );
    }

    #[test]
    fn every_prefix_of_a_split_hello_needs_more_and_fed_bytewise_it_completes() {
        let all = records(&hello_message(Some("evil.test"), 300), &[10, 200]);
        for end in 0..all.len() {
            assert_eq!(parse(&all[..end]), Hello::NeedMore, "prefix {end}");
        }
        let mut reader = HelloReader::default();
        for end in 1..all.len() {
            assert_eq!(reader.feed(&all[..end]), Hello::NeedMore, "byte {end}");
        }
        assert_eq!(
            reader.feed(&all),
            Hello::Parsed {
                sni: Some("evil.test".into())
            }
        );
    }

    #[test]
    fn malformed_hellos_are_invalid_not_unnamed() {
        // A handshake record that is not a ClientHello (a ServerHello type).
        let mut msg = hello_message(Some("a.test"), 0);
        msg[0] = 2;
        assert!(matches!(parse(&records(&msg, &[])), Hello::Invalid(_)));
        // Two host names in the SNI list.
        let mut two = hello_message(Some("a.test"), 0);
        let at = two.len() - "a.test".len() - 3;
        let entry = two[at..].to_vec();
        two.extend_from_slice(&entry);
        let grow = |v: &mut Vec<u8>, at: usize, by: usize, width: usize| {
            let mut n = 0usize;
            for b in &v[at..at + width] {
                n = n << 8 | usize::from(*b);
            }
            let bytes = (n + by).to_be_bytes();
            v[at..at + width].copy_from_slice(&bytes[bytes.len() - width..]);
        };
        let by = entry.len();
        grow(&mut two, 1, by, 3); // handshake length
        let exts_at = 4 + 2 + 32 + 1 + 4 + 2;
        grow(&mut two, exts_at, by, 2); // extensions length
        let sni_at = exts_at + 2 + 8;
        grow(&mut two, sni_at + 2, by, 2); // SNI extension length
        grow(&mut two, sni_at + 4, by, 2); // server name list length
        assert!(matches!(parse(&records(&two, &[])), Hello::Invalid(_)));
        // Application data where the hello should be.
        assert!(matches!(
            parse(&[0x17, 3, 3, 0, 2, 1, 2]),
            Hello::Invalid(_)
        ));
        // A record of a different type in the middle of the hello.
        let msg = hello_message(Some("a.test"), 0);
        let mut mixed = records(&msg[..20], &[]);
        mixed.extend_from_slice(&[0x17, 3, 3, 0, 1, 0]);
        mixed.extend_from_slice(&records(&msg[20..], &[]));
        assert!(matches!(parse(&mixed), Hello::Invalid(_)));
    }

    #[test]
    fn a_hello_larger_than_the_bound_is_invalid() {
        // A ClientHello of the largest length TLS allows, in records: never complete in bounds.
        let mut stream = Vec::new();
        let mut message = vec![1, 0, 0xff, 0xff];
        message.resize(0x4000, 0);
        stream.extend_from_slice(&records(&message, &[]));
        while stream.len() <= MAX_HELLO {
            stream.extend_from_slice(&records(&[0u8; 0x4000], &[]));
        }
        assert_eq!(parse(&stream[..MAX_HELLO - 10]), Hello::NeedMore);
        assert!(matches!(parse(&stream), Hello::Invalid(_)));
    }
}
