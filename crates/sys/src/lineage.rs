//! Which kernel a process descends from, even after it left every trace.
//!
//! A process a cell starts can clear its environment, call `setsid`,
//! double-fork and, on a root host, write itself into another cgroup. Then
//! neither its process group, nor its environment, nor its cgroup says
//! where it came from, and `/proc` parent links end at the host (which
//! adopted it as a subreaper). What does say it is the moment it was
//! forked: the kernel's process events connector (`NETLINK_CONNECTOR`,
//! `CN_IDX_PROC`) reports every fork with its parent. [`watch`] listens to
//! those (it needs `CAP_NET_ADMIN`, so in practice a root host: the hosts
//! whose kernels can leave their cgroups), and a [`Lineage`] made for a
//! kernel right after its spawn collects every process forked from it or
//! from anything it forked since.
//!
//! Where the connector is not available, [`Lineage::members`] is empty
//! and callers rely on cgroups and [`descends_from`] (parent links), as
//! before.
//!
//! ```
//! use toolcell_sys::lineage;
//!
//! let me = std::process::id();
//! assert!(lineage::descends_from(me, me));
//! let child = std::process::Command::new("true").spawn().unwrap();
//! assert!(!lineage::descends_from(me, child.id()));
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Most processes recorded across all lineages: past it new forks are not
/// recorded (and a warning is logged once), so a fork storm cannot grow
/// the host's memory.
const MAX_RECORDED: usize = 200_000;

#[derive(Debug, Default)]
struct Table {
    /// tgid → lineage id.
    owner: HashMap<u32, u64>,
    full_warned: bool,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);
static WATCHING: OnceLock<bool> = OnceLock::new();
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Starts listening to process events (once per process); true when the
/// listener runs. False where the connector is refused (no
/// `CAP_NET_ADMIN`), missing, or turned off with `TOOLCELL_LINEAGE=off`.
pub fn watch() -> bool {
    *WATCHING.get_or_init(|| {
        if std::env::var("TOOLCELL_LINEAGE").is_ok_and(|v| v == "off" || v == "0") {
            return false;
        }
        match connector::open() {
            Ok(sock) => {
                if let Ok(mut t) = TABLE.lock() {
                    *t = Some(Table::default());
                }
                let spawned = std::thread::Builder::new()
                    .name("toolcell-lineage".into())
                    .spawn(move || connector::run(&sock, record));
                spawned.is_ok()
            }
            Err(e) => {
                tracing::debug!(
                    "no process-event lineage ({e}); relying on cgroups and parent links"
                );
                false
            }
        }
    })
}

/// One process event the listener cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Fork { parent: u32, child: u32 },
    Exit { pid: u32 },
}

fn record(ev: Event) {
    let Ok(mut guard) = TABLE.lock() else { return };
    let Some(t) = guard.as_mut() else { return };
    match ev {
        Event::Fork { parent, child } => {
            if let Some(&id) = t.owner.get(&parent) {
                if t.owner.len() >= MAX_RECORDED {
                    if !t.full_warned {
                        t.full_warned = true;
                        tracing::warn!(
                            "process lineage is full ({MAX_RECORDED} processes); new forks are not recorded"
                        );
                    }
                    return;
                }
                t.owner.insert(child, id);
            }
        }
        Event::Exit { pid } => {
            t.owner.remove(&pid);
        }
    }
}

/// The processes forked from one root (a kernel) since [`Lineage::adopt`].
/// Dropping it forgets them.
#[derive(Debug)]
pub struct Lineage {
    id: u64,
    root: u32,
}

