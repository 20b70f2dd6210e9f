//! A repository's `config` names commands git runs on ordinary actions (`core.fsmonitor`,
//! `core.hooksPath`, aliases, filters, `include.path` of another file...), yet `git clone`,
//! `git init`, `git remote add`, `git branch -u` and `git config user.email` must work inside.
//! Git writes `config` only as `config.lock` renamed over it, so the guard validates what is
//! renamed there: every key must be one git writes in ordinary operations and that names no
//! command ([`ALLOWED`]), or be present with the same value in the file it replaces (so an
//! existing `core.hooksPath = .husky` survives `git config user.email` inside).

use std::collections::HashMap;

/// The most a `config` may hold for the guard to read it.
pub const MAX_CONFIG: usize = 1 << 20;

/// One variable: section (lower case), subsection (as written), key (lower case), value
/// (`None`: a bare key, boolean true).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    pub section: String,
    pub subsection: Option<String>,
    pub key: String,
    pub value: Option<String>,
}

impl Entry {
    pub fn name(&self) -> String {
        match &self.subsection {
            Some(s) => format!("{}.{s}.{}", self.section, self.key),
            None => format!("{}.{}", self.section, self.key),
        }
    }
}

/// Keys git writes in ordinary operations that name no command, by section; `sub` says whether
/// they live under a subsection (`remote.<name>.url`).
const ALLOWED: &[(&str, bool, &[&str])] = &[
    (
        "core",
        false,
        &[
            "repositoryformatversion",
            "filemode",
            "bare",
            "logallrefupdates",
            "ignorecase",
            "precomposeunicode",
            "symlinks",
            "autocrlf",
            "eol",
            "safecrlf",
            "sharedrepository",
            "quotepath",
            "checkstat",
            "trustctime",
            "untrackedcache",
            "splitindex",
            "commitgraph",
            "multipackindex",
            "abbrev",
            "compression",
            "loosecompression",
            "bigfilethreshold",
            "sparsecheckout",
            "sparsecheckoutcone",
        ],
    ),
    (
        "extensions",
        false,
        &["objectformat", "refstorage", "worktreeconfig"],
    ),
    (
        "remote",
        true,
        &[
            "url",
            "pushurl",
            "fetch",
            "push",
            "tagopt",
            "prune",
            "prunetags",
            "mirror",
            "skipdefaultupdate",
            "skipfetchall",
            "promisor",
            "partialclonefilter",
        ],
    ),
    (
        "branch",
        true,
        &["remote", "pushremote", "merge", "rebase", "description"],
    ),
    ("submodule", true, &["url", "active", "branch", "shallow"]),
    ("user", false, &["name", "email", "signingkey"]),
    ("init", false, &["defaultbranch"]),
    ("pull", false, &["rebase", "ff"]),
    ("push", false, &["default", "autosetupremote", "followtags"]),
    ("fetch", false, &["prune", "prunetags", "fsckobjects"]),
    ("merge", false, &["ff", "conflictstyle", "log"]),
    ("rebase", false, &["autosquash", "autostash", "updaterefs"]),
    ("gc", false, &["auto", "autodetach", "autopacklimit"]),
    ("i18n", false, &["commitencoding", "logoutputencoding"]),
    ("lfs", false, &["repositoryformatversion"]),
];

/// Whether `e` is a key git writes that names no command.
fn allowed(e: &Entry) -> bool {
    if e.section == "advice" && e.subsection.is_none() {
        return true;
    }
    let known = ALLOWED.iter().any(|(section, sub, keys)| {
        *section == e.section && *sub == e.subsection.is_some() && keys.contains(&e.key.as_str())
    });
    if !known {
        return false;
    }
    if e.key == "url" || e.key == "pushurl" {
        return safe_url(e.value.as_deref());
    }
    true
}

/// A remote's URL that runs nothing: not the `ext::` or `fd::` transports (which run a command),
/// not an option in disguise.
fn safe_url(url: Option<&str>) -> bool {
    let Some(url) = url else { return false };
    let lower = url.to_ascii_lowercase();
    !(lower.starts_with("ext::") || lower.starts_with("fd::") || url.starts_with('-'))
}

