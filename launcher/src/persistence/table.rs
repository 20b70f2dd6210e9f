//! The map of persistence surfaces: files whose contents run code on the host without a
//! deliberate action on the project's own code — on opening a shell, `cd`, `git status` or
//! `git commit`, opening the editor, starting an agent next time. One table, which the create
//! guard enforces (as rules in the spec), the plan binds read-only where it exists at launch,
//! `check` prints, and the README shows row for row (a test keeps the two in sync).

/// Where a surface's patterns apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// At any depth in every writable tree (nested repositories, a parent made writable...).
    Anywhere,
    /// Relative to the home directory, wherever a writable tree covers it.
    Home,
    /// Inside git directories (named `.git` or shaped like one): enforced by the guard's git
    /// rules, which allow only what git writes; listed here for the README and `check`.
    GitDir,
}

/// One row.
#[derive(Debug, Clone, Copy)]
pub struct Surface {
    /// What it is, in a few words (the README's first column).
    pub what: &'static str,
    pub scope: Scope,
    /// Path patterns: `/`-separated components, each a glob (`*`, `?`); a last `**` also covers
    /// everything below.
    pub patterns: &'static [&'static str],
    /// What runs it on the host.
    pub runs: &'static str,
}

pub const SURFACES: &[Surface] = &[
    Surface {
        what: "git hooks and configuration",
        scope: Scope::GitDir,
        patterns: &[
            "hooks/*",
            "config",
            "config.worktree",
            "commondir",
            "gitdir",
            "info/attributes",
            "modules/**",
            "worktrees/**",
        ],
        runs: "git status, git commit (hooks, core.fsmonitor, core.hooksPath, aliases, filters, includes; commondir and .git files point git elsewhere)",
    },
    Surface {
        what: "git hook managers",
        scope: Scope::Anywhere,
        patterns: &[
            ".husky/**",
            ".pre-commit-config.yaml",
            // Every name lefthook reads: lefthook.yml, .lefthook-local.yaml, lefthook.toml,
            // .lefthook.jsonc, …, and its script directories.
            "lefthook*",
            ".lefthook*",
            ".lefthook/**",
            ".lefthook-local/**",
            ".config/lefthook*",
        ],
        runs: "git commit, through the installed hook",
    },
    Surface {
        what: "direnv",
        scope: Scope::Anywhere,
        patterns: &[".envrc"],
        runs: "cd into the directory",
    },
    Surface {
        what: "editor workspace",
        scope: Scope::Anywhere,
        patterns: &[".vscode/**", ".idea/**", ".devcontainer/**", ".zed/**"],
        runs: "opening the folder in the editor (tasks, launch configurations, settings naming programs, dev containers)",
    },
    Surface {
        what: "sandbox-launch's own configuration",
        scope: Scope::Anywhere,
        patterns: &[".sandbox-launch/**"],
        runs: "the next sandbox-launch in this project (its policy)",
    },
    Surface {
        what: "agents' project configuration",
        scope: Scope::Anywhere,
        patterns: &[
            ".mcp.json",
            ".cursor/mcp.json",
            ".claude/settings*.json",
            // The status line's script (`/statusline` writes it; settings.json names it).
            ".claude/statusline*",
            ".claude/commands/**",
            ".claude/agents/**",
            ".claude/skills/**",
            ".claude/hooks/**",
            ".claude/output-styles/**",
            ".claude/workflows/**",
            ".claude/plugins/**",
            ".claude/local/**",
            ".claude/scheduled_tasks.json",
            ".claude/jobs/**",
            ".claude/daemon/**",
            ".claude/daemon.json",
            ".claude/rm-guard/**",
            ".factory/settings*.json",
            ".factory/mcp.json",
            ".factory/config.json",
            ".factory/hooks.json",
            ".factory/droids/**",
            ".factory/commands/**",
            ".factory/hooks/**",
            ".factory/skills/**",
            ".factory/plugins/**",
            ".factory/output-styles/**",
            ".factory/bin/**",
            ".codex/config.toml",
            ".codex/managed_config.toml",
            ".codex/hooks.json",
            ".codex/.env",
            ".codex/rules/**",
            ".codex/agents/**",
            ".codex/prompts/**",
            ".codex/skills/**",
            ".codex/plugins/**",
            ".agents/**",
            ".codex-plugin/**",
            ".claude-plugin/**",
            ".cursor-plugin/**",
        ],
        runs: "the agent's next start (hooks, MCP servers, custom commands and subagents, settings that name commands, droid's PATH directory, Claude Code's background sessions)",
    },
    Surface {
        what: "agents' own configuration",
        scope: Scope::Home,
        patterns: &[
            ".claude.json",
            ".claude/CLAUDE.md",
            ".local/share/claude/**",
            ".codex/AGENTS.md",
            ".codex/AGENTS.override.md",
            ".factory/AGENTS.md",
            ".factory/agents.md",
            ".config/anthropic/**",
        ],
        runs: "the agent's next start (global instructions, MCP servers in ~/.claude.json, the installed CLI)",
    },
    Surface {
        what: "shell start-up",
        scope: Scope::Home,
        patterns: &[
            ".bashrc",
            ".bash_profile",
            ".bash_login",
            ".bash_logout",
            ".bashrc.d/**",
            // Sourced by the stock ~/.bashrc of Debian and Ubuntu.
            ".bash_aliases",
            ".bash_completion",
            ".local/share/bash-completion/**",
            ".inputrc",
            ".profile",
            ".zshrc",
            ".zshenv",
            ".zprofile",
            ".zlogin",
            ".zlogout",
            ".oh-my-zsh/**",
            ".config/zsh/**",
            ".config/fish/**",
            ".kshrc",
            ".mkshrc",
            ".tmux.conf",
            ".config/tmux/**",
            ".screenrc",
            // direnv's own library, sourced for every .envrc it loads.
            ".config/direnv/**",
            ".config/nushell/**",
            ".xonshrc",
            ".config/xonsh/**",
            ".config/elvish/**",
            ".config/powershell/**",
            // What installers add a `. FILE` line for in the start-up files above.
            ".cargo/env",
            ".cargo/env.fish",
            ".fzf.bash",
            ".fzf.zsh",
            ".ghcup/env",
            ".deno/env",
            ".rye/env",
            ".elan/env",
            ".sdkman/bin/**",
            ".asdf/asdf.sh",
            ".opam/opam-init/**",
        ],
        runs: "opening a shell or a terminal multiplexer, entering a directory with direnv",
    },
    Surface {
        what: "session start-up",
        scope: Scope::Home,
        patterns: &[
            ".config/autostart/**",
            ".config/systemd/**",
            ".local/share/systemd/**",
            ".config/environment.d/**",
            ".pam_environment",
            ".xprofile",
            ".xinitrc",
            ".xsession*",
            ".config/i3/**",
            ".config/sway/**",
            ".config/hypr/**",
            ".config/plasma-workspace/**",
            ".config/mimeapps.list",
            ".local/share/applications/**",
            // Sourced by xdg-user-dir.
            ".config/user-dirs.dirs",
        ],
        runs: "logging in (autostart entries, user systemd units, the session's environment)",
    },
    Surface {
        what: "ssh and gpg",
        scope: Scope::Home,
        patterns: &[".ssh/**", ".gnupg/**"],
        runs: "the next ssh (config: ProxyCommand, LocalCommand; authorized_keys: a way in), gpg",
    },
    Surface {
        what: "git's global configuration",
        scope: Scope::Home,
        patterns: &[".gitconfig", ".config/git/**"],
        runs: "every git command (core.fsmonitor, core.hooksPath, aliases, includes)",
    },
    Surface {
        what: "package managers and toolchains",
        scope: Scope::Home,
        patterns: &[
            ".npmrc",
            ".yarnrc",
            ".yarnrc.yml",
            ".cargo/config",
            ".cargo/config.toml",
            ".cargo/bin/**",
            ".pypirc",
            ".config/pip/**",
            ".pip/**",
            ".gemrc",
            ".m2/settings.xml",
            ".gradle/init.d/**",
            ".local/bin/**",
            ".local/lib/python*/site-packages/**",
        ],
        runs: "the next npm, cargo, pip, gem, mvn, gradle or python (scripts, registries, .pth files), commands in ~/.local/bin",
    },
    Surface {
        what: "editors' user configuration",
        scope: Scope::Home,
        patterns: &[
            ".vimrc",
            ".vim/**",
            ".config/nvim/**",
            ".emacs",
            ".emacs.d/**",
            ".config/emacs/**",
            ".exrc",
            ".local/share/nvim/site/**",
            ".config/Code/User/**",
            ".wezterm.lua",
            ".config/wezterm/**",
            // Sourced as shell by sensible-editor (which `crontab -e` and Debian's tools run).
            ".selected_editor",
        ],
        runs: "opening the editor (sensible-editor and crontab -e source ~/.selected_editor)",
    },
    Surface {
        what: "pager and MIME handlers",
        scope: Scope::Home,
        patterns: &[
            // lesspipe runs it when LESSOPEN is set (Ubuntu's ~/.bashrc sets it).
            ".lessfilter",
            ".config/lessfilter",
            // A lesskey file's `#env` section sets LESSOPEN: a command less runs.
            ".lesskey",
            ".config/lesskey",
            ".less",
            ".config/less",
            ".mailcap",
        ],
        runs: "less (lesspipe runs ~/.lessfilter; a lesskey file's #env sets LESSOPEN), opening a file by its type (run-mailcap, mutt: ~/.mailcap names the programs)",
    },
    Surface {
        what: "mail, remote logins and network clients",
        scope: Scope::Home,
        patterns: &[
            ".forward",
            ".rhosts",
            ".shosts",
            ".k5login",
            ".k5users",
            ".wgetrc",
            ".config/wget/**",
            ".curlrc",
            ".config/.curlrc",
            ".netrc",
        ],
        runs: "mail delivery (a pipe to a command in ~/.forward), rsh and ssh host-based or Kerberos logins as the user (a way in), the next wget or curl (output files, proxies, uploads), ftp (~/.netrc's macdef init runs at log-in, and ! runs a shell)",
    },
    Surface {
        what: "tools run from the home",
        scope: Scope::Home,
        patterns: &[
            // On PATH from the next login (Debian's ~/.profile adds it when it exists).
            "bin/**",
            ".gdbinit",
            ".config/gdb/**",
            ".lldbinit",
            ".sqliterc",
            ".psqlrc",
            ".pdbrc",
            ".irbrc",
            ".Rprofile",
            ".julia/config/**",
            ".erlang",
            ".ghci",
            ".ipython/profile_*/startup/**",
            ".docker/cli-plugins/**",
            ".docker/config.json",
            ".kube/config",
            ".aws/config",
            ".config/gh/config.yml",
            ".terraformrc",
            ".config/containers/**",
            ".hgrc",
            ".config/mise/**",
            ".tool-versions",
            ".asdfrc",
            ".asdf/plugins/**",
            ".nvm/*.sh",
            ".mavenrc",
            ".gradle/init.gradle",
            ".gradle/init.gradle.kts",
            ".npm-init.js",
            ".bunfig.toml",
        ],
        runs: "commands in ~/bin, a debugger or REPL starting (gdb, lldb, sqlite3, psql, pdb, irb, R, julia, erl, ghci, ipython), docker and its plugins, kubectl and aws (credential commands), gh aliases, terraform, podman, hg, mise, asdf, nvm, mvn, gradle, npm init, bun",
    },
    Surface {
        what: "sandbox-launch's user configuration",
        scope: Scope::Home,
        patterns: &[".config/sandbox-launch/**"],
        runs: "the next sandbox-launch (its policy, trusted projects)",
    },
];

