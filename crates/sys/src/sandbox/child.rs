//! What runs between fork and exec: raw system calls on what the plan
//! prepared, nothing looked up by name but the plan's own paths.

use std::ffi::CStr;
use std::os::fd::RawFd;

use nix::libc as c;

use super::{Plan, Step};

/// The namespaces the outer process creates.
const NAMESPACES: c::c_int = c::CLONE_NEWUSER
    | c::CLONE_NEWNS
    | c::CLONE_NEWPID
    | c::CLONE_NEWIPC
    | c::CLONE_NEWUTS
    | c::CLONE_NEWCGROUP;

fn errno() -> c::c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(c::EIO)
}

/// `Err(errno)` when `rc` is negative.
fn check(rc: c::c_long) -> Result<c::c_long, c::c_int> {
    if rc < 0 { Err(errno()) } else { Ok(rc) }
}

/// A short text for an errno, without allocating through `strerror`'s
/// locale machinery.
fn errname(e: c::c_int) -> &'static str {
    match e {
        c::EPERM => "Operation not permitted",
        c::EACCES => "Permission denied",
        c::ENOENT => "No such file or directory",
        c::EINVAL => "Invalid argument",
        c::ENOSPC => "No space left",
        c::EUSERS => "Too many nested user namespaces",
        c::ENOSYS => "Not supported by this kernel",
        c::EROFS => "Read-only file system",
        c::EBUSY => "Device or resource busy",
        c::ENOTDIR => "Not a directory",
        c::ENETUNREACH => "Network is unreachable",
        _ => "failed",
    }
}

/// Sends `fail <what>: <errno text>` to the host (best effort).
fn fail(report: RawFd, what: &str, e: c::c_int) {
    // No allocation here: this runs between fork and exec, where another
    // thread of the host may have held the allocator's lock.
    let mut msg = [0u8; 512];
    let mut n = 0;
    let mut put = |b: &[u8]| {
        let take = b.len().min(msg.len() - n);
        msg[n..n + take].copy_from_slice(&b[..take]);
        n += take;
    };
    put(b"fail ");
    put(what.as_bytes());
    put(b": ");
    put(errname(e).as_bytes());
    put(b" (errno ");
    let mut digits = [0u8; 12];
    let mut i = digits.len();
    let mut v = e.unsigned_abs();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 || i == 0 {
            break;
        }
    }
    put(&digits[i..]);
    put(b")");
    // SAFETY: a plain send on a datagram socket we own a copy of.
    unsafe {
        c::send(report, msg.as_ptr().cast(), n, c::MSG_DONTWAIT);
    }
}

