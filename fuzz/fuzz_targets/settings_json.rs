#![no_main]
//! See `sandbox_launch::fuzz::settings_json`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox_launch::fuzz::settings_json(data));
