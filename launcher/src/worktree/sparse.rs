//! Copying a file from the upper layer keeps its holes: only the data extents
//! (`SEEK_DATA`/`SEEK_HOLE`) are read and written, so a program's terabyte of sparse zeros is a
//! terabyte-long sparse file in the checkout too, not a full disk.

use std::fs::File;
use std::io::{Error, Result};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

fn seek(f: &File, pos: u64, whence: libc::c_int) -> Result<Option<u64>> {
    // SAFETY: lseek on a descriptor we hold; the result is checked.
    let r = unsafe { libc::lseek(f.as_raw_fd(), pos as libc::off_t, whence) };
    if r < 0 {
        let e = Error::last_os_error();
        // ENXIO: no data at or after `pos`.
        return if e.raw_os_error() == Some(libc::ENXIO) {
            Ok(None)
        } else {
            Err(e)
        };
    }
    Ok(Some(r as u64))
}

/// Copy `src` into the empty `dst`, holes kept.
pub fn copy(src: &File, dst: &File) -> Result<()> {
    let len = src.metadata()?.len();
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0;
    while pos < len {
        let Some(start) = seek(src, pos, libc::SEEK_DATA)? else {
            break;
        };
        let end = seek(src, start, libc::SEEK_HOLE)?.unwrap_or(len).min(len);
        let mut at = start;
        while at < end {
            let want = ((end - at) as usize).min(buf.len());
            let n = src.read_at(&mut buf[..want], at)?;
            if n == 0 {
                break; // shrunk meanwhile
            }
            dst.write_all_at(&buf[..n], at)?;
            at += n as u64;
        }
        pos = end.max(start + 1);
    }
    dst.set_len(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn holes_stay_holes_and_data_stays_data() {
        let base = std::env::temp_dir().join(format!("sl-wt-sparse-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let src = File::create(base.join("src")).unwrap();
        src.write_all_at(b"head", 0).unwrap();
        src.write_all_at(b"middle", 1 << 30).unwrap();
        src.set_len((2 << 30) + 5).unwrap();
        let src = File::open(base.join("src")).unwrap();
        let dst = File::create(base.join("dst")).unwrap();
        copy(&src, &dst).unwrap();
        let m = std::fs::metadata(base.join("dst")).unwrap();
        assert_eq!(m.len(), (2 << 30) + 5);
        assert!(
            m.blocks() * 512 < 1 << 20,
            "{} blocks: the holes were filled",
            m.blocks()
        );
        let dst = File::open(base.join("dst")).unwrap();
        let mut b = [0u8; 6];
        dst.read_exact_at(&mut b[..4], 0).unwrap();
        assert_eq!(&b[..4], b"head");
        dst.read_exact_at(&mut b, 1 << 30).unwrap();
        assert_eq!(&b, b"middle");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
