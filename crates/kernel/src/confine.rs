//! `[execution] confine = true`: Landlock filesystem confinement of strict-mode
//! kernels, plus a seccomp filter for what Landlock has no right for (Linux
//! only).
//!
//! A confined kernel (the runner and everything it starts) may **write** only
//! beneath a few directories — its private directory (rpc socket, stub
//! module, artifacts), its private working directory and the system temp dir
//! — plus `/dev/null`. **Reads and execution are not restricted**: the
//! interpreter, its standard library and site-packages, shared libraries and
//! the rest of the filesystem stay readable, so this protects the user's files
//! from being changed, not from being read. With Landlock ABI 6 or newer the
//! kernel also may not signal processes outside its own domain (the host, the
//! user's other processes) nor connect to abstract Unix sockets outside it.
//! Tools called from a cell run in the host and are **not** confined.
//!
//! Landlock has no access right for file *metadata*. A seccomp filter
//! ([`BLOCKED_SYSCALLS`]) therefore makes these fail with `EPERM`
//! **everywhere** (seccomp sees numbers, not paths, so the kernel's own
//! files included): changing a file's owner (`chown`, `fchown`, `lchown`,
//! `fchownat`), setting or removing extended attributes (`setxattr`,
//! `lsetxattr`, `fsetxattr`, `removexattr`, `lremovexattr`, `fremovexattr`,
//! `setxattrat`, `removexattrat`), inode flags and fs attributes
//! (`ioctl(FS_IOC_SETFLAGS)`, `ioctl(FS_IOC_FSSETXATTR)`, `file_setattr`:
//! `chattr +i`/`+a`), and `io_uring` (whose `SETXATTR` operations would go
//! around the filter). It does **not** block `chmod` (`chmod`, `fchmod`,
//! `fchmodat`, `fchmodat2`) or `utime` (`utime`, `utimes`, `utimensat`,
//! `futimesat`): seccomp cannot tell a file outside the writable directories
//! from one inside, and blocking them everywhere breaks ordinary Python —
//! `shutil.copy` (`copymode`), `shutil.copy2` and `copytree` (`copystat`),
//! `pathlib.Path.touch` on an existing file, `tarfile` extraction, pip
//! (executable bits of installed scripts) and the runner's own artifacts
//! directory. So a confined cell can still change the mode bits and
//! timestamps of any file it owns. On x86_64 the x32 numbers of the blocked
//! calls are blocked too, and a 32-bit (`int 0x80`) system call kills the
//! process; the filter is built per architecture (x86_64, aarch64, riscv64)
//! and elsewhere `confine = true` is refused.
//!
//! How it is applied: [`Confinement::prepare`] builds the Landlock ruleset
//! (opening the allowed directories) and compiles the seccomp BPF program in
//! the host before the fork (both allocate); between fork and exec,
//! [`ChildConfinement::restrict`] makes only raw, async-signal-safe system
//! calls (`prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self`, then
//! `seccomp(SECCOMP_SET_MODE_FILTER)`). Both restrictions are inherited
//! across `exec` and by every descendant, and cannot be lifted.
//!
//! There is no silent fallback: when the running kernel lacks Landlock, or
//! its ABI is older than [`MIN_ABI`] (ABI 3 is the first that can deny
//! `truncate` outside the allowed directories), or it cannot install a
//! seccomp filter that returns an errno, [`check_supported`] fails and the
//! registry refuses to start.
//!
//! ```
//! use toolcell_kernel::confine::{self, ConfineError, MIN_ABI};
//!
//! // What the host checks at start when `confine = true`.
//! match confine::check_supported() {
//!     Ok(abi) => assert!(abi >= MIN_ABI),
//!     Err(e) => assert!(e.to_string().starts_with("execution.confine")),
//! }
//! // The check itself, fed an ABI, is a pure function.
//! let err = confine::check_abi(Ok(2)).unwrap_err();
//! assert!(matches!(err, ConfineError::AbiTooOld { found: 2, .. }));
//! ```

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

