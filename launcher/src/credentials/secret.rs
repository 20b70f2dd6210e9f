//! A credential's real value in the supervisor's memory: never printed (`Debug` shows nothing
//! of it), never serialised, and overwritten with zeros when dropped.

use std::fmt;

pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(value: Vec<u8>) -> Self {
        Secret(value)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        for b in self.0.iter_mut() {
            // SAFETY: a valid, aligned pointer to a byte this Vec owns; volatile so the
            // compiler keeps the write although the memory is freed right after.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_value() {
        let s = Secret::new(b"ghp_very_secret".to_vec());
        assert_eq!(format!("{s:?}"), "Secret(15 bytes)");
    }
}
