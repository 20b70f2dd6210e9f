//! Policy paths as written in files and flags, checked and made absolute. Symlinks are not
//! resolved here: the layout planner resolves them when it builds the mounts, so `check` shows
//! what the policy says and the sandbox uses what the paths point at.

use std::path::{Component, Path, PathBuf};

/// The longest path a policy may name (the OpenShell limit, also PATH_MAX).
pub const MAX_PATH_LEN: usize = 4096;

/// An OpenShell path: absolute, no `..`, at most 4096 bytes. `.` and repeated or trailing
/// slashes are dropped.
pub fn openshell(raw: &str) -> Result<PathBuf, String> {
    basic_checks(raw)?;
    if !raw.starts_with('/') {
        return Err(format!(
            "{raw:?} is not absolute (paths must start with `/`)"
        ));
    }
    if Path::new(raw)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(format!(
            "{raw:?} contains `..` (write the path without traversal)"
        ));
    }
    Ok(tidy(Path::new(raw)))
}

/// An agent-settings or command-line path: `~` and `~/…` are the home directory, a relative
/// path is relative to the working directory. `~user` is refused (write the path out).
pub fn relaxed(raw: &str, cwd: &Path, home: &Path) -> Result<PathBuf, String> {
    basic_checks(raw)?;
    let expanded = if raw == "~" {
        home.to_path_buf()
    } else if let Some(rest) = raw.strip_prefix("~/") {
        home.join(rest)
    } else if raw.starts_with('~') {
        return Err(format!(
            "{raw:?}: only `~` and `~/…` are expanded (write other users' paths out in full)"
        ));
    } else {
        cwd.join(raw)
    };
    Ok(tidy(&expanded))
}

fn basic_checks(raw: &str) -> Result<(), String> {
    if raw.is_empty() {
        return Err("empty path".into());
    }
    if raw.contains('\0') {
        return Err(format!("{raw:?} contains a NUL byte"));
    }
    if raw.len() > MAX_PATH_LEN {
        return Err(format!(
            "path of {} bytes is longer than the limit of {MAX_PATH_LEN}",
            raw.len()
        ));
    }
    Ok(())
}

/// Drop `.` components and redundant slashes; keep `..` (resolving it lexically would be wrong
/// across symlinks; the layout resolves it on the real filesystem).
fn tidy(p: &Path) -> PathBuf {
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// A writable path that would make everything writable.
pub fn is_root(p: &Path) -> bool {
    p == Path::new("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openshell_paths_must_be_absolute_without_traversal() {
        assert_eq!(openshell("/usr/lib/").unwrap(), PathBuf::from("/usr/lib"));
        assert_eq!(openshell("/usr//./lib").unwrap(), PathBuf::from("/usr/lib"));
        assert!(openshell("usr").unwrap_err().contains("not absolute"));
        assert!(openshell("/usr/../etc").unwrap_err().contains("`..`"));
        assert!(openshell("").unwrap_err().contains("empty"));
        let long = format!("/{}", "a".repeat(MAX_PATH_LEN));
        assert!(openshell(&long).unwrap_err().contains("4096"));
    }

    #[test]
    fn tilde_expands_to_home_and_relative_paths_join_the_workdir() {
        let (cwd, home) = (Path::new("/work/p"), Path::new("/home/u"));
        assert_eq!(relaxed("~", cwd, home).unwrap(), PathBuf::from("/home/u"));
        assert_eq!(
            relaxed("~/.ssh/id_rsa", cwd, home).unwrap(),
            PathBuf::from("/home/u/.ssh/id_rsa")
        );
        assert_eq!(
            relaxed("build/out", cwd, home).unwrap(),
            PathBuf::from("/work/p/build/out")
        );
        assert_eq!(relaxed("/abs", cwd, home).unwrap(), PathBuf::from("/abs"));
        assert!(relaxed("~bob/x", cwd, home).unwrap_err().contains("~bob"));
    }

    #[test]
    fn symlinks_and_dotdot_are_left_for_the_layout_to_resolve() {
        let dir = std::env::temp_dir().join(format!("sl-paths-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        let raw = link.join("passwd");
        let got = relaxed(raw.to_str().unwrap(), Path::new("/"), Path::new("/")).unwrap();
        assert_eq!(got, raw, "the symlink must not be resolved while loading");
        assert_eq!(
            relaxed("../x", Path::new("/a/b"), Path::new("/")).unwrap(),
            PathBuf::from("/a/b/../x")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
