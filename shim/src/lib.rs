//! What runs inside the sandbox. The launcher re-executes itself as `sandbox-launch __shim FD`;
//! that fresh, single-threaded process is PID 1 of the sandbox and builds every layer.

pub mod spec;
