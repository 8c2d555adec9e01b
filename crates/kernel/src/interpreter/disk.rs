//! Probes remembered on disk, so that a one-shot command (`toolcell exec`)
//! does not pay for a probe each time: behind a pyenv or asdf shim a probe
//! is a shell script and a version lookup, 60–90 ms, more than the cell.
//!
//! An entry answers only when nothing that could change the answer
//! changed. Its key has:
//! - the candidate file's identity (device, inode, size, mtime);
//! - the *context* a version manager resolves with: the variables pyenv and
//!   asdf read (`PYENV_VERSION`, `PYENV_ROOT`, `ASDF_*`, `PATH`, `HOME`),
//!   the contents of every `.python-version` and `.tool-versions` from the
//!   directory the probe runs in up to `/`, and the global version files
//!   (`$PYENV_ROOT/version`, `~/.tool-versions`);
//! - and it is used only while the interpreter it named still has the
//!   identity it had when probed (a reinstalled Python is probed again).
//!
//! The file lives in `$XDG_CACHE_HOME/toolcell/` (else `~/.cache/toolcell/`),
//! a directory verified private; it holds at most [`MAX_ENTRIES`] entries,
//! newest first, and is replaced atomically. Any problem reading or
//! writing it just means a probe.

use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Probe;

/// Most entries kept.
pub(super) const MAX_ENTRIES: usize = 32;
/// Largest file read.
const MAX_FILE: u64 = 64 * 1024;
/// Largest version file read.
const MAX_VERSION_FILE: u64 = 4096;
const FILE_NAME: &str = "interpreters.json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Entry {
    candidate: PathBuf,
    candidate_id: [i64; 5],
    context: u64,
    executable: PathBuf,
    executable_id: [i64; 5],
    version: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    version: u32,
    entries: Vec<Entry>,
}

pub(super) fn identity(path: &Path) -> Option<[i64; 5]> {
    let m = std::fs::metadata(path).ok()?;
    #[allow(clippy::cast_possible_wrap)]
    Some([
        m.dev() as i64,
        m.ino() as i64,
        m.size() as i64,
        m.mtime(),
        m.mtime_nsec(),
    ])
}

fn read_small(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let f = std::fs::File::open(path).ok()?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf).ok()?;
    Some(buf)
}