fn write_file(path: &CStr, data: &[u8]) -> Result<(), c::c_int> {
    // SAFETY: raw open/write/close on a NUL-terminated path we own.
    unsafe {
        let fd = c::open(path.as_ptr(), c::O_WRONLY | c::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let n = c::write(fd, data.as_ptr().cast(), data.len());
        let e = errno();
        c::close(fd);
        if n < 0 || n.unsigned_abs() != data.len() {
            return Err(if n < 0 { e } else { c::EIO });
        }
    }
    Ok(())
}

/// Closes every descriptor but `keep` (sorted, distinct).
fn close_all_but(keep: &[RawFd]) {
    let mut from: c::c_uint = 0;
    for &k in keep {
        let Ok(k) = c::c_uint::try_from(k) else {
            continue;
        };
        if k > from {
            // SAFETY: closes descriptors this process owns; none is in use
            // by anything but this thread.
            unsafe { c::syscall(c::SYS_close_range, from, k - 1, 0) };
        }
        from = k + 1;
    }
    // SAFETY: as above.
    unsafe { c::syscall(c::SYS_close_range, from, c::c_uint::MAX, 0) };
}

/// Renames this process (a fork of the host, which would otherwise show
/// the host's command line in `ps`): `comm` and the argv area that
/// `/proc/<pid>/cmdline` shows are overwritten in place.
pub(super) fn retitle(title: &CStr) {
    // SAFETY: PR_SET_NAME takes a NUL-terminated string.
    unsafe { c::prctl(c::PR_SET_NAME, title.as_ptr(), 0, 0, 0) };
    let mut buf = [0u8; 1024];
    // SAFETY: open/read/close into a stack buffer.
    let n = unsafe {
        let fd = c::open(c"/proc/self/stat".as_ptr(), c::O_RDONLY | c::O_CLOEXEC);
        if fd < 0 {
            return;
        }
        let n = c::read(fd, buf.as_mut_ptr().cast(), buf.len());
        c::close(fd);
        n
    };
    let Ok(n) = usize::try_from(n) else { return };
    let stat = &buf[..n];
    // Fields after the command's closing parenthesis start at field 3;
    // arg_start and arg_end are fields 48 and 49.
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return;
    };
    let mut fields = stat[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let parse =
        |f: Option<&[u8]>| -> Option<usize> { std::str::from_utf8(f?).ok()?.trim().parse().ok() };
    let start = parse(fields.nth(45));
    let end = parse(fields.next());
    let (Some(start), Some(end)) = (start, end) else {
        return;
    };
    if end <= start || end - start > 1 << 20 {
        return;
    }
    let text = title.to_bytes();
    let len = end - start;
    // SAFETY: [start, end) is this process's own argument area (mapped,
    // writable: it is on the initial stack), which nothing reads after
    // the fork but /proc.
    unsafe {
        let p = start as *mut u8;
        std::ptr::write_bytes(p, 0, len);
        std::ptr::copy_nonoverlapping(text.as_ptr(), p, text.len().min(len - 1));
    }
}

/// Waits for `pid` and returns its raw wait status.
fn wait_for(pid: c::pid_t) -> c::c_int {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child.
        let r = unsafe { c::waitpid(pid, &raw mut status, 0) };
        if r == pid {
            return status;
        }
        if r < 0 && errno() != c::EINTR {
            return 1 << 8;
        }
    }
}

/// Ends this process the way `status` says a process ended: the same
/// signal (default action restored), else the same exit code.
fn exit_like(status: c::c_int) -> ! {
    // SAFETY: signal/kill/_exit on ourselves.
    unsafe {
        if c::WIFSIGNALED(status) {
            let sig = c::WTERMSIG(status);
            c::signal(sig, c::SIG_DFL);
            let mut set: c::sigset_t = std::mem::zeroed();
            c::sigemptyset(&raw mut set);
            c::sigaddset(&raw mut set, sig);
            c::sigprocmask(c::SIG_UNBLOCK, &raw const set, std::ptr::null_mut());
            c::kill(c::getpid(), sig);
            c::_exit(128 + sig);
        }
        c::_exit(if c::WIFEXITED(status) {
            c::WEXITSTATUS(status)
        } else {
            1
        });
    }
}

/// The outer process after forking the init: holds nothing, waits, and
/// ends like the program did (the init passes the program's status on
/// `status_r`).
fn outer(init: c::pid_t, status_r: RawFd) -> ! {
    close_all_but(&[status_r]);
    retitle(c"toolcell-sandbox");
    // An interrupt for the program's process group is not for us.
    // SAFETY: signal dispositions of this process only.
    unsafe {
        c::signal(c::SIGINT, c::SIG_IGN);
        c::signal(c::SIGQUIT, c::SIG_IGN);
    }
    let own = wait_for(init);
    let mut buf = [0u8; 4];
    // SAFETY: read on our pipe end; the init closed its end by exiting.
    let n = unsafe { c::read(status_r, buf.as_mut_ptr().cast(), 4) };
    exit_like(if n == 4 {
        c::c_int::from_ne_bytes(buf)
    } else {
        own
    })
}

