//! What the home's shell start-up files source by a path of their own: `. "$HOME/.cargo/env"`
//! (rustup's line in `~/.profile`), `source ~/.fzf.bash`, `. ~/dotfiles/bash/aliases`. The
//! shell runs such a file at its next start as it runs the start-up file itself, so where it
//! lies in a writable tree it is a surface too. Read at launch: the start-up files (64 KiB
//! each at most) and, two levels deep, what they source; a word after `.` or `source` in
//! command position, `~`, `$HOME` and `${HOME}` expanded, anything else with a `$` skipped
//! (its value is the shell's, not known here).

use std::path::{Path, PathBuf};

/// The start-up files read (the table's shell start-up files that are plain files).
const STARTUP: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_aliases",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".kshrc",
    ".mkshrc",
    ".config/fish/config.fish",
];

/// At most this much of each file is read.
const MAX_FILE: u64 = 64 * 1024;

/// Every file the home's start-up files source, found by their text (absolute paths, as
/// written: not resolved).
pub fn sourced_by_startup(home: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let mut todo: Vec<(PathBuf, usize)> = STARTUP.iter().map(|n| (home.join(n), 0)).collect();
    while let Some((file, depth)) = todo.pop() {
        for p in sourced_by(&file, home) {
            if !found.contains(&p) {
                if depth < 2 {
                    todo.push((p.clone(), depth + 1));
                }
                found.push(p);
            }
        }
    }
    found
}

/// The files `file` sources.
fn sourced_by(file: &Path, home: &Path) -> Vec<PathBuf> {
    use std::io::Read;
    let Ok(f) = std::fs::File::open(file) else {
        return Vec::new();
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    let mut text = Vec::new();
    if f.take(MAX_FILE).read_to_end(&mut text).is_err() {
        return Vec::new();
    }
    String::from_utf8_lossy(&text)
        .lines()
        .flat_map(|line| sourced_in_line(line, home))
        .collect()
}

/// The files one line sources: the word after `.` or `source` where a command starts (the
/// line's start, or after `;`, `&&`, `||`, `|`, `then`, `do`, `else`, `{`, `(`).
fn sourced_in_line(line: &str, home: &Path) -> Vec<PathBuf> {
    let line = line.trim_start();
    if line.starts_with('#') {
        return Vec::new();
    }
    let spaced = line
        .replace("${HOME}", "$HOME")
        .replace("&&", " ; ")
        .replace("||", " ; ")
        .replace([';', '|', '(', ')', '{', '}'], " ; ");
    let words: Vec<&str> = spaced.split_whitespace().collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if *w == "#" || w.starts_with('#') {
            break;
        }
        let starts = i == 0 || matches!(words[i - 1], ";" | "then" | "do" | "else");
        if !starts || !matches!(*w, "." | "\\." | "source") {
            continue;
        }
        if let Some(p) = words.get(i + 1).and_then(|a| expand(a, home)) {
            out.push(p);
        }
    }
    out
}

/// A sourced word as a path: quotes dropped, `~`, `$HOME`, `${HOME}` expanded, relative to the
/// home (where a login shell starts); `None` with any other `$`.
fn expand(word: &str, home: &Path) -> Option<PathBuf> {
    let w = word.trim_matches(|c| c == '"' || c == '\'');
    let w = ["~/", "$HOME/", "${HOME}/"]
        .iter()
        .find_map(|pre| w.strip_prefix(pre))
        .map_or_else(
            || w.to_string(),
            |rest| format!("{}/{rest}", home.display()),
        );
    if w.is_empty() || w.contains('$') || w.contains('`') {
        return None;
    }
    Some(if w.starts_with('/') {
        PathBuf::from(w)
    } else {
        home.join(w)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sourced_files_are_read_from_the_lines_shells_run() {
        let h = Path::new("/h");
        let got = |l: &str| sourced_in_line(l, h);
        assert_eq!(
            got(r#". "$HOME/.cargo/env""#),
            [PathBuf::from("/h/.cargo/env")]
        );
        assert_eq!(got("source ~/.fzf.bash"), [PathBuf::from("/h/.fzf.bash")]);
        assert_eq!(
            got("[ -f ~/dotfiles/aliases ] && . ~/dotfiles/aliases"),
            [PathBuf::from("/h/dotfiles/aliases")]
        );
        assert_eq!(
            got("if [ -f x ]; then . /opt/tool/env; fi"),
            [PathBuf::from("/opt/tool/env")]
        );
        assert_eq!(
            got(r#"\. "${HOME}/.nvm/nvm.sh""#),
            [PathBuf::from("/h/.nvm/nvm.sh")]
        );
        // Unknown variables, comments, and a `.` that is not a command: nothing.
        assert!(got(r#". "$NVM_DIR/nvm.sh""#).is_empty());
        assert!(got("# . ~/.secret").is_empty());
        assert!(got("echo . ~/x").is_empty());
        assert!(got("PS1='. ~/x'").is_empty());
    }

    #[test]
    fn what_the_startup_files_source_is_followed_two_levels() {
        let home = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("sl-sourced-{}", std::process::id()));
        std::fs::create_dir_all(home.join("d")).unwrap();
        std::fs::write(home.join(".profile"), ". \"$HOME/d/one\"\n").unwrap();
        std::fs::write(home.join("d/one"), "source ~/d/two\n").unwrap();
        std::fs::write(home.join("d/two"), ". ~/d/three\n").unwrap();
        std::fs::write(home.join("d/three"), ". ~/d/four\n").unwrap();
        let found = sourced_by_startup(&home);
        for n in ["d/one", "d/two", "d/three"] {
            assert!(found.contains(&home.join(n)), "{n}: {found:?}");
        }
        assert!(!found.contains(&home.join("d/four")), "{found:?}");
        std::fs::remove_dir_all(&home).unwrap();
    }
}
