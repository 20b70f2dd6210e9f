//! Mounts placed by name (`--bind`, `--ro-bind`, `--overlay`, `--tmpfs`, `--empty-root`), tried
//! from inside and judged on the host: every denial next to its allowed twin.

use std::path::Path;

use integration::{explain, sh, stderr, stdout, TempDir, CALLERS};

fn run(
    caller: integration::Caller,
    cwd: &Path,
    opts: &[String],
    script: &str,
) -> std::process::Output {
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    sh(caller, cwd, &opts, script)
}

#[test]
fn bind_src_dst_writes_reach_the_host_file_and_the_source_path_stays_read_only() {
    for caller in CALLERS {
        let work = TempDir::new("mb-work");
        let src = TempDir::new_in("/var/tmp", "mb-src");
        src.write("f", "host\n");
        // A target outside every writable tree: only the mount (and its Landlock rule) makes
        // it writable.
        let dst = TempDir::new_in("/var/tmp", "mb-dst");
        let d = dst.path.display();
        let s = src.path.display();
        let out = run(
            caller,
            &work.path,
            &[
                "--bind".into(),
                (format!("{s}:{d}")),
                "--bind".into(),
                (format!("{s}:/tmp/again")),
            ],
            &format!(
                "cat {d}/f && echo inside >> {d}/f && echo new > {d}/new && echo wrote; \
                 cat /tmp/again/new; \
                 echo x > {s}/escape 2>/dev/null && echo ESCAPED; true"
            ),
        );
        let text = stdout(&out);
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("host\nwrote\nnew"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!text.contains("ESCAPED"), "{caller:?}: {}", explain(&out));
        assert_eq!(
            std::fs::read_to_string(src.join("f")).unwrap(),
            "host\ninside\n"
        );
        assert_eq!(std::fs::read_to_string(src.join("new")).unwrap(), "new\n");
        assert!(!src.join("escape").exists());
        assert!(
            std::fs::read_dir(&dst.path).unwrap().next().is_none(),
            "{caller:?}: the target's host directory must stay untouched"
        );
    }
}

#[test]
fn ro_bind_refuses_writes_and_its_writable_twin_accepts_them() {
    for caller in CALLERS {
        let work = TempDir::new("mr-work");
        let src = TempDir::new_in("/var/tmp", "mr-src");
        src.write("f", "orig\n");
        let s = src.path.display();
        let out = run(
            caller,
            &work.path,
            &[
                "--ro-bind".into(),
                format!("{s}:/tmp/ro"),
                "--bind".into(),
                format!("{s}:/tmp/rw"),
            ],
            "cat /tmp/ro/f; echo changed > /tmp/ro/f || echo refused-write; \
             touch /tmp/ro/new || echo refused-create; \
             grep -q ' /tmp/ro ro,' /proc/self/mountinfo && echo mount-ro; \
             echo twin > /tmp/rw/twin && echo twin-ok; cat /tmp/ro/twin",
        );
        let text = stdout(&out);
        assert!(text.starts_with("orig\n"), "{caller:?}: {}", explain(&out));
        for want in [
            "refused-write",
            "refused-create",
            "mount-ro",
            "twin-ok",
            "twin\n",
        ] {
            assert!(text.contains(want), "{caller:?}: {want}: {}", explain(&out));
        }
        assert_eq!(std::fs::read_to_string(src.join("f")).unwrap(), "orig\n");
        assert!(!src.join("new").exists());
        assert_eq!(std::fs::read_to_string(src.join("twin")).unwrap(), "twin\n");
    }
}