/// The oldest Landlock ABI toolcell confines with: ABI 3 adds
/// `LANDLOCK_ACCESS_FS_TRUNCATE`, without which a confined cell could still
/// truncate any file it can open for reading.
pub const MIN_ABI: u32 = 3;

/// The Landlock ABI from which signals and abstract Unix sockets are scoped.
const SCOPE_ABI: u32 = 6;

/// Why a kernel cannot be confined.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfineError {
    /// The running kernel has no Landlock (not built in, or disabled at boot).
    #[error(
        "execution.confine = true needs Landlock, which the running Linux kernel does not provide ({reason}); set confine = false or enable Landlock (CONFIG_SECURITY_LANDLOCK, lsm=landlock)"
    )]
    Unsupported {
        /// What the probe said.
        reason: String,
    },
    /// Landlock is there but too old.
    #[error(
        "execution.confine = true needs Landlock ABI {needed} or newer (to deny truncate outside the allowed directories); the running kernel has ABI {found}"
    )]
    AbiTooOld {
        /// The ABI found.
        found: u32,
        /// [`MIN_ABI`].
        needed: u32,
    },
    /// Building the ruleset failed (e.g. an allowed directory is missing).
    #[error("execution.confine: cannot build the Landlock ruleset: {0}")]
    Ruleset(String),
    /// The seccomp filter cannot be built or installed here.
    #[error(
        "execution.confine = true needs a seccomp filter (to block chown and extended attributes, which Landlock cannot), and {reason}; set confine = false or run where seccomp filters are allowed"
    )]
    Seccomp {
        /// Why.
        reason: String,
    },
}

/// The Landlock ABI version of the running kernel (`landlock_create_ruleset`
/// with `LANDLOCK_CREATE_RULESET_VERSION`).
///
/// # Errors
/// The system call's error: `ENOSYS` (not built in) or `EOPNOTSUPP`
/// (disabled at boot).
pub fn landlock_abi() -> std::io::Result<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: nix::libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag, the
    // call only returns a number; nothing is read or written.
    let rc = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    u32::try_from(rc).map_err(|_| std::io::Error::other("negative Landlock ABI"))
}

/// Judges a probed ABI (see [`landlock_abi`]): the ABI if it is at least
/// [`MIN_ABI`], else why confinement is impossible. Separate from the probe
/// so the refusal can be tested on a machine that has Landlock.
///
/// # Errors
/// [`ConfineError::Unsupported`] or [`ConfineError::AbiTooOld`].
pub fn check_abi(probe: std::io::Result<u32>) -> Result<u32, ConfineError> {
    match probe {
        Ok(abi) if abi >= MIN_ABI => Ok(abi),
        Ok(0) => Err(ConfineError::Unsupported {
            reason: "ABI 0".into(),
        }),
        Ok(found) => Err(ConfineError::AbiTooOld {
            found,
            needed: MIN_ABI,
        }),
        Err(e) => Err(ConfineError::Unsupported {
            reason: e.to_string(),
        }),
    }
}

