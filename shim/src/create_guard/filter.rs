//! The guard's BPF program: which syscalls go to init.

const O_CREAT: u32 = libc::O_CREAT as u32;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Syscalls that always create an entry (x86-64 numbers; other ABIs are killed by the main
/// policy's guard).
#[cfg(target_arch = "x86_64")]
const ALWAYS: &[libc::c_long] = &[
    libc::SYS_creat,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_mknod,
    libc::SYS_mknodat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    // Not a creation: seen (and let through) so init knows each process's umask without
    // reading /proc/PID/status on every creation.
    libc::SYS_umask,
];

/// The guard's BPF program.
#[cfg(target_arch = "x86_64")]
pub fn filter() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    let n = ALWAYS.len() as u8;
    // Layout: [0] ld arch, [1] jeq arch, [2] ld nr, [3..3+n) jeq always -> NOTIFY,
    // then jeq open -> OPEN, jeq openat -> OPENAT, jeq openat2 -> ENOSYS, ret ALLOW,
    // OPEN: ld args[1], jset O_CREAT -> NOTIFY, ret ALLOW,
    // OPENAT: ld args[2], jset O_CREAT -> NOTIFY, ret ALLOW,
    // NOTIFY: ret USER_NOTIF, ENOSYS: ret ERRNO|ENOSYS.
    let base = 3 + n; // index of `jeq open`
    let open_at = base + 4; // OPEN label
    let openat_at = open_at + 3;
    let notify_at = openat_at + 3;
    let enosys_at = notify_at + 1;
    let allow_early = base + 3; // `ret ALLOW` after the jeqs
    let mut p = vec![
        stmt(LD_W_ABS, 4),
        // Another ABI: not ours to judge (the main policy kills it).
        jump(JEQ, AUDIT_ARCH_X86_64, 0, allow_early - 2),
        stmt(LD_W_ABS, 0),
    ];
    for (i, nr) in ALWAYS.iter().enumerate() {
        let here = 3 + i as u8;
        p.push(jump(JEQ, *nr as u32, notify_at - here - 1, 0));
    }
    p.push(jump(JEQ, libc::SYS_open as u32, open_at - base - 1, 0));
    p.push(jump(
        JEQ,
        libc::SYS_openat as u32,
        openat_at - (base + 1) - 1,
        0,
    ));
    p.push(jump(
        JEQ,
        libc::SYS_openat2 as u32,
        enosys_at - (base + 2) - 1,
        0,
    ));
    p.push(stmt(RET, libc::SECCOMP_RET_ALLOW));
    // OPEN: flags are args[1] (low 32 bits at offset 16 + 8).
    p.push(stmt(LD_W_ABS, 24));
    p.push(jump(JSET, O_CREAT, notify_at - (open_at + 1) - 1, 0));
    p.push(stmt(RET, libc::SECCOMP_RET_ALLOW));
    // OPENAT: flags are args[2].
    p.push(stmt(LD_W_ABS, 32));
    p.push(jump(JSET, O_CREAT, notify_at - (openat_at + 1) - 1, 0));
    p.push(stmt(RET, libc::SECCOMP_RET_ALLOW));
    p.push(stmt(RET, libc::SECCOMP_RET_USER_NOTIF));
    p.push(stmt(RET, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    debug_assert_eq!(p.len(), enosys_at as usize + 1);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_has_consistent_jumps() {
        let p = filter();
        for (i, ins) in p.iter().enumerate() {
            if ins.code & 0x07 == libc::BPF_JMP as u16 {
                assert!(i + 1 + (ins.jt as usize) < p.len());
                assert!(i + 1 + (ins.jf as usize) < p.len());
            }
        }
        assert_eq!(
            p.last().unwrap().k,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
    }
}
