//! The host's paths as one pass of the launcher sees them (the persistence plan at launch, the
//! look for created surfaces when the sandbox ends). A pass asks whether a hundred names exist
//! under a handful of directories, most of them not: one `lstat` each was several hundred
//! system calls per launch. Here a directory asked about more than a few names is read once, a
//! name under a path known to be missing (or no directory) is missing without asking, and every
//! answer is kept for the pass.
//!
//! The answers are `symlink_metadata`'s: a symlink is reported as one, nothing is followed but
//! the directories leading to the name (as the kernel does), and a name that cannot be looked
//! up (a directory that cannot be searched) is missing. A listing stands in for lookups only
//! where it says the same: the directory can be searched (`dir/.` can be looked up), and its
//! filesystem matches names exactly and lists every name (ext4, tmpfs, btrfs, overlayfs, with
//! no case-folding on the directory). Anywhere else, and for a directory that cannot be read
//! (mode 0711, another owner's), each name is looked up on its own.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::hash::{BuildHasherDefault, Hasher};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use nix::sys::statfs;

use super::plain_path::{plain, split, split_name};

/// What is at a path, not following a symlink there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Nothing (or nothing the caller can look up).
    Missing,
    Dir,
    Symlink,
    /// A regular file.
    File,
    /// A socket, device, fifo.
    Other,
}

/// Lookups of names in one directory before it is read as a whole: reading costs about seven
/// system calls (open, statfs, flags, search probe, two reads, close).
const LOOKUPS_BEFORE_READING: u32 = 4;
/// A directory larger than this, by the size its filesystem gives it (ext4 allots a 4 KiB block
/// per ~150 names, tmpfs 20 bytes a name, btrfs twice their lengths), costs more to read than
/// the few dozen lookups it would spare: its names are looked up one by one.
const MAX_DIR_BYTES: i64 = 16 * 1024;
/// And past this many names, whatever its size said.
const MAX_NAMES: usize = 1024;
/// `FS_CASEFOLD_FL` (linux/fs.h): the directory matches names without regard to case.
const FS_CASEFOLD_FL: libc::c_int = 0x4000_0000;

/// A quick hash of a path's bytes (a pass keeps a few hundred paths it made itself; SipHash over
/// `Path`'s component-wise hashing cost more than the lookups it saves).
#[derive(Default)]
pub(super) struct Quick(u64);

impl Hasher for Quick {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        for b in chunks.remainder() {
            self.add(u64::from(*b));
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Quick {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Keyed by the path's bytes: only plain paths are kept, and two plain paths are the same path
/// exactly when their bytes are.
type ByPath<V> = HashMap<OsString, V, BuildHasherDefault<Quick>>;

enum Listing {
    /// Not read (yet): this many names were looked up one by one.
    Asked(u32),
    /// Every name in it, with its type when the listing gave one.
    Read(ByPath<Option<Kind>>),
    /// Nothing can be looked up under it (it is missing, or no directory).
    Nothing,
    /// A listing would not say what lookups say: look each name up.
    ByName,
}

#[derive(Default)]
pub struct HostView {
    kinds: ByPath<Kind>,
    followed: ByPath<Kind>,
    dirs: ByPath<Listing>,
    canonical: ByPath<Option<PathBuf>>,
    lenient: ByPath<Option<PathBuf>>,
}

fn lstat(p: &Path) -> Kind {
    match std::fs::symlink_metadata(p) {
        Ok(m) => kind_of(m.file_type()),
        Err(_) => Kind::Missing,
    }
}

fn kind_of(t: std::fs::FileType) -> Kind {
    if t.is_symlink() {
        Kind::Symlink
    } else if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File
    } else {
        Kind::Other
    }
}

/// Whether `dir`'s filesystem matches names exactly and lists every name it finds.
fn exact_names(dir: &Dir) -> bool {
    let Ok(fs) = statfs::fstatfs(dir) else {
        return false;
    };
    let t = fs.filesystem_type();
    if t == statfs::BTRFS_SUPER_MAGIC {
        return true; // no case-folding there
    }
    if t != statfs::EXT4_SUPER_MAGIC
        && t != statfs::TMPFS_MAGIC
        && t != statfs::OVERLAYFS_SUPER_MAGIC
    {
        return false;
    }
    // Case-folding is a directory's flag on these; where the flags cannot be read (tmpfs
    // before 6.0) it cannot be set either.
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one int through the pointer; the descriptor is open.
    let r = unsafe { libc::ioctl(dir.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) };
    r != 0 || flags & FS_CASEFOLD_FL == 0
}

/// Read `dir` (followed, as a lookup under it follows it), if its listing can stand in for
/// lookups.
fn read(dir: &Path) -> Listing {
    let opened = Dir::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    );
    let mut d = match opened {
        Ok(d) => d,
        // A lookup under it fails the same way.
        Err(Errno::ENOENT | Errno::ENOTDIR) => return Listing::Nothing,
        Err(_) => return Listing::ByName,
    };
    // Readable is not searchable: `dir/.` is looked up as any name in it would be.
    if !exact_names(&d) {
        return Listing::ByName;
    }
    match nix::sys::stat::fstatat(&d, ".", AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) if st.st_size <= MAX_DIR_BYTES => {}
        _ => return Listing::ByName,
    }
    let mut names = ByPath::default();
    for e in d.iter() {
        let Ok(e) = e else {
            return Listing::ByName;
        };
        let name = OsStr::from_bytes(e.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        if names.len() == MAX_NAMES {
            return Listing::ByName;
        }
        let kind = e.file_type().map(|t| match t {
            Type::Directory => Kind::Dir,
            Type::Symlink => Kind::Symlink,
            Type::File => Kind::File,
            _ => Kind::Other,
        });
        names.insert(name.to_os_string(), kind);
    }
    Listing::Read(names)
}

impl HostView {
    pub fn new() -> HostView {
        HostView::default()
    }

