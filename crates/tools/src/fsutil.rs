//! Opening a path a cell gave, safely: the helpers every file tool uses,
//! built-in or your own (CONTRIBUTING.md, "Adding a tool").
//!
//! The file tools run in the host process, so a path a cell passes must
//! never make the host touch something that is not a plain file: reading a
//! FIFO or a terminal blocks a host thread forever, reading `/dev/stdin`
//! in `toolcell serve` would swallow the host's own JSON-RPC input, and
//! `/proc/<pid>/fd/N` reaches whatever the host process has open.
//! [`open_regular`] and [`check_write_target`] are the only ways the file
//! tools get at a path: they refuse the host's file-descriptor aliases
//! ([`check_host_path`]), open without blocking (`O_NONBLOCK`, `O_NOCTTY`)
//! and accept only what `fstat` of the opened file calls a regular file.

use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::OFlag;

/// Symlinks followed when checking a path (as the kernel's own limit).
const MAX_HOPS: usize = 40;

/// `/proc/<pid>/<dir>` (and `/proc/<pid>/task/<tid>/<dir>`) directories
/// whose entries are a process's open files.
const FD_DIRS: &[&str] = &["fd", "fdinfo", "map_files"];

/// Why a path cannot be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpenError {
    /// The operating system refused (missing, permissions, …).
    Io(io::Error),
    /// A directory where a file is needed.
    Dir,
    /// A FIFO, socket or device; the text says which.
    NotRegular(&'static str),
    /// A path through `/proc/<pid>/fd`, `/dev/fd`, `/dev/stdin` and the like.
    FdAlias,
}

impl OpenError {
    /// A message for the cell: `{tool}: …` about `path`.
    pub fn message(&self, tool: &str, action: &str, path: &Path) -> String {
        let p = path.display();
        match self {
            Self::Io(e) => format!("{tool}: cannot {action} {p}: {e}"),
            Self::Dir => format!("{tool}: {p} is a directory; give the path of a file"),
            Self::NotRegular(kind) => format!(
                "{tool}: {p} is {kind}, not a regular file; {tool} works on regular files only \
                 (it never reads or writes pipes, sockets or devices)"
            ),
            Self::FdAlias => format!(
                "{tool}: {p} names a process's open file descriptor (/proc/<pid>/fd, /dev/fd, \
                 /dev/stdin and the like); {tool} works on regular files only: give the file's \
                 real path"
            ),
        }
    }
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// What a non-regular file type is, for messages.
pub(crate) fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

/// Whether absolute `path`, read literally, is one of the fd aliases.
fn is_fd_alias(path: &Path) -> bool {
    if !path.is_absolute() {
        return false;
    }
    let parts: Vec<&str> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_str().unwrap_or("\u{fffd}")),
            _ => None,
        })
        .collect();
    match parts.as_slice() {
        ["dev", "fd", ..] => true,
        ["dev", "stdin" | "stdout" | "stderr"] => true,
        ["proc", _, dir, ..] if FD_DIRS.contains(dir) => true,
        ["proc", _, "task", _, dir, ..] if FD_DIRS.contains(dir) => true,
        _ => false,
    }
}

/// Refuses a path that reaches a process's open file descriptors, through
/// any chain of symlinks: `/proc/<pid>/fd/N` (also `self`, `thread-self`,
/// `task/<tid>`), `fdinfo`, `map_files`, `/dev/fd/N`, `/dev/std{in,out,err}`.
///
/// Each step canonicalizes the parent directory and reads the last
/// component's link, so `/dev/stdin`, `/tmp/x -> /proc/self/fd/0` and
/// `/proc/../proc/self/fd/0` are all caught before anything is opened.
pub(crate) fn check_host_path(path: &Path) -> Result<(), OpenError> {
    let mut p: PathBuf = path.to_path_buf();
    for _ in 0..MAX_HOPS {
        if is_fd_alias(&p) {
            return Err(OpenError::FdAlias);
        }
        let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
            return Ok(());
        };
        let Ok(dir) = std::fs::canonicalize(parent) else {
            // A missing directory: opening will say so.
            return Ok(());
        };
        let real = dir.join(name);
        if is_fd_alias(&real) {
            return Err(OpenError::FdAlias);
        }
        match std::fs::symlink_metadata(&real) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&real) {
                // An absolute target replaces `dir` in the join.
                Ok(target) => p = dir.join(target),
                Err(_) => return Ok(()),
            },
            _ => return Ok(()),
        }
    }
    // Too many links: opening fails with ELOOP.
    Ok(())
}

/// Opens `path` for reading if, and only if, it is a regular file: the fd
/// aliases are refused, the type is checked before opening (so a device is
/// never opened), the open never blocks (`O_NONBLOCK`: a FIFO swapped in
/// meanwhile opens at once instead of waiting for a writer; `O_NOCTTY`),
/// and the opened file's own type (`fstat`) is checked again.
pub fn open_regular(path: &Path) -> Result<(File, Metadata), OpenError> {
    check_host_path(path)?;
    let before = std::fs::metadata(path)?;
    if before.is_dir() {
        return Err(OpenError::Dir);
    }
    if !before.is_file() {
        return Err(OpenError::NotRegular(kind_of(before.file_type())));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(OpenError::Dir);
    }
    if !meta.is_file() {
        return Err(OpenError::NotRegular(kind_of(meta.file_type())));
    }
    Ok((file, meta))
}

