//! What runs inside the sandbox: the child of the launcher's clone runs `run::main`, is PID 1
//! of the sandbox and builds every layer.

pub mod channel;
pub mod confinement;
pub mod cpus;
pub mod create_guard;
pub mod egress;
pub mod identity;
pub mod inherited_env;
pub mod init;
pub mod landlock;
pub mod mounts;
pub mod netlink;
pub mod network;
pub mod network_thread;
mod persist_wire;
pub mod placed;
pub mod run;
pub mod seccomp;
pub mod spawn;
pub mod spec;
pub mod sys;
pub mod sys_at;
pub mod verify;
pub mod worktree_mount;
