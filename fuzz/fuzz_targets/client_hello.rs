#![no_main]
//! See `sandbox_launch::fuzz::client_hello`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox_launch::fuzz::client_hello(data));
