//! The launcher's lines on stderr, each in one `write`.
//!
//! The launcher shares stderr with the program it runs. `eprintln!` writes a formatted line piece
//! by piece (stderr is unbuffered), so a line printed while the program runs — `-v`'s verified
//! facts, a warning, a denial summary — could be cut in the middle by what the program writes.
//! A CI run saw exactly that: the JSON of `verified:` split by the program's own error message.
//! `say!` formats the whole line first and hands it to the kernel at once; a write of up to
//! `PIPE_BUF` (4096 bytes) to a pipe is never interleaved with another writer's.
//! `clippy::print_stderr` is denied in this crate, so `eprintln!` cannot come back by accident.

use std::fmt;
use std::io::Write;

/// `say!("…", args)`: like `eprintln!`, but the line reaches stderr in one write.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say::line(::std::format_args!($($arg)*))
    };
}

/// Writes `args` and a newline to stderr in one write. A stderr that cannot be written to is
/// ignored, as a closed one is by `eprintln!`; there is nobody left to tell.
pub fn line(args: fmt::Arguments<'_>) {
    let _ = line_to(&mut std::io::stderr().lock(), args);
}

fn line_to(out: &mut impl Write, args: fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut text = args.to_string();
    text.push('\n');
    out.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records each `write` it is given, as the kernel would see them.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl Write for Writes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_with_arguments_is_one_write() {
        let facts =
            serde_json::json!({"hostname": "sandbox", "landlock": {"abi": 7, "enforced": true}});
        let mut said = Writes::default();
        line_to(&mut said, format_args!("sandbox-launch: verified: {facts}")).unwrap();
        assert_eq!(
            said.0,
            vec![format!("sandbox-launch: verified: {facts}\n").into_bytes()]
        );
        // What `eprintln!` does with the same line: many writes, any of which another writer
        // of the same pipe can come between.
        let mut pieces = Writes::default();
        writeln!(pieces, "sandbox-launch: verified: {facts}").unwrap();
        assert!(pieces.0.len() > 2, "{:?}", pieces.0.len());
    }
}