#[test]
fn overlay_writes_are_seen_inside_and_absent_on_the_host_after() {
    for caller in CALLERS {
        let work = TempDir::new("mo-work");
        let src = TempDir::new_in("/var/tmp", "mo-src");
        src.write("keep", "orig\n");
        src.write("gone", "x\n");
        src.write("sub/deep", "deep\n");
        let s = src.path.display();
        let out = run(
            caller,
            &work.path,
            &[
                "--overlay".into(),
                format!("{s}:/tmp/ov"),
                "--overlay".into(),
                s.to_string(),
            ],
            &format!(
                "echo changed > /tmp/ov/keep && echo new > /tmp/ov/new && rm /tmp/ov/gone && \
                 rm -r /tmp/ov/sub && mkdir /tmp/ov/made && echo wrote; \
                 cat /tmp/ov/keep /tmp/ov/new; ls /tmp/ov; \
                 echo same-place > {s}/keep && cat {s}/keep; \
                 grep ' /tmp/ov ' /proc/self/mountinfo"
            ),
        );
        let text = stdout(&out);
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("wrote\nchanged\nnew\nkeep\nmade\nnew\nsame-place\n"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("upperdir=/placed-"),
            "{caller:?}: {}",
            explain(&out)
        );
        // The host, afterwards: exactly as before.
        assert_eq!(std::fs::read_to_string(src.join("keep")).unwrap(), "orig\n");
        assert_eq!(std::fs::read_to_string(src.join("gone")).unwrap(), "x\n");
        assert_eq!(
            std::fs::read_to_string(src.join("sub/deep")).unwrap(),
            "deep\n"
        );
        let mut names: Vec<String> = std::fs::read_dir(&src.path)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["gone", "keep", "sub"], "{caller:?}");
    }
}

#[test]
fn overlay_writes_are_bounded_like_tmp() {
    let caller = CALLERS[1];
    let work = TempDir::new("mq-work");
    let src = TempDir::new_in("/var/tmp", "mq-src");
    src.write("a", "a\n");
    let s = src.path.display();
    let out = run(
        caller,
        &work.path,
        &[
            "--tmp-size".into(),
            "4M".into(),
            "--overlay".into(),
            format!("{s}:/tmp/ov"),
        ],
        "head -c 8M /dev/zero > /tmp/ov/big 2>/dev/null || echo full; \
         rm -f /tmp/ov/big; echo small > /tmp/ov/small && echo small-ok",
    );
    let text = stdout(&out);
    assert!(text.contains("full\nsmall-ok"), "{}", explain(&out));
    assert!(!src.join("big").exists() && !src.join("small").exists());
}

