//! Release builds of the binary place the code a launch runs together, ahead of the rest of
//! `.text` (`hot-code.ld`, written by `scripts/hot-code.py`): each process of a launch then
//! faults fewer than half as many 64 KiB groups of code in (see the README's benchmarks). The
//! script only orders sections, so a build whose functions it no longer names is as correct,
//! only slower; debug builds go without it.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=hot-code.ld");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if !(release && linux) || mold_links() {
        return;
    }
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let script = Path::new(&dir).join("hot-code.ld");
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
}

/// mold refuses a linker script with SECTIONS (the whole link fails); GNU ld and LLD (Rust's
/// default linker on x86-64 Linux) read it. mold links when the flags name it (`-fuse-ld=mold`,
/// `--ld-path=…/mold`) or under `mold -run`, which exports `MOLD_PATH` and preloads its wrapper.
fn mold_links() -> bool {
    let names_mold = |var: &str| {
        println!("cargo:rerun-if-env-changed={var}");
        std::env::var_os(var).is_some_and(|v| v.to_string_lossy().contains("mold"))
    };
    // Every variable is asked (each is one the build reruns on), not only up to the first hit.
    [
        names_mold("CARGO_ENCODED_RUSTFLAGS"),
        names_mold("MOLD_PATH"),
        names_mold("LD_PRELOAD"),
    ]
    .contains(&true)
}