/// Whether the running kernel can install a seccomp filter whose action is
/// an errno: `prctl(PR_GET_SECCOMP)` (no seccomp at all: `EINVAL`) and
/// `seccomp(SECCOMP_GET_ACTION_AVAIL, SECCOMP_RET_ERRNO)`.
///
/// # Errors
/// The failing call's error.
pub fn seccomp_probe() -> std::io::Result<()> {
    // SAFETY: PR_GET_SECCOMP takes no pointer; it returns the current mode.
    let mode = unsafe { nix::libc::prctl(nix::libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if mode < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let action: u32 = nix::libc::SECCOMP_RET_ERRNO;
    // SAFETY: SECCOMP_GET_ACTION_AVAIL reads one u32 through the pointer,
    // which points at a live local.
    let rc = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_seccomp,
            nix::libc::SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &raw const action,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Judges a seccomp probe (see [`seccomp_probe`]) and compiles the filter
/// for this architecture: what confinement needs beyond Landlock.
///
/// # Errors
/// [`ConfineError::Seccomp`] saying why.
pub fn check_seccomp(probe: std::io::Result<()>) -> Result<(), ConfineError> {
    probe.map_err(|e| ConfineError::Seccomp {
        reason: format!("the running Linux kernel cannot install one ({e})"),
    })?;
    seccomp_program().map(drop)
}

/// [`check_abi`] and [`check_seccomp`] of the running kernel; the Landlock
/// ABI when both pass.
///
/// # Errors
/// As [`check_abi`] and [`check_seccomp`].
pub fn check_supported() -> Result<u32, ConfineError> {
    let abi = check_abi(landlock_abi())?;
    check_seccomp(seccomp_probe())?;
    Ok(abi)
}

/// `setxattrat(2)` and `removexattrat(2)` (Linux 6.13; one number on every
/// architecture), not yet in `libc`.
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;
/// `file_setattr(2)` (Linux 6.17), not yet in `libc`.
const SYS_FILE_SETATTR: i64 = 469;
/// `FS_IOC_SETFLAGS` (`chattr`) and `FS_IOC_FSSETXATTR`.
const FS_IOC_SETFLAGS: u64 = 0x4008_6602;
const FS_IOC_FSSETXATTR: u64 = 0x401c_5820;
/// `TIOCSTI`: push bytes into a terminal's input, as if typed.
const TIOCSTI: u64 = 0x5412;
/// The ioctl commands a confined kernel gets `EPERM` from.
const BLOCKED_IOCTLS: [u64; 3] = [FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, TIOCSTI];

/// The system calls a confined kernel gets `EPERM` from, by name and number
/// on this architecture (`ioctl` only for the three commands above,
/// `mknod` and `mknodat` only for character and block devices: FIFOs and
/// sockets stay possible).
/// (`chown` and `lchown` exist only on x86_64; elsewhere `fchownat` is the
/// only path-based call.)
#[cfg(target_arch = "x86_64")]
pub const BLOCKED_SYSCALLS: &[(&str, i64)] = {
    use nix::libc as c;
    &[
        ("chown", c::SYS_chown),
        ("lchown", c::SYS_lchown),
        ("fchown", c::SYS_fchown),
        ("fchownat", c::SYS_fchownat),
        ("setxattr", c::SYS_setxattr),
        ("lsetxattr", c::SYS_lsetxattr),
        ("fsetxattr", c::SYS_fsetxattr),
        ("removexattr", c::SYS_removexattr),
        ("lremovexattr", c::SYS_lremovexattr),
        ("fremovexattr", c::SYS_fremovexattr),
        ("setxattrat", SYS_SETXATTRAT),
        ("removexattrat", SYS_REMOVEXATTRAT),
        ("file_setattr", SYS_FILE_SETATTR),
        ("io_uring_setup", c::SYS_io_uring_setup),
        ("io_uring_enter", c::SYS_io_uring_enter),
        ("io_uring_register", c::SYS_io_uring_register),
        ("ioctl", c::SYS_ioctl),
        ("mknod", c::SYS_mknod),
        ("mknodat", c::SYS_mknodat),
    ]
};

/// The system calls a confined kernel gets `EPERM` from (see the x86_64 list).
#[cfg(any(target_arch = "aarch64", target_arch = "riscv64"))]
pub const BLOCKED_SYSCALLS: &[(&str, i64)] = {
    use nix::libc as c;
    &[
        ("fchown", c::SYS_fchown),
        ("fchownat", c::SYS_fchownat),
        ("setxattr", c::SYS_setxattr),
        ("lsetxattr", c::SYS_lsetxattr),
        ("fsetxattr", c::SYS_fsetxattr),
        ("removexattr", c::SYS_removexattr),
        ("lremovexattr", c::SYS_lremovexattr),
        ("fremovexattr", c::SYS_fremovexattr),
        ("setxattrat", SYS_SETXATTRAT),
        ("removexattrat", SYS_REMOVEXATTRAT),
        ("file_setattr", SYS_FILE_SETATTR),
        ("io_uring_setup", c::SYS_io_uring_setup),
        ("io_uring_enter", c::SYS_io_uring_enter),
        ("io_uring_register", c::SYS_io_uring_register),
        ("ioctl", c::SYS_ioctl),
        ("mknodat", c::SYS_mknodat),
    ]
};

/// No filter is built for other architectures: `confine = true` is refused.
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
)))]
pub const BLOCKED_SYSCALLS: &[(&str, i64)] = &[];

