//! The persistence model, judged on the host: every way the program inside tries to plant code
//! that the host runs later (git hooks and config by every route, nested repositories, shell
//! start-up, editor and agent configuration) leaves nothing that runs — after the sandbox, the
//! host runs what it would (`git status`, `git commit`, a login shell with that HOME) and the
//! marker the planted code would write does not exist. Each with its allowed twin: everything
//! git does in ordinary work succeeds inside.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use integration::{explain, sh, stdout, Caller, TempDir, CALLERS};

/// Run git on the host the way a user would afterwards: with no configuration of its own (so
/// only what the repository holds runs), trusting directories owned by the sandbox's user.
fn host_git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", "/nonexistent")
        .env("GIT_AUTHOR_NAME", "host")
        .env("GIT_AUTHOR_EMAIL", "host@example.com")
        .env("GIT_COMMITTER_NAME", "host")
        .env("GIT_COMMITTER_EMAIL", "host@example.com")
        .output()
        .expect("run git")
}

fn host_git_ok(dir: &Path, args: &[&str]) -> String {
    let out = host_git(dir, args);
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        explain(&out)
    );
    stdout(&out)
}

/// Markers that planted code would have written, anywhere below `dir`.
fn markers(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with("PWNED") {
                found.push(p.clone());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(p);
            }
        }
    }
    found
}

/// A repository on the host with one commit, and what the tests need around it: a nested
/// repository `sub` and a bare `origin.git`, all owned by the sandbox's user.
fn repository(tag: &str) -> TempDir {
    let work = TempDir::new_in("/var/tmp", tag);
    host_git_ok(&work.path, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("a"), "a\n").unwrap();
    host_git_ok(&work.path, &["add", "a"]);
    host_git_ok(&work.path, &["commit", "-qm", "first"]);
    host_git_ok(&work.path, &["init", "-q", "-b", "main", "sub"]);
    host_git_ok(
        &work.join("sub"),
        &["commit", "-q", "--allow-empty", "-m", "sub"],
    );
    host_git_ok(&work.path, &["init", "-q", "--bare", "origin.git"]);
    work.give_to_sandbox_user(&work.path);
    work
}

/// Inside: `try NAME CMD...` prints `refused:NAME` when the attempt fails and `PLANTED:NAME`
/// when it succeeds; planted code would `touch $M-<what>`.
const PRELUDE: &str = r##"
M="$PWD/PWNED"
try() { n=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "PLANTED:$n"; else echo "refused:$n"; fi; }
hook="#!/bin/sh
touch $M-hook"
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@e GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@e
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
"##;

#[test]
fn git_does_all_its_ordinary_work_inside() {
    for caller in CALLERS {
        let work = repository("git-twins");
        let script = format!(
            r##"{PRELUDE}
ok() {{ if "$@" >/dev/null 2>&1; then echo "ok:$*"; else echo "FAILED:$*"; fi; }}
echo more >> a; ok git add a; ok git commit -qm inside
ok git branch feat; ok git checkout -q feat; echo feat >> a; ok git commit -qam feat
ok git checkout -q main; ok git merge -q --no-edit feat
ok git checkout -q -b topic HEAD~1; echo c > c; ok git add c; ok git commit -qm c
ok git rebase -q main
echo s >> a; ok git stash -q; ok git stash pop -q; ok git commit -qam stashed
ok git checkout -q -b side; echo p > p; ok git add p; ok git commit -qm picked
ok git checkout -q topic; ok git cherry-pick side
ok git tag v1; ok git tag -a v2 -m annotated
ok git gc -q
ok git remote add origin "$PWD/origin.git"; ok git push -q origin topic
ok git branch -u origin/topic
ok git config user.email in@side
ok git clone -q origin.git cloned
ok git init -q fresh
ok git -C sub commit -q --allow-empty -m nested
ok git -C fresh commit -q --allow-empty -m fresh
ok git reset -q --hard HEAD~1
"##
        );
        let out = sh(caller, &work.path, &[], &script);
        let text = stdout(&out);
        assert!(!text.contains("FAILED"), "{caller:?}: {}", explain(&out));
        assert_eq!(
            text.matches("ok:").count(),
            31,
            "{caller:?}: {}",
            explain(&out)
        );
        // On the host: the work is there, and ordinary git keeps working on it.
        let log = host_git_ok(&work.path, &["log", "--all", "--format=%s"]);
        for msg in ["inside", "feat", "c", "stashed"] {
            assert!(log.lines().any(|l| l == msg), "{caller:?}: {msg}: {log}");
        }
        assert_eq!(
            host_git_ok(&work.path, &["config", "user.email"]).trim(),
            "in@side"
        );
        assert_eq!(
            host_git_ok(&work.path, &["config", "branch.topic.remote"]).trim(),
            "origin"
        );
        host_git_ok(&work.join("origin.git"), &["rev-parse", "refs/heads/topic"]);
        host_git_ok(&work.join("cloned"), &["status", "--short"]);
        host_git_ok(&work.join("fresh"), &["log", "--oneline"]);
        host_git_ok(&work.join("sub"), &["log", "--oneline"]);
        host_git_ok(&work.path, &["commit", "-q", "--allow-empty", "-m", "host"]);
        assert_eq!(markers(&work.path), Vec::<PathBuf>::new());
    }
}

/// What the host runs afterwards in each repository the attempts aimed at.
fn run_git_as_the_host_would(caller: Caller, work: &Path, repos: &[&str]) {
    for repo in repos {
        let dir = work.join(repo);
        if !dir.exists() {
            continue;
        }
        for args in [
            &["status"][..],
            &["commit", "-q", "--allow-empty", "-m", "host"],
            &["checkout", "-q", "-b", "host-branch"],
        ] {
            // Whether git succeeds there does not matter; what it runs does.
            let _ = host_git(&dir, args);
        }
        let _ = caller;
    }
}

