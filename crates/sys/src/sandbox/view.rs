//! What a sandboxed caller could do with a path itself, for tools that act
//! on the host's files on its behalf.

use std::path::{Path, PathBuf};

/// Why a sandboxed caller may not have a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Denied {
    /// Hidden in the sandbox (or a place, like `/tmp` or `/proc`, that is
    /// the sandbox's own and not the host's): as if it did not exist.
    #[error("not found")]
    Hidden,
    /// Outside the writable set.
    #[error("read-only in this sandbox")]
    ReadOnly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Writable,
    Readable,
    Hidden,
}

/// The sandbox's view of the host's paths. Every list holds absolute,
/// symlink-free paths; the deepest entry above a path decides for it.
#[derive(Debug, Clone, Default)]
pub struct View {
    entries: Vec<(PathBuf, Kind)>,
}

/// `p` with symlinks resolved as far as it exists, the rest appended (a
/// file about to be created, a missing path), `..` taken lexically only
/// after the existing part.
pub fn resolve(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    let mut cur = p.to_path_buf();
    loop {
        if let Ok(c) = std::fs::canonicalize(&cur) {
            let mut out = c;
            for part in rest.iter().rev() {
                if part == ".." {
                    out.pop();
                } else {
                    out.push(part);
                }
            }
            return out;
        }
        match cur.components().next_back() {
            Some(Component::Normal(n)) => rest.push(n.to_os_string()),
            Some(Component::ParentDir) => rest.push("..".into()),
            Some(Component::CurDir) => {}
            _ => return p.to_path_buf(),
        }
        if !cur.pop() {
            return p.to_path_buf();
        }
    }
}

impl View {
    /// A view where `writable` may be written, `hidden` (and the
    /// sandbox's own `/tmp`, `/proc` and `/dev`) are not there, and
    /// `readable` stays readable even under a hidden path.
    pub fn new(writable: &[PathBuf], hidden: &[PathBuf], readable: &[PathBuf]) -> Self {
        let mut entries = Vec::new();
        for p in ["/tmp", "/proc", "/dev"] {
            entries.push((resolve(Path::new(p)), Kind::Hidden));
        }
        entries.extend(hidden.iter().map(|p| (resolve(p), Kind::Hidden)));
        entries.extend(readable.iter().map(|p| (resolve(p), Kind::Readable)));
        // Writable last: at equal depth it wins (a writable path that is
        // also a hidden default, such as a session dir under the cache).
        entries.extend(writable.iter().map(|p| (resolve(p), Kind::Writable)));
        Self { entries }
    }

    fn kind(&self, p: &Path) -> Option<Kind> {
        let p = resolve(p);
        self.entries
            .iter()
            .filter(|(root, _)| p.starts_with(root))
            .max_by_key(|(root, _)| root.components().count())
            .map(|(_, k)| *k)
    }

    /// Whether the caller could read `p`.
    ///
    /// # Errors
    /// [`Denied::Hidden`].
    pub fn check_read(&self, p: &Path) -> Result<(), Denied> {
        match self.kind(p) {
            Some(Kind::Hidden) => Err(Denied::Hidden),
            _ => Ok(()),
        }
    }

    /// Whether the caller could write `p` (create it, change it, remove
    /// it).
    ///
    /// # Errors
    /// [`Denied::Hidden`] or [`Denied::ReadOnly`].
    pub fn check_write(&self, p: &Path) -> Result<(), Denied> {
        match self.kind(p) {
            Some(Kind::Writable) => Ok(()),
            Some(Kind::Hidden) => Err(Denied::Hidden),
            _ => Err(Denied::ReadOnly),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deepest_entry_decides() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().canonicalize().unwrap();
        let ssh = home.join(".ssh");
        let cache = home.join(".cache/toolcell");
        let session = cache.join("sessions/s1");
        let spill = cache.join("spill/s1");
        for p in [&ssh, &session, &spill] {
            std::fs::create_dir_all(p).unwrap();
        }
        let v = View::new(
            &[home.clone(), session.clone()],
            &[ssh.clone(), cache.clone()],
            std::slice::from_ref(&spill),
        );
        assert_eq!(v.check_read(&ssh.join("id_rsa")), Err(Denied::Hidden));
        assert_eq!(v.check_write(&ssh.join("id_rsa")), Err(Denied::Hidden));
        assert_eq!(v.check_read(&cache.join("journal.db")), Err(Denied::Hidden));
        assert_eq!(v.check_write(&session.join("new.txt")), Ok(()));
        assert_eq!(v.check_read(&spill.join("out.txt")), Ok(()));
        assert_eq!(v.check_write(&spill.join("out.txt")), Err(Denied::ReadOnly));
        assert_eq!(v.check_write(&home.join("notes.md")), Ok(()));
        assert_eq!(
            v.check_write(Path::new("/etc/passwd")),
            Err(Denied::ReadOnly)
        );
        assert_eq!(v.check_read(Path::new("/etc/passwd")), Ok(()));
        assert_eq!(
            v.check_read(Path::new("/proc/1/environ")),
            Err(Denied::Hidden)
        );
        // A link from the writable directory into a hidden one is followed.
        std::os::unix::fs::symlink(&ssh, home.join("keys")).unwrap();
        assert_eq!(v.check_read(&home.join("keys/id_rsa")), Err(Denied::Hidden));
        // `..` after a missing part does not climb out of the check.
        assert_eq!(
            v.check_read(&home.join("missing/../.ssh/id_rsa")),
            Err(Denied::Hidden)
        );
    }
}