/// The compiled seccomp program: `EPERM` for [`BLOCKED_SYSCALLS`] (for
/// `ioctl`, only `FS_IOC_SETFLAGS` and `FS_IOC_FSSETXATTR`), everything else
/// allowed; a call of another architecture kills the process.
///
/// # Errors
/// [`ConfineError::Seccomp`] on an architecture without a filter.
pub fn seccomp_program() -> Result<seccompiler::BpfProgram, ConfineError> {
    let unsupported = |why: String| ConfineError::Seccomp { reason: why };
    let arch = seccompiler::TargetArch::try_from(std::env::consts::ARCH).map_err(|_| {
        unsupported(format!(
            "toolcell builds no filter for the {} architecture (only x86_64, aarch64, riscv64)",
            std::env::consts::ARCH
        ))
    })?;
    if BLOCKED_SYSCALLS.is_empty() {
        return Err(unsupported(format!(
            "toolcell builds no filter for the {} architecture",
            std::env::consts::ARCH
        )));
    }
    let err = |e: seccompiler::BackendError| unsupported(format!("building it failed: {e}"));
    // One rule per value of argument `arg` (masked with `mask`) to refuse.
    let arg_rules = |arg: u8,
                     mask: u64,
                     values: &[u64]|
     -> Result<Vec<seccompiler::SeccompRule>, ConfineError> {
        values
            .iter()
            .map(|&v| {
                let cond = seccompiler::SeccompCondition::new(
                    arg,
                    seccompiler::SeccompCmpArgLen::Dword,
                    seccompiler::SeccompCmpOp::MaskedEq(mask),
                    v,
                )
                .map_err(err)?;
                seccompiler::SeccompRule::new(vec![cond]).map_err(err)
            })
            .collect()
    };
    let devices = [u64::from(nix::libc::S_IFCHR), u64::from(nix::libc::S_IFBLK)];
    let file_type = u64::from(nix::libc::S_IFMT);
    let mut rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> = BTreeMap::new();
    for &(name, nr) in BLOCKED_SYSCALLS {
        let r = match name {
            "ioctl" => arg_rules(1, u64::from(u32::MAX), &BLOCKED_IOCTLS)?,
            "mknod" => arg_rules(1, file_type, &devices)?,
            "mknodat" => arg_rules(2, file_type, &devices)?,
            _ => Vec::new(),
        };
        // x32 calls carry the same numbers with bit 30 set and the x86_64
        // audit arch: block them too.
        if cfg!(target_arch = "x86_64") {
            rules.insert(nr | X32_SYSCALL_BIT, r.clone());
        }
        rules.insert(nr, r);
    }
    let filter = seccompiler::SeccompFilter::new(
        rules,
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(nix::libc::EPERM as u32),
        arch,
    )
    .map_err(err)?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| err(e))
}

/// `__X32_SYSCALL_BIT`.
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// A Landlock ruleset and a seccomp program, built in the host, ready to be
/// enforced in a child.
#[derive(Debug)]
pub struct Confinement {
    fd: OwnedFd,
    /// The access rights beneath a writable directory (Landlock bits).
    write_bits: u64,
    filter: Arc<seccompiler::BpfProgram>,
    writable: Vec<PathBuf>,
}

/// What the child between fork and exec needs to confine itself: the
/// ruleset's descriptor (kept open by [`Confinement`] until after spawn) and
/// the compiled seccomp program. Cheap to clone into a `pre_exec` closure.
#[derive(Debug, Clone)]
pub struct ChildConfinement {
    ruleset_fd: RawFd,
    write_bits: u64,
    filter: Arc<seccompiler::BpfProgram>,
}

