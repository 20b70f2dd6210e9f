//! The second line behind the create guard: the protected paths that did not exist at launch
//! (they could not be bound read-only), looked at again when the sandbox ends. Looking at all of
//! them was a few dozen system calls on the launch's critical path; here the nearest existing
//! directory above each is stamped once the sandbox is cloned (while the launcher waits for it
//! anyway), and at the end only the paths under a directory whose stamp changed are looked at.
//!
//! A stamp is a directory's identity (device, inode) and its change time (ctime, to the
//! nanosecond). No path can appear under a directory without an entry being created in it or
//! renamed or linked into it, and each of these sets its ctime; a directory replaced (renamed
//! over, a symlink put in its place, one of its parents swapped) is another inode. The ctime
//! cannot be set back from inside (`touch -d` sets the mtime, and the ctime to now): only the
//! system clock could. Every doubt is a path looked at: a directory that cannot be stamped or
//! read, one reached through a symlink, one on a filesystem not known to keep ctimes this way,
//! one changed too recently for the next change to be told apart, a name found at the stamp.

use std::collections::HashMap;
use std::ffi::OsString;
use std::hash::BuildHasherDefault;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::sys::statfs;

use super::host_view::{HostView, Kind, Quick};
use super::plain_path::{plain, split};

/// A ctime this close to the stamp's time may be shared by a change right after it: timestamps
/// come from a clock that ticks every few milliseconds (kernels before 6.13), to the second on
/// ext4 with small inodes. Such a directory's paths are looked at.
const SETTLED: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    ctime: i64,
    ctime_nsec: i64,
}

impl Stamp {
    fn of(st: &FileStat) -> Option<Stamp> {
        (SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR).then_some(Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            ctime: st.st_ctime,
            ctime_nsec: st.st_ctime_nsec,
        })
    }

    /// What is at `dir` now is this directory, unchanged.
    fn holds(&self, dir: &Path) -> bool {
        nix::sys::stat::lstat(dir)
            .ok()
            .and_then(|st| Stamp::of(&st))
            .is_some_and(|now| now == *self)
    }

    /// Changed before `now - SETTLED` (or a clock set back: not settled either).
    fn settled(&self, now: SystemTime) -> bool {
        let Ok(since) = now.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let changed = i128::from(self.ctime) * 1_000_000_000 + i128::from(self.ctime_nsec);
        changed + (SETTLED.as_nanos() as i128) < since.as_nanos() as i128
    }
}

/// Where a stamp can stand in for lookups: local filesystems that set a directory's ctime on
/// every change of its entries, from the kernel's clock. (Not overlayfs: a merged directory
/// shows its upper layer's ctime, and an entry may come from below. Not network or FUSE
/// filesystems: their times are the server's, and cached.)
fn keeps_ctime(fs: statfs::FsType) -> bool {
    [
        statfs::EXT4_SUPER_MAGIC,
        statfs::XFS_SUPER_MAGIC,
        statfs::BTRFS_SUPER_MAGIC,
        statfs::TMPFS_MAGIC,
    ]
    .contains(&fs)
}

type Levels = HashMap<OsString, Level, BuildHasherDefault<Quick>>;

/// A level of a watched path's parents, as the stamp found it.
#[derive(Clone, Copy)]
enum Level {
    /// Nothing there: look further up.
    Missing,
    /// Stamped: `Baseline::dirs[i]`.
    Stamped(usize),
    /// Something a stamp cannot stand in for: its paths are looked at.
    Unknown,
}

struct Baseline {
    dirs: Vec<(PathBuf, Stamp)>,
    /// Per watched path, the directory whose stamp covers it (`None`: looked at).
    covered_by: Vec<Option<usize>>,
}

/// The protected paths missing at launch.
pub struct Watch {
    paths: Vec<PathBuf>,
    /// Without one (the sandbox never got that far), every path is looked at.
    baseline: Option<Baseline>,
}

