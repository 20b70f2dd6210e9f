#![no_main]
//! See `sandbox_launch::fuzz::openshell_policy`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox_launch::fuzz::openshell_policy(data));
