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
/// `argv[2]` the file name; written to a temporary file, then renamed.
const COMPILE: &str = "import sys,os,marshal\n\
d,n=sys.argv[1],sys.argv[2]\n\
c=compile(sys.stdin.buffer.read(),'<toolcell runner>','exec')\n\
b=sys.modules['_frozen_importlib_external'].MAGIC_NUMBER+marshal.dumps(c)\n\
t=os.path.join(d,'%s.%d.tmp'%(n,os.getpid()))\n\
f=os.open(t,os.O_WRONLY|os.O_CREAT|os.O_EXCL|getattr(os,'O_NOFOLLOW',0)|getattr(os,'O_CLOEXEC',0),0o600)\n\
with os.fdopen(f,'wb') as w:\n w.write(b)\n\
os.replace(t,os.path.join(d,n))\n";

/// Keys whose compile helper this process started (one per key).
static STARTED: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

/// The cache file name for `source` run by `interpreter`.
fn file_name(interpreter: &Path, source: &str) -> Option<(u64, String)> {
    let id = identity(interpreter)?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    "toolcell runner code v1".hash(&mut h);
    source.hash(&mut h);
    id.hash(&mut h);
    let key = h.finish();
    Some((key, format!("runner-{key:016x}.code")))
}

/// The compiled runner for `interpreter`, opened for the child's fd 5, or
/// `None` (then the bootstrap compiles the source). On a miss the compile
/// is started in the background, once per process, for the next start.
pub(crate) fn runner_code(interpreter: &Path, source: &str) -> Option<OwnedFd> {
    let cache = DiskCache::for_user()?;
    let (key, name) = file_name(interpreter, source)?;
    let dir = PrivateDir::ensure(cache.dir()).ok()?;
    match open_code(&dir, &name) {
        Some(fd) => Some(fd),
        None => {
            start_compile(&dir, key, &name, interpreter, source);
            None
        }
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

fn start_compile(dir: &PrivateDir, key: u64, name: &str, interpreter: &Path, source: &str) {
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
        let (_, n1) = file_name(&a, "print(1)").unwrap();
        assert_eq!(file_name(&a, "print(1)").unwrap().1, n1);
        assert_ne!(file_name(&a, "print(2)").unwrap().1, n1);
        assert_ne!(file_name(&b, "print(1)").unwrap().1, n1);
        assert!(n1.starts_with("runner-") && n1.ends_with(".code"));
        assert!(file_name(&tmp.path().join("missing"), "x").is_none());
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