/// The init after forking the program: reaps every child until the
/// program ends, then passes its status out and exits (which ends the
/// namespace and everything still in it).
fn init(program: c::pid_t, status_w: RawFd) -> ! {
    close_all_but(&[status_w]);
    loop {
        let mut status = 0;
        // SAFETY: waitpid for any child of ours.
        let r = unsafe { c::waitpid(-1, &raw mut status, 0) };
        if r == program {
            let b = status.to_ne_bytes();
            // SAFETY: write/_exit.
            unsafe {
                c::write(status_w, b.as_ptr().cast(), 4);
                c::_exit(0);
            }
        }
        if r < 0 && errno() == c::ECHILD {
            // SAFETY: _exit.
            unsafe { c::_exit(1) };
        }
    }
}

fn sys_open_tree(path: &CStr, flags: c::c_uint) -> Result<RawFd, c::c_int> {
    // SAFETY: open_tree(2) on a NUL-terminated path.
    let r = check(unsafe { c::syscall(c::SYS_open_tree, c::AT_FDCWD, path.as_ptr(), flags) })?;
    RawFd::try_from(r).map_err(|_| c::EBADF)
}

fn sys_move_mount(fd: RawFd, to: &CStr) -> Result<(), c::c_int> {
    let empty = c"";
    // SAFETY: move_mount(2) of a detached tree we hold onto a path.
    check(unsafe {
        c::syscall(
            c::SYS_move_mount,
            fd,
            empty.as_ptr(),
            c::AT_FDCWD,
            to.as_ptr(),
            c::MOVE_MOUNT_F_EMPTY_PATH,
        )
    })
    .map(drop)
}

/// `mount_setattr(2)`: sets `set` on the mount at `path` (and below it
/// with `recursive`).
fn set_attr(path: &CStr, set: u64, recursive: bool) -> Result<(), c::c_int> {
    let attr = c::mount_attr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { c::AT_RECURSIVE } else { 0 };
    // SAFETY: the struct lives across the call; its size is passed.
    check(unsafe {
        c::syscall(
            c::SYS_mount_setattr,
            c::AT_FDCWD,
            path.as_ptr(),
            flags,
            &raw const attr,
            std::mem::size_of::<c::mount_attr>(),
        )
    })
    .map(drop)
}

fn mount(
    src: &CStr,
    target: &CStr,
    fstype: &CStr,
    flags: c::c_ulong,
    data: &CStr,
) -> Result<(), c::c_int> {
    // SAFETY: mount(2) with NUL-terminated strings.
    check(c::c_long::from(unsafe {
        c::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    }))
    .map(drop)
}

/// `mkdir -p` of `path` (each missing component 0755).
fn mkdir_p(path: &CStr) -> Result<(), c::c_int> {
    let bytes = path.to_bytes();
    let mut buf = Vec::with_capacity(bytes.len() + 1);
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'/' && i > 0 {
            buf.push(0);
            // SAFETY: NUL-terminated prefix of the path.
            let r = unsafe { c::mkdir(buf.as_ptr().cast(), 0o755) };
            if r < 0 && errno() != c::EEXIST {
                return Err(errno());
            }
            buf.pop();
        }
        buf.push(b);
    }
    buf.push(0);
    // SAFETY: as above.
    let r = unsafe { c::mkdir(buf.as_ptr().cast(), 0o755) };
    if r < 0 && errno() != c::EEXIST {
        return Err(errno());
    }
    Ok(())
}

fn exists(path: &CStr) -> bool {
    // SAFETY: access(2) on a NUL-terminated path.
    unsafe { c::access(path.as_ptr(), c::F_OK) == 0 }
}

/// Creates an empty file (a mount point) at `path`.
fn touch(path: &CStr) -> Result<(), c::c_int> {
    // SAFETY: open/close.
    unsafe {
        let fd = c::open(
            path.as_ptr(),
            c::O_WRONLY | c::O_CREAT | c::O_CLOEXEC,
            0o644,
        );
        if fd < 0 {
            return Err(errno());
        }
        c::close(fd);
    }
    Ok(())
}

