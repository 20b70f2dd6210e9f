#![no_main]
//! See `sandbox_launch::fuzz::request_path`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox_launch::fuzz::request_path(data));