impl ChildConfinement {
    /// Adds a writable rule for `dir` as the calling process sees it (a
    /// sandbox's own `/tmp`, which the host could not open). For the
    /// child between fork and exec: raw system calls only.
    ///
    /// # Errors
    /// The failing call's `errno`.
    pub fn allow_beneath_in_child(&self, dir: &std::ffi::CStr) -> std::io::Result<()> {
        #[repr(C, packed)]
        struct PathBeneathAttr {
            allowed_access: u64,
            parent_fd: i32,
        }
        // SAFETY: open/landlock_add_rule/close with a stack struct in the
        // kernel's layout.
        unsafe {
            let fd = nix::libc::open(
                dir.as_ptr(),
                nix::libc::O_PATH | nix::libc::O_DIRECTORY | nix::libc::O_CLOEXEC,
            );
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let attr = PathBeneathAttr {
                allowed_access: self.write_bits,
                parent_fd: fd,
            };
            // LANDLOCK_RULE_PATH_BENEATH = 1
            let rc = nix::libc::syscall(
                nix::libc::SYS_landlock_add_rule,
                self.ruleset_fd,
                1u32,
                &raw const attr,
                0u32,
            );
            let err = std::io::Error::last_os_error();
            nix::libc::close(fd);
            if rc != 0 {
                return Err(err);
            }
        }
        Ok(())
    }