/// The version-manager context of a probe run in `cwd` with `env`.
pub(super) fn context(cwd: &Path, env: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for var in [
        "PATH",
        "HOME",
        "PYENV_VERSION",
        "PYENV_ROOT",
        "PYENV_DIR",
        "ASDF_PYTHON_VERSION",
        "ASDF_DATA_DIR",
        "ASDF_DIR",
        "ASDF_CONFIG_FILE",
        "ASDF_DEFAULT_TOOL_VERSIONS_FILENAME",
    ] {
        var.hash(&mut h);
        env(var).hash(&mut h);
    }
    let mut dir = Some(cwd);
    while let Some(d) = dir {
        for name in [".python-version", ".tool-versions"] {
            read_small(&d.join(name), MAX_VERSION_FILE).hash(&mut h);
        }
        dir = d.parent();
    }
    let home = env("HOME").map(PathBuf::from);
    let pyenv_root = env("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".pyenv")));
    if let Some(root) = pyenv_root {
        read_small(&root.join("version"), MAX_VERSION_FILE).hash(&mut h);
    }
    if let Some(home) = home {
        read_small(&home.join(".tool-versions"), MAX_VERSION_FILE).hash(&mut h);
    }
    h.finish()
}

/// The on-disk cache at a directory.
#[derive(Debug, Clone)]
pub(super) struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    /// The cache of this user: `$XDG_CACHE_HOME/toolcell`, else
    /// `~/.cache/toolcell`; `None` without either, or when
    /// `TOOLCELL_PROBE_CACHE=off`.
    pub(super) fn for_user() -> Option<Self> {
        if std::env::var_os("TOOLCELL_PROBE_CACHE").is_some_and(|v| v == "off") {
            return None;
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|x| !x.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|x| !x.is_empty())
                    .map(|h| PathBuf::from(h).join(".cache"))
            })?;
        Some(Self {
            dir: base.join("toolcell"),
        })
    }

    /// The directory (not verified here).
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    #[cfg(test)]
    pub(super) fn at(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn load(&self) -> File {
        let path = self.dir.join(FILE_NAME);
        // Only from a directory nobody else can write.
        if toolcell_sys::private_dir::PrivateDir::ensure(&self.dir).is_err() {
            return File::default();
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() && m.len() <= MAX_FILE => {}
            _ => return File::default(),
        }
        read_small(&path, MAX_FILE)
            .and_then(|b| serde_json::from_slice::<File>(&b).ok())
            .filter(|f| f.version == 1)
            .unwrap_or_default()
    }

    /// The probe remembered for `candidate` in `context`, if still valid.
    pub(super) fn get(&self, candidate: &Path, context: u64) -> Option<Probe> {
        let id = identity(candidate)?;
        let file = self.load();
        let e = file
            .entries
            .into_iter()
            .find(|e| e.candidate == candidate && e.candidate_id == id && e.context == context)?;
        if identity(&e.executable)? != e.executable_id {
            return None;
        }
        Some(Probe {
            executable: e.executable,
            version: e.version,
        })
    }

    /// Remembers `probe` for `candidate` in `context`.
    pub(super) fn put(&self, candidate: &Path, context: u64, probe: &Probe) {
        let (Some(candidate_id), Some(executable_id)) =
            (identity(candidate), identity(&probe.executable))
        else {
            return;
        };
        let mut file = self.load();
        file.version = 1;
        file.entries
            .retain(|e| !(e.candidate == candidate && e.context == context));
        file.entries.insert(
            0,
            Entry {
                candidate: candidate.to_path_buf(),
                candidate_id,
                context,
                executable: probe.executable.clone(),
                executable_id,
                version: probe.version.clone(),
            },
        );
        file.entries.truncate(MAX_ENTRIES);
        let Ok(text) = serde_json::to_vec(&file) else {
            return;
        };
        if let Err(e) = self.write(&text) {
            tracing::debug!("cannot remember the interpreter probe on disk: {e}");
        }
    }

    fn write(&self, text: &[u8]) -> std::io::Result<()> {
        use std::io::Write as _;
        let dir = toolcell_sys::private_dir::PrivateDir::ensure(&self.dir)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let rand =
            toolcell_protocol::random_hex(4).map_err(|e| std::io::Error::other(e.to_string()))?;
        let tmp = format!("{FILE_NAME}.{rand}.tmp");
        let mut f = dir
            .create_file(&tmp)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let written = f.write_all(text);
        drop(f);
        let result = written
            .and_then(|()| std::fs::rename(dir.path().join(&tmp), dir.path().join(FILE_NAME)));
        if result.is_err() {
            let _ = std::fs::remove_file(dir.path().join(&tmp));
        }
        result
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_entry_answers_only_while_nothing_it_depends_on_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = DiskCache::at(tmp.path().join("cache"));
        let bin = tmp.path().join("python3");
        let exe = tmp.path().join("real-python");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        std::fs::write(&exe, "binary").unwrap();
        let probe = Probe {
            executable: exe.clone(),
            version: "3.11.7".into(),
        };
        let work = tmp.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let env = |_: &str| None;
        let ctx = context(&work, &env);
        assert_eq!(cache.get(&bin, ctx), None);
        cache.put(&bin, ctx, &probe);
        assert_eq!(cache.get(&bin, ctx), Some(probe.clone()));
        // A .python-version appearing changes the context.
        std::fs::write(work.join(".python-version"), "3.12\n").unwrap();
        let ctx2 = context(&work, &env);
        assert_ne!(ctx, ctx2);
        assert_eq!(cache.get(&bin, ctx2), None);
        // So does a variable pyenv reads.
        let env3 = |k: &str| (k == "PYENV_VERSION").then(|| "3.9".into());
        assert_ne!(context(&work, &env3), ctx2);
        // A reinstalled interpreter is probed again.
        std::fs::write(&exe, "another binary").unwrap();
        assert_eq!(cache.get(&bin, ctx), None);
        // The file is private and bounded.
        for i in 0..(MAX_ENTRIES + 5) {
            cache.put(
                &bin,
                i as u64,
                &Probe {
                    executable: bin.clone(),
                    version: "3.11.7".into(),
                },
            );
        }
        assert_eq!(cache.load().entries.len(), MAX_ENTRIES);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(tmp.path().join("cache").join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0);
    }
}
