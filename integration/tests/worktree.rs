//! Copy-on-write worktrees (issue 14, item 4): `whole-process --worktree` lets the program
//! change the project freely while the checkout stays byte for byte as it was (judged on the
//! host); `diff` shows every change as a patch `git apply` takes; `apply` makes the checkout
//! what the program saw, refuses as a whole when the checkout changed meanwhile or when a
//! persistence surface is not named; `discard` leaves nothing on disk.
//!
//! Each test keeps its worktrees in a state directory of its own (`XDG_STATE_HOME`) under
//! /var/cache/sandbox-launch-tests (worktrees are never kept in /tmp), removed at the end.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use integration::{
    command, command_with, explain, fault_inject, is_root, launcher, stderr, stdout, Caller,
    TempDir, CALLERS,
};

const STATE_BASE: &str = "/var/cache/sandbox-launch-tests";

/// One entry of a tree: type, permissions, contents (a symlink's target).
type Tree = BTreeMap<PathBuf, (char, u32, Vec<u8>)>;

/// Everything below `root`, `.git` included.
fn snapshot(root: &Path) -> Tree {
    fn walk(root: &Path, rel: &Path, out: &mut Tree) {
        let mut names: Vec<_> = std::fs::read_dir(root.join(rel))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for n in names {
            let r = rel.join(&n);
            let p = root.join(&r);
            let m = std::fs::symlink_metadata(&p).unwrap();
            let mode = m.permissions().mode() & 0o7777;
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(r, ('l', mode, t.into_os_string().into_encoded_bytes()));
            } else if m.is_dir() {
                out.insert(r.clone(), ('d', mode, Vec::new()));
                walk(root, &r, out);
            } else if m.is_file() {
                out.insert(r, ('f', mode, std::fs::read(&p).unwrap()));
            } else {
                out.insert(r, ('s', mode, Vec::new()));
            }
        }
    }
    let mut out = Tree::new();
    walk(root, Path::new(""), &mut out);
    out
}

/// A test's project (a git repository with a commit) and its state directory.
struct Setup {
    project: TempDir,
    state: TempDir,
    caller: Caller,
}

fn git(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new("git")
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        // `git status` must not refresh the index: the tests compare the checkout byte for byte.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", explain(&out));
    out
}

impl Setup {
    fn new(caller: Caller, tag: &str) -> Setup {
        let project = TempDir::new(&format!("wt-{tag}"));
        project.write("src/a.txt", "hello\n");
        project.write("src/nested/n.txt", "n\n");
        project.write("gone.txt", "to be deleted\n");
        project.write("olddir/x", "x\n");
        project.write("olddir/y/z", "z\n");
        project.write("keep.txt", "unchanged\n");
        std::fs::write(project.join("bin.dat"), [0u8, 1, 2, 3, 0, 255]).unwrap();
        project.give_to_sandbox_user(&project.join("bin.dat"));
        git(&project.path, &["init", "-q"]);
        git(&project.path, &["add", "-A"]);
        git(&project.path, &["commit", "-qm", "init"]);
        project.give_to_sandbox_user(&project.path);
        std::fs::create_dir_all(STATE_BASE).unwrap();
        let state = TempDir::new_in(STATE_BASE, &format!("wt-state-{tag}"));
        // The store's directories are made by the caller (they must be the caller's own).
        if caller == Caller::Invoker && is_root() {
            std::os::unix::fs::chown(&state.path, Some(0), Some(0)).unwrap();
        }
        Setup {
            project,
            state,
            caller,
        }
    }

    fn cmd(&self, args: &[&str]) -> Output {
        command(self.caller, &self.project.path, args)
            .env("XDG_STATE_HOME", &self.state.path)
            .output()
            .expect("run sandbox-launch")
    }

    /// `whole-process --worktree --name NAME -- sh -c SCRIPT`.
    fn run(&self, name: &str, script: &str) -> Output {
        self.cmd(&[
            "whole-process",
            "--worktree",
            "--name",
            name,
            "--",
            "/bin/sh",
            "-c",
            script,
        ])
    }

    fn worktrees_dir(&self) -> PathBuf {
        self.state.join("sandbox-launch/worktrees")
    }

