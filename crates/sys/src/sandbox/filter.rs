//! The sandbox's seccomp filters: `EPERM` for what a cell has no business
//! calling (tracing, mounting, new namespaces, kernel modules and
//! keyrings, device nodes, pushing input into a terminal), `ENOSYS` for
//! `clone3` (its flags sit in memory a filter cannot read; the C library
//! falls back to `clone`, whose flags are checked).

use std::collections::BTreeMap;

use nix::libc as c;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::SandboxError;

/// `TIOCSTI` and `TIOCLINUX`: typing into, and driving, a terminal.
const BLOCKED_IOCTLS: [u64; 2] = [0x5412, 0x541c];

/// The namespace flags `clone` may not carry.
const NEW_NAMESPACES: [u64; 8] = [
    c::CLONE_NEWUSER as u64,
    c::CLONE_NEWNS as u64,
    c::CLONE_NEWPID as u64,
    c::CLONE_NEWNET as u64,
    c::CLONE_NEWIPC as u64,
    c::CLONE_NEWUTS as u64,
    c::CLONE_NEWCGROUP as u64,
    0x80, // CLONE_NEWTIME
];

/// The calls refused with `EPERM`, by name (for documentation and tests)
/// and number. `clone` only with a namespace flag, `ioctl` only for the
/// commands above, `mknod`/`mknodat` only for devices.
pub const BLOCKED: &[(&str, i64)] = &[
    ("ptrace", c::SYS_ptrace),
    ("process_vm_readv", c::SYS_process_vm_readv),
    ("process_vm_writev", c::SYS_process_vm_writev),
    ("kcmp", c::SYS_kcmp),
    ("mount", c::SYS_mount),
    ("umount2", c::SYS_umount2),
    ("pivot_root", c::SYS_pivot_root),
    ("chroot", c::SYS_chroot),
    ("open_tree", c::SYS_open_tree),
    ("move_mount", c::SYS_move_mount),
    ("fsopen", c::SYS_fsopen),
    ("fsconfig", c::SYS_fsconfig),
    ("fsmount", c::SYS_fsmount),
    ("fspick", c::SYS_fspick),
    ("mount_setattr", c::SYS_mount_setattr),
    ("unshare", c::SYS_unshare),
    ("setns", c::SYS_setns),
    ("clone", c::SYS_clone),
    ("kexec_load", c::SYS_kexec_load),
    ("kexec_file_load", c::SYS_kexec_file_load),
    ("init_module", c::SYS_init_module),
    ("finit_module", c::SYS_finit_module),
    ("delete_module", c::SYS_delete_module),
    ("bpf", c::SYS_bpf),
    ("perf_event_open", c::SYS_perf_event_open),
    ("userfaultfd", c::SYS_userfaultfd),
    ("keyctl", c::SYS_keyctl),
    ("add_key", c::SYS_add_key),
    ("request_key", c::SYS_request_key),
    ("open_by_handle_at", c::SYS_open_by_handle_at),
    ("name_to_handle_at", c::SYS_name_to_handle_at),
    ("syslog", c::SYS_syslog),
    ("reboot", c::SYS_reboot),
    ("swapon", c::SYS_swapon),
    ("swapoff", c::SYS_swapoff),
    ("acct", c::SYS_acct),
    ("quotactl", c::SYS_quotactl),
    ("io_uring_setup", c::SYS_io_uring_setup),
    ("io_uring_enter", c::SYS_io_uring_enter),
    ("io_uring_register", c::SYS_io_uring_register),
    #[cfg(target_arch = "x86_64")]
    ("mknod", c::SYS_mknod),
    ("mknodat", c::SYS_mknodat),
    ("ioctl", c::SYS_ioctl),
];

/// `__X32_SYSCALL_BIT`: x32 calls carry the same numbers with bit 30 set.
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

fn err(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Filter(e.to_string())
}

fn arch() -> Result<TargetArch, SandboxError> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|_| {
        SandboxError::Filter(format!(
            "there is none for the {} architecture (only x86_64, aarch64, riscv64)",
            std::env::consts::ARCH
        ))
    })
}

/// One rule per value: argument `arg` masked with `mask` equals it.
fn masked(arg: u8, mask: u64, values: &[u64]) -> Result<Vec<SeccompRule>, SandboxError> {
    values
        .iter()
        .map(|&v| {
            let m = if mask == 0 { v } else { mask };
            let cond =
                SeccompCondition::new(arg, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(m), v)
                    .map_err(err)?;
            SeccompRule::new(vec![cond]).map_err(err)
        })
        .collect()
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, SandboxError> {
    let mut all = BTreeMap::new();
    for (nr, r) in rules {
        if cfg!(target_arch = "x86_64") {
            all.insert(nr | X32_SYSCALL_BIT, r.clone());
        }
        all.insert(nr, r);
    }
    let filter = SeccompFilter::new(
        all,
        SeccompAction::Allow,
        SeccompAction::Errno(errno.unsigned_abs()),
        arch()?,
    )
    .map_err(err)?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| err(e))
}

/// The two compiled programs: the `EPERM` list, then `clone3` → `ENOSYS`.
///
/// # Errors
/// [`SandboxError::Filter`] on an architecture without one.
pub fn program() -> Result<Vec<BpfProgram>, SandboxError> {
    let devices = [u64::from(c::S_IFCHR), u64::from(c::S_IFBLK)];
    let file_type = u64::from(c::S_IFMT);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &(name, nr) in BLOCKED {
        let r = match name {
            // The request is an unsigned int: compare its low 32 bits.
            "ioctl" => masked(1, u64::from(u32::MAX), &BLOCKED_IOCTLS)?,
            "mknod" => masked(1, file_type, &devices)?,
            "mknodat" => masked(2, file_type, &devices)?,
            // x86_64 passes clone's flags first, as do aarch64 and riscv64.
            "clone" => masked(0, 0, &NEW_NAMESPACES)?,
            _ => Vec::new(),
        };
        rules.insert(nr, r);
    }
    let eperm = compile(rules, c::EPERM)?;
    let mut clone3 = BTreeMap::new();
    clone3.insert(c::SYS_clone3, Vec::new());
    Ok(vec![eperm, compile(clone3, c::ENOSYS)?])
}