/// Whether `new` may replace `old` (both `config` files): `Err` names the first key that makes
/// it unsafe, or why it cannot be read.
pub fn validate(new: &[u8], old: Option<&[u8]>) -> Result<(), String> {
    let new = parse(new).map_err(|e| format!("not a valid git config ({e})"))?;
    // Keys already in the file it replaces, with the same value, as many times as there.
    let mut kept: HashMap<&Entry, usize> = HashMap::new();
    let old = old
        .map(parse)
        .transpose()
        .unwrap_or_default()
        .unwrap_or_default();
    for e in &old {
        *kept.entry(e).or_default() += 1;
    }
    for e in &new {
        if allowed(e) {
            continue;
        }
        match kept.get_mut(e) {
            Some(n) if *n > 0 => *n -= 1,
            _ => return Err(e.name()),
        }
    }
    Ok(())
}

/// Parse git-config syntax as git does (sections, subsections, quoting, escapes, continuation
/// lines, comments). Anything git would reject is an error.
pub fn parse(text: &[u8]) -> Result<Vec<Entry>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_string())?;
    let mut out = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    let mut chars = text.chars().peekable();
    let mut line = 1;
    loop {
        // Skip blank space and comments.
        match chars.peek() {
            None => return Ok(out),
            Some('\n') => {
                line += 1;
                chars.next();
                continue;
            }
            Some(c) if c.is_whitespace() => {
                chars.next();
                continue;
            }
            Some('#' | ';') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        break;
                    }
                }
                continue;
            }
            Some('[') => {
                chars.next();
                section = Some(header(&mut chars).map_err(|e| format!("line {line}: {e}"))?);
                continue;
            }
            Some(_) => {}
        }
        let Some((sec, sub)) = &section else {
            return Err(format!("line {line}: a key before any section"));
        };
        let (key, value) =
            variable(&mut chars, &mut line).map_err(|e| format!("line {line}: {e}"))?;
        out.push(Entry {
            section: sec.clone(),
            subsection: sub.clone(),
            key,
            value,
        });
    }
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// After `[`: `name]`, `name "sub"]` or `name.sub]`.
fn header(chars: &mut Chars<'_>) -> Result<(String, Option<String>), String> {
    let mut name = String::new();
    while let Some(&c) = chars.peek() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
            name.push(c.to_ascii_lowercase());
            chars.next();
        } else {
            break;
        }
    }
    if name.is_empty() {
        return Err("an empty section name".into());
    }
    match chars.next() {
        Some(']') => {
            // The deprecated `[section.sub]`: the subsection is case-folded.
            Ok(match name.split_once('.') {
                Some((s, sub)) => (s.to_string(), Some(sub.to_string())),
                None => (name, None),
            })
        }
        Some(' ' | '\t') => {
            while matches!(chars.peek(), Some(' ' | '\t')) {
                chars.next();
            }
            if chars.next() != Some('"') {
                return Err("a subsection must be quoted".into());
            }
            let mut sub = String::new();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some('\n') | None => return Err("an unterminated subsection".into()),
                        Some(c) => sub.push(c),
                    },
                    Some('\n') | None => return Err("an unterminated subsection".into()),
                    Some(c) => sub.push(c),
                }
            }
            if chars.next() != Some(']') {
                return Err("`]` expected after the subsection".into());
            }
            if name.contains('.') {
                return Err("a dotted section name with a subsection".into());
            }
            Ok((name, Some(sub)))
        }
        _ => Err("`]` expected".into()),
    }
}

