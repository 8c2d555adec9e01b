//! The Python runner compiled once per interpreter, remembered on disk.
//!
//! Compiling `runner.py` (about 1,700 lines) costs a kernel start 10–30 ms,
//! as much as the interpreter's own start on this kind of machine. The
//! first start with an interpreter compiles from source as always and, in
//! the background, runs that interpreter once more in isolated mode
//! (`-I -S`, so no environment, site or user code takes part) to compile
//! the runner and write the code object (`marshal`, behind the
//! interpreter's bytecode magic number) to the user's cache directory.
//! Later starts pass that file to the bootstrap as fd 5, and it runs the
//! code without compiling.
//!
//! The file's name is a hash of the runner source and the interpreter
//! file's identity (device, inode, size, mtime): another toolcell build or
//! a reinstalled Python uses another file. The directory is the probe
//! cache's, verified private (no other user can write it); the file is
//! opened without following links and read by the bootstrap only when the
//! host passes it, and a file that does not start with the interpreter's
//! magic number, or does not load, makes the bootstrap compile the source
//! (fd 4) as before. `TOOLCELL_PROBE_CACHE=off` turns this off too.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use toolcell_sys::private_dir::PrivateDir;

use super::disk::{DiskCache, identity};

/// Largest code file passed on (the runner's is ~150 KiB).
const MAX_CODE: u64 = 8 << 20;

/// What the compile helper runs: source on stdin, `argv[1]` the directory,
/// `argv[2]` the file name, `argv[3]` the name the code is compiled under;
/// written to a temporary file, then renamed.
const COMPILE: &str = "import sys,os,marshal\n\
d,n=sys.argv[1],sys.argv[2]\n\
c=compile(sys.stdin.buffer.read(),sys.argv[3],'exec')\n\
b=sys.modules['_frozen_importlib_external'].MAGIC_NUMBER+marshal.dumps(c)\n\
t=os.path.join(d,'%s.%d.tmp'%(n,os.getpid()))\n\
f=os.open(t,os.O_WRONLY|os.O_CREAT|os.O_EXCL|getattr(os,'O_NOFOLLOW',0)|getattr(os,'O_CLOEXEC',0),0o600)\n\
with os.fdopen(f,'wb') as w:\n w.write(b)\n\
os.replace(t,os.path.join(d,n))\n";

/// Keys whose compile helper this process started (one per key).
static STARTED: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

/// Stub modules' code files kept at most (one per set of tools a session
/// had); the oldest go first.
const MAX_STUB_FILES: usize = 32;

/// What is compiled: the runner, or a stub module.
#[derive(Clone, Copy)]
enum Kind {
    Runner,
    Stubs,
}

impl Kind {
    /// The file name prefix, and the name the code is compiled under.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Kind::Runner => ("runner", "<toolcell runner>"),
            Kind::Stubs => ("stubs", "toolcell_tools.py"),
        }
    }
}

/// The cache file name for `source` run by `interpreter`.
fn file_name(kind: Kind, interpreter: &Path, source: &str) -> Option<(u64, String)> {
    let id = identity(interpreter)?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let prefix = kind.names().0;
    format!("toolcell {prefix} code v1").hash(&mut h);
    source.hash(&mut h);
    id.hash(&mut h);
    let key = h.finish();
    Some((key, format!("{prefix}-{key:016x}.code")))
}

/// The compiled runner for `interpreter`, opened for the child's fd 5, or
/// `None` (then the bootstrap compiles the source). On a miss the compile
/// is started in the background, once per process, for the next start.
pub(crate) fn runner_code(interpreter: &Path, source: &str) -> Option<OwnedFd> {
    cached(Kind::Runner, interpreter, source)
}

/// The stub module `source` compiled by `interpreter` (its magic number and
/// marshalled code), for the kernel directory's `toolcell_tools.code`, or
/// `None` (the runner imports the source). A miss starts the compile, as
/// for the runner; a session's own set of tools is one more file, and the
/// oldest beyond [`MAX_STUB_FILES`] are removed.
pub(crate) fn stub_code(interpreter: &Path, source: &str) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let fd = cached(Kind::Stubs, interpreter, source)?;
    let mut data = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_CODE)
        .read_to_end(&mut data)
        .ok()?;
    Some(data)
}

fn cached(kind: Kind, interpreter: &Path, source: &str) -> Option<OwnedFd> {
    let cache = DiskCache::for_user()?;
    let (key, name) = file_name(kind, interpreter, source)?;
    let dir = PrivateDir::ensure(cache.dir()).ok()?;
    match open_code(&dir, &name) {
        Some(fd) => Some(fd),
        None => {
            if matches!(kind, Kind::Stubs) {
                prune(&dir, "stubs-", MAX_STUB_FILES - 1);
            }
            start_compile(&dir, key, &name, interpreter, source, kind.names().1);
            None
        }
    }
}