const DEVICES: [&CStr; 5] = [c"null", c"zero", c"full", c"random", c"urandom"];

/// Builds the view (the init runs this, inside every namespace).
fn build_view(plan: &Plan) -> Result<(), (&'static str, c::c_int)> {
    let none = c"none";
    let empty = c"";
    mount(none, c"/", empty, c::MS_REC | c::MS_PRIVATE, empty)
        .map_err(|e| ("making / private", e))?;
    // Everything that will be covered is cloned first: the writable
    // directories (which may lie under /tmp or a hidden directory), the
    // host's device nodes and one empty file per hidden file.
    let clone = c::OPEN_TREE_CLONE | c::OPEN_TREE_CLOEXEC;
    let mut sources = Vec::with_capacity(plan.writable.len());
    for w in &plan.writable {
        sources.push(
            sys_open_tree(w, clone | c::AT_RECURSIVE as c::c_uint)
                .map_err(|e| ("cloning a writable or readable path", e))?,
        );
    }
    let mut devices = [0; DEVICES.len()];
    for (i, d) in DEVICES.iter().enumerate() {
        let mut path = b"/dev/".to_vec();
        path.extend_from_slice(d.to_bytes_with_nul());
        let p = CStr::from_bytes_with_nul(&path).map_err(|_| ("naming a device", c::EINVAL))?;
        devices[i] = sys_open_tree(p, clone).map_err(|e| ("cloning /dev", e))?;
    }
    // The whole machine read-only and without set-uid.
    set_attr(c"/", c::MOUNT_ATTR_RDONLY | c::MOUNT_ATTR_NOSUID, true)
        .map_err(|e| ("making the filesystem read-only", e))?;
    let mut read_only: Vec<&CStr> = Vec::new();
    for step in &plan.steps {
        match step {
            Step::Tmp => {
                mount(
                    c"tmpfs",
                    c"/tmp",
                    c"tmpfs",
                    c::MS_NOSUID | c::MS_NODEV,
                    &plan.tmp_opts,
                )
                .map_err(|e| ("mounting the private /tmp", e))?;
            }
            Step::Proc => {
                // Read-only: on a root host the sandbox's uid is the host's
                // root, which the kernel's sysctl files check by uid alone
                // (`/proc/sys/kernel/core_pattern` would be a way out).
                mount(
                    c"proc",
                    c"/proc",
                    c"proc",
                    c::MS_NOSUID | c::MS_NODEV | c::MS_NOEXEC | c::MS_RDONLY,
                    empty,
                )
                .map_err(|e| ("mounting /proc", e))?;
            }
            Step::Dev => {
                mount(
                    c"tmpfs",
                    c"/dev",
                    c"tmpfs",
                    c::MS_NOSUID | c::MS_NOEXEC,
                    c"mode=0755,size=65536",
                )
                .map_err(|e| ("mounting /dev", e))?;
                for (i, d) in DEVICES.iter().enumerate() {
                    let mut path = b"/dev/".to_vec();
                    path.extend_from_slice(d.to_bytes_with_nul());
                    let p = CStr::from_bytes_with_nul(&path)
                        .map_err(|_| ("naming a device", c::EINVAL))?;
                    touch(p).map_err(|e| ("making /dev", e))?;
                    sys_move_mount(devices[i], p).map_err(|e| ("mounting a device", e))?;
                }
                mkdir_p(c"/dev/pts").map_err(|e| ("making /dev/pts", e))?;
                mount(
                    c"devpts",
                    c"/dev/pts",
                    c"devpts",
                    c::MS_NOSUID | c::MS_NOEXEC,
                    c"newinstance,ptmxmode=0666,mode=0620",
                )
                .map_err(|e| ("mounting /dev/pts", e))?;
                mkdir_p(c"/dev/shm").map_err(|e| ("making /dev/shm", e))?;
                // As bounded as the private /tmp (unbounded, it is half
                // the machine's memory).
                mount(
                    c"tmpfs",
                    c"/dev/shm",
                    c"tmpfs",
                    c::MS_NOSUID | c::MS_NODEV,
                    &plan.tmp_opts,
                )
                .map_err(|e| ("mounting /dev/shm", e))?;
                for (link, to) in [
                    (c"/dev/ptmx", c"pts/ptmx"),
                    (c"/dev/fd", c"/proc/self/fd"),
                    (c"/dev/stdin", c"/proc/self/fd/0"),
                    (c"/dev/stdout", c"/proc/self/fd/1"),
                    (c"/dev/stderr", c"/proc/self/fd/2"),
                ] {
                    // SAFETY: symlink(2) with NUL-terminated strings.
                    if unsafe { c::symlink(to.as_ptr(), link.as_ptr()) } < 0 {
                        return Err(("making /dev links", errno()));
                    }
                }
                read_only.push(c"/dev");
            }
            Step::HideDir(p) => {
                if !exists(p) {
                    continue;
                }
                mount(
                    c"tmpfs",
                    p,
                    c"tmpfs",
                    c::MS_NOSUID | c::MS_NODEV | c::MS_NOEXEC,
                    c"mode=0755,size=65536",
                )
                .map_err(|e| ("hiding a directory", e))?;
                read_only.push(p);
            }
            Step::HideFile(p) => {
                if !exists(p) {
                    continue;
                }
                let null =
                    sys_open_tree(c"/dev/null", clone).map_err(|e| ("cloning /dev/null", e))?;
                let r = sys_move_mount(null, p);
                // SAFETY: close our handle of the (now attached) tree.
                unsafe { c::close(null) };
                r.map_err(|e| ("hiding a file", e))?;
            }
            Step::Readable {
                index,
                path,
                parent,
                dir,
            } => {
                if !exists(path) {
                    mkdir_p(parent).map_err(|e| ("making a readable path's parent", e))?;
                    let made = if *dir { mkdir_p(path) } else { touch(path) };
                    made.map_err(|e| ("making a readable path's mount point", e))?;
                }
                let fd = *sources.get(*index).ok_or(("a readable path", c::EINVAL))?;
                sys_move_mount(fd, path).map_err(|e| ("mounting a readable path", e))?;
                read_only.push(path);
            }
            Step::Writable(i, p) => {
                if !exists(p) {
                    mkdir_p(p).map_err(|e| ("making a writable path's mount point", e))?;
                }
                let fd = *sources.get(*i).ok_or(("a writable path", c::EINVAL))?;
                sys_move_mount(fd, p).map_err(|e| ("mounting a writable path", e))?;
            }
        }
    }
    for p in read_only {
        set_attr(p, c::MOUNT_ATTR_RDONLY, false)
            .map_err(|e| ("making a hidden path read-only", e))?;
    }
    for fd in sources {
        // SAFETY: close our handles of the attached trees.
        unsafe { c::close(fd) };
    }
    Ok(())
}