impl Watch {
    pub fn new(paths: Vec<PathBuf>) -> Watch {
        Watch {
            paths,
            baseline: None,
        }
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Stamp the directories above the paths (before anything inside can run, or racing it:
    /// a name created before its directory's stamp is found by the lookups after it).
    pub fn stamp(&mut self) {
        self.stamp_at(SystemTime::now());
    }

    fn stamp_at(&mut self, now: SystemTime) {
        // Keyed by the directories' bytes with the plan's quick hash: SipHash over the few
        // hundred paths of a developer's setting was ~70K instructions of the launch.
        let mut levels: Levels = HashMap::default();
        let mut dirs = Vec::new();
        // Per path: its stamped directory and the name in it that leads to the path.
        let found: Vec<Option<(usize, PathBuf)>> = self
            .paths
            .iter()
            .map(|p| nearest_dir(p, &mut levels, &mut dirs, now))
            .collect();
        // After every stamp: the names leading to the paths are not there (yet).
        let names: Vec<PathBuf> = found.iter().flatten().map(|(_, n)| n.clone()).collect();
        let mut view = HostView::new();
        view.expect(&names);
        let covered_by = found
            .into_iter()
            .map(|f| f.and_then(|(i, name)| (view.kind(&name) == Kind::Missing).then_some(i)))
            .collect();
        self.baseline = Some(Baseline { dirs, covered_by });
    }

    /// The paths to look at now: every path, or with a baseline those whose directory changed.
    fn suspects(&self) -> Vec<PathBuf> {
        let Some(b) = &self.baseline else {
            return self.paths.clone();
        };
        let held: Vec<bool> = b.dirs.iter().map(|(d, s)| s.holds(d)).collect();
        self.paths
            .iter()
            .zip(&b.covered_by)
            .filter(|(_, c)| c.is_none_or(|i| !held[i]))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// The paths that exist now, sorted.
    pub fn appeared(&self) -> Vec<PathBuf> {
        let suspects = self.suspects();
        if suspects.is_empty() {
            return suspects;
        }
        // A fresh view: what is there now, each directory asked about read once.
        let mut view = HostView::new();
        view.expect(&suspects);
        let mut there: Vec<PathBuf> = suspects
            .into_iter()
            .filter(|p| view.kind(p) != Kind::Missing)
            .collect();
        super::plain_path::sort_dedup(&mut there);
        there
    }
}

/// The nearest directory above `p` that exists, stamped, and the name in it on the way to `p`;
/// `None` where no stamp can stand in for a look at `p`.
fn nearest_dir(
    p: &Path,
    levels: &mut Levels,
    dirs: &mut Vec<(PathBuf, Stamp)>,
    now: SystemTime,
) -> Option<(usize, PathBuf)> {
    if !plain(p) {
        return None;
    }
    let mut name = p;
    loop {
        let (dir, _) = split(name)?;
        let level = match levels.get(dir.as_os_str()) {
            Some(l) => *l,
            None => {
                let l = stamp_level(dir, dirs, now);
                levels.insert(dir.as_os_str().to_owned(), l);
                l
            }
        };
        match level {
            Level::Missing if dir.as_os_str().as_bytes() != b"/" => name = dir,
            Level::Stamped(i) => return Some((i, name.to_path_buf())),
            Level::Missing | Level::Unknown => return None,
        }
    }
}

fn stamp_level(dir: &Path, dirs: &mut Vec<(PathBuf, Stamp)>, now: SystemTime) -> Level {
    // Not followed: a symlink's target could change with nothing here changing.
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = match nix::fcntl::open(dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Level::Missing,
        Err(_) => return Level::Unknown,
    };
    let stamp = nix::sys::stat::fstat(&fd)
        .ok()
        .and_then(|st| Stamp::of(&st));
    let known = statfs::fstatfs(&fd).is_ok_and(|fs| keeps_ctime(fs.filesystem_type()));
    match stamp {
        Some(s) if known && s.settled(now) => {
            dirs.push((dir.to_path_buf(), s));
            Level::Stamped(dirs.len() - 1)
        }
        _ => Level::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Tree(PathBuf);

    impl Tree {
        fn new(tag: &str) -> Tree {
            let p = std::env::temp_dir().join(format!("sl-watch-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(p.join("work/src")).unwrap();
            std::fs::write(p.join("work/src/main.rs"), "").unwrap();
            std::fs::create_dir_all(p.join("elsewhere")).unwrap();
            Tree(p)
        }
        fn at(&self, rel: &str) -> PathBuf {
            self.0.join(rel)
        }
        /// Watching `.envrc` and `.cursor/mcp.json` (two levels below the working directory)
        /// and `src/.envrc`, stamped as if the directories had been made long ago.
        fn watch(&self) -> Watch {
            let mut w = Watch::new(vec![
                self.at("work/.envrc"),
                self.at("work/.cursor/mcp.json"),
                self.at("work/src/.envrc"),
            ]);
            w.stamp_at(SystemTime::now() + Duration::from_secs(10));
            w
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn names(t: &Tree, paths: Vec<PathBuf>) -> Vec<String> {
        paths
            .iter()
            .map(|p| p.strip_prefix(&t.0).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn unchanged_directories_spare_every_lookup() {
        let t = Tree::new("same");
        let w = t.watch();
        assert_eq!(
            w.baseline.as_ref().unwrap().dirs.len(),
            2,
            "work and work/src"
        );
        // A file's contents rewritten, files read: no entry of the directories changes.
        std::fs::write(t.at("work/src/main.rs"), "fn main() {}").unwrap();
        std::fs::read_dir(t.at("work")).unwrap().for_each(drop);
        assert!(w.suspects().is_empty());
        assert!(w.appeared().is_empty());
    }

    #[test]
    fn a_path_two_levels_below_is_found_through_its_nearest_directory() {
        let t = Tree::new("deep");
        let w = t.watch();
        std::fs::create_dir(t.at("work/.cursor")).unwrap();
        std::fs::write(t.at("work/.cursor/mcp.json"), "{}").unwrap();
        assert_eq!(
            names(&t, w.suspects()),
            ["work/.envrc", "work/.cursor/mcp.json"],
            "work changed; src did not"
        );
        assert_eq!(names(&t, w.appeared()), ["work/.cursor/mcp.json"]);
    }

    #[test]
    fn a_tree_renamed_in_or_a_link_made_is_found() {
        let t = Tree::new("rename");
        let w = t.watch();
        std::fs::create_dir_all(t.at("elsewhere/.cursor")).unwrap();
        std::fs::write(t.at("elsewhere/.cursor/mcp.json"), "{}").unwrap();
        std::fs::rename(t.at("elsewhere/.cursor"), t.at("work/.cursor")).unwrap();
        assert_eq!(names(&t, w.appeared()), ["work/.cursor/mcp.json"]);

        let t = Tree::new("link");
        let w = t.watch();
        std::fs::write(t.at("elsewhere/rc"), "").unwrap();
        std::fs::hard_link(t.at("elsewhere/rc"), t.at("work/src/.envrc")).unwrap();
        assert_eq!(names(&t, w.appeared()), ["work/src/.envrc"]);
    }

    #[test]
    fn a_change_undone_still_has_the_paths_looked_at() {
        // Created and removed again, the times reset: the ctime still moved.
        let t = Tree::new("undone");
        let before = std::fs::metadata(t.at("work/src"))
            .unwrap()
            .modified()
            .unwrap();
        let w = t.watch();
        std::fs::write(t.at("work/src/tmp"), "").unwrap();
        std::fs::remove_file(t.at("work/src/tmp")).unwrap();
        let f = std::fs::File::open(t.at("work/src")).unwrap();
        f.set_modified(before).unwrap();
        assert_eq!(names(&t, w.suspects()), ["work/src/.envrc"]);
        assert!(w.appeared().is_empty());
    }

    #[test]
    fn a_directory_replaced_by_a_symlink_or_another_directory_is_looked_at() {
        let t = Tree::new("swap");
        let w = t.watch();
        std::fs::create_dir_all(t.at("elsewhere/src")).unwrap();
        std::fs::write(t.at("elsewhere/src/.envrc"), "").unwrap();
        std::fs::rename(t.at("work/src"), t.at("src.old")).unwrap();
        symlink(t.at("elsewhere/src"), t.at("work/src")).unwrap();
        // `work` changed too; the path under the link is what counts.
        assert!(names(&t, w.suspects()).contains(&"work/src/.envrc".into()));
        assert_eq!(names(&t, w.appeared()), ["work/src/.envrc"]);

        // A parent swapped, the directory itself untouched in its new place: another inode at
        // the path.
        let t = Tree::new("parent");
        let w = t.watch();
        std::fs::rename(t.at("work"), t.at("work.old")).unwrap();
        std::fs::create_dir_all(t.at("work/src")).unwrap();
        std::fs::write(t.at("work/src/.envrc"), "").unwrap();
        assert_eq!(names(&t, w.appeared()), ["work/src/.envrc"]);
    }

    #[test]
    fn what_cannot_be_stamped_is_looked_at() {
        let t = Tree::new("doubt");
        // Changed just now: the next change could carry the same ctime.
        let mut fresh = Watch::new(vec![t.at("work/.envrc")]);
        fresh.stamp();
        assert_eq!(names(&t, fresh.suspects()), ["work/.envrc"]);
        // Below a symlinked directory; below a file; a relative path; no stamp at all.
        symlink(t.at("elsewhere"), t.at("work/linked")).unwrap();
        std::fs::write(t.at("work/file"), "").unwrap();
        let mut w = Watch::new(vec![
            t.at("work/linked/.envrc"),
            t.at("work/file/.envrc"),
            PathBuf::from("work/.envrc"),
        ]);
        w.stamp_at(SystemTime::now() + Duration::from_secs(10));
        assert_eq!(w.suspects().len(), 3);
        std::fs::write(t.at("elsewhere/.envrc"), "").unwrap();
        assert_eq!(names(&t, w.appeared()), ["work/linked/.envrc"]);
        let unstamped = Watch::new(vec![t.at("work/linked/.envrc")]);
        assert_eq!(unstamped.appeared().len(), 1);
    }

    #[test]
    fn a_name_already_there_at_the_stamp_is_looked_at() {
        // Created between the plan and the stamp (the program may already run): the stamp
        // includes it, so the lookups after it must see it.
        let t = Tree::new("early");
        std::fs::write(t.at("work/.envrc"), "").unwrap();
        let mut w = Watch::new(vec![t.at("work/.envrc"), t.at("work/src/.envrc")]);
        w.stamp_at(SystemTime::now() + Duration::from_secs(10));
        assert_eq!(names(&t, w.suspects()), ["work/.envrc"]);
        assert_eq!(names(&t, w.appeared()), ["work/.envrc"]);
    }
}
