#![no_main]
//! See `sandbox_launch::fuzz::http_head`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox_launch::fuzz::http_head(data));