#[test]
fn nothing_git_runs_can_be_planted_by_any_route() {
    for caller in CALLERS {
        let work = repository("git-attacks");
        let script = format!(
            r##"{PRELUDE}
printf '%s\n' "$hook" > h; chmod +x h
try hook-create sh -c 'printf "%s\n" "$hook" > .git/hooks/pre-commit'
try hook-rename mv h .git/hooks/pre-commit
try hook-link ln h .git/hooks/post-checkout
try hook-symlink ln -s ../../h .git/hooks/pre-commit
try hook-nested sh -c 'printf "%s\n" "$hook" > sub/.git/hooks/pre-commit'
try hook-nested-mkdir sh -c 'mkdir -p sub/.git/hooks && cp h sub/.git/hooks/pre-commit'
try fsmonitor-append sh -c "printf '[core]\n\tfsmonitor = touch $M-fsmonitor\n' >> .git/config"
try fsmonitor-truncate sh -c ': > sub/.git/config'
try fsmonitor-git-config git config core.fsmonitor "touch $M-fsmonitor"
try fsmonitor-nested git -C sub config core.fsmonitor "touch $M-fsmonitor"
try hookspath git config core.hooksPath "$PWD"
try alias git config alias.st "!touch $M-alias"
try include sh -c "printf '[core]\n\tfsmonitor = touch $M-include\n' > inc; git config include.path $PWD/inc"
try config-rename sh -c "cp .git/config c2; printf '[core]\n\tfsmonitor = touch $M-fsmonitor\n' >> c2; mv c2 .git/config"
try config-lock sh -c "cp .git/config .git/config.lock; printf '[core]\n\tfsmonitor = touch $M-fsmonitor\n' >> .git/config.lock; mv .git/config.lock .git/config"
try config-proc sh -c "exec 3<.git/config; printf '[core]\n\tfsmonitor = touch $M-fsmonitor\n' >> /proc/self/fd/3"
mkdir -p evil/objects evil/refs evil/hooks; cp h evil/hooks/pre-commit
printf '[core]\n\tfsmonitor = touch %s-commondir\n' "$M" > evil/config
try commondir sh -c 'echo ../evil > .git/commondir'
try commondir-fresh sh -c 'mkdir -p nogit/.git && echo "ref: refs/heads/main" > nogit/.git/HEAD && echo ../../evil > nogit/.git/commondir'
try evil-becomes-repo sh -c 'echo "ref: refs/heads/main" > evil/HEAD'
try gitlink sh -c 'mkdir -p linked && echo "gitdir: ../evil" > linked/.git'
try dotgit-rename sh -c 'mkdir -p fake/objects fake/refs fake/hooks && cp h fake/hooks/pre-commit && echo "ref: refs/heads/main" > fake/HEAD.txt && mkdir -p other && mv fake other/.git'
try modules sh -c 'mkdir -p .git/modules/x'
try worktrees sh -c 'mkdir -p .git/worktrees/x'
try info-attributes sh -c 'echo "* filter=x" > .git/info/attributes'
"##
        );
        let out = sh(caller, &work.path, &[], &script);
        let text = stdout(&out);
        assert!(!text.contains("PLANTED"), "{caller:?}: {}", explain(&out));
        assert_eq!(
            text.matches("refused:").count(),
            24,
            "{caller:?}: {}",
            explain(&out)
        );
        run_git_as_the_host_would(
            caller,
            &work.path,
            &[".", "sub", "nogit", "evil", "linked", "other"],
        );
        assert_eq!(
            markers(&work.path),
            Vec::<PathBuf>::new(),
            "{caller:?}: planted code ran on the host: {}",
            explain(&out)
        );
        assert!(!work.join(".git/hooks/pre-commit").exists());
        assert!(!work.join(".git/commondir").exists());
    }
}

