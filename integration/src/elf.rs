//! Just enough of an ELF64 little-endian file to say where its functions were placed: the
//! section headers, and the symbol table with its names.

use std::path::Path;

pub struct Section {
    pub name: String,
    pub addr: u64,
    pub size: u64,
}

pub struct Symbol {
    pub name: String,
    pub addr: u64,
    pub size: u64,
}

pub struct Elf {
    pub sections: Vec<Section>,
    /// The functions of `.symtab` (STT_FUNC).
    pub functions: Vec<Symbol>,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn name_at(strtab: &[u8], at: usize) -> String {
    let end = strtab[at..].iter().position(|&c| c == 0).unwrap() + at;
    String::from_utf8_lossy(&strtab[at..end]).into_owned()
}

const SHT_SYMTAB: u32 = 2;
const STT_FUNC: u8 = 2;

impl Elf {
    pub fn read(path: &Path) -> Elf {
        let b = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        assert!(
            b.starts_with(b"\x7fELF\x02\x01"),
            "{} is not a 64-bit little-endian ELF file",
            path.display()
        );
        let (shoff, shentsize) = (u64_at(&b, 0x28) as usize, u16_at(&b, 0x3a) as usize);
        let (shnum, shstrndx) = (u16_at(&b, 0x3c) as usize, u16_at(&b, 0x3e) as usize);
        let header = |i: usize| &b[shoff + i * shentsize..shoff + (i + 1) * shentsize];
        let contents = |h: &[u8]| {
            let (off, size) = (u64_at(h, 0x18) as usize, u64_at(h, 0x20) as usize);
            &b[off..off + size]
        };
        let names = contents(header(shstrndx));
        let mut sections = Vec::new();
        let mut functions = Vec::new();
        for i in 0..shnum {
            let h = header(i);
            sections.push(Section {
                name: name_at(names, u32_at(h, 0) as usize),
                addr: u64_at(h, 0x10),
                size: u64_at(h, 0x20),
            });
            if u32_at(h, 4) != SHT_SYMTAB {
                continue;
            }
            let strtab = contents(header(u32_at(h, 0x28) as usize));
            for sym in contents(h).chunks_exact(24) {
                if sym[4] & 0xf == STT_FUNC {
                    functions.push(Symbol {
                        name: name_at(strtab, u32_at(sym, 0) as usize),
                        addr: u64_at(sym, 8),
                        size: u64_at(sym, 16),
                    });
                }
            }
        }
        Elf {
            sections,
            functions,
        }
    }

    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }
}

/// `pattern` with `*` for any run of characters (the only wildcard the linker scripts here use)
/// matches all of `text`.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::glob_matches;

    #[test]
    fn a_star_matches_any_run_and_the_rest_literally() {
        assert!(glob_matches("_RNvCs*_4shim3run", "_RNvCsabc_4shim3run"));
        assert!(glob_matches("a*b*c", "abc"));
        assert!(glob_matches("a*", "a"));
        assert!(glob_matches("*", ""));
        assert!(glob_matches("plain", "plain"));
        assert!(!glob_matches("plain", "plainer"));
        assert!(!glob_matches("a*b*c", "acb"));
        assert!(!glob_matches("ab*ba", "aba"));
        assert!(!glob_matches(
            "_RNvCs*_4shim3run",
            "_RNvCsabc_4shim3run4main"
        ));
    }
}
