#![no_main]
//! See `sandbox_launch::fuzz::globs`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox_launch::fuzz::globs(data));
