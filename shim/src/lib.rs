//! What runs inside the sandbox. The launcher re-executes itself as `sandbox-launch __shim FD`;
//! that fresh, single-threaded process is PID 1 of the sandbox and builds every layer.

pub mod channel;
pub mod identity;
pub mod init;
pub mod landlock;
pub mod mounts;
pub mod network;
pub mod run;
pub mod seccomp;
pub mod spec;
pub mod sys;
pub mod verify;