/// The table as the README shows it: one line per surface.
pub fn readme_rows() -> Vec<String> {
    SURFACES
        .iter()
        .map(|s| {
            let scope = match s.scope {
                Scope::Anywhere => "any writable tree, at any depth",
                Scope::Home => "home directory",
                Scope::GitDir => "every git directory (`.git`, bare, submodule, worktree)",
            };
            let paths: Vec<String> = s.patterns.iter().map(|p| format!("`{p}`")).collect();
            format!(
                "| {} | {scope} | {} | {} |",
                s.what,
                paths.join(" "),
                s.runs
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_shows_the_table_row_for_row() {
        let readme = include_str!("../../../README.md");
        let start = readme
            .find("<!-- persistence-table:start -->")
            .expect("README has the persistence table markers");
        let end = readme
            .find("<!-- persistence-table:end -->")
            .expect("README has the end marker");
        let shown: Vec<&str> = readme[start..end]
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| What") && !l.starts_with("| ---"))
            .collect();
        let rows = readme_rows();
        assert_eq!(
            shown,
            rows.iter().map(String::as_str).collect::<Vec<_>>(),
            "README's persistence table differs from launcher/src/persistence/table.rs; the rows should read:\n{}",
            rows.join("\n")
        );
    }

    #[test]
    fn patterns_are_relative_and_well_formed() {
        for s in SURFACES {
            for p in s.patterns {
                assert!(!p.starts_with('/') && !p.contains("//"), "{p}");
                assert!(
                    !p.contains("**") || p.ends_with("/**"),
                    "{p}: `**` only as the last component"
                );
            }
        }
    }
}
