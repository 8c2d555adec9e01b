//! Private directories that another local user cannot swap or fill.
//!
//! Every directory toolcell keeps under a shared location (the temp dir, the
//! runtime dir) — kernels root, kernel dirs, spill dir, daemon dir, journal
//! dir — is opened through [`PrivateDir::ensure`]. It walks the path one
//! component at a time from `/` with `O_NOFOLLOW` directory fds, so what it
//! checks is what it holds:
//!
//! - every existing ancestor is owned by root or by us, and one that others
//!   may write to must be sticky (like `/tmp`), where nobody but the owner
//!   can rename or remove an entry;
//! - a symlinked ancestor is followed only when it sits in a directory
//!   nobody else can write to (a `/var/run -> /run` link, say);
//! - missing components are created `0700`; the directory itself must be a
//!   real directory owned by us, and is tightened to `0700` when it is ours
//!   and looser.
//!
//! Files inside are created with [`PrivateDir::create_file`] (`openat` with
//! `O_CREAT | O_EXCL | O_NOFOLLOW`, mode `0600`), and subdirectories with
//! [`PrivateDir::create_dir`] (`mkdirat` + an `O_NOFOLLOW` open + `fstat`),
//! so nothing is ever re-resolved by path between the check and the use.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use toolcell_sys::private_dir::PrivateDir;
//! let tmp = tempfile::tempdir()?;
//! let root = PrivateDir::ensure(&tmp.path().join("toolcell/kernels"))?;
//! let k = root.create_dir("k-1")?;
//! let mut f = k.create_file("runner.py")?;
//! std::io::Write::write_all(&mut f, b"print('hi')")?;
//! # Ok(()) }
//! ```

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, mkdirat};