/// Loopback up in the new network namespace.
fn loopback_up() -> Result<(), c::c_int> {
    // SAFETY: a socket and an ioctl on a zeroed ifreq naming "lo".
    unsafe {
        let s = c::socket(c::AF_INET, c::SOCK_DGRAM | c::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(errno());
        }
        let mut ifr: c::ifreq = std::mem::zeroed();
        ifr.ifr_name[0] = b'l' as c::c_char;
        ifr.ifr_name[1] = b'o' as c::c_char;
        ifr.ifr_ifru.ifru_flags = (c::IFF_UP | c::IFF_RUNNING) as c::c_short;
        let r = c::ioctl(s, c::SIOCSIFFLAGS, &raw mut ifr);
        let e = errno();
        c::close(s);
        if r < 0 {
            return Err(e);
        }
    }
    Ok(())
}

/// A listening TCP socket on 127.0.0.1:`port`.
fn listen_on(port: u16) -> Result<RawFd, c::c_int> {
    // SAFETY: socket/setsockopt/bind/listen on a sockaddr_in we fill.
    unsafe {
        let s = c::socket(c::AF_INET, c::SOCK_STREAM | c::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(errno());
        }
        let one: c::c_int = 1;
        c::setsockopt(
            s,
            c::SOL_SOCKET,
            c::SO_REUSEADDR,
            (&raw const one).cast(),
            4,
        );
        let mut addr: c::sockaddr_in = std::mem::zeroed();
        addr.sin_family = c::AF_INET as c::sa_family_t;
        addr.sin_port = port.to_be();
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let len = c::socklen_t::try_from(std::mem::size_of::<c::sockaddr_in>()).unwrap_or(16);
        if c::bind(s, (&raw const addr).cast(), len) < 0 || c::listen(s, 128) < 0 {
            let e = errno();
            c::close(s);
            return Err(e);
        }
        Ok(s)
    }
}

