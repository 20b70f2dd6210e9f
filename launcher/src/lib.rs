//! sandbox-launch as a library: the binary (`main.rs`) is a thin front over these modules, and the
//! fuzz targets (`fuzz/`, outside the workspace) call the parsers through it.

// Lines on stderr go through `say!`, one write each (see `say`).
#![deny(clippy::print_stderr)]

pub mod cli;
pub mod control;
pub mod credentials;
pub mod doctor;
pub mod environment;
pub mod fs_violations;
pub mod fuzz;
pub mod home;
pub mod idmap;
pub mod layout;
pub mod limits;
pub mod login;
pub mod mountinfo;
pub mod namespaces;
pub mod nest;
pub mod persistence;
pub mod policy;
pub mod process_start;
pub mod prompt;
pub mod proxy;
pub mod reload;
pub mod sandbox;
pub mod say;
pub mod status;
pub mod supervisor;
pub mod users;
pub mod worktree;
