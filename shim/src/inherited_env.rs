//! The launcher's own environment, which init inherited with the clone (the program gets the
//! one in the spec), wiped from init's memory before anything of the sandbox runs: init lives
//! as long as the sandbox, and its initial environment block is what `/proc/1/environ` shows.
//! (That file is unreadable inside anyway — init is not dumpable — so this is the second
//! layer: what is not there cannot leak.)

/// Overwrite the inherited environment block with zeros. Afterwards every variable of this
/// process reads as empty and unset, which nothing in init relies on.
pub fn wipe() -> Result<(), String> {
    let stat =
        crate::sys::read_proc("/proc/self/stat").map_err(|e| format!("/proc/self/stat: {e}"))?;
    let (start, end) = env_bounds(&stat).ok_or("/proc/self/stat: no env_start/env_end")?;
    if end > start {
        // SAFETY: [start, end) is this process's initial environment block, which the kernel
        // mapped writable on the stack at exec and which stays mapped for the life of the
        // process; the C environment's pointers into it then see empty strings.
        unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
    }
    Ok(())
}

/// `env_start` and `env_end`: fields 50 and 51 of `/proc/<pid>/stat`, counted from the first
/// field after the command name (which may itself contain spaces and parentheses).
fn env_bounds(stat: &str) -> Option<(usize, usize)> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // `fields[0]` is field 3 (state).
    let start = fields.get(50 - 3)?.parse().ok()?;
    let end = fields.get(51 - 3)?.parse().ok()?;
    Some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_read_past_a_command_name_with_spaces() {
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        let (start, end) = env_bounds(&own).unwrap();
        assert!(start > 0 && end > start);
        let tail = &own[own.rfind(')').unwrap()..];
        let odd = format!("1 (a) b (c) d{tail}");
        assert_eq!(env_bounds(&odd), Some((start, end)));
    }
}
