//! Whether `/etc/shells` lists this program.
//!
//! util-linux `su` treats a target whose shell is listed in `/etc/shells` as unrestricted: it
//! honours `-s SHELL`, `-m` and `-p`, which run a shell of the caller's choosing (or the
//! caller's `$SHELL`) instead of the user's — with no sandbox at all. The launcher cannot stop
//! that once it is listed; it can only say so (at every login, and in `doctor`).

use std::path::{Path, PathBuf};

use super::is_this_program;

/// Where the list of unrestricted shells is.
pub const SHELLS: &str = "/etc/shells";

/// The line of `/etc/shells` that names this program, if one does.
pub fn listing_this_program() -> Option<PathBuf> {
    let text = std::fs::read_to_string(SHELLS).ok()?;
    listed(&text, is_this_program)
}

/// The first entry of an `/etc/shells` text for which `is_me` holds.
fn listed(text: &str, is_me: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('/'))
        .map(PathBuf::from)
        .find(|p| is_me(p))
}

/// The warning a login prints when `/etc/shells` lists this program at `line`.
pub fn warning(line: &Path) -> String {
    format!(
        "{SHELLS} lists this program ({}): `su -s /bin/sh USER`, `su -m USER` and `su -p USER` \
         then run a shell of the caller's choosing for this user with no sandbox at all; remove \
         the line (root's chsh -s and usermod -s, and sshd, do not need it)",
        line.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_entries_are_shells_and_comments_are_not() {
        let text = "# /usr/local/bin/sandbox-launch\n/bin/sh\n  /usr/local/bin/sandbox-launch  \n";
        let me = |p: &Path| p == Path::new("/usr/local/bin/sandbox-launch");
        assert_eq!(
            listed(text, me).as_deref(),
            Some(Path::new("/usr/local/bin/sandbox-launch"))
        );
        assert_eq!(listed("/bin/sh\n/bin/bash\n", me), None);
    }
}
