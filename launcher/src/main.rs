//! sandbox-launch: run an AI coding agent and everything it starts inside a kernel-enforced
//! Linux sandbox. See README.md and DESIGN.md.

#![deny(clippy::print_stderr)]
#![cfg_attr(not(test), no_main)]

use sandbox_launch::{cli, control, doctor, login, persistence, policy, prompt, sandbox, worktree};

/// The process's entry, called by the C library: Rust's runtime start-up is not run (see
/// `sandbox_launch::process_start`). A panic ends the process with exit code 101, as it would
/// have (the panic hook has printed it); it must not unwind out of this function.
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    sandbox_launch::process_start::prepare();
    match std::panic::catch_unwind(run) {
        Ok(never) => match never {},
        Err(_) => std::process::exit(101),
    }
}

/// Parse the command line and run the command; never returns (`std::process::exit` flushes
/// stdout).
#[cfg_attr(test, allow(dead_code))]
fn run() -> ! {
    let args: Vec<String> = std::env::args().collect();
    let cli = match login::rewrite(&args) {
        Ok(Some(rewritten)) => cli::parse(&rewritten),
        Ok(None) => cli::parse(&args),
        // A login shell given another command line, or whose configuration cannot be used: no
        // shell at all, rather than one with another policy than the administrator's.
        Err(refused) => {
            sandbox_launch::say!("sandbox-launch: login: {refused}");
            std::process::exit(refused.exit_code());
        }
    };
    let code = match cli.command {
        cli::Command::WholeProcess(cli::WholeProcessArgs { sandbox, command }) => {
            sandbox::run(&sandbox, command, "whole-process")
        }
        cli::Command::PerCommand { sandbox, command } => sandbox::run(
            &sandbox,
            vec!["/bin/sh".into(), "-c".into(), command],
            "per-command",
        ),
        cli::Command::Doctor { json, sandbox } => doctor::run(json, &sandbox),
        cli::Command::Check { sandbox } => match sandbox::load_policy(&sandbox)
            .and_then(|(policy, _)| Ok((policy, persistence::check(&sandbox)?)))
        {
            Ok((policy, protections)) => {
                println!("{}", policy::describe(&policy));
                println!("{protections}");
                0
            }
            Err(e) => {
                sandbox_launch::say!("sandbox-launch: {e}");
                e.0.step.exit_code()
            }
        },
        cli::Command::Ps { json } => control::commands::ps(json),
        cli::Command::Prompt {
            target,
            answer: Some(answer),
            timeout,
            json,
        } => prompt::commands::answer_next(target.as_deref(), &answer, timeout, json),
        cli::Command::Prompt { target, .. } => prompt::commands::interactive(target.as_deref()),
        cli::Command::Policy {
            action: cli::PolicyAction::Set { target, file },
        } => control::commands::policy_set(&target, &file),
        cli::Command::Allow { target, domain } => control::commands::allow(&target, &domain),
        cli::Command::Deny { target, domain } => control::commands::deny(&target, &domain),
        cli::Command::Stop { target, grace } => control::commands::stop(&target, grace),
        cli::Command::Worktrees { json } => worktree::commands::list(json),
        cli::Command::Diff { target, stat } => worktree::commands::diff(&target, stat),
        cli::Command::Apply {
            target,
            include_persistence,
            skip_persistence,
        } => worktree::commands::apply(
            &target,
            &worktree::apply::Choice {
                include: include_persistence,
                skip_persistence,
            },
        ),
        cli::Command::Discard { target } => worktree::commands::discard(&target),
        cli::Command::Events {
            target,
            follow,
            json,
        } => control::commands::events(&target, follow, json),
    };
    std::process::exit(code);
}
