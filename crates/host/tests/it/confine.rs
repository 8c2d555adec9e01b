//! `[execution] confine = true` with real Landlock and real kernels
//! (issue 10): a confined strict-mode kernel cannot write outside its private
//! directory, its working directory and the temp dir (PermissionError and a
//! hint), can still read, still calls tools (which run in the host,
//! unconfined), cannot signal the host; project-mode cells are refused.
//!
//! Every target path lives under `CARGO_TARGET_TMPDIR`, which is not under
//! the temp dir, so a write that works there would prove the confinement
//! broken. The kernels root is there too, so the kernel-directory rule is
//! tested on its own, not through the temp-dir rule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use crate::common::{assert_success, show};
use tempfile::TempDir;
use toolcell_host::config::{Config, Mode};
use toolcell_host::{ExecuteRequest, Registry, RegistryOptions};
use toolcell_kernel::{ExecuteResult, Status};

struct Confined {
    reg: Registry,
    /// Outside every writable directory.
    outside: PathBuf,
    _tmp: TempDir,
}

impl Confined {
    fn new() -> Self {
        let tmp = tempfile::tempdir_in(outside_temp_dir()).unwrap();
        assert!(!tmp.path().starts_with(std::env::temp_dir()));
        let outside = tmp.path().join("home");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("notes.txt"), "readable\n").unwrap();
        let reg = Registry::new(RegistryOptions {
            kernels_root: Some(tmp.path().join("kernels")),
            spill_dir: tmp.path().join("spill"),
            default_cwd: outside.clone(),
            mode: Mode::Strict,
            confine: true,
            // Landlock and its seccomp filter alone, as the layer under the
            // sandbox (crates/cli/tests/it/sandbox.rs::confine_inside_a_sandbox_keeps_both_layers
            // covers both).
            sandbox: toolcell_kernel::sandbox::Policy::off(),
            ..RegistryOptions::default()
        })
        .unwrap();
        Self {
            reg,
            outside,
            _tmp: tmp,
        }
    }

    async fn run(&self, code: &str) -> ExecuteResult {
        self.reg.execute(ExecuteRequest::new(code)).await
    }
}

/// A directory for the test's files that is not under the temp dir (the
/// confined kernel may write there): cargo's target tmp dir, unless the
/// target dir itself lives under the temp dir (`CARGO_TARGET_DIR=/tmp/…`),
/// then `/var/tmp` or `$HOME/.cache`.
fn outside_temp_dir() -> PathBuf {
    let temp = std::env::temp_dir();
    let home_cache = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache"));
    [
        Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
        Some(PathBuf::from("/var/tmp")),
        home_cache,
    ]
    .into_iter()
    .flatten()
    .find(|d| !d.starts_with(&temp) && std::fs::create_dir_all(d).is_ok())
    .expect("a writable directory outside the temp dir (set CARGO_TARGET_DIR or HOME)")
}