#[test]
fn tmpfs_is_empty_writable_and_hides_the_host_directory() {
    for caller in CALLERS {
        let work = TempDir::new("mt-work");
        let dir = TempDir::new_in("/var/tmp", "mt-dir");
        dir.write("hidden", "host\n");
        let d = dir.path.display();
        let out = run(
            caller,
            &work.path,
            &["--tmpfs".into(), d.to_string()],
            &format!(
                "ls -A {d} | wc -l; echo x > {d}/made && cat {d}/made; \
                 mkdir -p {d}/a/b && echo nested-ok"
            ),
        );
        let text = stdout(&out);
        assert!(
            text.contains("0\nx\nnested-ok"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!dir.join("made").exists());
        assert!(!dir.join("a").exists());
        assert_eq!(
            std::fs::read_to_string(dir.join("hidden")).unwrap(),
            "host\n"
        );
    }
}

#[test]
fn empty_root_has_only_what_was_mounted() {
    for caller in CALLERS {
        let work = TempDir::new("me-work");
        work.write("mine", "mine\n");
        let data = TempDir::new_in("/var/tmp", "me-data");
        data.write("d", "data\n");
        let w = work.path.display();
        let out = run(
            caller,
            &work.path,
            &[
                "--empty-root".into(),
                "--ro-bind".into(),
                "/usr".into(),
                "--bind".into(),
                w.to_string(),
                "--ro-bind".into(),
                format!("{}:/data", data.path.display()),
                "--tmpfs".into(),
                "/scratch".into(),
            ],
            "ls -A /; echo --; cat mine /data/d; echo x > /scratch/s && echo scratch-ok; \
             echo y > new && echo cwd-ok; \
             for p in /etc/passwd /home /var /root /opt; do test -e $p && echo PRESENT:$p; done; \
             true",
        );
        let text = stdout(&out);
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        let (top, rest) = text.split_once("--\n").expect("listing");
        let mut names: Vec<&str> = top.lines().collect();
        names.sort();
        // /etc: the sandbox's own resolver configuration (restricted network's DNS stub).
        let allowed = [
            "bin", "data", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin",
            "scratch", "tmp", "usr",
        ];
        for n in &names {
            assert!(
                allowed.contains(n),
                "{caller:?}: unexpected /{n} in {names:?}"
            );
        }
        for n in ["data", "dev", "proc", "scratch", "tmp", "usr"] {
            assert!(
                names.contains(&n),
                "{caller:?}: /{n} missing from {names:?}"
            );
        }
        assert!(
            rest.starts_with("mine\ndata\nscratch-ok\ncwd-ok\n"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!rest.contains("PRESENT"), "{caller:?}: {}", explain(&out));
        assert_eq!(std::fs::read_to_string(work.join("new")).unwrap(), "y\n");
    }
}

#[test]
fn bind_of_a_repository_keeps_its_git_hooks_protected() {
    for caller in CALLERS {
        let work = TempDir::new("mg-work");
        let repo = TempDir::new_in("/var/tmp", "mg-repo");
        repo.write(".git/HEAD", "ref: refs/heads/main\n");
        repo.write(".git/config", "[core]\n");
        repo.mkdir(".git/hooks");
        repo.write("src.txt", "v1\n");
        let r = repo.path.display();
        let out = run(
            caller,
            &work.path,
            &["--bind".into(), format!("{r}:/tmp/repo")],
            "echo v2 > /tmp/repo/src.txt && echo edit-ok; \
             echo evil > /tmp/repo/.git/hooks/pre-commit && echo HOOK-WRITTEN; \
             mkdir -p /tmp/repo/.vscode && echo '{}' > /tmp/repo/.vscode/tasks.json && echo TASKS-WRITTEN; \
             true",
        );
        let text = stdout(&out);
        assert!(text.contains("edit-ok"), "{caller:?}: {}", explain(&out));
        assert!(
            !text.contains("HOOK-WRITTEN"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            !text.contains("TASKS-WRITTEN"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            std::fs::read_to_string(repo.join("src.txt")).unwrap(),
            "v2\n"
        );
        assert!(!repo.join(".git/hooks/pre-commit").exists(), "{caller:?}");
        assert!(!repo.join(".vscode/tasks.json").exists(), "{caller:?}");
    }
}

/// A bind of a directory below the home directory, at another name: the home's protected paths
/// in it are protected at that name too (git's configuration, a shell's startup file, an
/// autostart entry), judged by what git and the home do on the host afterwards.
#[test]
fn a_home_subdirectory_bound_elsewhere_keeps_the_homes_protections() {
    for caller in CALLERS {
        let work = TempDir::new("mhs-work");
        work.mkdir(".config");
        work.mkdir(".local/bin");
        let w = work.path.display();
        let marker = work.join("PWNED");
        let out = run(
            caller,
            &work.path,
            &[
                "--bind".into(),
                format!("{w}/.config:/tmp/c"),
                "--bind".into(),
                format!("{w}/.local:/tmp/l"),
            ],
            &format!(
                "mkdir -p /tmp/c/git && printf '[core]\\n\\tfsmonitor = touch {m}\\n' > /tmp/c/git/config && echo GITCONFIG; \
                 mkdir -p /tmp/c/fish && echo 'touch {m}' > /tmp/c/fish/config.fish && echo FISH; \
                 mkdir -p /tmp/c/autostart && echo x > /tmp/c/autostart/x.desktop && echo AUTOSTART; \
                 echo 'touch {m}' > /tmp/l/bin/ls && echo LOCALBIN; \
                 echo ok > /tmp/c/ordinary.txt && echo ordinary-ok; true",
                m = marker.display()
            ),
        );
        let text = stdout(&out);
        assert!(
            text.contains("ordinary-ok"),
            "{caller:?}: {}",
            explain(&out)
        );
        for planted in ["GITCONFIG", "FISH", "AUTOSTART", "LOCALBIN"] {
            assert!(
                !text.contains(planted),
                "{caller:?}: {planted}: {}",
                explain(&out)
            );
        }
        assert_eq!(
            std::fs::read_to_string(work.join(".config/ordinary.txt")).unwrap(),
            "ok\n"
        );
        for p in [
            ".config/git",
            ".config/fish",
            ".config/autostart",
            ".local/bin/ls",
        ] {
            assert!(!work.join(p).exists(), "{caller:?}: {p} reached the host");
        }
        // What the host runs afterwards: git, with this home (its configuration would name the
        // planted command).
        let _ = std::process::Command::new("git")
            .args(["-C", &w.to_string(), "status"])
            .env("HOME", &work.path)
            .env("XDG_CONFIG_HOME", work.join(".config"))
            .output()
            .expect("git");
        assert!(!marker.exists(), "{caller:?}: planted code ran on the host");
    }
}

/// The target of the working directory's protected symlink (`.envrc` -> a file elsewhere),
/// bound writable at another name: refused there too; the same bind's other files are written.
#[test]
fn a_protected_symlinks_target_bound_elsewhere_stays_protected() {
    for caller in CALLERS {
        let work = TempDir::new("mls-work");
        let dot = TempDir::new_in("/var/tmp", "mls-dot");
        dot.write("envrc", "# safe\n");
        std::os::unix::fs::symlink(dot.join("envrc"), work.join(".envrc")).unwrap();
        let out = run(
            caller,
            &work.path,
            &["--bind".into(), format!("{}:/tmp/d", dot.path.display())],
            "echo 'touch /tmp/PWNED' >> /tmp/d/envrc && echo ENVRC-WRITTEN; \
             echo ok > /tmp/d/other && echo other-ok; true",
        );
        let text = stdout(&out);
        assert!(text.contains("other-ok"), "{caller:?}: {}", explain(&out));
        assert!(
            !text.contains("ENVRC-WRITTEN"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            std::fs::read_to_string(dot.join("envrc")).unwrap(),
            "# safe\n",
            "{caller:?}"
        );
        assert_eq!(std::fs::read_to_string(dot.join("other")).unwrap(), "ok\n");
    }
}

#[test]
fn mounts_that_cannot_be_placed_safely_are_refused_naming_the_flag_and_the_fix() {
    let caller = CALLERS[1];
    let work = TempDir::new("mx-work");
    let src = TempDir::new_in("/var/tmp", "mx-src");
    src.write("f", "f\n");
    let other = TempDir::new_in("/var/tmp", "mx-other");
    std::os::unix::fs::symlink("/etc", other.join("link")).unwrap();
    let s = src.path.display().to_string();
    let o = other.path.display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--bind".into(),
                format!("{s}:/tmp/x"),
                "--ro-bind".into(),
                format!("{o}:/tmp/x"),
            ],
            "is also the target of --bind",
        ),
        (
            vec!["--bind".into(), format!("{s}/missing:/tmp/x")],
            "create it first",
        ),
        (vec!["--ro-bind".into(), format!("{s}:/proc/x")], "/proc"),
        (vec!["--bind".into(), format!("{s}:/dev/shm")], "/dev"),
        (vec!["--bind".into(), format!("{s}:/")], "--empty-root"),
        (vec!["--bind".into(), "/:/tmp/r".into()], "the host's root"),
        (
            vec!["--ro-bind".into(), "/:/tmp/r".into()],
            "the host's root",
        ),
        (vec!["--tmpfs".into(), format!("{o}/link/x")], "symlink"),
        (vec!["--bind".into(), format!("{s}:{o}/new")], "mkdir -p"),
        (
            vec!["--overlay".into(), format!("{s}/f:/tmp/f")],
            "not a directory",
        ),
        (vec!["--bind".into(), format!("{s}/f:{o}")], "a directory"),
        (
            vec![
                "--tmpfs".into(),
                "/tmp".into(),
                "--bind".into(),
                format!("{s}:{}", work.path.display()),
            ],
            "would hide",
        ),
        (
            vec![
                "--bind".into(),
                format!(
                    "{s}:{}",
                    integration::runtime_dir(caller)
                        .join("sandbox-launch")
                        .display()
                ),
            ],
            "control",
        ),
    ];
    for (opts, says) in cases {
        let out = run(caller, &work.path, &opts, "echo STARTED");
        assert_eq!(out.status.code(), Some(111), "{opts:?}: {}", explain(&out));
        assert!(!stdout(&out).contains("STARTED"), "{opts:?}");
        let err = stderr(&out);
        assert!(err.contains(says), "{opts:?}: want {says:?}: {err}");
        assert!(
            err.contains(opts[opts.len() - 2].as_str()) || err.contains(opts[0].as_str()),
            "{opts:?}: {err}"
        );
    }
    assert!(!other.join("new").exists());
}

#[test]
fn check_shows_every_mount() {
    let caller = CALLERS[1];
    let work = TempDir::new("mc-work");
    let src = TempDir::new_in("/var/tmp", "mc-src");
    let s = src.path.display().to_string();
    let out = integration::command(
        caller,
        &work.path,
        &[
            "check",
            "--bind",
            &format!("{s}:/tmp/b"),
            "--ro-bind",
            &format!("{s}:/tmp/r"),
            "--overlay",
            &format!("{s}:/tmp/o"),
            "--tmpfs",
            "/tmp/t",
        ],
    )
    .output()
    .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{}", explain(&out));
    for want in [
        format!("--bind {s}:/tmp/b"),
        format!("--ro-bind {s}:/tmp/r"),
        format!("--overlay {s}:/tmp/o"),
        "--tmpfs /tmp/t".into(),
        "persistence protections apply".into(),
        "read-only for every user inside".into(),
        // The writable bind is a writable tree of the persistence model, where it is inside.
        "\n    /tmp/b\n".into(),
    ] {
        assert!(text.contains(&want), "{want}: {text}");
    }
}

#[test]
fn deny_read_inside_a_bind_source_is_masked_at_its_target_too() {
    for caller in CALLERS {
        let work = TempDir::new("md-work");
        let src = TempDir::new_in("/var/tmp", "md-src");
        let secret = src.write("secret/token", "s3cr3t\n");
        src.write("open", "open\n");
        let s = src.path.display();
        let out = run(
            caller,
            &work.path,
            &[
                "--deny-read".into(),
                secret.display().to_string(),
                "--ro-bind".into(),
                format!("{s}:/tmp/view"),
                "--overlay".into(),
                format!("{s}:/tmp/ov"),
            ],
            "cat /tmp/view/open; cat /tmp/view/secret/token /tmp/ov/secret/token 2>/dev/null; \
             echo done",
        );
        let text = stdout(&out);
        assert!(text.contains("open\n"), "{caller:?}: {}", explain(&out));
        assert!(text.contains("done"), "{caller:?}: {}", explain(&out));
        assert!(!text.contains("s3cr3t"), "{caller:?}: {}", explain(&out));
    }
}

#[test]
fn started_as_root_a_writable_bind_of_a_root_owned_tree_keeps_its_owner_on_the_host() {
    if !integration::is_root() {
        return; // only root can start the sandbox as root; the unprivileged twin is above
    }
    let work = TempDir::new("mi-work");
    let src = TempDir::new_in("/var/tmp", "mi-src");
    std::os::unix::fs::chown(&src.path, Some(0), Some(0)).unwrap();
    let out = run(
        integration::Caller::Invoker,
        &work.path,
        &["--bind".into(), format!("{}:/tmp/data", src.path.display())],
        "id -u; echo made > /tmp/data/made && echo wrote",
    );
    assert!(stdout(&out).contains("65534\nwrote"), "{}", explain(&out));
    let meta = std::fs::metadata(src.join("made")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (meta.uid(), meta.gid()),
        (0, 0),
        "the host's owner, not the sandbox user's"
    );
}

#[test]
fn the_sandboxs_own_files_are_never_created_in_a_bound_host_tree() {
    for caller in CALLERS {
        let work = TempDir::new("mf-work");
        let etc = TempDir::new_in("/var/tmp", "mf-etc");
        // restricted network (the default) puts its resolver configuration at /etc/resolv.conf.
        let out = run(
            caller,
            &work.path,
            &["--bind".into(), format!("{}:/etc", etc.path.display())],
            "echo STARTED",
        );
        let in_etc = std::fs::symlink_metadata("/etc/resolv.conf").is_ok_and(|m| m.is_file());
        if in_etc {
            assert_eq!(
                out.status.code(),
                Some(113),
                "{caller:?}: {}",
                explain(&out)
            );
            assert!(
                stderr(&out).contains("would write on the host"),
                "{caller:?}: {}",
                explain(&out)
            );
        } // else it goes where the host's link leads (/run/...), a tmpfs of the sandbox
        assert!(
            std::fs::read_dir(&etc.path).unwrap().next().is_none(),
            "{caller:?}: nothing may appear in the host's tree"
        );
        // The twin: with the file there, the sandbox's own covers it inside, the host's stays.
        etc.write("resolv.conf", "nameserver 192.0.2.1\n");
        let out = run(
            caller,
            &work.path,
            &["--bind".into(), format!("{}:/etc", etc.path.display())],
            "cat /etc/resolv.conf",
        );
        assert!(out.status.success(), "{caller:?}: {}", explain(&out));
        assert!(
            !stdout(&out).contains("192.0.2.1"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            std::fs::read_to_string(etc.join("resolv.conf")).unwrap(),
            "nameserver 192.0.2.1\n"
        );
    }
}

#[test]
fn a_mount_the_kernel_only_pretends_to_make_stops_the_launch() {
    for caller in CALLERS {
        let work = TempDir::new("mk-work");
        let src = TempDir::new_in("/var/tmp", "mk-src");
        src.write("f", "f\n");
        let ro = format!("{}:/tmp/ro", src.path.display());
        let launcher = integration::launcher().to_str().unwrap().to_string();
        // move_mount "succeeds" without doing anything: every placed mount (the private /tmp
        // first) would be missing.
        let args = [
            "--errno",
            "move_mount=0",
            "--",
            &launcher,
            "whole-process",
            "--ro-bind",
            &ro,
            "--",
            "/bin/sh",
            "-c",
            "echo STARTED",
        ];
        let out = integration::command_with(integration::fault_inject(), caller, &work.path, &args)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(113),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!stdout(&out).contains("STARTED"), "{caller:?}");
        assert!(
            stderr(&out).contains("not in place after the kernel reported it done"),
            "{caller:?}: {}",
            explain(&out)
        );
        // The twin: the same launch without the fault runs.
        let out = run(
            caller,
            &work.path,
            &["--ro-bind".into(), ro.clone()],
            "cat /tmp/ro/f",
        );
        assert_eq!(stdout(&out), "f\n", "{caller:?}: {}", explain(&out));
    }
}

#[test]
fn a_policy_files_mounts_apply_as_the_flags_do() {
    for caller in CALLERS {
        let work = TempDir::new("mp-work");
        let data = TempDir::new_in("/var/tmp", "mp-data");
        data.write("d", "data\n");
        let policy = work.write(
            "policy.yaml",
            &format!(
                "version: 1\n\
                 filesystem_policy:\n  include_workdir: true\n  read_only: [/usr]\n\
                 mounts:\n  - ro_bind: {}:/data\n  - tmpfs: /scratch\n",
                data.path.display()
            ),
        );
        let out = run(
            caller,
            &work.path,
            &["--policy".into(), policy.display().to_string()],
            "cat /data/d; echo x > /data/x || echo ro-refused; echo s > /scratch/s && echo \
             scratch-ok; test -e /etc/passwd && echo PRESENT; true",
        );
        let text = stdout(&out);
        assert!(
            text.contains("data\nro-refused\nscratch-ok\n"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!text.contains("PRESENT"), "{caller:?}: {}", explain(&out));
        assert!(!data.join("x").exists());
    }
}
