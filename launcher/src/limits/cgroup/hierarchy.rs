//! Where this host keeps each cgroup controller, and the launcher's own group there.
//!
//! A host may run cgroup v2 alone, v1 alone, or both at once ("hybrid": v1 hierarchies for some
//! controllers and a v2 tree holding the rest). A controller is used from v2 when the
//! launcher's own v2 group offers it (it is in that group's `cgroup.controllers`), else from
//! the v1 hierarchy it is mounted with. Read from `/proc/self/cgroup` and
//! `/proc/self/mountinfo`: nothing is assumed about where `/sys/fs/cgroup` is.

use std::path::{Path, PathBuf};

use crate::mountinfo::unescape;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn name(self) -> &'static str {
        match self {
            Version::V1 => "cgroup v1",
            Version::V2 => "cgroup v2",
        }
    }
}

/// One hierarchy and the launcher's place in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub version: Version,
    /// The launcher's own group, as a directory of the mounted hierarchy.
    pub own: PathBuf,
    /// v1: the controllers mounted in this hierarchy. v2: those the own group offers.
    pub controllers: Vec<String>,
}

/// Every hierarchy of this process that is mounted where it can reach its own group.
pub fn discover() -> Vec<Hierarchy> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    parse(
        &read("/proc/self/cgroup"),
        &read("/proc/self/mountinfo"),
        |dir| std::fs::read_to_string(dir.join("cgroup.controllers")).ok(),
    )
}

/// The hierarchy controller `c` is used from.
pub fn locate<'a>(hierarchies: &'a [Hierarchy], c: &str) -> Option<&'a Hierarchy> {
    let has = |h: &&Hierarchy| h.controllers.iter().any(|x| x == c);
    hierarchies
        .iter()
        .filter(|h| h.version == Version::V2)
        .find(has)
        .or_else(|| {
            hierarchies
                .iter()
                .filter(|h| h.version == Version::V1)
                .find(has)
        })
}

/// A cgroup mount: its root within the hierarchy, where it is mounted, its type and options.
struct Mount<'a> {
    root: String,
    point: PathBuf,
    v2: bool,
    options: Vec<&'a str>,
}

fn mounts(mountinfo: &str) -> Vec<Mount<'_>> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let mut post = post.split(' ');
            let fstype = post.next()?;
            let options = post.nth(1).unwrap_or("").split(',').collect();
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            Some(Mount {
                root: unescape(pre.get(3)?),
                point: PathBuf::from(unescape(pre.get(4)?)),
                v2,
                options,
            })
        })
        .collect()
}

/// `group` (a path of `/proc/self/cgroup`) below the mount `m`, if the mount reaches it.
fn own_dir(m: &Mount<'_>, group: &str) -> Option<PathBuf> {
    let rel = if m.root == "/" {
        group.strip_prefix('/')?
    } else {
        let rest = group.strip_prefix(m.root.as_str())?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest.trim_start_matches('/')
    };
    Some(if rel.is_empty() {
        m.point.clone()
    } else {
        m.point.join(rel)
    })
}

fn parse(
    cgroup: &str,
    mountinfo: &str,
    v2_controllers: impl Fn(&Path) -> Option<String>,
) -> Vec<Hierarchy> {
    let mounts = mounts(mountinfo);
    let mut out = Vec::new();
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(names), Some(group)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && names.is_empty() {
            let Some(own) = mounts
                .iter()
                .filter(|m| m.v2)
                .find_map(|m| own_dir(m, group))
            else {
                continue;
            };
            let controllers = v2_controllers(&own)
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect();
            out.push(Hierarchy {
                version: Version::V2,
                own,
                controllers,
            });
            continue;
        }
        let wanted: Vec<&str> = names.split(',').filter(|n| !n.is_empty()).collect();
        let Some(own) = mounts
            .iter()
            .filter(|m| !m.v2 && wanted.iter().all(|w| m.options.contains(w)))
            .find_map(|m| own_dir(m, group))
        else {
            continue;
        };
        out.push(Hierarchy {
            version: Version::V1,
            own,
            controllers: wanted
                .iter()
                .filter(|n| !n.starts_with("name="))
                .map(|n| n.to_string())
                .collect(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_CGROUP: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/4b43\n\
        1:cpu,cpuacct:/\n0::/\n";
    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn a_hybrid_host_uses_v1_for_what_v2_does_not_offer() {
        let hs = parse(HYBRID_CGROUP, HYBRID_MOUNTS, |_| Some("hugetlb\n".into()));
        let mem = locate(&hs, "memory").unwrap();
        assert_eq!(mem.version, Version::V1);
        assert_eq!(mem.own, Path::new("/sys/fs/cgroup/memory/process_api/4b43"));
        let cpu = locate(&hs, "cpu").unwrap();
        assert_eq!(cpu.own, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(locate(&hs, "pids").unwrap().version, Version::V1);
        assert_eq!(locate(&hs, "hugetlb").unwrap().version, Version::V2);
        assert!(locate(&hs, "io").is_none());
    }

    #[test]
    fn v2_wins_where_the_own_group_offers_the_controller() {
        let cgroup = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope\n";
        let mounts = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let hs = parse(cgroup, mounts, |dir| {
            assert!(dir.ends_with("app.slice/x.scope"));
            Some("cpu memory pids\n".into())
        });
        let mem = locate(&hs, "memory").unwrap();
        assert_eq!(mem.version, Version::V2);
        assert_eq!(
            mem.own,
            Path::new(
                "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope"
            )
        );
    }

    #[test]
    fn a_mount_of_a_subtree_reaches_only_groups_below_its_root() {
        let mounts = "41 31 0:38 /ctr /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let inside = parse("0::/ctr/job\n", mounts, |_| Some("pids".into()));
        assert_eq!(inside[0].own, Path::new("/sys/fs/cgroup/job"));
        assert!(parse("0::/other\n", mounts, |_| None).is_empty());
        assert!(parse("0::/ctrl\n", mounts, |_| None).is_empty());
    }

    #[test]
    fn mount_points_with_spaces_are_unescaped() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/a\\"), r"/a\\");
    }
}
