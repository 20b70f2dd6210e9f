#![no_main]
//! See `sandbox_launch::fuzz::socks5`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox_launch::fuzz::socks5(data));