fn py(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_outside_the_allowed_dirs_is_refused_with_a_hint() {
    let c = Confined::new();
    let target = c.outside.join("evil.txt");
    let r = c
        .run(&format!("open({}, 'w').write('x')", py(&target)))
        .await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert!(
        r.output
            .contains("PermissionError: [Errno 13] Permission denied"),
        "{}",
        show(&r)
    );
    assert!(!target.exists());
    let hint = r.hint.as_deref().unwrap();
    assert!(hint.contains("[execution] confine = true"), "{hint}");
    assert!(
        hint.contains(&std::env::temp_dir().display().to_string()),
        "{hint}"
    );
    assert!(hint.contains(&format!("{}-work", r.kernel.id)), "{hint}");
    // Deleting, renaming into, making directories and truncating are writes too.
    std::fs::write(c.outside.join("keep.txt"), "precious").unwrap();
    let keep = c.outside.join("keep.txt");
    for code in [
        format!("import os\nos.remove({})", py(&keep)),
        format!("import os\nos.mkdir({})", py(&c.outside.join("d"))),
        format!("import os\nos.truncate({}, 0)", py(&keep)),
        format!(
            "import os, tempfile\nfd, p = tempfile.mkstemp()\nos.close(fd)\nos.rename(p, {})",
            py(&c.outside.join("moved"))
        ),
    ] {
        let r = c.run(&code).await;
        assert_eq!(r.status, Status::Error, "{code}: {}", show(&r));
        assert!(
            r.output.contains("PermissionError") || r.output.contains("OSError"),
            "{code}: {}",
            show(&r)
        );
    }
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "precious");
    assert!(!c.outside.join("d").exists() && !c.outside.join("moved").exists());
    // A subprocess is confined too.
    let r = c
        .run(&format!(
            "import subprocess\nprint(subprocess.run(['touch', {}]).returncode)",
            py(&c.outside.join("by_child"))
        ))
        .await;
    assert_success(&r);
    assert_ne!(r.output.trim(), "0", "{}", show(&r));
    assert!(!c.outside.join("by_child").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_private_dirs_and_the_temp_dir_stay_writable_and_reads_are_not_restricted() {
    let c = Confined::new();
    let code = format!(
        "import os, tempfile\n\
         kdir = os.environ['PYTHONPATH'].split(os.pathsep)[0]\n\
         open(os.path.join(kdir, 'scratch.txt'), 'w').write('k')\n\
         open('cwd.txt', 'w').write('c')\n\
         os.mkdir('sub')\n\
         fd, p = tempfile.mkstemp()\n\
         os.write(fd, b't')\n\
         os.close(fd)\n\
         os.remove(p)\n\
         open(os.devnull, 'w').write('n')\n\
         print(open({}).read(), end='')\n\
         print(os.getcwd().endswith('-work'), os.path.basename(kdir))",
        py(&c.outside.join("notes.txt"))
    );
    let r = c.run(&code).await;
    assert_success(&r);
    assert_eq!(r.output, format!("readable\nTrue {}\n", r.kernel.id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_still_work_from_a_confined_kernel_and_run_unconfined_in_the_host() {
    let c = Confined::new();
    let written = c.outside.join("by_tool.txt");
    let code = format!(
        "r = write_file({}, 'from the host')\n\
         print(r['bytes_written'])\n\
         print(read_file({})['content'], end='')",
        py(&written),
        py(&c.outside.join("notes.txt"))
    );
    let r = c.run(&code).await;
    assert_success(&r);
    assert_eq!(r.tool_calls_made, 2);
    assert_eq!(r.output, "13\nreadable\n");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "from the host");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_kernel_cannot_signal_the_host() {
    if toolcell_kernel::confine::landlock_abi().unwrap() < 6 {
        crate::common::missing("Landlock ABI 6 (Linux 6.12), for signal scoping");
        return;
    }
    let c = Confined::new();
    let r = c
        .run(&format!(
            "import os, signal\nos.kill({}, signal.SIGCONT)",
            std::process::id()
        ))
        .await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    assert!(r.output.contains("PermissionError"), "{}", show(&r));
    let hint = r.hint.as_deref().unwrap_or_default();
    assert!(
        hint.contains("may signal only the processes it started"),
        "{hint}"
    );
    // Its own children are in its domain and can be signalled.
    let r = c
        .run("import subprocess, signal\np = subprocess.Popen(['sleep', '30'])\np.send_signal(signal.SIGTERM)\nprint(p.wait())")
        .await;
    assert_success(&r);
    assert_eq!(r.output, "-15\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_mode_cells_are_refused_when_confine_is_on() {
    let c = Confined::new();
    let marker = c.outside.join("ran");
    let r = c
        .reg
        .execute(
            ExecuteRequest::new(format!("open({}, 'w').write('x')", py(&marker)))
                .mode(Mode::Project),
        )
        .await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    let error = r.error.unwrap();
    assert!(error.contains("[execution] confine = true"), "{error}");
    assert!(error.contains("none of the code ran"), "{error}");
    assert!(!marker.exists());
    assert_eq!(c.reg.live_kernels(), 0);
}

#[test]
fn confine_in_the_config_needs_strict_mode() {
    let err = Config::from_toml_str("[execution]\nconfine = true\n", None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "execution.confine: expected false unless execution.mode = \"strict\" (Landlock confinement applies to strict-mode kernels only), got true"
    );
    let c =
        Config::from_toml_str("[execution]\nmode = \"strict\"\nconfine = true\n", None).unwrap();
    assert!(c.execution.confine);
    let opts = RegistryOptions::from_config(&c, std::env::temp_dir()).unwrap();
    assert!(opts.confine);
    let err = Config::from_toml_str("[execution]\nconfine = \"yes\"\n", None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "execution.confine: expected true or false, got \"yes\""
    );
    let mut c = Config::from_toml_str("[execution]\nmode = \"strict\"\n", None).unwrap();
    c.set_override("execution.confine", "true").unwrap();
    c.validate().unwrap();
    assert!(
        c.to_toml_with_sources()
            .contains("confine = true  # from --confine")
    );
    let e = c.set_override("execution.confine", "maybe").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--confine: execution.confine: expected true or false, got \"maybe\""
    );
}

/// Tries every metadata change Landlock has no right for, on a file outside
/// the writable directories and on one of the kernel's own, and prints
/// `<call> <file> <ok|ERRNO>` per attempt. Raw numbers (through `syscall`)
/// for the calls Python has no function for; x86_64 numbers.
const METADATA: &str = r#"
import ctypes, errno, fcntl, os, shutil, struct, pathlib, tarfile, io
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def attempt(name, f):
    try:
        f()
        print(name, 'ok')
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def raw(nr, *args):
    def f():
        ctypes.set_errno(0)
        if libc.syscall(ctypes.c_long(nr), *args) < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    return f
uid, gid = os.getuid(), os.getgid()
open('mine.txt', 'w').write('m')
for tag, p in (('outside', OUTSIDE), ('own', os.path.abspath('mine.txt'))):
    b = ctypes.c_char_p(p.encode())
    fd = os.open(p, os.O_RDONLY)
    d = os.open(os.path.dirname(p), os.O_RDONLY)
    name = os.path.basename(p)
    attempt('os.chown ' + tag, lambda: os.chown(p, uid, gid))
    attempt('os.lchown ' + tag, lambda: os.lchown(p, uid, gid))
    attempt('os.fchown ' + tag, lambda: os.fchown(fd, uid, gid))
    attempt('os.chown(dir_fd) ' + tag, lambda: os.chown(name, uid, gid, dir_fd=d))
    attempt('chown ' + tag, raw(92, b, uid, gid))
    attempt('fchown ' + tag, raw(93, fd, uid, gid))
    attempt('lchown ' + tag, raw(94, b, uid, gid))
    attempt('fchownat ' + tag, raw(260, d, ctypes.c_char_p(name.encode()), uid, gid, 0))
    attempt('x32 chown ' + tag, raw(0x40000000 | 92, b, uid, gid))
    attempt('os.setxattr ' + tag, lambda: os.setxattr(p, 'user.tc', b'1'))
    attempt('os.setxattr(nofollow) ' + tag, lambda: os.setxattr(p, 'user.tc', b'1', follow_symlinks=False))
    attempt('os.setxattr(fd) ' + tag, lambda: os.setxattr(fd, 'user.tc', b'1'))
    attempt('os.removexattr ' + tag, lambda: os.removexattr(p, 'user.tc'))
    attempt('os.removexattr(nofollow) ' + tag, lambda: os.removexattr(p, 'user.tc', follow_symlinks=False))
    attempt('os.removexattr(fd) ' + tag, lambda: os.removexattr(fd, 'user.tc'))
    attempt('setxattrat ' + tag, raw(463, d, ctypes.c_char_p(name.encode()), 0, ctypes.c_char_p(b'user.tc'), None, 0))
    attempt('removexattrat ' + tag, raw(466, d, ctypes.c_char_p(name.encode()), 0, ctypes.c_char_p(b'user.tc')))
    attempt('file_setattr ' + tag, raw(469, d, ctypes.c_char_p(name.encode()), None, 0, 0))
    attempt('FS_IOC_SETFLAGS ' + tag, lambda: fcntl.ioctl(fd, 0x40086602, struct.pack('l', 0)))
    attempt('FS_IOC_FSSETXATTR ' + tag, lambda: fcntl.ioctl(fd, 0x401c5820, bytes(28)))
    attempt('chmod ' + tag, lambda: os.chmod(p, 0o644))
    attempt('utime ' + tag, lambda: os.utime(p, (1, 1)))
attempt('io_uring_setup', raw(425, 0, None))
# Ordinary Python that changes modes and times of its own files still works.
attempt('shutil.copy', lambda: shutil.copy('mine.txt', 'copy.txt'))
attempt('shutil.copy2', lambda: shutil.copy2('mine.txt', 'copy2.txt'))
attempt('shutil.copytree', lambda: shutil.copytree('.', '/tmp/tc-tree-%d' % os.getpid(), ignore=shutil.ignore_patterns('tc-tree*')))
attempt('Path.touch', lambda: pathlib.Path('mine.txt').touch())
def tar():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w') as t:
        t.add('mine.txt')
    buf.seek(0)
    with tarfile.open(fileobj=buf) as t:
        t.extractall('untarred')
attempt('tarfile', tar)
"#;

/// The `<call> <file>` → result lines of [`METADATA`] run in `reg`.
async fn metadata_attempts(
    reg: &Registry,
    outside: &Path,
) -> std::collections::BTreeMap<String, String> {
    let code = format!("OUTSIDE = {}\n{METADATA}", py(outside));
    let r = reg
        .execute(ExecuteRequest::new(code).mode(Mode::Strict))
        .await;
    assert_success(&r);
    r.output
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(target_arch = "x86_64")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chown_xattrs_inode_flags_and_io_uring_are_refused_but_chmod_and_utime_are_not() {
    let c = Confined::new();
    let target = c.outside.join("notes.txt");
    let got = metadata_attempts(&c.reg, &target).await;
    let blocked = [
        "os.chown",
        "os.lchown",
        "os.fchown",
        "os.chown(dir_fd)",
        "chown",
        "fchown",
        "lchown",
        "fchownat",
        "x32 chown",
        "os.setxattr",
        "os.setxattr(nofollow)",
        "os.setxattr(fd)",
        "os.removexattr",
        "os.removexattr(nofollow)",
        "os.removexattr(fd)",
        "setxattrat",
        "removexattrat",
        "file_setattr",
        "FS_IOC_SETFLAGS",
        "FS_IOC_FSSETXATTR",
    ];
    // Blocked everywhere: seccomp sees no paths, so the kernel's own files too.
    for call in blocked {
        for tag in ["outside", "own"] {
            let key = format!("{call} {tag}");
            assert_eq!(
                got.get(&key).map(String::as_str),
                Some("EPERM"),
                "{key}: {got:#?}"
            );
        }
    }
    assert_eq!(got["io_uring_setup"], "EPERM", "{got:#?}");
    // Not blocked (the documented limit): mode bits and times, also outside.
    for key in ["chmod outside", "utime outside", "chmod own", "utime own"] {
        assert_eq!(got[key], "ok", "{key}: {got:#?}");
    }
    let meta = std::fs::metadata(&target).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::mtime(&meta),
        1,
        "utime outside the writable dirs works under confinement"
    );
    // What ordinary Python does with its own files keeps working.
    for key in [
        "shutil.copy",
        "shutil.copy2",
        "shutil.copytree",
        "Path.touch",
        "tarfile",
    ] {
        assert_eq!(got[key], "ok", "{key}: {got:#?}");
    }

    // Unconfined, the same calls are not refused with EPERM: the refusals
    // above are the filter's.
    let tmp = tempfile::tempdir_in(outside_temp_dir()).unwrap();
    let free = Registry::new(RegistryOptions {
        kernels_root: Some(tmp.path().join("kernels")),
        spill_dir: tmp.path().join("spill"),
        default_cwd: tmp.path().to_path_buf(),
        mode: Mode::Strict,
        sandbox: toolcell_kernel::sandbox::Policy::off(),
        ..RegistryOptions::default()
    })
    .unwrap();
    let base = metadata_attempts(&free, &target).await;
    for key in [
        "os.chown outside",
        "os.fchown own",
        "chown outside",
        "fchownat own",
    ] {
        assert_eq!(base[key], "ok", "{key}: {base:#?}");
    }
    for key in [
        "x32 chown outside",
        "setxattrat own",
        "file_setattr own",
        "io_uring_setup",
    ] {
        assert_ne!(base[key], "EPERM", "{key}: {base:#?}");
    }
}

/// Review item 4: a confined kernel on a root host made a character device
/// in its temp dir (`os.mknod`) and wrote through it (`/dev/kmsg`,
/// `/dev/mem`, a terminal with `TIOCSTI`). Device nodes are refused under
/// every writable directory, by Landlock and by seccomp alike; FIFOs and
/// plain files are not. `TIOCSTI` is refused on any terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_04_a_confined_kernel_cannot_make_device_nodes_or_push_terminal_input() {
    let c = Confined::new();
    let code = r#"
import os, stat, tempfile, fcntl, termios
out = []
def attempt(tag, f):
    try:
        f()
        out.append(tag + ' ok')
    except OSError as e:
        out.append(tag + ' ' + str(e.errno))
for where in (tempfile.gettempdir(), os.getcwd(), os.path.dirname(os.environ['TOOLCELL_RPC'][len('unix:'):])):
    p = os.path.join(where, 'kmsg-%d' % os.getpid())
    attempt('chr', lambda: os.mknod(p, 0o600 | stat.S_IFCHR, os.makedev(1, 11)))
    attempt('blk', lambda: os.mknod(p + 'b', 0o600 | stat.S_IFBLK, os.makedev(7, 0)))
    dfd = os.open(where, os.O_RDONLY)
    attempt('chrat', lambda: os.mknod('kmsg-at', 0o600 | stat.S_IFCHR, os.makedev(1, 11), dir_fd=dfd))
    os.close(dfd)
    attempt('fifo', lambda: os.mkfifo(p + '.fifo'))
def push():
    m, s = os.openpty()
    fcntl.ioctl(s, termios.TIOCSTI, b'x')
attempt('tiocsti', push)
print(' | '.join(out))
"#;
    let r = c.run(code).await;
    assert_success(&r);
    let line = r.output.trim().to_string();
    let eperm = nix::libc::EPERM.to_string();
    let eacces = nix::libc::EACCES.to_string();
    for part in line.split(" | ") {
        let (tag, outcome) = part.rsplit_once(' ').unwrap();
        if tag == "fifo" {
            assert_eq!(outcome, "ok", "a FIFO stays possible: {}", show(&r));
        } else {
            assert!(
                outcome == eperm || outcome == eacces,
                "{tag} must be refused, got {outcome}: {}",
                show(&r)
            );
        }
    }
    assert!(line.contains("tiocsti"), "{}", show(&r));
    assert_eq!(line.matches("chr ").count(), 3, "{}", show(&r));
}