impl Lineage {
    /// Starts recording `root`'s descendants; `None` when [`watch`] is not
    /// running. Call it right after spawning `root`, before it runs code.
    pub fn adopt(root: u32) -> Option<Lineage> {
        if !watch() {
            return None;
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut guard = TABLE.lock().ok()?;
        guard.as_mut()?.owner.insert(root, id);
        Some(Lineage { id, root })
    }

    /// The root pid.
    pub fn root(&self) -> u32 {
        self.root
    }

    /// Every recorded member alive as far as the events say (root included
    /// while it lives).
    pub fn members(&self) -> Vec<u32> {
        let Ok(guard) = TABLE.lock() else {
            return Vec::new();
        };
        guard
            .as_ref()
            .map(|t| {
                t.owner
                    .iter()
                    .filter(|&(_, &id)| id == self.id)
                    .map(|(&pid, _)| pid)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether `pid` was forked from this lineage (or is its root).
    pub fn contains(&self, pid: u32) -> bool {
        TABLE
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(|t| t.owner.get(&pid) == Some(&self.id)))
            .unwrap_or(false)
    }
}

impl Drop for Lineage {
    fn drop(&mut self) {
        if let Ok(mut guard) = TABLE.lock()
            && let Some(t) = guard.as_mut()
        {
            let id = self.id;
            t.owner.retain(|_, v| *v != id);
        }
    }
}

/// Whether `pid` is `root` or a descendant of it by `/proc` parent links
/// now (a process re-parented to a subreaper no longer is).
pub fn descends_from(pid: u32, root: u32) -> bool {
    let mut p = pid;
    // Parent chains are short; the bound only guards against a loop read
    // from a /proc that changed under us.
    for _ in 0..4096 {
        if p == root {
            return true;
        }
        if p <= 1 {
            return false;
        }
        match crate::procfs::parent(p) {
            Some(pp) => p = pp,
            None => return false,
        }
    }
    false
}

/// Whether a strict ancestor of `pid` (by `/proc` parent links) runs a
/// program whose name (`/proc/<pid>/comm`, readable even for a
/// non-dumpable process) is `comm`. A process that left its kernel's
/// cgroup, session and environment is re-parented to the toolcell host
/// that adopted it as a subreaper, so its chain still passes through a
/// process named like the host.
pub fn has_ancestor_named(pid: u32, comm: &str) -> bool {
    let mut p = pid;
    for _ in 0..4096 {
        match crate::procfs::parent(p) {
            Some(pp) if pp > 0 => p = pp,
            _ => return false,
        }
        if comm_of(p).is_some_and(|c| c == comm) {
            return true;
        }
        if p <= 1 {
            return false;
        }
    }
    false
}

/// The program name of `pid` (`/proc/<pid>/comm`, without the newline).
pub fn comm_of(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/comm")).ok()?;
    let name = raw.strip_suffix(b"\n").unwrap_or(&raw);
    Some(String::from_utf8_lossy(name).into_owned())
}

/// The proc connector socket: subscribe, then decode events.
mod connector {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use super::Event;

    const NETLINK_CONNECTOR: i32 = 11;
    const CN_IDX_PROC: u32 = 1;
    const CN_VAL_PROC: u32 = 1;
    const PROC_CN_MCAST_LISTEN: u32 = 1;
    const PROC_EVENT_FORK: u32 = 0x0000_0001;
    const PROC_EVENT_EXIT: u32 = 0x8000_0000;
    const NLMSG_HDR: usize = 16;
    const CN_MSG_HDR: usize = 20;
    /// `what` (4), `cpu` (4), `timestamp_ns` (8), then the event's fields.
    const EVENT_DATA: usize = NLMSG_HDR + CN_MSG_HDR + 16;

    pub(super) fn open() -> std::io::Result<OwnedFd> {
        use nix::libc;
        // SAFETY: plain socket(2); the fd is owned right after.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                NETLINK_CONNECTOR,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a new, valid descriptor nobody else owns.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // A fork storm must not drop events: a large receive buffer (the
        // forced variant ignores rmem_max, root only; the plain one is the
        // fallback).
        let size: libc::c_int = 8 << 20;
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
            // SAFETY: setsockopt with a pointer to a live c_int.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    std::ptr::from_ref(&size).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
        // SAFETY: sockaddr_nl is plain data; zeroed is valid.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = CN_IDX_PROC;
        // SAFETY: bind with a pointer to a live sockaddr_nl and its size.
        let rc = unsafe {
            libc::bind(
                fd,
                std::ptr::from_ref(&addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut msg = Vec::with_capacity(NLMSG_HDR + CN_MSG_HDR + 4);
        let total = (NLMSG_HDR + CN_MSG_HDR + 4) as u32;
        msg.extend_from_slice(&total.to_ne_bytes());
        msg.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&std::process::id().to_ne_bytes());
        msg.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        msg.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&4u16.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        // SAFETY: send from a live buffer of its own length.
        let n = unsafe { libc::send(fd, msg.as_ptr().cast(), msg.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(sock)
    }

    pub(super) fn run(sock: &OwnedFd, mut on: impl FnMut(Event)) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: recv into a live buffer of its own length.
            let n =
                unsafe { nix::libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(nix::libc::EINTR) => continue,
                    Some(nix::libc::ENOBUFS) => {
                        tracing::warn!("process events were lost (receive buffer full)");
                        continue;
                    }
                    _ => {
                        tracing::warn!("process-event listener stopped: {e}");
                        return;
                    }
                }
            }
            let Ok(n) = usize::try_from(n) else { continue };
            for ev in decode(buf.get(..n).unwrap_or_default()) {
                on(ev);
            }
        }
    }

    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        b.get(at..at + 4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_ne_bytes)
    }

    /// The events in one datagram (one or more netlink messages).
    pub(super) fn decode(mut b: &[u8]) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(len) = u32_at(b, 0) {
            let len = (len as usize).min(b.len());
            if len < NLMSG_HDR {
                break;
            }
            let m = &b[..len];
            let ev = match u32_at(m, NLMSG_HDR + CN_MSG_HDR) {
                Some(PROC_EVENT_FORK) => u32_at(m, EVENT_DATA + 4)
                    .zip(u32_at(m, EVENT_DATA + 8))
                    .zip(u32_at(m, EVENT_DATA + 12))
                    .and_then(|((parent, child_pid), child)| {
                        // A new thread is a fork event too; only new
                        // processes (pid == tgid) are recorded.
                        (child_pid == child && child != parent)
                            .then_some(Event::Fork { parent, child })
                    }),
                Some(PROC_EVENT_EXIT) => u32_at(m, EVENT_DATA)
                    .zip(u32_at(m, EVENT_DATA + 4))
                    .and_then(|(pid, tgid)| (pid == tgid).then_some(Event::Exit { pid })),
                _ => None,
            };
            out.extend(ev);
            // Messages are 4-byte aligned.
            let step = (len + 3) & !3;
            b = b.get(step..).unwrap_or_default();
        }
        out
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn message(what: u32, data: [u32; 4]) -> Vec<u8> {
            let mut m = Vec::new();
            m.extend_from_slice(&76u32.to_ne_bytes());
            m.extend_from_slice(&[0u8; 12]);
            m.extend_from_slice(&[0u8; 20]);
            m.extend_from_slice(&what.to_ne_bytes());
            m.extend_from_slice(&[0u8; 12]);
            for d in data {
                m.extend_from_slice(&d.to_ne_bytes());
            }
            m.resize(76, 0);
            m
        }

        #[test]
        fn decodes_forks_of_processes_and_exits_of_leaders_only() {
            let mut b = message(PROC_EVENT_FORK, [10, 10, 11, 11]);
            b.extend(message(PROC_EVENT_FORK, [10, 10, 12, 10]));
            b.extend(message(PROC_EVENT_EXIT, [11, 11, 0, 0]));
            b.extend(message(PROC_EVENT_EXIT, [12, 10, 0, 0]));
            b.extend(message(2, [1, 2, 3, 4]));
            assert_eq!(
                decode(&b),
                vec![
                    Event::Fork {
                        parent: 10,
                        child: 11
                    },
                    Event::Exit { pid: 11 }
                ]
            );
        }

        #[test]
        fn truncated_or_garbage_input_yields_nothing_and_never_panics() {
            let m = message(PROC_EVENT_FORK, [10, 10, 11, 11]);
            for cut in 0..m.len() {
                let _ = decode(&m[..cut]);
            }
            assert!(decode(&[0xff; 3]).is_empty());
            let mut zero_len = m.clone();
            zero_len[..4].copy_from_slice(&0u32.to_ne_bytes());
            assert!(decode(&zero_len).is_empty());
        }
    }
}