/// Checks from inside that the sandbox holds: `/proc` is this PID
/// namespace's (the init is pid 1 there), and, with a network of its own,
/// an address outside is unreachable.
fn check_inside(isolated: bool) -> Result<(), (&'static str, c::c_int)> {
    let mut buf = [0u8; 16];
    // SAFETY: readlink into a stack buffer.
    let n = unsafe { c::readlink(c"/proc/self".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n != 1 || buf[0] != b'1' {
        return Err((
            "checking that the host's processes are out of sight: /proc still shows them",
            c::EEXIST,
        ));
    }
    if isolated {
        // SAFETY: a UDP connect only routes; nothing is sent.
        unsafe {
            let s = c::socket(c::AF_INET, c::SOCK_DGRAM | c::SOCK_CLOEXEC, 0);
            if s < 0 {
                return Err(("checking the network", errno()));
            }
            let mut addr: c::sockaddr_in = std::mem::zeroed();
            addr.sin_family = c::AF_INET as c::sa_family_t;
            addr.sin_port = 9u16.to_be();
            // 192.0.2.1 (TEST-NET-1): no route inside a fresh namespace.
            addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::new(192, 0, 2, 1)).to_be();
            let len = c::socklen_t::try_from(std::mem::size_of::<c::sockaddr_in>()).unwrap_or(16);
            let r = c::connect(s, (&raw const addr).cast(), len);
            let e = errno();
            c::close(s);
            if r == 0 {
                return Err((
                    "checking the network: an outside address is reachable",
                    c::EEXIST,
                ));
            }
            if e != c::ENETUNREACH {
                return Err(("checking the network", e));
            }
        }
    }
    Ok(())
}

/// Sends `ok`, the listeners' descriptors and, as credentials, the
/// program's pid: the kernel gives the host that pid in the host's own
/// PID namespace, however soon the program ends (the init may send
/// another process's pid: it holds `CAP_SYS_ADMIN` over its namespace).
fn report_ok(report: RawFd, fds: &[RawFd], program: c::pid_t) -> Result<(), c::c_int> {
    let msg = b"ok";
    let mut iov = c::iovec {
        iov_base: msg.as_ptr().cast_mut().cast(),
        iov_len: msg.len(),
    };
    // Room for 8 descriptors and one ucred, aligned for cmsghdr.
    let mut space = [0u64; 24];
    // SAFETY: a msghdr over stack buffers sized by CMSG_SPACE.
    unsafe {
        let mut hdr: c::msghdr = std::mem::zeroed();
        hdr.msg_iov = &raw mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = space.as_mut_ptr().cast();
        let cred_bytes = std::mem::size_of::<c::ucred>() as u32;
        let n = fds.len().min(8);
        let fd_bytes = u32::try_from(n * std::mem::size_of::<RawFd>()).unwrap_or(0);
        hdr.msg_controllen = c::CMSG_SPACE(cred_bytes) as usize
            + if n > 0 {
                c::CMSG_SPACE(fd_bytes) as usize
            } else {
                0
            };
        let cm = c::CMSG_FIRSTHDR(&raw const hdr);
        (*cm).cmsg_level = c::SOL_SOCKET;
        (*cm).cmsg_type = c::SCM_CREDENTIALS;
        (*cm).cmsg_len = c::CMSG_LEN(cred_bytes) as usize;
        let cred = c::ucred {
            pid: program,
            uid: c::getuid(),
            gid: c::getgid(),
        };
        std::ptr::write_unaligned(c::CMSG_DATA(cm).cast::<c::ucred>(), cred);
        if n > 0 {
            let cm = c::CMSG_NXTHDR(&raw const hdr, cm);
            (*cm).cmsg_level = c::SOL_SOCKET;
            (*cm).cmsg_type = c::SCM_RIGHTS;
            (*cm).cmsg_len = c::CMSG_LEN(fd_bytes) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), c::CMSG_DATA(cm).cast::<RawFd>(), n);
        }
        if c::sendmsg(report, &raw const hdr, 0) < 0 {
            return Err(errno());
        }
    }
    Ok(())
}

