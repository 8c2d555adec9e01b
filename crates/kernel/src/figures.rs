//! The figures a cell returns for display (the runner's `display` list),
//! checked by the host before anything trusts them.
//!
//! The runner runs in the same process as the cell, so its `display` list is
//! whatever the cell wants it to be: a cell can replace the runner's figure
//! saver and claim `{"mime": "text/plain;<anything>", "path":
//! "/proc/<host pid>/environ"}`. The host therefore keeps an entry only when
//!
//! - its `mime` is one of [`ALLOWED_MIMES`] (exactly);
//! - its `path` names a file *directly* in the kernel's own artifacts
//!   directory (`<kernel dir>/artifacts/<name>`, where the runner saves
//!   figures), and the name has no secret in it;
//! - that file, opened component by component from the kernel directory with
//!   `O_NOFOLLOW` (no symbolic link anywhere: not the kernel directory, not
//!   `artifacts`, not the file), is a regular file (`O_NONBLOCK`, so a FIFO
//!   cannot block the open; `fstat` refuses it) of at most
//!   [`MAX_FIGURE_BYTES`].
//!
//! An SVG is text: its bytes go through the redactor, and when that changes
//! them the redacted text replaces the file (written beside it with
//! `O_EXCL|O_NOFOLLOW` and renamed over it) so the path in the result never
//! shows the secret. Any other entry is dropped, and the result's `warning`
//! says so (without echoing the rejected path or type, which the cell chose).
//!
//! The bytes the journal stores are the ones read here, through the checked
//! file descriptor ([`crate::result::Display`] carries them); the journal
//! never opens a path a cell named.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path};
use std::sync::Arc;

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstat};
use toolcell_redact::Redactor;

use crate::result::Display;

/// The only figure types a result may carry.
pub const ALLOWED_MIMES: [&str; 3] = ["image/png", "image/svg+xml", "image/jpeg"];

/// Largest figure file the host accepts (16 MiB).
pub const MAX_FIGURE_BYTES: u64 = 16 * 1024 * 1024;

/// Most figures kept from one cell; later entries are dropped.
pub const MAX_FIGURES: usize = 64;

/// Most figure bytes of one cell held in memory for the journal (64 MiB);
/// figures past it are returned but not journaled.
pub const MAX_KEPT_BYTES: u64 = 64 * 1024 * 1024;

/// The subdirectory of a kernel's directory the runner saves figures in.
pub const ARTIFACTS: &str = "artifacts";

const SVG: &str = "image/svg+xml";

/// The checked figures of one cell and what was dropped.
#[derive(Debug, Default)]
pub struct Checked {
    /// The entries kept, in the runner's order.
    pub display: Vec<Display>,
    /// One sentence per dropped entry (or group of entries).
    pub warnings: Vec<String>,
}

impl Checked {
    /// The warnings as one sentence group, for the result's `warning`.
    #[must_use]
    pub fn warning(&self) -> Option<String> {
        (!self.warnings.is_empty()).then(|| self.warnings.join(" "))
    }
}

/// Checks the runner's `display` entries of a cell run by the kernel whose
/// directory is `kernel_dir`. With `keep_bytes`, the bytes of each kept
/// figure (read through the checked descriptor) ride along for the journal;
/// an SVG's bytes are always read, to redact them.
pub fn check(
    kernel_dir: &Path,
    entries: &[toolcell_protocol::Display],
    redactor: &Redactor,
    keep_bytes: bool,
) -> Checked {
    let mut out = Checked::default();
    if entries.is_empty() {
        return out;
    }
    let artifacts = open_artifacts(kernel_dir);
    let mut kept_bytes = 0u64;
    for (i, e) in entries.iter().enumerate() {
        let n = i + 1;
        if out.display.len() >= MAX_FIGURES {
            out.warnings.push(format!(
                "{} display entries dropped: at most {MAX_FIGURES} figures are kept per cell.",
                entries.len() - i
            ));
            break;
        }
        let dir = match &artifacts {
            Ok(d) => d,
            Err(why) => {
                out.warnings
                    .push(format!("display entry {n} dropped: {why}."));
                continue;
            }
        };
        match check_one(kernel_dir, dir, e, redactor, keep_bytes, kept_bytes) {
            Ok(d) => {
                kept_bytes += d.data().map_or(0, |b| b.len() as u64);
                out.display.push(d);
            }
            Err(why) => {
                tracing::warn!("display entry {n} of a cell dropped: {why}");
                out.warnings
                    .push(format!("display entry {n} dropped: {why}."));
            }
        }
    }
    out
}

/// The kernel's artifacts directory, opened without following a symbolic
/// link at the kernel directory or at `artifacts`.
fn open_artifacts(kernel_dir: &Path) -> Result<OwnedFd, String> {
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let kdir = nix::fcntl::open(kernel_dir, dir_flags, Mode::empty())
        .map_err(|e| format!("the kernel's directory cannot be opened ({e})"))?;
    openat(&kdir, ARTIFACTS, dir_flags, Mode::empty()).map_err(|e| {
        if e == nix::errno::Errno::ELOOP || e == nix::errno::Errno::ENOTDIR {
            "the kernel's artifacts directory is not a plain directory".to_string()
        } else {
            format!("the kernel's artifacts directory cannot be opened ({e})")
        }
    })
}

