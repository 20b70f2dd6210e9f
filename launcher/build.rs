//! Release builds of the binary place the code a launch runs together, ahead of the rest of
//! `.text` (`hot-code.ld`, written by `scripts/hot-code.py`): each process of a launch then
//! faults fewer than half as many 64 KiB groups of code in (see the README's benchmarks). The
//! script only orders sections, so a build whose functions it no longer names is as correct,
//! only slower; debug builds go without it.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=hot-code.ld");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    // mold reads no SECTIONS in a linker script; GNU ld and LLD (Rust's default) do.
    let mold = std::env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|f| f.contains("mold"));
    if !(release && linux) || mold {
        return;
    }
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let script = Path::new(&dir).join("hot-code.ld");
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
}