/// Removes the oldest `<prefix>*.code` files of `dir` until `keep` remain.
fn prune(dir: &PrivateDir, prefix: &str, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir.path()) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, std::ffi::OsString)> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with(prefix) && n.ends_with(".code")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.file_name())))
        .collect();
    if files.len() <= keep {
        return;
    }
    files.sort();
    for (_, name) in &files[..files.len() - keep] {
        let _ = nix::unistd::unlinkat(
            dir.fd(),
            name.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
}

fn open_code(dir: &PrivateDir, name: &str) -> Option<OwnedFd> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::{Mode, fstat};
    let fd = openat(
        dir.fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    )
    .ok()?;
    let st = fstat(&fd).ok()?;
    let regular = (st.st_mode & nix::libc::S_IFMT) == nix::libc::S_IFREG;
    let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    (regular && size > 4 && size <= MAX_CODE).then_some(fd)
}

fn start_compile(
    dir: &PrivateDir,
    key: u64,
    name: &str,
    interpreter: &Path,
    source: &str,
    compiled_as: &str,
) {
    {
        let mut started = STARTED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !started.get_or_insert_with(HashSet::new).insert(key) {
            return;
        }
    }
    let child = Command::new(interpreter)
        .args(["-I", "-S", "-c", COMPILE])
        .arg(dir.path())
        .arg(name)
        .arg(compiled_as)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!("cannot start the runner compile: {e}");
            return;
        }
    };
    let Some(mut stdin) = child.stdin.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return;
    };
    let source = source.to_owned();
    // Writes the source and reaps the helper; a host that exits first
    // leaves a helper that reads a cut source, fails to compile and writes
    // nothing.
    let spawned = std::thread::Builder::new()
        .name("toolcell-runner-compile".into())
        .spawn(move || {
            let _ = stdin.write_all(source.as_bytes());
            drop(stdin);
            match child.wait() {
                Ok(s) if s.success() => {}
                Ok(s) => tracing::debug!("the runner compile ended with {s}"),
                Err(e) => tracing::debug!("cannot wait for the runner compile: {e}"),
            }
        });
    if let Err(e) = spawned {
        tracing::debug!("cannot start the runner compile's thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_name_changes_with_the_source_and_the_interpreter() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("python-a");
        let b = tmp.path().join("python-b");
        std::fs::write(&a, "a").unwrap();
        std::fs::write(&b, "bb").unwrap();
        let (_, n1) = file_name(Kind::Runner, &a, "print(1)").unwrap();
        assert_eq!(file_name(Kind::Runner, &a, "print(1)").unwrap().1, n1);
        assert_ne!(file_name(Kind::Runner, &a, "print(2)").unwrap().1, n1);
        assert_ne!(file_name(Kind::Runner, &b, "print(1)").unwrap().1, n1);
        assert!(n1.starts_with("runner-") && n1.ends_with(".code"));
        let (_, s1) = file_name(Kind::Stubs, &a, "print(1)").unwrap();
        assert!(s1.starts_with("stubs-") && s1[6..] != n1[7..]);
        assert!(file_name(Kind::Runner, &tmp.path().join("missing"), "x").is_none());
    }

    #[test]
    fn pruning_keeps_the_newest_stub_files_and_nothing_else_is_touched() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = PrivateDir::ensure(&tmp.path().join("c")).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for i in 0..5u64 {
            let p = dir.path().join(format!("stubs-{i}.code"));
            std::fs::write(&p, b"x").unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(old + std::time::Duration::from_secs(i))
                .unwrap();
        }
        std::fs::write(dir.path().join("runner-1.code"), b"x").unwrap();
        prune(&dir, "stubs-", 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["runner-1.code", "stubs-3.code", "stubs-4.code"]);
    }

    #[test]
    fn only_a_regular_file_of_a_sane_size_is_passed_on() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = PrivateDir::ensure(&tmp.path().join("c")).unwrap();
        std::fs::write(dir.path().join("ok.code"), vec![1u8; 64]).unwrap();
        std::fs::write(dir.path().join("tiny.code"), b"abc").unwrap();
        std::os::unix::fs::symlink(dir.path().join("ok.code"), dir.path().join("link.code"))
            .unwrap();
        std::fs::create_dir(dir.path().join("sub.code")).unwrap();
        assert!(open_code(&dir, "ok.code").is_some());
        assert!(open_code(&dir, "tiny.code").is_none());
        assert!(open_code(&dir, "link.code").is_none(), "a link is followed");
        assert!(open_code(&dir, "sub.code").is_none());
        assert!(open_code(&dir, "absent.code").is_none());
    }
}