    /// The kept worktrees' directories.
    fn kept(&self) -> Vec<PathBuf> {
        match std::fs::read_dir(self.worktrees_dir()) {
            Ok(d) => d.map(|e| e.unwrap().path()).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// What the program saw of the project (but `.git` and fifos), as `find` and `cksum` print it:
/// the same script runs inside the sandbox and, after `apply`, on the host.
const VIEW: &str =
    "find . -path ./.git -prune -o ! -type p -printf '%y %m %p -> %l\\n' | LC_ALL=C sort; \
                    find . -path ./.git -prune -o -type f -print | LC_ALL=C sort | xargs cksum";

/// What the program does: every kind of change.
const CHANGES: &str = "set -e; \
    echo world >> src/a.txt; \
    printf '\\000\\377binary\\000' > bin.dat; \
    rm gone.txt; \
    rm -r olddir; \
    mkdir -p new/deep && printf 'fresh\\n' > new/deep/f; \
    chmod 755 src/nested/n.txt; \
    mkdir -p src/nested/emptydir; \
    ln -s ../keep.txt src/link; \
    mkfifo pipe; \
    printf '#!/bin/sh\\necho planted\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
    echo ===VIEW===; ";

#[test]
fn worktree_leaves_the_checkout_untouched_and_apply_applies_what_the_program_saw() {
    for caller in CALLERS {
        let s = Setup::new(caller, "main");
        let before = snapshot(&s.project.path);
        let out = s.run("wt-main", &format!("{CHANGES}{VIEW}"));
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        let seen = stdout(&out)
            .split("===VIEW===\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{}", explain(&out)))
            .to_string();
        assert!(seen.contains("./new/deep/f"), "{seen}");

        // The checkout is byte for byte as it was, .git included.
        assert_eq!(
            snapshot(&s.project.path),
            before,
            "{caller:?}: the checkout changed"
        );
        assert_eq!(
            stdout(&git(&s.project.path, &["status", "--porcelain"])),
            ""
        );
        let kept = s.kept();
        assert_eq!(kept.len(), 1, "{caller:?}: {kept:?}");
        assert_eq!(
            std::fs::metadata(s.worktrees_dir()).unwrap().mode() & 0o777,
            0o700
        );

        // diff shows every change; git apply takes the project's part.
        let d = s.cmd(&["diff", "wt-main"]);
        assert!(d.status.success(), "{}", explain(&d));
        let patch = stdout(&d);
        for want in [
            "diff --git a/src/a.txt b/src/a.txt",
            "+world",
            "diff --git a/bin.dat b/bin.dat",
            "GIT binary patch",
            "deleted file mode 100644",
            "diff --git a/olddir/y/z b/olddir/y/z",
            "diff --git a/new/deep/f b/new/deep/f\nnew file mode 100644",
            "diff --git a/src/nested/n.txt b/src/nested/n.txt\nold mode 100644\nnew mode 100755",
            "diff --git a/src/link b/src/link\nnew file mode 120000",
            "# pipe: a fifo",
            "# persistence surface, not applied unless named (apply --include-persistence .git/hooks/pre-commit)",
            "+echo planted",
        ] {
            assert!(patch.contains(want), "{caller:?}: no {want:?} in\n{patch}");
        }
        assert!(
            stderr(&d).contains(".git/hooks/pre-commit"),
            "{}",
            explain(&d)
        );
        let st = s.cmd(&["diff", "--stat", "wt-main"]);
        assert!(st.status.success(), "{}", explain(&st));
        for line in [
            "M\tsrc/a.txt",
            "M\tbin.dat",
            "D\tgone.txt",
            "D\tolddir/",
            "D\tolddir/y/z",
            "A\tnew/deep/f",
            "M\tsrc/nested/n.txt",
            "A\tsrc/link",
            "X\tpipe",
            "A\t.git/hooks/pre-commit\tpersistence",
        ] {
            let listed = stdout(&st).lines().any(|l| l == line);
            assert!(listed, "{caller:?}: no {line:?} in\n{}", stdout(&st));
        }
        let copy = TempDir::new("wt-copy");
        let status = Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", s.project.path.display()))
            .arg(&copy.path)
            .status()
            .unwrap();
        assert!(status.success());
        let project_part = patch.split("# persistence surface").next().unwrap();
        std::fs::write(copy.join("p.patch"), project_part).unwrap();
        git(&copy.path, &["apply", "--check", "p.patch"]);

        // Not named, the planted hook refuses the whole apply: nothing changes.
        let a = s.cmd(&["apply", "wt-main"]);
        assert_eq!(a.status.code(), Some(1), "{}", explain(&a));
        assert!(
            stderr(&a).contains("--include-persistence"),
            "{}",
            explain(&a)
        );
        assert_eq!(
            snapshot(&s.project.path),
            before,
            "a refused apply changed the checkout"
        );

        // Applied without it: the checkout is what the program saw; the hook is not there.
        let a = s.cmd(&["apply", "wt-main", "--skip-persistence"]);
        assert!(a.status.success(), "{caller:?}: {}", explain(&a));
        let host_view = Command::new("/bin/sh")
            .args(["-c", VIEW])
            .current_dir(&s.project.path)
            .output()
            .unwrap();
        assert_eq!(
            stdout(&host_view),
            seen,
            "{caller:?}: the checkout after apply"
        );
        assert!(!s.project.join(".git/hooks/pre-commit").exists());
        assert!(!s.project.join("pipe").exists());
        assert_eq!(
            std::fs::read_link(s.project.join("src/link")).unwrap(),
            Path::new("../keep.txt")
        );

        // Named, it is applied too.
        let a = s.cmd(&[
            "apply",
            "wt-main",
            "--include-persistence",
            ".git/hooks/pre-commit",
        ]);
        assert!(a.status.success(), "{}", explain(&a));
        assert!(
            stderr(&a).contains("warning: applying persistence surface"),
            "{}",
            explain(&a)
        );
        assert!(
            std::fs::read_to_string(s.project.join(".git/hooks/pre-commit"))
                .unwrap()
                .contains("planted")
        );

        // discard leaves nothing.
        let d = s.cmd(&["discard", "wt-main"]);
        assert!(d.status.success(), "{}", explain(&d));
        assert!(s.kept().is_empty(), "{:?}", s.kept());
        let l = s.cmd(&["worktrees", "--json"]);
        assert_eq!(stdout(&l).trim(), "[]", "{}", explain(&l));
    }
}

#[test]
fn apply_refuses_a_checkout_changed_meanwhile_and_changes_nothing() {
    for caller in CALLERS {
        let s = Setup::new(caller, "conflict");
        let out = s.run(
            "wt-conflict",
            "echo inside >> src/a.txt && echo new > b.txt && echo m > keep.txt",
        );
        assert!(out.status.success(), "{}", explain(&out));
        // The host edits a file the program changed, and creates one it created.
        std::fs::write(s.project.join("src/a.txt"), "edited on the host\n").unwrap();
        std::fs::write(s.project.join("b.txt"), "host's own\n").unwrap();
        let before = snapshot(&s.project.path);
        let a = s.cmd(&["apply", "wt-conflict"]);
        assert_eq!(a.status.code(), Some(1), "{}", explain(&a));
        let e = stderr(&a);
        assert!(
            e.contains("src/a.txt: changed on the host since the launch"),
            "{e}"
        );
        assert!(
            e.contains("b.txt: created on the host since the launch"),
            "{e}"
        );
        assert_eq!(
            snapshot(&s.project.path),
            before,
            "{caller:?}: a refused apply wrote"
        );

        // The allowed twin: with the host's changes undone, the same apply goes through.
        let s2 = Setup::new(caller, "conflict-free");
        let out = s2.run("wt-free", "echo inside >> src/a.txt && echo new > b.txt");
        assert!(out.status.success(), "{}", explain(&out));
        let a = s2.cmd(&["apply", "wt-free"]);
        assert!(a.status.success(), "{}", explain(&a));
        assert_eq!(
            std::fs::read_to_string(s2.project.join("src/a.txt")).unwrap(),
            "hello\ninside\n"
        );
        for (s, n) in [(&s, "wt-conflict"), (&s2, "wt-free")] {
            assert!(s.cmd(&["discard", n]).status.success());
            assert!(s.kept().is_empty());
        }
    }
}

#[test]
fn apply_follows_no_symlink_out_of_the_checkout() {
    for caller in CALLERS {
        let s = Setup::new(caller, "links");
        let outside = TempDir::new("wt-outside");
        // The program writes below a directory, and a symlink pointing out of the checkout.
        let out = s.run(
            "wt-links",
            &format!(
                "echo inside > src/nested/new.txt && ln -s {} escape",
                outside.path.display()
            ),
        );
        assert!(out.status.success(), "{}", explain(&out));
        // Meanwhile the checkout's directory is swapped for a symlink to the outside.
        std::fs::rename(s.project.join("src/nested"), s.project.join("moved")).unwrap();
        std::os::unix::fs::symlink(&outside.path, s.project.join("src/nested")).unwrap();
        let a = s.cmd(&["apply", "wt-links"]);
        assert_eq!(a.status.code(), Some(1), "{}", explain(&a));
        assert!(
            std::fs::read_dir(&outside.path).unwrap().next().is_none(),
            "{caller:?}: apply wrote outside the checkout"
        );
        // Put back, the apply places the program's symlink as a symlink.
        std::fs::remove_file(s.project.join("src/nested")).unwrap();
        std::fs::rename(s.project.join("moved"), s.project.join("src/nested")).unwrap();
        let a = s.cmd(&["apply", "wt-links"]);
        assert!(a.status.success(), "{}", explain(&a));
        assert_eq!(
            std::fs::read_link(s.project.join("escape")).unwrap(),
            outside.path
        );
        assert!(std::fs::read_dir(&outside.path).unwrap().next().is_none());
        assert!(s.cmd(&["discard", "wt-links"]).status.success());
    }
}

#[test]
fn worktrees_are_not_kept_in_tmp() {
    let s = Setup::new(Caller::Unprivileged, "tmp-state");
    let out = command(
        Caller::Unprivileged,
        &s.project.path,
        &["whole-process", "--worktree", "--", "/bin/true"],
    )
    .env("XDG_STATE_HOME", "/tmp/somewhere")
    .output()
    .unwrap();
    assert!(!out.status.success(), "{}", explain(&out));
    assert!(
        stderr(&out).contains("set XDG_STATE_HOME"),
        "{}",
        explain(&out)
    );
    assert!(!Path::new("/tmp/somewhere").exists());
}

#[test]
fn the_program_cannot_forge_overlay_records_or_reach_its_upper_layer() {
    for caller in CALLERS {
        let s = Setup::new(caller, "forge");
        let store = s.worktrees_dir();
        // Through the overlay: an opaque mark on src (which would read as "everything in src
        // deleted"), a whiteout device over keep.txt, and the store itself.
        let script = format!(
            "python3 -c 'import os; os.setxattr(\"src\", \"user.overlay.opaque\", b\"y\")' 2>/dev/null; \
             mknod keep.txt c 0 0 2>/dev/null; \
             echo x > src/added; \
             if ls {0} >/dev/null 2>&1; then echo STORE-VISIBLE; fi; \
             if echo y > {0}/planted 2>/dev/null; then echo STORE-WRITABLE; fi; true",
            store.display()
        );
        let out = s.run("wt-forge", &script);
        assert!(out.status.success(), "{}", explain(&out));
        assert!(
            !stdout(&out).contains("STORE-"),
            "{caller:?}: {}",
            explain(&out)
        );
        let d = s.cmd(&["diff", "wt-forge"]);
        assert!(d.status.success(), "{}", explain(&d));
        let patch = stdout(&d);
        assert!(patch.contains("b/src/added"), "{patch}");
        assert!(
            !patch.contains("deleted file"),
            "{caller:?}: a forged record read as a deletion:\n{patch}"
        );
        let a = s.cmd(&["apply", "wt-forge"]);
        assert!(a.status.success(), "{}", explain(&a));
        assert_eq!(
            std::fs::read_to_string(s.project.join("src/a.txt")).unwrap(),
            "hello\n"
        );
        assert_eq!(
            std::fs::read_to_string(s.project.join("keep.txt")).unwrap(),
            "unchanged\n"
        );
        assert!(s.cmd(&["discard", "wt-forge"]).status.success());
    }
}

/// What the checkout itself makes a persistence surface — the directory `core.hooksPath` names,
/// a git configuration file it includes, the target of a protected symlink (`.envrc`), a
/// directory of `PATH` — is one in the worktree too: `apply` refuses it unless named, and the
/// host's git then runs nothing planted.
#[test]
fn surfaces_the_checkout_names_are_not_applied_unless_named() {
    for caller in CALLERS {
        let s = Setup::new(caller, "named");
        s.project
            .write(".githooks/pre-commit", "#!/bin/sh\nexit 0\n");
        s.project.write("tools/envrc", "# ok\n");
        s.project.write("shared.gitconfig", "[user]\n\tname = t\n");
        s.project.write("bin/tool", "#!/bin/sh\n");
        s.project.write("scripts/fsmon.sh", "#!/bin/sh\nexit 1\n");
        std::os::unix::fs::symlink("tools/envrc", s.project.join(".envrc")).unwrap();
        git(
            &s.project.path,
            &["config", "core.fsmonitor", "scripts/fsmon.sh"],
        );
        git(&s.project.path, &["config", "core.hooksPath", ".githooks"]);
        git(
            &s.project.path,
            &["config", "include.path", "../shared.gitconfig"],
        );
        git(&s.project.path, &["add", "-A"]);
        git(&s.project.path, &["commit", "-qm", "surfaces"]);
        s.project.give_to_sandbox_user(&s.project.path);
        let marker = s.project.join("PWNED");
        let m = marker.display();
        let out = s.run(
            "wt-named",
            &format!(
                "printf '#!/bin/sh\\ntouch {m}\\n' > .githooks/pre-commit; \
                 echo 'touch {m}' >> tools/envrc; \
                 printf '[core]\\n\\tfsmonitor = touch {m}\\n' >> shared.gitconfig; \
                 printf '#!/bin/sh\\ntouch {m}\\n' > bin/ls; \
                 printf '#!/bin/sh\\ntouch {m}\\nexit 1\\n' > scripts/fsmon.sh; \
                 echo edit > src/a.txt"
            ),
        );
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        let before = snapshot(&s.project.path);
        let path = format!(
            "{}:{}",
            s.project.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let apply = |extra: &[&str]| {
            let mut args = vec!["apply", "wt-named"];
            args.extend_from_slice(extra);
            command(s.caller, &s.project.path, &args)
                .env("XDG_STATE_HOME", &s.state.path)
                .env("PATH", &path)
                .output()
                .unwrap()
        };
        let d = command(s.caller, &s.project.path, &["diff", "wt-named"])
            .env("XDG_STATE_HOME", &s.state.path)
            .env("PATH", &path)
            .output()
            .unwrap();
        let patch = stdout(&d);
        let project_part = patch.split("# persistence surface").next().unwrap();
        for surface in [
            ".githooks/pre-commit",
            "tools/envrc",
            "shared.gitconfig",
            "bin/ls",
            "scripts/fsmon.sh",
        ] {
            assert!(
                !project_part.contains(surface),
                "{caller:?}: {surface} shown as a project file:\n{patch}"
            );
        }
        let a = apply(&[]);
        assert_eq!(a.status.code(), Some(1), "{caller:?}: {}", explain(&a));
        assert_eq!(
            snapshot(&s.project.path),
            before,
            "{caller:?}: a refused apply changed the checkout"
        );
        // The project's own change goes in without them.
        let a = apply(&["--skip-persistence"]);
        assert!(a.status.success(), "{caller:?}: {}", explain(&a));
        assert_eq!(
            std::fs::read_to_string(s.project.join("src/a.txt")).unwrap(),
            "edit\n"
        );
        // What the host runs afterwards: git's status and a commit, the tool on PATH.
        git(&s.project.path, &["status", "--short"]);
        git(&s.project.path, &["commit", "-qam", "after"]);
        let _ = Command::new("ls").env("PATH", &path).output();
        assert!(!marker.exists(), "{caller:?}: planted code ran on the host");
        assert!(s.cmd(&["discard", "wt-named"]).status.success());
    }
}

/// A sandbox without `--worktree` whose writable tree holds the worktree store (here, as its
/// working directory) cannot read or rewrite a kept worktree (the checkout `apply` writes to,
/// the upper layer it copies); where no store exists yet, it cannot plant one. The allowed
/// twin: an ordinary file next to the store is written.
#[test]
fn a_sandbox_cannot_reach_or_plant_the_worktree_store() {
    for caller in CALLERS {
        let s = Setup::new(caller, "store");
        let out = s.run("wt-store", "echo changed > keep.txt");
        assert!(out.status.success(), "{}", explain(&out));
        let kept = s.kept();
        assert_eq!(kept.len(), 1, "{caller:?}: {}", explain(&out));
        let meta = std::fs::read(kept[0].join("meta.json")).unwrap();
        let w = s.worktrees_dir();
        let script = format!(
            "if cat {w}/*/meta.json >/dev/null 2>&1; then echo STORE-READABLE; fi; \
             if sed -i s#wt-store#planted# {w}/*/meta.json 2>/dev/null; then echo META-WRITTEN; fi; \
             if echo planted > {w}/planted 2>/dev/null; then echo STORE-WRITABLE; fi; \
             echo ok > beside.txt && echo beside-ok; true",
            w = w.display()
        );
        let out = command(
            s.caller,
            &s.state.path,
            &["whole-process", "--", "/bin/sh", "-c", &script],
        )
        .env("XDG_STATE_HOME", &s.state.path)
        .output()
        .unwrap();
        let text = stdout(&out);
        assert!(text.contains("beside-ok"), "{caller:?}: {}", explain(&out));
        assert!(!text.contains("STORE-"), "{caller:?}: {}", explain(&out));
        assert!(!text.contains("META-"), "{caller:?}: {}", explain(&out));
        assert_eq!(std::fs::read(kept[0].join("meta.json")).unwrap(), meta);
        assert!(!w.join("planted").exists());
        // Nor can a store be built in its place once it is moved away (put back after, on
        // the host: moving it back is refused inside too).
        let out = command(
            s.caller,
            &s.state.path,
            &[
                "whole-process",
                "--",
                "/bin/sh",
                "-c",
                "mv sandbox-launch moved 2>/dev/null; \
                 mkdir -p sandbox-launch/worktrees/fake && echo PLANTED; true",
            ],
        )
        .env("XDG_STATE_HOME", &s.state.path)
        .output()
        .unwrap();
        let moved = s.state.join("moved");
        if moved.exists() {
            let _ = std::fs::remove_dir(s.state.join("sandbox-launch"));
            std::fs::rename(&moved, s.state.join("sandbox-launch")).unwrap();
        }
        assert!(
            !stdout(&out).contains("PLANTED"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!w.join("fake").exists(), "{caller:?}");
        assert_eq!(std::fs::read(kept[0].join("meta.json")).unwrap(), meta);
        assert!(s.cmd(&["discard", "wt-store"]).status.success());

        // No store yet: none can be made from inside.
        let fresh = TempDir::new_in(STATE_BASE, "wt-fresh");
        if caller == Caller::Invoker && is_root() {
            std::os::unix::fs::chown(&fresh.path, Some(0), Some(0)).unwrap();
        }
        let out = command(
            s.caller,
            &fresh.path,
            &[
                "whole-process",
                "--",
                "/bin/sh",
                "-c",
                "mkdir -p sandbox-launch/worktrees/x && echo PLANTED; \
                 mkdir -p sandbox-launch/other && echo other-ok; true",
            ],
        )
        .env("XDG_STATE_HOME", &fresh.path)
        .output()
        .unwrap();
        let text = stdout(&out);
        assert!(text.contains("other-ok"), "{caller:?}: {}", explain(&out));
        assert!(!text.contains("PLANTED"), "{caller:?}: {}", explain(&out));
        assert!(
            !fresh.join("sandbox-launch/worktrees").exists(),
            "{caller:?}"
        );
    }
}

/// A writable `--bind` inside the checkout is not part of the worktree: its writes reach the
/// host, and so its persistence protections stay (a repository there keeps its hooks, its
/// `.envrc` stays unwritable), judged by what git then runs on the host.
#[test]
fn a_writable_bind_inside_the_checkout_keeps_its_protections_with_a_worktree() {
    for caller in CALLERS {
        let s = Setup::new(caller, "bindin");
        s.project.write("sub/.envrc", "# ok\n");
        git(&s.project.join("sub"), &["init", "-q"]);
        s.project.give_to_sandbox_user(&s.project.join("sub"));
        let sub = s.project.join("sub");
        let marker = s.project.join("PWNED");
        let script = format!(
            "printf '#!/bin/sh\\ntouch {m}\\n' > sub/.git/hooks/pre-commit && echo HOOK; \
             echo 'touch {m}' >> sub/.envrc && echo ENVRC; \
             git -C sub config core.fsmonitor 'touch {m}' 2>/dev/null && echo FSMONITOR; \
             echo edit > sub/plain.txt && echo plain-ok; \
             echo edit > src/a.txt && echo worktree-ok; true",
            m = marker.display()
        );
        let out = s.cmd(&[
            "whole-process",
            "--worktree",
            "--name",
            "wt-bindin",
            "--bind",
            &sub.display().to_string(),
            "--",
            "/bin/sh",
            "-c",
            &script,
        ]);
        let text = stdout(&out);
        assert!(text.contains("plain-ok"), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("worktree-ok"),
            "{caller:?}: {}",
            explain(&out)
        );
        for planted in ["HOOK", "ENVRC", "FSMONITOR"] {
            assert!(
                !text.contains(planted),
                "{caller:?}: {planted}: {}",
                explain(&out)
            );
        }
        // The bind wrote the host; the rest of the checkout is untouched.
        assert_eq!(
            std::fs::read_to_string(sub.join("plain.txt")).unwrap(),
            "edit\n"
        );
        assert_eq!(
            std::fs::read_to_string(s.project.join("src/a.txt")).unwrap(),
            "hello\n"
        );
        assert_eq!(
            std::fs::read_to_string(sub.join(".envrc")).unwrap(),
            "# ok\n"
        );
        let _ = Command::new("git")
            .arg("-C")
            .arg(&sub)
            .arg("status")
            .output();
        assert!(!marker.exists(), "{caller:?}: planted code ran on the host");
        let _ = s.cmd(&["discard", "wt-bindin"]);
    }
}

#[test]
fn started_as_root_a_checkout_of_another_owner_is_the_idmapped_lower_layer() {
    if !is_root() {
        return; // only root starts with another user's checkout idmapped
    }
    let s = Setup::new(Caller::Invoker, "idmapped");
    let status = Command::new("chown")
        .args(["-R", "0:0"])
        .arg(&s.project.path)
        .status()
        .unwrap();
    assert!(status.success());
    let before = snapshot(&s.project.path);
    let out = s.run(
        "wt-idmapped",
        "echo more >> src/a.txt && echo n > new.txt && id -u",
    );
    assert!(out.status.success(), "{}", explain(&out));
    assert_eq!(stdout(&out).trim(), "65534");
    assert_eq!(snapshot(&s.project.path), before);
    let a = s.cmd(&["apply", "wt-idmapped"]);
    assert!(a.status.success(), "{}", explain(&a));
    assert_eq!(
        std::fs::read_to_string(s.project.join("src/a.txt")).unwrap(),
        "hello\nmore\n"
    );
    assert!(s.cmd(&["discard", "wt-idmapped"]).status.success());
    assert!(s.kept().is_empty());
}

#[test]
fn git_inside_the_worktree_commits_there_and_apply_brings_the_files_only() {
    for caller in CALLERS {
        let s = Setup::new(caller, "gitin");
        let head = std::fs::read(s.project.join(".git/HEAD")).unwrap();
        let log_before = stdout(&git(&s.project.path, &["log", "--format=%H"]));
        let out = s.run(
            "wt-gitin",
            "echo committed >> src/a.txt && git add -A && \
             git -c user.name=a -c user.email=a@a commit -qm inside && git log --format=%s -1",
        );
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert_eq!(stdout(&out).trim(), "inside");
        let d = s.cmd(&["diff", "wt-gitin"]);
        let patch = stdout(&d);
        assert!(patch.contains("+committed"), "{patch}");
        assert!(patch.contains("# git directories:"), "{patch}");
        assert!(
            !patch.contains("a/.git/"),
            "{caller:?}: repository state in the patch:\n{patch}"
        );
        let a = s.cmd(&["apply", "wt-gitin"]);
        assert!(a.status.success(), "{}", explain(&a));
        assert_eq!(
            std::fs::read_to_string(s.project.join("src/a.txt")).unwrap(),
            "hello\ncommitted\n"
        );
        // The host's repository is as it was: the change is in the working tree.
        assert_eq!(std::fs::read(s.project.join(".git/HEAD")).unwrap(), head);
        assert_eq!(
            stdout(&git(&s.project.path, &["log", "--format=%H"])),
            log_before
        );
        assert_eq!(
            stdout(&git(&s.project.path, &["status", "--porcelain"])),
            " M src/a.txt\n"
        );
        assert!(s.cmd(&["discard", "wt-gitin"]).status.success());
    }
}

#[test]
fn apply_and_discard_wait_for_the_sandbox_to_end() {
    let s = Setup::new(Caller::Unprivileged, "running");
    let mut child = command(
        Caller::Unprivileged,
        &s.project.path,
        &[
            "whole-process",
            "--worktree",
            "--name",
            "wt-running",
            "--",
            "/bin/sh",
            "-c",
            "echo a > started; sleep 60",
        ],
    )
    .env("XDG_STATE_HOME", &s.state.path)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !s
        .kept()
        .first()
        .is_some_and(|w| w.join("layers/upper/started").exists())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the sandbox did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for op in ["apply", "discard"] {
        let o = s.cmd(&[op, "wt-running"]);
        assert_eq!(o.status.code(), Some(1), "{op}: {}", explain(&o));
        assert!(
            stderr(&o).contains("still in use by a running sandbox"),
            "{}",
            explain(&o)
        );
    }
    assert!(!s.project.join("started").exists());
    // The launcher killed: the worktree is kept, and now free.
    child.kill().unwrap();
    child.wait().unwrap();
    let a = s.cmd(&["apply", "wt-running"]);
    assert!(a.status.success(), "{}", explain(&a));
    assert!(s.project.join("started").exists());
    assert!(s.cmd(&["discard", "wt-running"]).status.success());
    assert!(s.kept().is_empty());
}

#[test]
fn the_events_stream_names_the_worktree() {
    let s = Setup::new(Caller::Unprivileged, "events");
    let events = s.state.join("events.jsonl");
    std::fs::write(&events, "").unwrap();
    s.state.give_to_sandbox_user(&events);
    let out = s.cmd(&[
        "whole-process",
        "--worktree",
        "--name",
        "wt-events",
        "--events",
        events.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        "echo x > f",
    ]);
    assert!(out.status.success(), "{}", explain(&out));
    let line = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["event"] == "worktree")
        .unwrap_or_else(|| panic!("no worktree event: {}", explain(&out)));
    let kept = s.kept();
    assert_eq!(kept.len(), 1);
    assert_eq!(line["name"], "wt-events");
    assert_eq!(line["dir"], kept[0].to_str().unwrap());
    assert_eq!(line["checkout"], s.project.path.to_str().unwrap());
    assert!(s.cmd(&["discard", "wt-events"]).status.success());
}

#[test]
fn a_huge_sparse_file_is_named_not_shown_and_applied_without_filling_the_disk() {
    let s = Setup::new(Caller::Unprivileged, "huge");
    let out = s.run("wt-huge", "truncate -s 20G huge && printf end >> huge");
    assert!(out.status.success(), "{}", explain(&out));
    let d = s.cmd(&["diff", "wt-huge"]);
    assert!(d.status.success(), "{}", explain(&d));
    assert!(
        stdout(&d).contains("# huge: 21474836483 bytes, too large to show"),
        "{}",
        explain(&d)
    );
    let a = s.cmd(&["apply", "wt-huge"]);
    assert!(a.status.success(), "{}", explain(&a));
    let m = std::fs::metadata(s.project.join("huge")).unwrap();
    assert_eq!(m.len(), 21474836483);
    assert!(m.blocks() * 512 < 1 << 20, "{} blocks", m.blocks());
    assert!(s.cmd(&["discard", "wt-huge"]).status.success());
}

#[test]
fn a_state_directory_without_user_xattrs_refuses_the_launch_with_the_fix() {
    for caller in CALLERS {
        let s = Setup::new(caller, "noxattr");
        let before = snapshot(&s.project.path);
        // setxattr answers as on a filesystem without user attributes.
        let sl = launcher().to_str().unwrap().to_string();
        let fault = format!("{}=EOPNOTSUPP", libc::SYS_setxattr);
        let args = [
            "--errno",
            &fault,
            "--",
            &sl,
            "whole-process",
            "--worktree",
            "--",
            "/bin/sh",
            "-c",
            "echo ran > marker",
        ];
        let out = command_with(fault_inject(), caller, &s.project.path, &args)
            .env("XDG_STATE_HOME", &s.state.path)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(113),
            "{caller:?}: {}",
            explain(&out)
        );
        let e = stderr(&out);
        assert!(
            e.contains("user extended attributes") && e.contains("XDG_STATE_HOME"),
            "{e}"
        );
        assert_eq!(
            snapshot(&s.project.path),
            before,
            "{caller:?}: the program ran"
        );
        assert!(s.kept().is_empty(), "{caller:?}: {:?}", s.kept());
    }
}