    /// What `symlink_metadata(p)` says `p` is (an error: missing).
    pub fn kind(&mut self, p: &Path) -> Kind {
        // Kept, or in its directory's listing (nothing to keep then).
        if let Some(k) = self.known(p) {
            return k;
        }
        // Paths compare by components (`a/link/` equals `a/link`): only plain ones are kept.
        if !plain(p) {
            return if p == Path::new("/") {
                Kind::Dir
            } else {
                lstat(p)
            };
        }
        let (k, keep) = self.look(p);
        if keep {
            self.kinds.insert(p.as_os_str().to_owned(), k);
        }
        k
    }

    /// What `metadata(p)` says `p` is: a symlink followed.
    pub fn followed(&mut self, p: &Path) -> Kind {
        match self.kind(p) {
            Kind::Symlink if !plain(p) => match std::fs::metadata(p) {
                Ok(m) => kind_of(m.file_type()),
                Err(_) => Kind::Missing,
            },
            Kind::Symlink => *self
                .followed
                .entry(p.as_os_str().to_owned())
                .or_insert_with(|| match std::fs::metadata(p) {
                    Ok(m) => kind_of(m.file_type()),
                    Err(_) => Kind::Missing,
                }),
            k => k,
        }
    }

    /// `std::fs::canonicalize(p)`, kept.
    pub fn canonical(&mut self, p: &Path) -> Option<PathBuf> {
        if !plain(p) {
            return std::fs::canonicalize(p).ok();
        }
        self.canonical
            .entry(p.as_os_str().to_owned())
            .or_insert_with(|| std::fs::canonicalize(p).ok())
            .clone()
    }

    /// `made(self)` (what `dir` is named as), kept under `dir` for the pass: what the view says
    /// of `dir` does not change within it (a plan names hundreds of paths in a handful of
    /// directories). `None` when that is `dir` itself, as written.
    pub fn lenient_dir(
        &mut self,
        dir: &Path,
        made: impl FnOnce(&mut HostView) -> PathBuf,
    ) -> Option<PathBuf> {
        // Asked only for `/` and plain directories, which `has_lenient_dir`'s callers rely on
        // (a kept answer shows the directory plain).
        debug_assert!(dir.as_os_str() == "/" || plain(dir), "{dir:?}");
        if let Some(p) = self.lenient.get(dir.as_os_str()) {
            return p.clone();
        }
        let p = made(self);
        let p = (p.as_os_str() != dir.as_os_str()).then_some(p);
        self.lenient.insert(dir.as_os_str().to_owned(), p.clone());
        p
    }

    /// Whether [`HostView::lenient_dir`] has an answer kept for `dir` (kept only for `/` and
    /// plain directories).
    pub fn has_lenient_dir(&self, dir: &Path) -> bool {
        self.lenient.contains_key(dir.as_os_str())
    }

    /// `paths` are about to be asked: each directory holding more of them than a few is read
    /// now (outermost first, so that what is under a missing directory is known missing).
    pub fn expect(&mut self, paths: &[PathBuf]) {
        // Counted per directory for the plain paths only: a name's path is plain when its
        // directory is (see `split_name`), asked once per directory.
        let mut per_dir: HashMap<&OsStr, u32, BuildHasherDefault<Quick>> = HashMap::default();
        for p in paths {
            if let Some((d, _)) = split_name(p) {
                *per_dir.entry(d.as_os_str()).or_default() += 1;
            }
        }
        let mut dirs: Vec<&Path> = per_dir
            .into_iter()
            .filter(|(_, n)| *n > LOOKUPS_BEFORE_READING)
            .map(|(d, _)| Path::new(d))
            .filter(|d| d.as_os_str() == "/" || plain(d))
            .collect();
        dirs.sort_by_key(|d| d.components().count());
        for d in dirs {
            let unknown = matches!(self.dirs.get(d.as_os_str()), None | Some(Listing::Asked(_)));
            let can_hold = !matches!(
                self.known(d),
                Some(Kind::Missing | Kind::File | Kind::Other)
            );
            if unknown && can_hold {
                self.dirs.insert(d.as_os_str().to_owned(), read(d));
            }
        }
    }