#[test]
fn surfaces_at_any_depth_and_in_a_writable_home_cannot_be_planted() {
    // The working directory is also HOME here (the harness sets HOME to it), so the home's
    // surfaces are in a writable tree too. Each attempt is refused; the allowed twins land.
    for caller in CALLERS {
        let work = TempDir::new_in("/var/tmp", "surfaces");
        let script = format!(
            r##"{PRELUDE}
try envrc-deep sh -c 'mkdir -p a/b && echo "touch $M-envrc" > a/b/.envrc'
try vscode-deep mkdir -p x/y/.vscode
try claude-settings sh -c 'mkdir -p p/.claude && echo "{{}}" > p/.claude/settings.local.json'
try claude-dir-symlink sh -c 'mkdir -p q elsewhere && ln -s ../elsewhere q/.claude'
try factory-droids mkdir -p r/.factory/droids
try codex-config sh -c 'mkdir -p .codex && echo "notify = [\"touch\", \"$M-codex\"]" > .codex/config.toml'
try mcp-json sh -c 'echo "{{}}" > sub/.mcp.json'
try husky mkdir .husky
try precommit-config sh -c 'echo "repos: []" > .pre-commit-config.yaml'
try bashrc sh -c "echo 'touch $M-bashrc' >> .bashrc"
try profile sh -c "echo 'touch $M-profile' > .profile"
try ssh mkdir .ssh
try gitconfig sh -c "printf '[core]\n\tfsmonitor = touch $M-global\n' > .gitconfig"
try local-bin sh -c 'mkdir -p .local/bin && printf "#!/bin/sh\ntouch $M-ls\n" > .local/bin/ls'
mkdir -p deep && echo ok:deep
try bind-envrc python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("deep/.envrc")'
mkdir -p p/.claude/notes && echo ok > p/.claude/notes/n.md && echo ok:claude-notes
echo example > .envrc.example && echo ok:envrc-example
mkdir -p .codex/sessions && echo s > .codex/sessions/s.jsonl && echo ok:codex-sessions
"##
        );
        std::fs::create_dir_all(work.join("sub")).unwrap();
        work.give_to_sandbox_user(&work.path);
        let out = sh(caller, &work.path, &["-v"], &script);
        let text = stdout(&out);
        assert!(!text.contains("PLANTED"), "{caller:?}: {}", explain(&out));
        assert_eq!(
            text.matches("refused:").count(),
            15,
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            text.matches("ok:").count(),
            4,
            "{caller:?}: {}",
            explain(&out)
        );
        // Each refusal is said on stderr with -v, naming the path and the surface.
        let err = integration::stderr(&out);
        assert!(
            err.contains("refused: create") && err.contains("a/b/.envrc: direnv"),
            "{caller:?}: {}",
            explain(&out)
        );
        // On the host: a shell with this HOME, git with this HOME's configuration.
        for args in [&["-i", "-c", "true"][..], &["-l", "-c", "true"]] {
            let _ = Command::new("bash")
                .args(args)
                .current_dir(&work.path)
                .env("HOME", &work.path)
                .stdin(std::process::Stdio::null())
                .output();
        }
        let _ = Command::new("git")
            .args(["-c", "safe.directory=*", "status"])
            .current_dir(&work.path)
            .env("HOME", &work.path)
            .output();
        assert_eq!(markers(&work.path), Vec::<PathBuf>::new(), "{caller:?}");
        for p in [
            "a/b/.envrc",
            "x/y/.vscode",
            "p/.claude/settings.local.json",
            "q/.claude",
            "r/.factory/droids",
            ".codex/config.toml",
            "sub/.mcp.json",
            ".bashrc",
            ".ssh",
            "deep/.envrc",
        ] {
            assert!(
                std::fs::symlink_metadata(work.join(p)).is_err(),
                "{caller:?}: {p} exists on the host"
            );
        }
        assert!(work.join("p/.claude/notes/n.md").exists());
        assert!(work.join(".codex/sessions/s.jsonl").exists());
    }
}

/// A directory `parent` on the host holding a repository `parent/proj` with protected files
/// existing at launch: `.envrc`, `.vscode/tasks.json`, `.git/hooks`.
fn project_in_a_parent(tag: &str) -> (TempDir, PathBuf) {
    let parent = TempDir::new_in("/var/tmp", tag);
    let proj = parent.join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    host_git_ok(&proj, &["init", "-q", "-b", "main"]);
    host_git_ok(&proj, &["commit", "-q", "--allow-empty", "-m", "first"]);
    std::fs::write(proj.join(".envrc"), "export SAFE=1\n").unwrap();
    std::fs::create_dir_all(proj.join(".vscode")).unwrap();
    std::fs::write(proj.join(".vscode/tasks.json"), "{}\n").unwrap();
    parent.give_to_sandbox_user(&parent.path);
    (parent, proj)
}

/// What the host runs afterwards in `proj`: git, direnv's sourcing of `.envrc`.
fn host_runs(proj: &Path) {
    run_git_as_the_host_would(integration::Caller::Invoker, proj, &["."]);
    let _ = Command::new("sh")
        .args(["-c", ". ./.envrc"])
        .current_dir(proj)
        .output();
}

const PLANT_IN_PROJECT: &str = r##"
try envrc-append sh -c "echo 'touch $M-envrc' >> .envrc"
try envrc-replace sh -c "rm -f .envrc; echo 'touch $M-envrc' > .envrc"
try envrc-rename-over sh -c "echo 'touch $M-envrc' > e2 && mv -f e2 .envrc"
try vscode-rename-over sh -c "echo '{\"tasks\":[\"touch $M-vscode\"]}' > t2 && mv -f t2 .vscode/tasks.json"
try vscode-task sh -c "echo '{\"tasks\":[\"touch $M-vscode\"]}' > .vscode/tasks.json"
try hook sh -c 'printf "%s\n" "$hook" > .git/hooks/pre-commit'
try fsmonitor git config core.fsmonitor "touch $M-fsmonitor"
try swap-git sh -c 'mv .git .git-moved && mkdir -p .git/hooks'
"##;

#[test]
fn a_writable_parent_keeps_every_protection_of_the_working_directory_inside_it() {
    // `--allow-write` of the project's parent (a writable ~ or ~/src) used to drop every
    // protection of the working directory inside it.
    for caller in CALLERS {
        let (parent, proj) = project_in_a_parent("parent");
        let parent_path = parent.path.to_str().unwrap().to_string();
        let script = format!(
            "{PRELUDE}{PLANT_IN_PROJECT}
echo ok > ../beside.txt && echo ok:beside
echo ok > file && git add file && git commit -qm inside && echo ok:commit
"
        );
        let out = sh(caller, &proj, &["--allow-write", &parent_path], &script);
        let text = stdout(&out);
        assert!(!text.contains("PLANTED"), "{caller:?}: {}", explain(&out));
        assert_eq!(
            text.matches("refused:").count(),
            8,
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            text.matches("ok:").count(),
            2,
            "{caller:?}: {}",
            explain(&out)
        );
        host_runs(&proj);
        assert_eq!(markers(&parent.path), Vec::<PathBuf>::new(), "{caller:?}");
        assert_eq!(
            std::fs::read_to_string(proj.join(".envrc")).unwrap(),
            "export SAFE=1\n"
        );
        assert_eq!(
            std::fs::read_to_string(proj.join(".vscode/tasks.json")).unwrap(),
            "{}\n"
        );
        assert!(parent.join("beside.txt").exists());
        assert!(host_git_ok(&proj, &["log", "--format=%s"]).contains("inside"));
    }
}