fn check_one(
    kernel_dir: &Path,
    artifacts: &OwnedFd,
    e: &toolcell_protocol::Display,
    redactor: &Redactor,
    keep_bytes: bool,
    kept_so_far: u64,
) -> Result<Display, String> {
    let Some(mime) = ALLOWED_MIMES.iter().find(|m| **m == e.mime) else {
        return Err(format!(
            "its type is not one of {}",
            ALLOWED_MIMES.join(", ")
        ));
    };
    let name = file_name_in_artifacts(kernel_dir, &e.path)?;
    let canonical = kernel_dir.join(ARTIFACTS).join(name);
    let Some(path) = canonical.to_str().map(str::to_string) else {
        return Err("its path is not UTF-8".into());
    };
    if redactor.redact(&path) != path {
        return Err("its file name looks like a secret".into());
    }
    let fd = openat(
        artifacts,
        name,
        OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        nix::errno::Errno::ELOOP => "its file is a symbolic link".to_string(),
        e => format!("its file cannot be opened ({e})"),
    })?;
    let st = fstat(&fd).map_err(|e| format!("its file cannot be examined ({e})"))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err("its file is not a regular file".into());
    }
    let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    if size > MAX_FIGURE_BYTES {
        return Err(format!(
            "its file is {size} bytes, more than the {MAX_FIGURE_BYTES} accepted"
        ));
    }
    let is_svg = *mime == SVG;
    if !is_svg && !keep_bytes {
        return Ok(Display::new(*mime, path));
    }
    let mut bytes = Vec::new();
    File::from(fd)
        .take(MAX_FIGURE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("its file cannot be read ({e})"))?;
    if bytes.len() as u64 > MAX_FIGURE_BYTES {
        return Err(format!(
            "its file grew past the {MAX_FIGURE_BYTES} bytes accepted"
        ));
    }
    if is_svg {
        let Ok(text) = std::str::from_utf8(&bytes) else {
            return Err("its SVG is not UTF-8 text".into());
        };
        if let std::borrow::Cow::Owned(clean) = redactor.redact(text) {
            replace(artifacts, name, clean.as_bytes())
                .map_err(|e| format!("its SVG held a secret and could not be rewritten ({e})"))?;
            bytes = clean.into_bytes();
        }
    }
    let keep = keep_bytes && kept_so_far + bytes.len() as u64 <= MAX_KEPT_BYTES;
    Ok(Display::new(*mime, path).with_data(keep.then(|| Arc::from(bytes))))
}

/// The file name `path` gives inside `<kernel_dir>/artifacts`: exactly one
/// plain component after that prefix (compared component by component).
fn file_name_in_artifacts<'a>(kernel_dir: &Path, path: &'a str) -> Result<&'a OsStr, String> {
    let not_inside = || "its path is not a file directly in this kernel's artifacts directory";
    let rest = Path::new(path)
        .strip_prefix(kernel_dir.join(ARTIFACTS))
        .map_err(|_| not_inside().to_string())?;
    let mut parts = rest.components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(name)), None) if !name.as_bytes().contains(&0) => Ok(name),
        _ => Err(not_inside().into()),
    }
}

/// Replaces `name` in `dir` with `bytes`: a new file made beside it
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600) and renamed over it.
fn replace(dir: &OwnedFd, name: &OsStr, bytes: &[u8]) -> std::io::Result<()> {
    let suffix = toolcell_protocol::random_hex(8).map_err(std::io::Error::other)?;
    let mut tmp = std::ffi::OsString::from(".toolcell-redacted-");
    tmp.push(suffix);
    let fd = openat(
        dir,
        tmp.as_os_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    let written = File::from(fd).write_all(bytes);
    let renamed = written.and_then(|()| {
        nix::fcntl::renameat(dir.as_fd(), tmp.as_os_str(), dir.as_fd(), name)
            .map_err(std::io::Error::from)
    });
    if renamed.is_err() {
        let _ = nix::unistd::unlinkat(
            dir,
            tmp.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    renamed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_single_plain_name_under_artifacts_is_accepted() {
        let k = Path::new("/run/k/k-1");
        assert_eq!(
            file_name_in_artifacts(k, "/run/k/k-1/artifacts/cell-1-fig-1.png").unwrap(),
            "cell-1-fig-1.png"
        );
        for bad in [
            "/proc/1/environ",
            "/run/k/k-1/artifacts",
            "/run/k/k-1/artifacts/",
            "/run/k/k-1/artifacts/../owner.pid",
            "/run/k/k-1/artifacts/sub/x.png",
            "/run/k/k-2/artifacts/x.png",
            "run/k/k-1/artifacts/x.png",
            "/run/k/k-1/artifactsx/x.png",
        ] {
            assert!(file_name_in_artifacts(k, bad).is_err(), "{bad}");
        }
    }
}