/// File systems whose reads never wait on a network or another process:
/// a path that resolves within one of them may be opened and read on a
/// runtime thread. FUSE, NFS, SMB, 9p, autofs and everything else are not
/// listed and keep the blocking pool.
const LOCAL_FS: &[nix::sys::statfs::FsType] = {
    use nix::sys::statfs::*;
    &[
        EXT4_SUPER_MAGIC, // also ext2 and ext3 (one magic number)
        XFS_SUPER_MAGIC,
        BTRFS_SUPER_MAGIC,
        F2FS_SUPER_MAGIC,
        TMPFS_MAGIC,
        // A container's root. Its layers are local in every container
        // runtime; an overlay over NFS would wrongly count as local.
        OVERLAYFS_SUPER_MAGIC,
    ]
};

/// `/`, opened once, when it is on a local file system ([`LOCAL_FS`]).
fn local_root() -> Option<&'static std::os::fd::OwnedFd> {
    static ROOT: std::sync::OnceLock<Option<std::os::fd::OwnedFd>> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let fd = nix::fcntl::open(
            "/",
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .ok()?;
        let kind = nix::sys::statfs::fstatfs(&fd).ok()?.filesystem_type();
        LOCAL_FS.contains(&kind).then_some(fd)
    })
    .as_ref()
}

