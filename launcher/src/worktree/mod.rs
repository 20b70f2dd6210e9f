//! Copy-on-write worktrees (`whole-process --worktree`): the working directory is mounted as
//! an overlay — the checkout read-only below, an upper layer kept in the user's state
//! directory above — so the program writes freely and the checkout is untouched. Afterwards
//! `diff` shows what it did as a git-style patch, `apply` carries it to the checkout (all or
//! nothing, refused when the checkout changed meanwhile, persistence surfaces only when
//! named), `discard` removes it, `worktrees` lists them.
//!
//! * `store` — where worktrees are kept and what is known of each;
//! * `launch` — a new worktree and the overlay in the sandbox's plan;
//! * `manifest` — the checkout's state at launch, for `apply`'s checks;
//! * `beneath` — paths below a root, never following a symlink;
//! * `changes` — the upper layer read back as changes; `classify` sorts them;
//! * `patch` — the patch; `apply` — the apply (`sparse`: copies that keep holes);
//!   `commands` — the subcommands.

pub mod apply;
mod beneath;
pub mod changes;
mod classify;
pub mod commands;
pub mod launch;
pub mod manifest;
pub mod patch;
mod sparse;
pub mod store;
