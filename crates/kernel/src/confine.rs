//! `[execution] confine = true`: Landlock filesystem confinement of strict-mode
//! kernels (Linux only).
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
//! How it is applied: [`Confinement::prepare`] builds the Landlock ruleset in
//! the host (opening the allowed directories, which allocates) before the
//! fork; between fork and exec, [`Confinement::restrict_in_child`] makes two
//! raw, async-signal-safe system calls (`prctl(PR_SET_NO_NEW_PRIVS)` and
//! `landlock_restrict_self`). The restriction is inherited across `exec` and
//! by every descendant, and cannot be lifted.
//!
//! There is no silent fallback: when the running kernel lacks Landlock, or
//! its ABI is older than [`MIN_ABI`] (ABI 3 is the first that can deny
//! `truncate` outside the allowed directories), [`check_supported`] fails and
//! the registry refuses to start.
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

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

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

/// [`check_abi`] of the running kernel.
///
/// # Errors
/// As [`check_abi`].
pub fn check_supported() -> Result<u32, ConfineError> {
    check_abi(landlock_abi())
}

/// A Landlock ruleset, built in the host, ready to be enforced in a child.
#[derive(Debug)]
pub struct Confinement {
    fd: OwnedFd,
    writable: Vec<PathBuf>,
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
        for dir in writable {
            created = created
                .add_rule(PathBeneath::new(open(dir)?, AccessFs::from_all(abi)))
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
            writable: writable.to_vec(),
        })
    }

    /// The directories a confined kernel may write beneath.
    pub fn writable(&self) -> &[PathBuf] {
        &self.writable
    }

    /// The ruleset's file descriptor, to pass into a `pre_exec` closure.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Enforces the ruleset `fd` on the calling process. Meant for the child
    /// between fork and exec: only two raw system calls, no allocation
    /// (async-signal-safe).
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