/// Drops every capability (bounding set, ambient, effective, permitted,
/// inheritable), locks root's special treatment away and sets
/// `no_new_privs`; then installs the filter.
pub(super) fn lock_down(
    filters: &[seccompiler::BpfProgram],
) -> Result<(), (&'static str, c::c_int)> {
    // SAFETY: prctl/capset with integers and a stack struct.
    unsafe {
        for cap in 0..64 {
            c::prctl(c::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        c::prctl(c::PR_CAP_AMBIENT, c::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        // SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP(_LOCKED)
        // | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE(_LOCKED):
        // uid 0 inside gains nothing at exec.
        c::prctl(c::PR_SET_SECUREBITS, 0xef, 0, 0, 0);
        #[repr(C)]
        struct Header {
            version: u32,
            pid: c::c_int,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut h = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let d = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if c::syscall(c::SYS_capset, &raw mut h, d.as_ptr()) < 0 {
            return Err(("dropping capabilities", errno()));
        }
        if c::prctl(c::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(("setting no_new_privs", errno()));
        }
        for filter in filters {
            let prog = c::sock_fprog {
                len: u16::try_from(filter.len())
                    .map_err(|_| ("installing the seccomp filter", c::E2BIG))?,
                // seccompiler's sock_filter has the kernel's layout.
                filter: filter.as_ptr().cast::<c::sock_filter>().cast_mut(),
            };
            if c::syscall(
                c::SYS_seccomp,
                c::SECCOMP_SET_MODE_FILTER,
                0u32,
                &raw const prog,
            ) != 0
            {
                return Err(("installing the seccomp filter", errno()));
            }
        }
    }
    Ok(())
}

/// Forks; in the parent, ends like the child (never returns); in the
/// child, returns. `status_r` gets the status from a grandchild's init
/// when there is one.
pub(super) fn fork_and_wait() -> Result<(), c::c_int> {
    let mut p = [0; 2];
    // SAFETY: pipe2 into a stack array.
    if unsafe { c::pipe2(p.as_mut_ptr(), c::O_CLOEXEC) } < 0 {
        return Err(errno());
    }
    // SAFETY: fork in a single-threaded child.
    match unsafe { c::fork() } {
        -1 => Err(errno()),
        0 => {
            // SAFETY: closing our copy of the read end.
            unsafe { c::close(p[0]) };
            Ok(())
        }
        child => {
            // The pipe's write end is closed with everything else; the
            // read end then sees EOF and `outer` takes the child's own
            // status.
            outer(child, p[0])
        }
    }
}

/// See [`super::ChildSandbox::enter`].
pub(super) unsafe fn enter(plan: &Plan, report: RawFd) -> std::io::Result<()> {
    let ns = if plan.listen.is_some() {
        NAMESPACES | c::CLONE_NEWNET
    } else {
        NAMESPACES
    };
    // SAFETY: unshare in a single-threaded child.
    if unsafe { c::unshare(ns) } < 0 {
        let e = errno();
        let step = match e {
            c::ENOSPC => {
                "creating a user namespace (unshare): the machine's limit is reached (sysctl user.max_user_namespaces)"
            }
            c::EPERM => {
                "creating a user namespace (unshare): this user may not (sysctl kernel.unprivileged_userns_clone, or on Ubuntu kernel.apparmor_restrict_unprivileged_userns)"
            }
            _ => "creating the user and other namespaces (unshare)",
        };
        fail(report, step, e);
        return Err(std::io::Error::from_raw_os_error(e));
    }
    // A host that made itself non-dumpable (`forbid_inspection`) passes
    // that on to this fork, and a non-dumpable process's /proc files are
    // root's: without root, its own maps cannot be opened. Dumpable for
    // the three writes only: that is the one moment another process of
    // the same user could open or attach to this copy of the host.
    // SAFETY: geteuid and prctl with integer arguments.
    let unprivileged = unsafe { c::geteuid() } != 0;
    let dumpable = |on: c::c_ulong| {
        if unprivileged {
            // SAFETY: prctl with integer arguments.
            unsafe { c::prctl(c::PR_SET_DUMPABLE, on, 0, 0, 0) };
        }
    };
    dumpable(1);
    for (path, data) in [
        (c"/proc/self/setgroups", &b"deny"[..]),
        (c"/proc/self/uid_map", &plan.uid_map[..]),
        (c"/proc/self/gid_map", &plan.gid_map[..]),
    ] {
        if let Err(e) = write_file(path, data) {
            dumpable(0);
            fail(report, "mapping the user into its namespace", e);
            return Err(std::io::Error::from_raw_os_error(e));
        }
    }
    dumpable(0);
    // The init: pid 1 of the new PID namespace.
    let mut status = [0; 2];
    // SAFETY: pipe2 into a stack array.
    if unsafe { c::pipe2(status.as_mut_ptr(), c::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fork in a single-threaded child.
    match unsafe { c::fork() } {
        -1 => return Err(std::io::Error::last_os_error()),
        0 => {}
        init_pid => {
            // SAFETY: close our copy of the write end.
            unsafe { c::close(status[1]) };
            outer(init_pid, status[0]);
        }
    }
    // SAFETY: prctl/close with integers.
    unsafe {
        c::close(status[0]);
        c::prctl(c::PR_SET_PDEATHSIG, c::SIGKILL, 0, 0, 0);
    }
    retitle(c"toolcell-sandbox-init");
    let die = |what: &str, e: c::c_int| -> ! {
        fail(report, what, e);
        // SAFETY: _exit.
        unsafe { c::_exit(125) }
    };
    if let Err((what, e)) = build_view(plan) {
        die(what, e);
    }
    let mut listeners = Vec::new();
    if let Some(ports) = &plan.listen {
        if let Err(e) = loopback_up() {
            die("bringing loopback up", e);
        }
        for &port in ports {
            match listen_on(port) {
                Ok(fd) => listeners.push(fd),
                Err(e) => die("listening inside the sandbox", e),
            }
        }
    }
    if let Err((what, e)) = check_inside(plan.listen.is_some()) {
        die(what, e);
    }
    // The program: pid 2.
    // SAFETY: fork in a single-threaded child.
    match unsafe { c::fork() } {
        -1 => die("starting the program", errno()),
        0 => {}
        program => {
            if let Err(e) = report_ok(report, &listeners, program) {
                die("reporting to the host", e);
            }
            init(program, status[1]);
        }
    }
    // SAFETY: prctl/close/chdir with integers and the plan's path.
    unsafe {
        c::prctl(c::PR_SET_PDEATHSIG, c::SIGKILL, 0, 0, 0);
        for fd in listeners {
            c::close(fd);
        }
        // The old working directory is the one under the mounts.
        if c::chdir(plan.cwd.as_ptr()) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    lock_down(&plan.filter).map_err(|(_, e)| std::io::Error::from_raw_os_error(e))?;
    Ok(())
}