    /// What is known of `p` without asking the host: kept, or in its directory's listing.
    /// Only plain paths are kept and only their directories held, so neither answers for any
    /// other path, and neither needs `plain`'s look at the whole of `p` (see `split_name`).
    fn known(&self, p: &Path) -> Option<Kind> {
        if let Some(k) = self.kinds.get(p.as_os_str()) {
            return Some(*k);
        }
        let (dir, name) = split_name(p)?;
        match self.dirs.get(dir.as_os_str())? {
            Listing::Read(names) => match names.get(name) {
                None => Some(Kind::Missing),
                Some(k) => *k,
            },
            Listing::Nothing => Some(Kind::Missing),
            Listing::Asked(_) | Listing::ByName => None,
        }
    }

    /// `p` is plain. With the answer, whether to keep it: what its directory's listing or
    /// a missing directory above says is known again at the cost of two lookups, which is less
    /// than keeping it (a copy of the path and its hashing; a plan asks hundreds of names no
    /// host has).
    fn look(&mut self, p: &Path) -> (Kind, bool) {
        let Some((dir, name)) = split(p) else {
            return (lstat(p), true);
        };
        // Nothing is under a missing path, or under a file: known without asking.
        if matches!(
            self.known(dir),
            Some(Kind::Missing | Kind::File | Kind::Other)
        ) {
            return (Kind::Missing, false);
        }
        if !self.dirs.contains_key(dir.as_os_str()) {
            self.dirs
                .insert(dir.as_os_str().to_owned(), Listing::Asked(0));
        }
        let Some(listing) = self.dirs.get_mut(dir.as_os_str()) else {
            return (lstat(p), true);
        };
        if let Listing::Asked(n) = listing {
            if *n < LOOKUPS_BEFORE_READING {
                *n += 1;
                return (lstat(p), true);
            }
            *listing = read(dir);
        }
        match listing {
            Listing::Read(names) => match names.get(name) {
                None => (Kind::Missing, false),
                Some(Some(k)) => (*k, false),
                Some(None) => (lstat(p), true),
            },
            Listing::Nothing => (Kind::Missing, false),
            Listing::Asked(_) | Listing::ByName => (lstat(p), true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o755));
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn tmp(name: &str) -> Tmp {
        let base = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("sl-hostview-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        Tmp(base)
    }

    /// Every answer the view gives for `names` under `base` is `symlink_metadata`'s, whether
    /// the directory was read or looked into name by name.
    fn agrees(base: &Path, names: &[&str]) {
        let mut view = HostView::new();
        for n in names {
            let p = base.join(n);
            assert_eq!(view.kind(&p), lstat(&p), "{}", p.display());
            // And again, from what was kept.
            assert_eq!(view.kind(&p), lstat(&p), "{}", p.display());
        }
    }

    const NAMES: &[&str] = &[
        "a",
        "b",
        "c",
        "d",
        "e",
        "f",
        "dir",
        "dir/x",
        "file",
        "file/x",
        "link",
        "link/x",
        "link/inner",
        "dangling",
        "dangling/x",
        "gone",
        "gone/deeper/x",
        ".envrc",
        "dir/inner",
    ];

    #[test]
    fn a_read_directory_answers_as_lstat_for_files_dirs_symlinks_and_missing_names() {
        let t = tmp("kinds");
        let b = &t.0;
        std::fs::create_dir_all(b.join("dir/inner")).unwrap();
        std::fs::write(b.join("file"), "").unwrap();
        std::fs::write(b.join(".envrc"), "").unwrap();
        std::os::unix::fs::symlink("dir", b.join("link")).unwrap();
        std::os::unix::fs::symlink("nowhere/x", b.join("dangling")).unwrap();
        agrees(b, NAMES);
        let mut view = HostView::new();
        for n in ["a", "b", "c", "d", "e", "f"] {
            assert_eq!(view.kind(&b.join(n)), Kind::Missing);
        }
        assert!(matches!(
            view.dirs.get(b.as_os_str()),
            Some(Listing::Read(_))
        ));
        // A symlink is a symlink, a dangling one too; what is under it is looked up through it.
        assert_eq!(view.kind(&b.join("link")), Kind::Symlink);
        assert_eq!(view.kind(&b.join("dangling")), Kind::Symlink);
        assert_eq!(view.kind(&b.join("link/inner")), Kind::Dir);
        assert_eq!(view.followed(&b.join("link")), Kind::Dir);
        assert_eq!(view.followed(&b.join("dangling")), Kind::Missing);
        assert_eq!(view.kind(&b.join("dangling/x")), Kind::Missing);
    }

    #[test]
    fn a_large_directory_is_looked_into_name_by_name() {
        let t = tmp("large");
        for i in 0..1200 {
            std::fs::write(t.0.join(format!("a-rather-long-file-name-{i:05}")), "").unwrap();
        }
        std::os::unix::fs::symlink("x", t.0.join(".envrc")).unwrap();
        agrees(
            &t.0,
            &[
                "a",
                "b",
                "c",
                "d",
                "e",
                ".envrc",
                "a-rather-long-file-name-00007",
            ],
        );
        let mut view = HostView::new();
        view.expect(&["a", "b", "c", "d", "e", "f"].map(|n| t.0.join(n)));
        assert!(matches!(
            view.dirs.get(t.0.as_os_str()),
            Some(Listing::ByName)
        ));
        assert_eq!(view.kind(&t.0.join(".envrc")), Kind::Symlink);
    }

    #[test]
    fn under_a_missing_parent_nothing_is_looked_up() {
        let t = tmp("missing");
        let mut view = HostView::new();
        let gone = t.0.join("gone");
        assert_eq!(view.kind(&gone), Kind::Missing);
        std::fs::create_dir_all(gone.join("sub")).unwrap();
        // Made after the view saw its parent missing: the view keeps what it saw.
        assert_eq!(view.kind(&gone.join("sub")), Kind::Missing);
        assert_eq!(view.kind(&gone.join("sub/x")), Kind::Missing);
        assert!(!view.dirs.contains_key(gone.as_os_str()));
        assert_eq!(HostView::new().kind(&gone.join("sub")), Kind::Dir);
    }

    #[test]
    fn a_directory_that_cannot_be_read_is_looked_into_name_by_name() {
        let t = tmp("unreadable");
        let d = t.0.join("d");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("f"), "").unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o311)).unwrap();
        // As root nothing is unreadable: the same answers then come from a listing.
        let names = ["a", "b", "c", "d", "e", "f", "sub", "sub/x"];
        let mut view = HostView::new();
        for n in names {
            let p = d.join(n);
            assert_eq!(view.kind(&p), lstat(&p), "{}", p.display());
        }
        assert_eq!(view.kind(&d.join("f")), Kind::File);
        assert_eq!(view.kind(&d.join("sub")), Kind::Dir);
        if !nix::unistd::geteuid().is_root() {
            assert!(matches!(
                view.dirs.get(d.as_os_str()),
                Some(Listing::ByName)
            ));
        }
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_directory_that_cannot_be_searched_has_no_names_to_look_up() {
        let t = tmp("unsearchable");
        let d = t.0.join("d");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("f"), "").unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o644)).unwrap();
        agrees(&d, &["a", "b", "c", "d", "e", "f", "g"]);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_plain_path_splits_into_its_directory_and_name() {
        let s = |p: &'static str| split(Path::new(p)).map(|(d, n)| (d.to_owned(), n.to_owned()));
        assert_eq!(s("/a"), Some(("/".into(), "a".into())));
        assert_eq!(s("/a/b/c"), Some(("/a/b".into(), "c".into())));
        for p in ["/a", "/a/b/c", "/x y/.envrc"] {
            let p = Path::new(p);
            let (d, n) = split(p).unwrap();
            assert_eq!((Some(d), Some(n)), (p.parent(), p.file_name()));
        }
    }

    #[test]
    fn paths_a_lookup_would_treat_differently_are_asked_as_they_are() {
        assert!(plain(Path::new("/a/b")));
        for p in ["/", "a/b", "/a/./b", "/a/../b", "/a//b", "/a/link/"] {
            assert!(!plain(Path::new(p)), "{p}");
        }
        let t = tmp("plain");
        std::fs::create_dir_all(t.0.join("dir")).unwrap();
        std::os::unix::fs::symlink("dir", t.0.join("link")).unwrap();
        let slash = PathBuf::from(format!("{}/link/", t.0.display()));
        let mut view = HostView::new();
        assert_eq!(view.kind(&slash), Kind::Dir);
        assert_eq!(view.kind(&t.0.join("link")), Kind::Symlink);
        // Kept answers do not leak between the two spellings, either way round.
        let mut view = HostView::new();
        assert_eq!(view.kind(&t.0.join("link")), Kind::Symlink);
        assert_eq!(view.kind(&slash), Kind::Dir);
        assert_eq!(view.followed(&slash), Kind::Dir);
    }
}