/// `key`, `key = value`; the value may be quoted, escaped and continued over lines.
fn variable(chars: &mut Chars<'_>, line: &mut usize) -> Result<(String, Option<String>), String> {
    let mut key = String::new();
    while let Some(&c) = chars.peek() {
        if c.is_ascii_alphanumeric() || c == '-' {
            key.push(c.to_ascii_lowercase());
            chars.next();
        } else {
            break;
        }
    }
    if !key.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err("a key must start with a letter".into());
    }
    while matches!(chars.peek(), Some(' ' | '\t')) {
        chars.next();
    }
    match chars.peek() {
        None | Some('\n') => return Ok((key, None)),
        Some('#' | ';') => {
            for c in chars.by_ref() {
                if c == '\n' {
                    *line += 1;
                    break;
                }
            }
            return Ok((key, None));
        }
        Some('=') => {
            chars.next();
        }
        Some(_) => return Err(format!("`=` expected after `{key}`")),
    }
    let mut value = String::new();
    let mut quoted = false;
    // Whitespace is kept only between other characters (or inside quotes).
    let mut pending = String::new();
    while let Some(c) = chars.next() {
        match c {
            '\n' if !quoted => {
                *line += 1;
                break;
            }
            '\n' => return Err("a newline inside quotes".into()),
            '#' | ';' if !quoted => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        *line += 1;
                        break;
                    }
                }
                break;
            }
            '"' => {
                value.push_str(&pending);
                pending.clear();
                quoted = !quoted;
            }
            '\\' => {
                let e = match chars.next() {
                    Some('\n') => {
                        *line += 1;
                        continue;
                    }
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('b') => '\u{8}',
                    Some('"') => '"',
                    Some('\\') => '\\',
                    _ => return Err("an unknown escape".into()),
                };
                value.push_str(&pending);
                pending.clear();
                value.push(e);
            }
            c if c.is_whitespace() && !quoted => {
                if !value.is_empty() {
                    pending.push(c);
                }
            }
            c => {
                value.push_str(&pending);
                pending.clear();
                value.push(c);
            }
        }
    }
    if quoted {
        return Err("an unterminated quote".into());
    }
    Ok((key, Some(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLONE: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n[remote \"origin\"]\n\turl = /srv/repo.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n";

    #[test]
    fn what_git_writes_in_ordinary_operations_is_accepted() {
        assert_eq!(validate(CLONE.as_bytes(), None), Ok(()));
        let more = format!("{CLONE}[user]\n\temail = me@example.com\n[remote \"up\"]\n\turl = https://example.com/x.git\n");
        assert_eq!(validate(more.as_bytes(), Some(CLONE.as_bytes())), Ok(()));
    }

    #[test]
    fn keys_that_name_commands_are_refused_by_name() {
        for (text, key) in [
            ("[core]\n\tfsmonitor = touch /tmp/x\n", "core.fsmonitor"),
            ("[core]\n\thooksPath = /tmp\n", "core.hookspath"),
            ("[core]\n\tsshCommand = evil\n", "core.sshcommand"),
            ("[alias]\n\tst = !evil\n", "alias.st"),
            ("[include]\n\tpath = ../evil\n", "include.path"),
            (
                "[includeIf \"gitdir:/\"]\n\tpath = x\n",
                "includeif.gitdir:/.path",
            ),
            ("[filter \"lfs\"]\n\tclean = evil\n", "filter.lfs.clean"),
            ("[remote \"o\"]\n\turl = ext::sh -c evil\n", "remote.o.url"),
            (
                "[remote \"o\"]\n\tuploadpack = evil\n",
                "remote.o.uploadpack",
            ),
            (
                "[submodule \"s\"]\n\tupdate = !evil\n",
                "submodule.s.update",
            ),
            ("[core.x]\n\tfsmonitor = e\n", "core.x.fsmonitor"),
            ("[CORE]\n\tFSMonitor = e\n", "core.fsmonitor"),
            ("[core]\n\tfsmonitor\n", "core.fsmonitor"),
            ("[core]\nfsmonitor = a\\\nb\n", "core.fsmonitor"),
        ] {
            assert_eq!(
                validate(text.as_bytes(), None),
                Err(key.to_string()),
                "{text}"
            );
        }
    }

    #[test]
    fn a_command_already_in_the_replaced_file_may_stay_but_not_change_or_multiply() {
        let old = "[core]\n\thooksPath = .husky\n\tbare = false\n";
        let new = "[core]\n\thooksPath = .husky\n\tbare = false\n[user]\n\temail = a@b\n";
        assert_eq!(validate(new.as_bytes(), Some(old.as_bytes())), Ok(()));
        let changed = "[core]\n\thooksPath = /tmp/evil\n";
        assert!(validate(changed.as_bytes(), Some(old.as_bytes())).is_err());
        let twice = "[core]\n\thooksPath = .husky\n\thooksPath = .husky\n";
        assert!(validate(twice.as_bytes(), Some(old.as_bytes())).is_err());
    }

    #[test]
    fn what_git_would_not_parse_is_refused() {
        for bad in [
            "key = v\n",
            "[core\n",
            "[core \"x]\n",
            "[core]\n\t= v\n",
            "[core]\n\tbare = \"open\n",
            "[core]\n\tbare = \\q\n",
            "[core]\n\t1x = y\n",
        ] {
            assert!(validate(bad.as_bytes(), None).is_err(), "{bad:?}");
        }
        assert!(validate(&[0xff, 0xfe], None).is_err());
    }

    #[test]
    fn values_keep_git_s_quoting_rules() {
        let e = parse(b"[a \"S x\"]\n\tk = \" two  spaces \" # c\n\tb\n\tc = x\\ty ; c\n").unwrap();
        assert_eq!(e[0].subsection.as_deref(), Some("S x"));
        assert_eq!(e[0].value.as_deref(), Some(" two  spaces "));
        assert_eq!(e[1].value, None);
        assert_eq!(e[2].value.as_deref(), Some("x\ty"));
    }
}
