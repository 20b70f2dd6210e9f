#![no_main]
//! See `sandbox_launch::fuzz::dns_stub`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sandbox_launch::fuzz::dns_stub(data));