/// Why a directory cannot be used privately. Every variant names the path and
/// says what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivateDirError {
    /// A component is owned by another user.
    #[error(
        "{path} is owned by uid {owner}, not by you (uid {ours}); another user could swap what toolcell puts there — remove it or choose another directory"
    )]
    NotOwned {
        /// The offending component.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our uid.
        ours: u32,
    },
    /// An ancestor others can write to lacks the sticky bit.
    #[error(
        "{path} can be written by other users (mode {mode:04o}) and is not sticky, so an entry under it could be swapped — make it yours with mode 0700 (or sticky, like /tmp) or choose another directory"
    )]
    SharedNotSticky {
        /// The offending ancestor.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// A component is a symlink where only a real directory is safe.
    #[error(
        "{path} is a symlink in a directory other users can write to; refusing to follow it — remove it or choose another directory"
    )]
    Symlink {
        /// The link.
        path: PathBuf,
    },
    /// A component is not a directory.
    #[error("{path} is not a directory")]
    NotADirectory {
        /// The offending component.
        path: PathBuf,
    },
    /// The directory is ours but others may write to it: entries may have
    /// been planted.
    #[error(
        "{path} can be written by group or others (mode {mode:04o}); it must be yours with mode 0700 — fix its mode (chmod 700) or remove it"
    )]
    TooOpen {
        /// The directory.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// A name given to create inside a directory is not one plain component.
    #[error("{name:?} is not a plain file name")]
    BadName {
        /// The name.
        name: String,
    },
    /// A system call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(Errno) -> PrivateDirError + 'a {
    move |e| PrivateDirError::Io {
        what,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// An open directory that is ours, `0700`, and reached without following any
/// link another user could have planted.
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
    fd: OwnedFd,
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

fn our_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn is_dir(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
}

/// Others (group or world) may create, rename or remove entries.
fn shared(st: &FileStat) -> bool {
    st.st_mode & 0o022 != 0
}

fn sticky(st: &FileStat) -> bool {
    st.st_mode & 0o1000 != 0
}

/// A directory of ours that others may only read or enter is tightened to
/// 0700; one others may write to is refused (they may have planted entries).
fn tighten(fd: &OwnedFd, st: &FileStat, path: &Path) -> Result<(), PrivateDirError> {
    let mode = st.st_mode & 0o7777;
    if mode == 0o700 {
        return Ok(());
    }
    if mode & 0o022 != 0 {
        return Err(PrivateDirError::TooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    fchmod(fd.as_fd(), Mode::from_bits_truncate(0o700)).map_err(io("tightening the mode of", path))
}

impl PrivateDir {
    /// Opens `path` as a private directory, creating what is missing.
    ///
    /// # Errors
    /// [`PrivateDirError`] naming the component that is not safe and why.
    pub fn ensure(path: &Path) -> Result<Self, PrivateDirError> {
        let abs = std::path::absolute(path).map_err(|source| PrivateDirError::Io {
            what: "resolving",
            path: path.to_path_buf(),
            source,
        })?;
        Self::walk(&abs, 0)
    }

    /// [`PrivateDir::ensure`] for a default location under a shared parent
    /// (the temp dir): when `path` cannot be used safely (another user made
    /// it first), a fresh private directory `<parent>/<prefix>XXXXXX` is made
    /// instead, with a warning naming the refused path. The second value is
    /// the refusal, when there was one.
    ///
    /// # Errors
    /// Only when no private directory can be made at all.
    pub fn ensure_or_fresh(
        path: &Path,
        parent: &Path,
        prefix: &str,
    ) -> Result<(Self, Option<PrivateDirError>), PrivateDirError> {
        match Self::ensure(path) {
            Ok(d) => Ok((d, None)),
            Err(refused) => {
                tracing::warn!("{refused}; using a fresh private directory instead");
                match Self::fresh(parent, prefix)? {
                    Some(d) => Ok((d, Some(refused))),
                    None => Err(refused),
                }
            }
        }
    }

    /// [`PrivateDir::ensure_or_fresh`] for a default location that later
    /// processes must find again (the daemon's socket, which every
    /// `exec --session` looks for): when `path` is refused, the first
    /// directory by name among `<parent>/<prefix>XXXXXX` that is ours and
    /// passes every check of [`PrivateDir::ensure`] is used — one an
    /// earlier fallback made — and only when there is none is a fresh one
    /// made (then the first by name is taken again, so that processes
    /// making one at the same moment settle on the same). Entries of other
    /// users under that prefix are never opened.
    ///
    /// # Errors
    /// Only when no private directory can be found or made at all.
    pub fn ensure_or_reuse(
        path: &Path,
        parent: &Path,
        prefix: &str,
    ) -> Result<(Self, Option<PrivateDirError>), PrivateDirError> {
        let refused = match Self::ensure(path) {
            Ok(d) => return Ok((d, None)),
            Err(e) => e,
        };
        if let Some(d) = Self::first_own(parent, prefix) {
            tracing::warn!("{refused}; using {} instead", d.path().display());
            return Ok((d, Some(refused)));
        }
        tracing::warn!("{refused}; using a fresh private directory instead");
        let Some(made) = Self::fresh(parent, prefix)? else {
            return Err(refused);
        };
        Ok((
            Self::first_own(parent, prefix).unwrap_or(made),
            Some(refused),
        ))
    }

    /// The first directory by name `<parent>/<prefix>XXXXXX` (six of
    /// `[a-z0-9]`, as [`PrivateDir::fresh`] names them) that is ours and
    /// passes [`PrivateDir::ensure`].
    fn first_own(parent: &Path, prefix: &str) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let ours = our_uid();
        let mut names: Vec<String> = std::fs::read_dir(parent)
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| {
                n.strip_prefix(prefix).is_some_and(|rest| {
                    rest.len() == 6
                        && rest
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                })
            })
            .collect();
        names.sort();
        names.into_iter().find_map(|n| {
            let candidate = parent.join(&n);
            // Someone else's entry (or a link) is not even walked into.
            let md = std::fs::symlink_metadata(&candidate).ok()?;
            if !md.is_dir() || md.uid() != ours {
                return None;
            }
            Self::ensure(&candidate).ok()
        })
    }

    /// A fresh private directory `<parent>/<prefix>XXXXXX`; `None` when
    /// sixteen random names were all taken.
    fn fresh(parent: &Path, prefix: &str) -> Result<Option<Self>, PrivateDirError> {
        let base = Self::ensure_shared_parent(parent)?;
        for _ in 0..16 {
            let mut b = [0u8; 6];
            getrandom::fill(&mut b).map_err(|e| PrivateDirError::Io {
                what: "drawing a random name under",
                path: parent.to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            })?;
            let suffix: String = b
                .iter()
                .map(|x| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[usize::from(*x) % 36]))
                .collect();
            match base.create_dir(&format!("{prefix}{suffix}")) {
                Ok(d) => return Ok(Some(d)),
                Err(PrivateDirError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Opens an existing shared parent (like `/tmp`) after the ancestor
    /// checks, without requiring it to be ours.
    fn ensure_shared_parent(parent: &Path) -> Result<Self, PrivateDirError> {
        let abs = std::path::absolute(parent).map_err(|source| PrivateDirError::Io {
            what: "resolving",
            path: parent.to_path_buf(),
            source,
        })?;
        let (fd, path) = Self::walk_ancestors(&abs, 0, false)?;
        Ok(Self { path, fd })
    }

    /// `fd` as a private dir: it must be ours; a merely readable one is
    /// tightened to 0700 (see [`tighten`]).
    fn owned(fd: OwnedFd, path: PathBuf) -> Result<Self, PrivateDirError> {
        let st = fstat(fd.as_fd()).map_err(io("inspecting", &path))?;
        let ours = our_uid();
        if st.st_uid != ours {
            return Err(PrivateDirError::NotOwned {
                path,
                owner: st.st_uid,
                ours,
            });
        }
        tighten(&fd, &st, &path)?;
        Ok(Self { path, fd })
    }

    fn walk(abs: &Path, depth: u32) -> Result<Self, PrivateDirError> {
        let (fd, path) = Self::walk_ancestors(abs, depth, true)?;
        Self::owned(fd, path)
    }

    /// Walks `abs` from `/`, checking every ancestor, creating missing
    /// components when `create`. Returns the last component's fd.
    fn walk_ancestors(
        abs: &Path,
        depth: u32,
        create: bool,
    ) -> Result<(OwnedFd, PathBuf), PrivateDirError> {
        if depth > 8 {
            return Err(PrivateDirError::Io {
                what: "too many symlinks resolving",
                path: abs.to_path_buf(),
                source: Errno::ELOOP.into(),
            });
        }
        let ours = our_uid();
        let mut fd = nix::fcntl::open("/", DIR_FLAGS, Mode::empty())
            .map_err(io("opening", Path::new("/")))?;
        let mut here = PathBuf::from("/");
        let mut parent_st = fstat(fd.as_fd()).map_err(io("inspecting", &here))?;
        let comps: Vec<Component<'_>> = abs.components().collect();
        for (i, c) in comps.iter().enumerate() {
            let name: &OsStr = match c {
                Component::RootDir | Component::CurDir => continue,
                Component::Prefix(_) => continue,
                Component::ParentDir => {
                    // `..` after a checked component: restart from the
                    // normalised path so every component is checked.
                    let mut norm = PathBuf::new();
                    for c in &comps {
                        match c {
                            Component::ParentDir => {
                                norm.pop();
                            }
                            other => norm.push(other.as_os_str()),
                        }
                    }
                    return Self::walk_ancestors(&norm, depth + 1, create);
                }
                Component::Normal(n) => n,
            };
            let next = here.join(name);
            let opened = openat(fd.as_fd(), name, DIR_FLAGS, Mode::empty());
            let child = match opened {
                Ok(f) => f,
                Err(Errno::ENOENT) if create => {
                    match mkdirat(fd.as_fd(), name, Mode::from_bits_truncate(0o700)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(io("creating", &next)(e)),
                    }
                    openat(fd.as_fd(), name, DIR_FLAGS, Mode::empty())
                        .map_err(|e| Self::open_error(e, &next))?
                }
                Err(Errno::ELOOP) | Err(Errno::ENOTDIR) => {
                    // A symlink (or a file). Follow a link only where no one
                    // else could have planted it.
                    let st = nix::sys::stat::fstatat(
                        fd.as_fd(),
                        name,
                        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                    )
                    .map_err(io("inspecting", &next))?;
                    let is_link =
                        SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK;
                    if !is_link {
                        return Err(PrivateDirError::NotADirectory { path: next });
                    }
                    if shared(&parent_st) || (st.st_uid != 0 && st.st_uid != ours) {
                        return Err(PrivateDirError::Symlink { path: next });
                    }
                    let target = nix::fcntl::readlinkat(fd.as_fd(), name)
                        .map_err(io("reading the link", &next))?;
                    let target = PathBuf::from(target);
                    let mut resolved = if target.is_absolute() {
                        target
                    } else {
                        here.join(target)
                    };
                    for rest in &comps[i + 1..] {
                        resolved.push(rest.as_os_str());
                    }
                    return Self::walk_ancestors(&resolved, depth + 1, create);
                }
                Err(e) => return Err(Self::open_error(e, &next)),
            };
            let st = fstat(child.as_fd()).map_err(io("inspecting", &next))?;
            if !is_dir(&st) {
                return Err(PrivateDirError::NotADirectory { path: next });
            }
            if st.st_uid != 0 && st.st_uid != ours {
                return Err(PrivateDirError::NotOwned {
                    path: next,
                    owner: st.st_uid,
                    ours,
                });
            }
            if shared(&st) && !sticky(&st) {
                return Err(PrivateDirError::SharedNotSticky {
                    path: next,
                    mode: st.st_mode & 0o7777,
                });
            }
            fd = child;
            here = next;
            parent_st = st;
        }
        Ok((fd, here))
    }

    fn open_error(e: Errno, path: &Path) -> PrivateDirError {
        match e {
            Errno::ELOOP => PrivateDirError::Symlink {
                path: path.to_path_buf(),
            },
            Errno::ENOTDIR => PrivateDirError::NotADirectory {
                path: path.to_path_buf(),
            },
            e => io("opening", path)(e),
        }
    }

    fn check_name(name: &str) -> Result<(), PrivateDirError> {
        let bad = name.is_empty()
            || name == "."
            || name == ".."
            || name.as_bytes().contains(&b'/')
            || name.as_bytes().contains(&0);
        if bad {
            return Err(PrivateDirError::BadName {
                name: name.to_string(),
            });
        }
        Ok(())
    }

    /// Creates the new subdirectory `name` (`0700`; it must not exist) and
    /// opens it.
    ///
    /// # Errors
    /// It exists already ([`std::io::ErrorKind::AlreadyExists`] inside
    /// [`PrivateDirError::Io`]), or is not ours after creation.
    pub fn create_dir(&self, name: &str) -> Result<Self, PrivateDirError> {
        Self::check_name(name)?;
        let path = self.path.join(name);
        mkdirat(self.fd.as_fd(), name, Mode::from_bits_truncate(0o700))
            .map_err(io("creating", &path))?;
        self.open_dir(name)
    }

    /// Opens the existing subdirectory `name`, which must be ours and is
    /// tightened to `0700`.
    ///
    /// # Errors
    /// Missing, a link, not a directory, or not ours.
    pub fn open_dir(&self, name: &str) -> Result<Self, PrivateDirError> {
        Self::check_name(name)?;
        let path = self.path.join(name);
        let fd = openat(self.fd.as_fd(), name, DIR_FLAGS, Mode::empty())
            .map_err(|e| Self::open_error(e, &path))?;
        Self::owned(fd, path)
    }

    /// Creates the new file `name` (`0600`, `O_EXCL | O_NOFOLLOW`), open for
    /// reading and writing.
    ///
    /// # Errors
    /// It exists already, or the name is not plain.
    pub fn create_file(&self, name: &str) -> Result<File, PrivateDirError> {
        Self::check_name(name)?;
        let path = self.path.join(name);
        let fd = openat(
            self.fd.as_fd(),
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(io("creating", &path))?;
        Ok(File::from(fd))
    }

    /// The path this directory was reached by (for messages and for
    /// children that need a path, such as `PYTHONPATH`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open directory.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The raw descriptor (for `openat`-style calls).
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// A second handle on the same directory.
    ///
    /// # Errors
    /// `dup` failed.
    pub fn try_clone(&self) -> Result<Self, PrivateDirError> {
        let fd = self.fd.try_clone().map_err(|source| PrivateDirError::Io {
            what: "duplicating the handle of",
            path: self.path.clone(),
            source,
        })?;
        Ok(Self {
            path: self.path.clone(),
            fd,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    /// False, after saying why, where chown to another uid is impossible
    /// (not root); under `TOOLCELL_REQUIRE=1` (CI) that fails the test.
    fn root_or_missing() -> bool {
        let root = nix::unistd::geteuid().is_root();
        assert!(
            root || std::env::var_os("TOOLCELL_REQUIRE").is_none_or(|v| v != "1"),
            "TOOLCELL_REQUIRE=1, and this test needs root (to chown to another uid)"
        );
        root
    }

    #[test]
    fn creates_missing_components_0700_and_files_0600() {
        let tmp = tempfile::tempdir().unwrap();
        let d = PrivateDir::ensure(&tmp.path().join("a/b")).unwrap();
        assert_eq!(mode(&tmp.path().join("a")), 0o700);
        assert_eq!(mode(&tmp.path().join("a/b")), 0o700);
        let k = d.create_dir("k-1").unwrap();
        drop(k.create_file("f").unwrap());
        assert_eq!(mode(&tmp.path().join("a/b/k-1/f")), 0o600);
        // Nothing is ever opened twice by name: existing names are refused.
        assert!(d.create_dir("k-1").is_err());
        assert!(k.create_file("f").is_err());
        assert!(matches!(
            k.create_file("../x"),
            Err(PrivateDirError::BadName { .. })
        ));
    }

    #[test]
    fn a_readable_directory_of_ours_is_tightened_and_a_writable_one_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("d");
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        PrivateDir::ensure(&p).unwrap();
        assert_eq!(mode(&p), 0o700);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = PrivateDir::ensure(&p).unwrap_err();
        assert!(matches!(e, PrivateDirError::TooOpen { .. }), "{e}");
        assert!(e.to_string().contains("0700"), "{e}");
    }

    #[test]
    fn a_shared_ancestor_must_be_sticky() {
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = PrivateDir::ensure(&shared.join("x")).unwrap_err();
        assert!(matches!(e, PrivateDirError::SharedNotSticky { .. }), "{e}");
        assert!(e.to_string().contains("shared"), "{e}");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        PrivateDir::ensure(&shared.join("x")).unwrap();
    }

    #[test]
    fn a_symlink_in_a_shared_directory_is_refused_and_in_a_private_one_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, shared.join("link")).unwrap();
        let e = PrivateDir::ensure(&shared.join("link/k")).unwrap_err();
        assert!(matches!(e, PrivateDirError::Symlink { .. }), "{e}");
        // The same link in a directory only we can write is followed.
        std::os::unix::fs::symlink(&target, tmp.path().join("mine")).unwrap();
        let d = PrivateDir::ensure(&tmp.path().join("mine/k")).unwrap();
        assert!(target.join("k").is_dir());
        assert_eq!(d.path(), target.join("k"));
    }

    #[test]
    fn review_13_the_reused_fallback_is_found_again_and_never_another_users() {
        if !root_or_missing() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("tmp");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let planted = shared.join("toolcell-0");
        std::fs::create_dir(&planted).unwrap();
        nix::unistd::chown(&planted, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        // Another user's entry that would sort first is never taken.
        let decoy = shared.join("toolcell-0-000000");
        std::fs::create_dir(&decoy).unwrap();
        nix::unistd::chown(&decoy, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let (first, refused) =
            PrivateDir::ensure_or_reuse(&planted, &shared, "toolcell-0-").unwrap();
        assert!(refused.is_some());
        assert_ne!(first.path(), decoy);
        assert!(first.path().starts_with(&shared) && first.path() != planted);
        assert_eq!(mode(first.path()), 0o700);
        let (again, _) = PrivateDir::ensure_or_reuse(&planted, &shared, "toolcell-0-").unwrap();
        assert_eq!(again.path(), first.path());
        assert_eq!(std::fs::read_dir(&shared).unwrap().count(), 3);
    }

    #[test]
    fn another_users_directory_is_refused_and_the_fallback_is_fresh() {
        if !root_or_missing() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("tmp");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let planted = shared.join("toolcell-0");
        std::fs::create_dir(&planted).unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
        nix::unistd::chown(&planted, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let e = PrivateDir::ensure(&planted.join("kernels")).unwrap_err();
        assert!(
            matches!(e, PrivateDirError::NotOwned { owner: 65534, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("toolcell-0"), "{e}");
        let (d, refused) =
            PrivateDir::ensure_or_fresh(&planted.join("kernels"), &shared, "toolcell-0-").unwrap();
        assert!(refused.is_some());
        assert!(d.path().starts_with(&shared) && !d.path().starts_with(&planted));
        assert_eq!(mode(d.path()), 0o700);
        assert_eq!(
            std::fs::metadata(d.path()).unwrap().uid(),
            nix::unistd::geteuid().as_raw()
        );
    }
}