/// `path` opened from the local root without leaving its mount, and without
/// magic links (`/proc/<pid>/fd/N`).
fn open_on_root_mount(
    root: &std::os::fd::OwnedFd,
    rel: &Path,
    flags: OFlag,
) -> Option<std::os::fd::OwnedFd> {
    use nix::fcntl::{OpenHow, ResolveFlag, openat2};
    // openat2 refuses any flag but O_CLOEXEC (and two others) beside O_PATH.
    let extra = if flags.contains(OFlag::O_PATH) {
        OFlag::O_CLOEXEC
    } else {
        OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK
    };
    let how = OpenHow::new()
        .flags(flags | extra)
        .resolve(ResolveFlag::RESOLVE_NO_XDEV | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    openat2(root, rel, how).ok()
}

/// [`open_regular`] without blocking on anything but a local disk, for the
/// common case: `Some` only when absolute `path` resolves, without crossing
/// a mount point, on the root file system, that file system is local
/// ([`LOCAL_FS`]), and the file is a regular file. Callers may then read it
/// on a runtime thread. `None` says nothing about the path: use
/// [`open_regular`] on the blocking pool, which also makes every error
/// message.
///
/// Why this is as safe as [`open_regular`]: `openat2`'s `RESOLVE_NO_XDEV`
/// refuses to enter any other mount, so `/proc`, `/dev`, FUSE, NFS and
/// automount points (not even triggered) are out of reach, through symlinks
/// too, and `RESOLVE_NO_MAGICLINKS` refuses fd links on their own. The type
/// is checked on an `O_PATH` handle first, so a device or FIFO is never
/// opened (barring a swap between the two opens, which the `fstat` of the
/// opened file then catches, as in [`open_regular`]).
pub fn open_regular_local(path: &Path) -> Option<(File, Metadata)> {
    #[cfg(target_os = "linux")]
    {
        let root = local_root()?;
        let rel = path.strip_prefix("/").ok()?;
        if rel.as_os_str().is_empty() {
            return None;
        }
        let probe = File::from(open_on_root_mount(root, rel, OFlag::O_PATH)?);
        if !probe.metadata().ok()?.is_file() {
            return None;
        }
        let file = File::from(open_on_root_mount(root, rel, OFlag::O_RDONLY)?);
        let meta = file.metadata().ok()?;
        meta.is_file().then_some((file, meta))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        None
    }
}

/// Checks that `path` may be (re)written: not an fd alias, and either
/// missing or a regular file (a symlink to one counts). Directories and
/// special files are refused before anything is created.
pub fn check_write_target(path: &Path) -> Result<(), OpenError> {
    check_host_path(path)?;
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(OpenError::Dir),
        Ok(m) if !m.is_file() => Err(OpenError::NotRegular(kind_of(m.file_type()))),
        // Missing (a new file) or unreadable metadata: the write says why.
        _ => Ok(()),
    }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, flushed and synced, then renamed over `path`. Parent
/// directories are created. An existing file keeps its permissions.
///
/// # Errors
/// Any I/O error; `path` is never left half-written. Writing through a path
/// that is a directory is an `IsADirectory`-style error.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if path.is_dir() {
        return Err(io::Error::other(format!(
            "{} is a directory; give a file path",
            path.display()
        )));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".toolcell-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    if let Ok(meta) = std::fs::metadata(path) {
        // Keep the mode of the file being replaced.
        let _ = std::fs::set_permissions(tmp.path(), meta.permissions());
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Sets a flag when dropped: a blocking worker polls it, so the work stops
/// when the call's future goes away (deadline, cancellation, or the rpc
/// server giving up on the call), not only when the tool's own `select!`
/// notices.
#[derive(Debug)]
pub struct StopOnDrop(pub std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `dir` is on the root mount, read from `/proc/self/mountinfo`
    /// (the longest mount point above its real path), and `/` is local: the
    /// condition under which `open_regular_local` may say `Some`.
    fn inline_expected(dir: &Path) -> bool {
        let real = std::fs::canonicalize(dir).unwrap_or_else(|e| panic!("{e}"));
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mount = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| real.starts_with(m))
            .max_by_key(|m| m.len())
            .unwrap_or("/");
        let root_local =
            nix::sys::statfs::statfs("/").is_ok_and(|f| LOCAL_FS.contains(&f.filesystem_type()));
        mount == "/" && root_local
    }

    fn check_inline_in(dir: &Path) {
        let expected = inline_expected(dir);
        let file = dir.join("plain.txt");
        std::fs::write(&file, "hello\n").unwrap_or_else(|e| panic!("{e}"));
        let link = dir.join("link.txt");
        std::os::unix::fs::symlink("plain.txt", &link).unwrap_or_else(|e| panic!("{e}"));
        for p in [&file, &link] {
            let got = open_regular_local(p);
            assert_eq!(got.is_some(), expected, "{}", p.display());
            if let Some((mut f, meta)) = got {
                let mut text = String::new();
                io::Read::read_to_string(&mut f, &mut text).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!((text.as_str(), meta.len()), ("hello\n", 6));
            }
        }
    }

    #[test]
    fn a_regular_file_on_the_local_root_mount_opens_without_the_blocking_pool() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        check_inline_in(tmp.path());
        // The build tree too, which is on the root file system on a typical
        // machine even where the temp dir is a tmpfs mount of its own.
        let here = tempfile::tempdir_in(
            std::env::var("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        check_inline_in(here.path());
    }

    #[test]
    fn the_inline_open_leaves_everything_but_plain_local_files_to_the_slow_path() {
        let tmp = tempfile::tempdir_in(
            std::env::var("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path();
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap_or_else(|e| panic!("{e}"));
        let to_fd = dir.join("to_fd");
        std::os::unix::fs::symlink("/proc/self/fd/0", &to_fd).unwrap_or_else(|e| panic!("{e}"));
        let to_dev = dir.join("to_dev");
        std::os::unix::fs::symlink("/dev/null", &to_dev).unwrap_or_else(|e| panic!("{e}"));
        let to_proc = dir.join("to_proc");
        std::os::unix::fs::symlink("/proc/self/status", &to_proc).unwrap_or_else(|e| panic!("{e}"));
        for p in [
            fifo.as_path(),
            to_fd.as_path(),
            to_dev.as_path(),
            to_proc.as_path(),
            dir,
            Path::new("/"),
            Path::new("/proc/self/status"),
            Path::new("/proc/self/fd/0"),
            Path::new("/dev/stdin"),
            Path::new("relative.txt"),
            &dir.join("missing"),
        ] {
            assert!(open_regular_local(p).is_none(), "{}", p.display());
        }
    }

    #[test]
    fn fd_aliases_are_recognised_literally() {
        for p in [
            "/proc/self/fd/0",
            "/proc/123/fd/7",
            "/proc/thread-self/fd",
            "/proc/1/task/2/fd/3",
            "/proc/self/fdinfo/1",
            "/proc/self/map_files/x",
            "/dev/fd/0",
            "/dev/stdin",
            "/dev/stderr",
        ] {
            assert!(is_fd_alias(Path::new(p)), "{p}");
        }
        for p in [
            "/proc/cpuinfo",
            "/proc/self/status",
            "/home/u/proc/1/fd/2",
            "/dev/null",
            "relative/proc/1/fd",
        ] {
            assert!(!is_fd_alias(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn links_into_fd_directories_are_followed_and_refused() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let link = tmp.path().join("in");
        std::os::unix::fs::symlink("/proc/self/fd/0", &link).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(check_host_path(&link), Err(OpenError::FdAlias)));
        let hop = tmp.path().join("hop");
        std::os::unix::fs::symlink(&link, &hop).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(check_host_path(&hop), Err(OpenError::FdAlias)));
        assert!(matches!(
            check_host_path(Path::new("/proc/../proc/self/fd/1")),
            Err(OpenError::FdAlias)
        ));
        let plain = tmp.path().join("plain.txt");
        std::fs::write(&plain, "x").unwrap_or_else(|e| panic!("{e}"));
        assert!(check_host_path(&plain).is_ok());
        assert!(check_host_path(&tmp.path().join("missing/deeper")).is_ok());
    }
}