#[test]
fn a_protected_path_that_is_a_symlink_protects_where_it_leads() {
    // `.envrc -> ../dotfiles/envrc`, `.git/hooks -> ../hooks.real`, and (HOME is the working
    // directory here) a stow-managed `.bashrc -> dotfiles/bashrc`: neither can the link be
    // replaced nor what it points at be written, by the link's name or its own.
    for caller in CALLERS {
        let (parent, proj) = project_in_a_parent("symlinks");
        std::fs::create_dir_all(parent.join("dotfiles")).unwrap();
        std::fs::write(parent.join("dotfiles/envrc"), "export SAFE=1\n").unwrap();
        std::fs::remove_file(proj.join(".envrc")).unwrap();
        std::os::unix::fs::symlink("../dotfiles/envrc", proj.join(".envrc")).unwrap();
        std::fs::create_dir_all(proj.join("hooks.real")).unwrap();
        std::fs::remove_dir_all(proj.join(".git/hooks")).unwrap();
        std::os::unix::fs::symlink("../hooks.real", proj.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(proj.join("dotfiles")).unwrap();
        std::fs::write(proj.join("dotfiles/bashrc"), "# mine\n").unwrap();
        std::os::unix::fs::symlink("dotfiles/bashrc", proj.join(".bashrc")).unwrap();
        // A stow-managed `~/.config -> dotfiles/.config` (the link named as its target) with no
        // `git/` in it yet: git's global configuration would be created through the link.
        std::fs::create_dir_all(proj.join("dotfiles/.config")).unwrap();
        std::os::unix::fs::symlink("dotfiles/.config", proj.join(".config")).unwrap();
        parent.give_to_sandbox_user(&parent.path);
        let parent_path = parent.path.to_str().unwrap().to_string();
        let script = format!(
            r##"{PRELUDE}
try through-link sh -c "echo 'touch $M-envrc' >> .envrc"
try target-directly sh -c "echo 'touch $M-envrc' >> ../dotfiles/envrc"
try replace-link sh -c "rm .envrc && echo 'touch $M-envrc' > .envrc"
try relink sh -c "ln -sfn dotfiles/bashrc .envrc"
try hooks-by-name sh -c 'printf "%s\n" "$hook" > .git/hooks/pre-commit'
try hooks-by-target sh -c 'printf "%s\n" "$hook" > hooks.real/pre-commit'
try bashrc-target sh -c "echo 'touch $M-bashrc' >> dotfiles/bashrc"
try bashrc-link sh -c "echo 'touch $M-bashrc' >> .bashrc"
try xdg-git-by-name sh -c 'mkdir -p .config/git && printf "[core]\n\tfsmonitor = touch $M-xdg\n" > .config/git/config'
try xdg-git-by-target sh -c 'mkdir -p dotfiles/.config/git && printf "[core]\n\tfsmonitor = touch $M-xdg\n" > dotfiles/.config/git/config'
echo fine > dotfiles/other && echo ok:twin
mkdir -p .config/other && echo ok:xdg-twin
"##
        );
        let out = sh(caller, &proj, &["--allow-write", &parent_path], &script);
        let text = stdout(&out);
        assert!(!text.contains("PLANTED"), "{caller:?}: {}", explain(&out));
        assert_eq!(
            text.matches("refused:").count(),
            10,
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("ok:twin"), "{caller:?}: {}", explain(&out));
        assert!(
            text.contains("ok:xdg-twin"),
            "{caller:?}: {}",
            explain(&out)
        );
        host_runs(&proj);
        // git with this HOME reads `~/.config/git/config` (through the link).
        let _ = Command::new("git")
            .args(["-c", "safe.directory=*", "status"])
            .current_dir(&proj)
            .env("HOME", &proj)
            .env_remove("XDG_CONFIG_HOME")
            .output();
        let _ = Command::new("bash")
            .args(["-i", "-c", "true"])
            .env("HOME", &proj)
            .stdin(std::process::Stdio::null())
            .output();
        assert_eq!(markers(&parent.path), Vec::<PathBuf>::new(), "{caller:?}");
        // The link may be removed (removal is allowed), never replaced or written through.
        if let Ok(target) = std::fs::read_link(proj.join(".envrc")) {
            assert_eq!(target, Path::new("../dotfiles/envrc"));
        } else {
            assert!(std::fs::symlink_metadata(proj.join(".envrc")).is_err());
        }
        assert_eq!(
            std::fs::read_to_string(parent.join("dotfiles/envrc")).unwrap(),
            "export SAFE=1\n"
        );
        assert_eq!(
            std::fs::read_to_string(proj.join("dotfiles/bashrc")).unwrap(),
            "# mine\n"
        );
        assert!(!proj.join("dotfiles/.config/git/config").exists());
    }
}

#[test]
fn deny_write_holds_for_a_missing_path_and_for_a_symlink() {
    for caller in CALLERS {
        let work = TempDir::new_in("/var/tmp", "denymissing");
        work.write("real/conf", "orig\n");
        std::os::unix::fs::symlink("real", work.join("lnk")).unwrap();
        work.give_to_sandbox_user(&work.path);
        let missing = work.join("later/config").to_str().unwrap().to_string();
        let lnk = work.join("lnk").to_str().unwrap().to_string();
        let out = sh(
            caller,
            &work.path,
            &["--deny-write", &missing, "--deny-write", &lnk],
            &format!(
                "{PRELUDE}
try create-missing sh -c 'mkdir -p later && echo x > later/config'
try missing-as-dir sh -c 'mkdir -p later/config'
try write-target sh -c 'echo x >> real/conf'
try replace-link sh -c 'rm lnk && mkdir lnk'
try through-link sh -c 'echo x > lnk/new'
mkdir -p later/other && echo ok > later/other/f && echo ok:twin
"
            ),
        );
        let text = stdout(&out);
        assert!(!text.contains("PLANTED"), "{caller:?}: {}", explain(&out));
        assert_eq!(
            text.matches("refused:").count(),
            5,
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("ok:twin"), "{caller:?}: {}", explain(&out));
        assert!(!work.join("later/config").exists());
        assert_eq!(
            std::fs::read_to_string(work.join("real/conf")).unwrap(),
            "orig\n"
        );
        assert!(!work.join("real/new").exists());
    }
}

#[test]
fn an_explicit_allow_write_of_a_protected_path_overrides_it_and_says_what_can_run() {
    for caller in CALLERS {
        let (parent, proj) = project_in_a_parent("override");
        let vscode = proj.join(".vscode").to_str().unwrap().to_string();
        let out = sh(
            caller,
            &proj,
            &["--allow-write", &vscode],
            &format!(
                "{PRELUDE}
echo '{{\"new\":1}}' > .vscode/tasks.json && echo ok:override
try envrc sh -c \"echo 'touch $M-envrc' >> .envrc\"
"
            ),
        );
        let text = stdout(&out);
        assert!(
            text.contains("ok:override"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(
            text.contains("refused:envrc"),
            "{caller:?}: {}",
            explain(&out)
        );
        let err = integration::stderr(&out);
        assert!(
            err.contains(&format!("--allow-write {vscode}: a protected path"))
                && err.contains("can run on the host later"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            std::fs::read_to_string(proj.join(".vscode/tasks.json")).unwrap(),
            "{\"new\":1}\n"
        );
        // `check` shows the same override.
        let check = integration::command(caller, &proj, &["check", "--allow-write", &vscode])
            .output()
            .unwrap();
        let shown = stdout(&check);
        assert!(
            shown.contains("overrides (explicit --allow-write of a protected path)")
                && shown.contains(&vscode),
            "{}",
            explain(&check)
        );
        drop(parent);
    }
}

#[test]
fn core_hooks_path_includes_and_path_directories_in_a_writable_tree_are_protected() {
    for caller in CALLERS {
        let work = repository("hookspath");
        std::fs::write(work.join("extra.inc"), "[user]\n\tname = x\n").unwrap();
        host_git_ok(&work.path, &["config", "core.hooksPath", "githooks"]);
        host_git_ok(&work.path, &["config", "include.path", "../extra.inc"]);
        std::fs::create_dir_all(work.join("bin")).unwrap();
        std::fs::create_dir_all(work.join("tools")).unwrap();
        std::fs::write(work.join("tools/helper"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("../tools/helper", work.join("bin/helper")).unwrap();
        work.give_to_sandbox_user(&work.path);
        let path = format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            work.join("bin").display()
        );
        let script = format!(
            r##"{PRELUDE}
try hookspath-hook sh -c 'mkdir -p githooks && printf "%s\n" "$hook" > githooks/pre-commit'
try include sh -c "printf '[core]\n\tfsmonitor = touch $M-include\n' >> extra.inc"
try path-dir sh -c "printf '#!/bin/sh\ntouch $M-git\n' > bin/git"
try path-link-target sh -c "echo 'touch $M-helper' >> tools/helper"
echo ok > tools/other && echo ok:twin
"##
        );
        let out = integration::command(
            caller,
            &work.path,
            &["whole-process", "--", "/bin/sh", "-c", &script],
        )
        .env("PATH", &path)
        .output()
        .unwrap();
        let text = stdout(&out);
        assert!(!text.contains("PLANTED"), "{caller:?}: {}", explain(&out));
        assert_eq!(
            text.matches("refused:").count(),
            4,
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(text.contains("ok:twin"), "{caller:?}: {}", explain(&out));
        run_git_as_the_host_would(caller, &work.path, &["."]);
        assert_eq!(markers(&work.path), Vec::<PathBuf>::new(), "{caller:?}");
        assert!(!work.join("bin/git").exists());
    }
}

/// A home reached through a symlink (`/home` -> `var/home` on Fedora's atomic desktops) keeps
/// every protection of the home: `.bashrc` and `.bash_aliases` (which Debian's `.bashrc`
/// sources) are refused by either name, an ordinary file is written.
#[test]
fn a_home_reached_through_a_symlink_keeps_its_protections() {
    for caller in CALLERS {
        let work = TempDir::new_in("/var/tmp", "homelink");
        let link = PathBuf::from(format!("{}-link", work.path.display()));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&work.path, &link).unwrap();
        let m = work.join("PWNED").display().to_string();
        let script = format!(
            "echo 'touch {m}' >> $HOME/.bashrc && echo BASHRC; \
             echo 'touch {m}' > $HOME/.bash_aliases && echo ALIASES; \
             mkdir -p $HOME/bin && echo 'touch {m}' > $HOME/bin/ls && echo HOMEBIN; \
             echo 'shell touch {m}' > $HOME/.gdbinit && echo GDBINIT; \
             echo 'pre-commit: {{jobs: [{{run: touch {m}}}]}}' > .lefthook-local.yml && echo LEFTHOOK; \
             mkdir -p $HOME/.config && echo x > $HOME/.config/ordinary && echo ordinary-ok; true"
        );
        let out = integration::command(
            caller,
            &work.path,
            &["whole-process", "--", "/bin/sh", "-c", &script],
        )
        .env("HOME", &link)
        .output()
        .unwrap();
        let _ = std::fs::remove_file(&link);
        let text = stdout(&out);
        assert!(
            text.contains("ordinary-ok"),
            "{caller:?}: {}",
            explain(&out)
        );
        assert!(!text.contains("BASHRC"), "{caller:?}: {}", explain(&out));
        for planted in ["ALIASES", "HOMEBIN", "GDBINIT", "LEFTHOOK"] {
            assert!(
                !text.contains(planted),
                "{caller:?}: {planted}: {}",
                explain(&out)
            );
        }
        let _ = Command::new("bash")
            .args(["-i", "-c", "true"])
            .env("HOME", &work.path)
            .stdin(std::process::Stdio::null())
            .output();
        assert_eq!(markers(&work.path), Vec::<PathBuf>::new(), "{caller:?}");
    }
}

/// Where a home's protected name is a symlink into a writable tree (a stow-managed
/// `~/.bashrc -> dotfiles/bashrc`, `~/.config/git -> ../dotfiles/git`) and the home itself is
/// not writable, the link's target is protected in that tree, whether it is the working
/// directory, an `--allow-write` path or a `--bind` at another name.
#[test]
fn a_stow_managed_dotfile_is_protected_where_its_link_leads() {
    for caller in CALLERS {
        let home = TempDir::new_in("/var/tmp", "stow-home");
        home.write("dotfiles/bashrc", "# mine\n");
        home.write("dotfiles/git/config", "[user]\n\tname = t\n");
        home.mkdir(".config");
        home.mkdir("project");
        std::os::unix::fs::symlink("dotfiles/bashrc", home.join(".bashrc")).unwrap();
        std::os::unix::fs::symlink("../dotfiles/git", home.join(".config/git")).unwrap();
        let dot = home.join("dotfiles").display().to_string();
        let m = home.join("PWNED").display().to_string();
        for opts in [
            vec!["--allow-write".to_string(), dot.clone()],
            vec!["--bind".to_string(), format!("{dot}:/tmp/d")],
        ] {
            let at = if opts[0] == "--bind" {
                "/tmp/d"
            } else {
                dot.as_str()
            };
            let script = format!(
                "echo 'touch {m}' >> {at}/bashrc && echo BASHRC; \
                 printf '[core]\\n\\tfsmonitor = touch {m}\\n' >> {at}/git/config && echo GITCONFIG; \
                 echo x > {at}/notes.txt && echo notes-ok; true"
            );
            let mut args = vec!["whole-process"];
            args.extend(opts.iter().map(String::as_str));
            args.extend(["--", "/bin/sh", "-c", &script]);
            let out = integration::command(caller, &home.join("project"), &args)
                .env("HOME", &home.path)
                .output()
                .unwrap();
            let text = stdout(&out);
            assert!(
                text.contains("notes-ok"),
                "{caller:?} {opts:?}: {}",
                explain(&out)
            );
            assert!(
                !text.contains("BASHRC"),
                "{caller:?} {opts:?}: {}",
                explain(&out)
            );
            assert!(
                !text.contains("GITCONFIG"),
                "{caller:?} {opts:?}: {}",
                explain(&out)
            );
        }
        assert_eq!(
            std::fs::read_to_string(home.join("dotfiles/bashrc")).unwrap(),
            "# mine\n"
        );
        let _ = Command::new("bash")
            .args(["-i", "-c", "true"])
            .env("HOME", &home.path)
            .stdin(std::process::Stdio::null())
            .output();
        let _ = Command::new("git")
            .args(["-C", &home.join("project").display().to_string(), "status"])
            .env("HOME", &home.path)
            .output();
        assert_eq!(markers(&home.path), Vec::<PathBuf>::new(), "{caller:?}");
    }
}

/// What the host's git configuration or PATH names by path in the working directory is a
/// surface: a `core.fsmonitor` program, a relative `PATH` entry (`bin`), a link in the home's
/// own PATH directory into the working directory. Each is refused; an ordinary file next to
/// them is written; the host then runs git and the command without a marker.
#[test]
fn programs_the_hosts_git_or_path_names_in_the_project_are_protected() {
    for caller in CALLERS {
        let home = TempDir::new_in("/var/tmp", "named-home");
        let work = TempDir::new_in("/var/tmp", "named-work");
        work.write("scripts/fsmon.sh", "#!/bin/sh\nexit 1\n");
        work.write("tools/tool", "#!/bin/sh\necho tool\n");
        work.mkdir("bin");
        home.mkdir(".local/bin");
        std::os::unix::fs::symlink(work.join("tools/tool"), home.join(".local/bin/tool")).unwrap();
        host_git_ok(&work.path, &["init", "-q"]);
        host_git_ok(
            &work.path,
            &["config", "core.fsmonitor", "sh scripts/fsmon.sh"],
        );
        work.mkdir("bin2");
        std::os::unix::fs::symlink(work.join("bin2"), home.join("lbin")).unwrap();
        work.give_to_sandbox_user(&work.path);
        let m = work.join("PWNED").display().to_string();
        let script = format!(
            "printf '#!/bin/sh\\ntouch {m}\\nexit 1\\n' > scripts/fsmon.sh && echo FSMONITOR; \
             printf '#!/bin/sh\\ntouch {m}\\n' > bin/ls && echo RELATIVE-PATH; \
             printf '#!/bin/sh\\ntouch {m}\\n' > tools/tool && echo HOME-PATH-LINK; \
             printf '#!/bin/sh\\ntouch {m}\\n' > bin2/ls && echo LINKED-PATH-DIR; \
             echo x > scripts/notes.txt && echo notes-ok; true"
        );
        let path = format!(
            "bin:{}:{}:{}",
            home.join("lbin").display(),
            home.join(".local/bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = integration::command(
            caller,
            &work.path,
            &["whole-process", "--", "/bin/sh", "-c", &script],
        )
        .env("HOME", &home.path)
        .env("PATH", &path)
        .output()
        .unwrap();
        let text = stdout(&out);
        assert!(text.contains("notes-ok"), "{caller:?}: {}", explain(&out));
        for planted in [
            "FSMONITOR",
            "RELATIVE-PATH",
            "HOME-PATH-LINK",
            "LINKED-PATH-DIR",
        ] {
            assert!(
                !text.contains(planted),
                "{caller:?}: {planted}: {}",
                explain(&out)
            );
        }
        let _ = host_git(&work.path, &["status"]);
        for cmd in ["ls", "tool"] {
            let _ = Command::new("sh")
                .args(["-c", cmd])
                .current_dir(&work.path)
                .env("PATH", &path)
                .output();
        }
        assert_eq!(markers(&work.path), Vec::<PathBuf>::new(), "{caller:?}");
    }
}

/// A file the home's start-up files source by a path of their own (`. ~/dotfiles/aliases` in
/// `~/.bashrc`, rustup's `. "$HOME/.cargo/env"` in `~/.profile`) is protected where it lies in
/// a writable tree — here the working directory, the home not writable; an ordinary file next
/// to it is written; a shell on the host then runs nothing planted.
#[test]
fn files_the_homes_startup_files_source_are_protected() {
    for caller in CALLERS {
        let home = TempDir::new_in("/var/tmp", "sourced-home");
        home.write(".bashrc", ". ~/dotfiles/bash/aliases\n");
        home.write(
            ".profile",
            "[ -f \"$HOME/dotfiles/env.sh\" ] && . \"$HOME/dotfiles/env.sh\"\n",
        );
        home.write("dotfiles/bash/aliases", "alias ll='ls -l'\n");
        home.write("dotfiles/env.sh", "export X=1\n");
        let m = home.join("PWNED").display().to_string();
        let script = format!(
            "echo 'touch {m}' >> bash/aliases && echo ALIASES; \
             echo 'touch {m}' >> env.sh && echo ENVSH; \
             echo x > bash/notes && echo notes-ok; true"
        );
        let out = integration::command(
            caller,
            &home.join("dotfiles"),
            &["whole-process", "--", "/bin/sh", "-c", &script],
        )
        .env("HOME", &home.path)
        .output()
        .unwrap();
        let text = stdout(&out);
        assert!(text.contains("notes-ok"), "{caller:?}: {}", explain(&out));
        for planted in ["ALIASES", "ENVSH"] {
            assert!(
                !text.contains(planted),
                "{caller:?}: {planted}: {}",
                explain(&out)
            );
        }
        for args in [&["-i", "-c", "true"][..], &["-l", "-c", "true"]] {
            let _ = Command::new("bash")
                .args(args)
                .env("HOME", &home.path)
                .stdin(std::process::Stdio::null())
                .output();
        }
        assert_eq!(markers(&home.path), Vec::<PathBuf>::new(), "{caller:?}");
    }
}

/// What the host runs from the home besides shells and editors' own files: sensible-editor
/// (and `crontab -e`) sources `~/.selected_editor` as shell; less, with LESSOPEN set as
/// Ubuntu's `~/.bashrc` sets it, runs `~/.lessfilter` through lesspipe, and takes LESSOPEN
/// itself from a lesskey file's `#env`; programs for MIME types, mail forwarding, remote
/// logins and network clients' configuration. The home is the working directory here: each
/// is refused, and the files those programs write for themselves land (`.lesshst`,
/// `.wget-hsts`).
#[test]
fn files_the_pager_the_editor_chooser_mail_and_logins_run_cannot_be_planted() {
    for caller in CALLERS {
        let work = TempDir::new_in("/var/tmp", "homefiles");
        let script = format!(
            r##"{PRELUDE}
try selected-editor sh -c "echo 'SELECTED_EDITOR=true; touch $M-editor' > .selected_editor"
try lessfilter sh -c "printf '#!/bin/sh\ntouch $M-lessfilter\nexit 1\n' > .lessfilter && chmod +x .lessfilter"
try lessfilter-xdg sh -c "mkdir -p .config && printf '#!/bin/sh\ntouch $M-lessfilter\nexit 1\n' > .config/lessfilter"
try lesskey sh -c "printf '#env\nLESSOPEN=|touch $M-lesskey; cat %%s\n' > .lesskey"
try lesskey-xdg sh -c "mkdir -p .config && printf '#env\nLESSOPEN=|touch $M-lesskey; cat %%s\n' > .config/lesskey"
try less-binary sh -c "echo x > .less"
try mailcap sh -c "echo 'text/plain; touch $M-mailcap' > .mailcap"
try forward sh -c "echo '|touch $M-forward' > .forward"
try rhosts sh -c "echo '+ +' > .rhosts"
try shosts sh -c "echo '+ +' > .shosts"
try k5login sh -c "echo 'evil@EXAMPLE' > .k5login"
try k5users sh -c "echo 'evil@EXAMPLE' > .k5users"
try wgetrc sh -c "echo 'output_document = $M-wget' > .wgetrc"
try curlrc sh -c "echo 'output = $M-curl' > .curlrc"
try netrc sh -c "printf 'machine x\nmacdef init\n!touch $M-netrc\n\n' > .netrc"
echo h > .lesshst && echo ok:lesshst
echo h > .wget-hsts && echo ok:wget-hsts
mkdir -p notes && echo n > notes/.forward.txt && echo ok:notes
"##
        );
        let out = sh(caller, &work.path, &[], &script);
        let text = stdout(&out);
        assert!(!text.contains("PLANTED"), "{caller:?}: {}", explain(&out));
        assert_eq!(
            text.matches("refused:").count(),
            15,
            "{caller:?}: {}",
            explain(&out)
        );
        assert_eq!(
            text.matches("ok:").count(),
            3,
            "{caller:?}: {}",
            explain(&out)
        );
        // On the host, with this HOME: the editor chooser, and less as Ubuntu's shell sets it
        // up (with `lesspipe`) and as it is (its lesskey files).
        let page = work.join("notes/.forward.txt");
        let host = |program: &str, args: &[&Path], env: &[(&str, &str)]| {
            let mut cmd = Command::new(program);
            cmd.args(args)
                .current_dir(&work.path)
                .env("HOME", &work.path)
                .env_remove("XDG_CONFIG_HOME")
                .env_remove("VISUAL")
                .env_remove("LESSOPEN")
                .env_remove("LESSKEYIN")
                .env("EDITOR", "true")
                .stdin(std::process::Stdio::null());
            for (k, v) in env {
                cmd.env(k, v);
            }
            let out = cmd.output().expect("run on the host");
            assert!(out.status.success(), "{program}: {}", explain(&out));
        };
        host("sensible-editor", &[&page], &[]);
        host("less", &[&page], &[("LESSOPEN", "| /usr/bin/lesspipe %s")]);
        host("less", &[&page], &[]);
        assert_eq!(markers(&work.path), Vec::<PathBuf>::new(), "{caller:?}");
        for p in [
            ".selected_editor",
            ".lessfilter",
            ".config/lessfilter",
            ".lesskey",
            ".config/lesskey",
            ".less",
            ".mailcap",
            ".forward",
            ".rhosts",
            ".shosts",
            ".k5login",
            ".k5users",
            ".wgetrc",
            ".curlrc",
            ".netrc",
        ] {
            assert!(
                std::fs::symlink_metadata(work.join(p)).is_err(),
                "{caller:?}: {p} exists on the host"
            );
        }
        assert!(work.join(".lesshst").exists());
        assert!(work.join(".wget-hsts").exists());
    }
}

/// sandbox-launch's user policy (and its trusted projects) lies where `XDG_CONFIG_HOME` puts
/// it, here in the working directory (also HOME): the program inside can neither write a
/// policy there (nor by swapping or linking the directory above it), and the next launch,
/// which reads it, gets nothing more than before. Missing at launch and existing. The twin:
/// the rest of that configuration directory is writable.
#[test]
fn a_user_policy_moved_by_xdg_config_home_cannot_be_written_for_the_next_launch() {
    for caller in CALLERS {
        for existing in [false, true] {
            let work = TempDir::new_in("/var/tmp", "xdgpolicy");
            let outside = TempDir::new_in("/var/tmp", "xdgpolicy-outside");
            let cfg = work.mkdir("cfg");
            if existing {
                work.write("cfg/sandbox-launch/settings.json", "{\"sandbox\": {}}\n");
            }
            let settings = format!(
                "{{\"sandbox\": {{\"filesystem\": {{\"allowWrite\": [\"{}\"]}}}}}}",
                outside.path.display()
            );
            let script = format!(
                r##"{PRELUDE}
S='{settings}'
try settings sh -c 'mkdir -p cfg/sandbox-launch && echo "$S" > cfg/sandbox-launch/settings.json'
try policy-yaml sh -c 'mkdir -p cfg/sandbox-launch && echo "version: 1" > cfg/sandbox-launch/policy.yaml'
try trusted sh -c 'mkdir -p cfg/sandbox-launch && echo "$PWD" > cfg/sandbox-launch/trusted-projects'
try swap-parent sh -c 'mv cfg cfg.old && mkdir -p cfg/sandbox-launch && echo "$S" > cfg/sandbox-launch/settings.json'
try link-parent sh -c 'mkdir -p other/sandbox-launch && echo "$S" > other/sandbox-launch/settings.json && mv cfg cfg.gone && ln -s other cfg'
mkdir -p cfg/other && echo x > cfg/other/notes && echo ok:cfg-other
"##
            );
            let out = integration::command(
                caller,
                &work.path,
                &["whole-process", "--", "/bin/sh", "-c", &script],
            )
            .env("XDG_CONFIG_HOME", &cfg)
            .output()
            .expect("run sandbox-launch");
            let text = stdout(&out);
            let what = format!("{caller:?} (policy directory existing: {existing})");
            assert!(!text.contains("PLANTED"), "{what}: {}", explain(&out));
            assert_eq!(
                text.matches("refused:").count(),
                5,
                "{what}: {}",
                explain(&out)
            );
            assert!(text.contains("ok:cfg-other"), "{what}: {}", explain(&out));
            assert!(cfg.join("other/notes").exists(), "{what}");
            // On the host: the next launch, with the same configuration, writes where the
            // policy the program tried to leave would let it.
            let out = integration::command(
                caller,
                &work.path,
                &[
                    "whole-process",
                    "--",
                    "/bin/sh",
                    "-c",
                    &format!(
                        "echo x > {}/PWNED-policy; echo next-launch-ran",
                        outside.path.display()
                    ),
                ],
            )
            .env("XDG_CONFIG_HOME", &cfg)
            .output()
            .expect("run sandbox-launch");
            assert!(
                stdout(&out).contains("next-launch-ran"),
                "{what}: {}",
                explain(&out)
            );
            assert_eq!(
                markers(&outside.path),
                Vec::<PathBuf>::new(),
                "{what}: the next launch obeyed the policy written inside: {}",
                explain(&out)
            );
            let written = std::fs::read_to_string(cfg.join("sandbox-launch/settings.json"));
            if existing {
                assert_eq!(written.unwrap(), "{\"sandbox\": {}}\n", "{what}");
            } else {
                assert!(written.is_err(), "{what}");
            }
            assert!(!cfg.join("sandbox-launch/trusted-projects").exists());
        }
    }
}
