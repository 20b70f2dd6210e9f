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