    /// Enforces Landlock, then the seccomp filter, on the calling process.
    /// Meant for the child between fork and exec: raw system calls only, no
    /// allocation (async-signal-safe).
    ///
    /// # Errors
    /// The failing call's `errno`.
    pub fn restrict(&self) -> std::io::Result<()> {
        Confinement::restrict_in_child(self.ruleset_fd)?;
        let prog = nix::libc::sock_fprog {
            len: u16::try_from(self.filter.len())
                .map_err(|_| std::io::Error::from_raw_os_error(nix::libc::E2BIG))?,
            // `seccompiler::sock_filter` is `#[repr(C)]` with the kernel's
            // layout (u16, u8, u8, u32), as `libc::sock_filter`.
            filter: self
                .filter
                .as_ptr()
                .cast::<nix::libc::sock_filter>()
                .cast_mut(),
        };
        // SAFETY: the kernel copies the program from `prog`, which points at
        // the live, immutable filter; no_new_privs is already set.
        let rc = unsafe {
            nix::libc::syscall(
                nix::libc::SYS_seccomp,
                nix::libc::SECCOMP_SET_MODE_FILTER,
                0u32,
                &raw const prog,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Confinement {
    /// Builds the ruleset: read, execute (and device ioctls) everywhere;
    /// every access right beneath each of `writable` (directories) and write
    /// access to `/dev/null`; signals and abstract Unix sockets scoped to the
    /// kernel's own domain when the ABI has scopes.
    ///
    /// # Errors
    /// [`ConfineError`] when Landlock is missing or too old, or a directory
    /// cannot be opened.
    pub fn prepare(writable: &[PathBuf]) -> Result<Self, ConfineError> {
        let found = check_supported()?;
        let abi = ABI::from(i32::try_from(found).unwrap_or(i32::MAX));
        let rs = |e: landlock::RulesetError| ConfineError::Ruleset(e.to_string());
        let mut read = AccessFs::from_read(abi);
        if found >= 5 {
            read |= AccessFs::IoctlDev;
        }
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))
            .map_err(rs)?;
        if found >= SCOPE_ABI {
            ruleset = ruleset
                .scope(Scope::Signal | Scope::AbstractUnixSocket)
                .map_err(rs)?;
        }
        let open = |p: &Path| {
            PathFd::new(p)
                .map_err(|e| ConfineError::Ruleset(format!("cannot open {}: {e}", p.display())))
        };
        let mut created = ruleset
            .create()
            .map_err(rs)?
            .add_rule(PathBeneath::new(open(Path::new("/"))?, read))
            .map_err(rs)?;
        // Everything beneath the writable directories but making device
        // nodes: a character or block device made there would reach what
        // it names (/dev/kmsg, /dev/mem, a terminal) past every rule.
        let write = AccessFs::from_all(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock);
        for dir in writable {
            created = created
                .add_rule(PathBeneath::new(open(dir)?, write))
                .map_err(rs)?;
        }
        let devnull = Path::new("/dev/null");
        created = created
            .add_rule(PathBeneath::new(open(devnull)?, AccessFs::from_file(abi)))
            .map_err(rs)?;
        let fd: Option<OwnedFd> = created.into();
        let fd = fd.ok_or_else(|| ConfineError::Unsupported {
            reason: "the Landlock ruleset was not created".into(),
        })?;
        Ok(Self {
            fd,
            write_bits: write.bits(),
            filter: Arc::new(seccomp_program()?),
            writable: writable.to_vec(),
        })
    }

    /// The part the child needs ([`ChildConfinement::restrict`]).
    pub fn for_child(&self) -> ChildConfinement {
        ChildConfinement {
            ruleset_fd: self.fd.as_raw_fd(),
            write_bits: self.write_bits,
            filter: Arc::clone(&self.filter),
        }
    }

    /// The directories a confined kernel may write beneath.
    pub fn writable(&self) -> &[PathBuf] {
        &self.writable
    }

    /// The ruleset's file descriptor, to pass into a `pre_exec` closure.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Enforces the Landlock ruleset `fd` (only; see
    /// [`ChildConfinement::restrict`] for the whole confinement) on the
    /// calling process. Meant for the child between fork and exec: only two
    /// raw system calls, no allocation (async-signal-safe).
    ///
    /// # Errors
    /// The failing call's `errno`.
    pub fn restrict_in_child(fd: RawFd) -> std::io::Result<()> {
        // SAFETY: prctl and landlock_restrict_self take integers only; `fd`
        // is the ruleset descriptor the host keeps open until after spawn.
        unsafe {
            if nix::libc::prctl(nix::libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if nix::libc::syscall(nix::libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_landlock_is_refused_naming_the_key() {
        let e = check_abi(Err(std::io::Error::from_raw_os_error(nix::libc::ENOSYS))).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("execution.confine = true needs Landlock"),
            "{text}"
        );
        assert!(text.contains("not implemented"), "{text}");
        let e = check_abi(Err(std::io::Error::from_raw_os_error(
            nix::libc::EOPNOTSUPP,
        )))
        .unwrap_err();
        assert!(matches!(e, ConfineError::Unsupported { .. }));
    }

    #[test]
    fn a_kernel_that_cannot_install_a_seccomp_filter_is_refused() {
        let e =
            check_seccomp(Err(std::io::Error::from_raw_os_error(nix::libc::EINVAL))).unwrap_err();
        assert!(matches!(e, ConfineError::Seccomp { .. }));
        let text = e.to_string();
        assert!(
            text.starts_with("execution.confine = true needs a seccomp filter"),
            "{text}"
        );
        assert!(
            text.contains("cannot install one (Invalid argument"),
            "{text}"
        );
        // Here (x86_64, seccomp available) it passes, and the program
        // blocks every listed call and its x32 twin.
        check_seccomp(seccomp_probe()).unwrap();
        let prog = seccomp_program().unwrap();
        assert!(prog.len() > 2 * BLOCKED_SYSCALLS.len(), "{}", prog.len());
    }

    #[test]
    fn an_old_abi_is_refused_with_both_numbers() {
        let e = check_abi(Ok(2)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "execution.confine = true needs Landlock ABI 3 or newer (to deny truncate outside the allowed directories); the running kernel has ABI 2"
        );
        assert_eq!(check_abi(Ok(3)).unwrap(), 3);
        assert_eq!(check_abi(Ok(7)).unwrap(), 7);
    }
}
