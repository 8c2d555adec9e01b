//! Finding and killing process trees (used by `terminal`; the kernel crate
//! uses the same functions for kernels).
//!
//! A process group is not enough: a child that called `setsid()` has left
//! its group, and once its parent exits it is not even a descendant any
//! more (it is reparented to init). So a tree is found three ways: the
//! process group, descendants through `/proc/<pid>/stat` parent links, and
//! an environment marker (`NAME=value`, set when the tree was started and
//! inherited by everything in it) looked up in `/proc/<pid>/environ`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::procfs::{Proc, proc_table};
pub use crate::procfs::{alive, is_zombie, parent, start_time};

/// Parent pid → children, from a table.
fn children_of(table: &[Proc]) -> HashMap<i32, Vec<i32>> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    children
}

/// Parent pid of every process visible in `/proc`.
fn parent_map() -> HashMap<i32, Vec<i32>> {
    children_of(&proc_table())
}

/// The descendants of `root` in `map`, parents first.
fn descendants_in(map: &HashMap<i32, Vec<i32>>, root: i32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut queue = vec![root];
    while let Some(p) = queue.pop() {
        for &c in map.get(&p).map_or(&[][..], Vec::as_slice) {
            if seen.insert(c) {
                out.push(c.unsigned_abs());
                queue.push(c);
            }
        }
    }
    out
}

/// Whether `pid`'s environment holds exactly `needle` (`NAME=value`).
fn has_env(pid: u32, needle: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == needle))
}

/// Every living descendant of `root` (not `root` itself), parents first.
pub fn descendants(root: u32) -> Vec<u32> {
    let Ok(root) = i32::try_from(root) else {
        return Vec::new();
    };
    descendants_in(&parent_map(), root)
}

/// Processes of our uid whose environment contains exactly `NAME=value`.
pub fn with_env_marker(name: &str, value: &str) -> Vec<u32> {
    let needle = format!("{name}={value}");
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != me && has_env(pid, needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// A process tree to signal: a root, its process group, and optionally an
/// environment marker every member inherited.
#[derive(Debug, Clone)]
pub struct Tree {
    /// The first process.
    pub root: u32,
    /// Its process group, when it leads one.
    pub pgid: Option<u32>,
    /// `(NAME, value)` set in the root's environment at spawn.
    pub marker: Option<(String, String)>,
    /// The tree's own cgroup v2 directory, when it has one
    /// ([`crate::cgroup`]): its members are members, and SIGKILL also goes
    /// through `cgroup.kill`, which nothing inside can escape.
    pub cgroup: Option<std::path::PathBuf>,
    /// When the root started ([`start_time`], read while it ran): only
    /// processes no older are asked for the marker, even after the root is
    /// gone. `None`: the root's own entry says, or, once it is gone, every
    /// process is asked.
    pub started: Option<u64>,
    /// Every process forked from the root since its spawn, as the host's
    /// process-event listener saw them ([`crate::lineage`]): found even
    /// after leaving the cgroup, the process group and the environment.
    pub lineage: Option<std::sync::Arc<crate::lineage::Lineage>>,
    /// The init of the PID namespace the whole tree lives in (a sandboxed
    /// kernel's): nothing in a PID namespace can leave it, and when its
    /// init ends the kernel kills every process left in it before the
    /// init's end is seen. So SIGKILL to this init ends the tree, and its
    /// end means the tree is gone: neither needs a walk of `/proc`.
    pub namespace: Option<std::sync::Arc<crate::pidfd::Pidfd>>,
}

impl Tree {
    /// Every member found now (root first; may include dead pids).
    ///
    /// One walk of `/proc`: parent links give the descendants; the marker
    /// is looked for only in processes that started no earlier than the
    /// root (a process older than the tree cannot have inherited it), so
    /// the walk reads few `environ` files — each read copies from another
    /// process's memory, and a kernel's shutdown walks several times.
    pub fn members(&self) -> Vec<u32> {
        let table = proc_table();
        let map = children_of(&table);
        let mut all = vec![self.root];
        let root = i32::try_from(self.root).unwrap_or(-1);
        all.extend(descendants_in(&map, root));
        if let Some(cg) = &self.cgroup {
            for p in crate::cgroup::members(cg) {
                if !all.contains(&p) {
                    all.push(p);
                }
            }
        }
        if let Some(l) = &self.lineage {
            for p in l.members() {
                if !all.contains(&p) {
                    all.push(p);
                }
            }
        }
        if let Some((k, v)) = &self.marker {
            let needle = format!("{k}={v}");
            let me = std::process::id();
            // The root gone (its tree may live on): every process is asked.
            let since = self
                .started
                .or_else(|| table.iter().find(|p| p.pid == root).map(|p| p.start));
            for p in &table {
                let pid = p.pid.unsigned_abs();
                if pid == me || all.contains(&pid) || since.is_some_and(|s| p.start < s) {
                    continue;
                }
                if has_env(pid, needle.as_bytes()) {
                    all.push(pid);
                    for d in descendants_in(&map, p.pid) {
                        if !all.contains(&d) {
                            all.push(d);
                        }
                    }
                }
            }
        }
        all
    }

    /// Sends `signal` to the group and every member.
    pub fn signal(&self, signal: Signal) {
        self.signal_each(&[signal]);
    }

    /// Sends each of `signals`, in order, to the group and every member
    /// (one walk of `/proc`).
    fn signal_each(&self, signals: &[Signal]) {
        for &s in signals {
            self.signal_group(s);
        }
        if self.namespace.is_some() && signals == [Signal::SIGKILL] {
            // The namespace's init took it: everything in it dies.
            return;
        }
        for pid in self.members() {
            if let Ok(p) = i32::try_from(pid) {
                for &s in signals {
                    let _ = kill(Pid::from_raw(p), s);
                }
            }
        }
    }

    /// `signal` to the process group, and SIGKILL through the cgroup.
    fn signal_group(&self, signal: Signal) {
        if signal == Signal::SIGKILL
            && let Some(cg) = &self.cgroup
        {
            let _ = std::fs::write(cg.join("cgroup.kill"), b"1");
        }
        if signal == Signal::SIGKILL
            && let Some(init) = &self.namespace
        {
            init.signal(signal);
        }
        if let Some(g) = self.pgid.and_then(|g| i32::try_from(g).ok()) {
            let _ = killpg(Pid::from_raw(g), signal);
        }
    }

    /// Whether any member is still alive.
    pub fn any_alive(&self) -> bool {
        if self.namespace.as_ref().is_some_and(|init| init.exited()) {
            return false;
        }
        self.members().into_iter().any(alive)
    }

    /// SIGTERM to everything (and SIGCONT, so that a stopped member takes
    /// it), then SIGKILL after `grace` to whatever is still there (members
    /// are looked up again, so late forks are caught).
    pub async fn kill(&self, grace: Duration) {
        // One walk first: when nothing is left (the common case after a
        // SIGKILL or a clean exit) there is nothing to signal, and nothing
        // alive could have forked since; a shutdown walked `/proc` four
        // times before. A namespace whose init ended is empty: no walk.
        if !self.any_alive() {
            // Still the group and the cgroup (no walk): a member that
            // cleared its environment and was re-parented is in neither
            // list.
            self.signal_group(Signal::SIGKILL);
            return;
        }
        // A stopped process keeps SIGTERM pending until it is continued.
        self.signal_each(&[Signal::SIGTERM, Signal::SIGCONT]);
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline && self.any_alive() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.signal(Signal::SIGKILL);
    }
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0): another process
/// of the same uid without `CAP_SYS_PTRACE` can then neither open its
/// `/proc/<pid>/fd/*` (its stdin and stdout: a cell could forge or read the
/// host's protocol there), nor read its `environ` (the host's secrets) or
/// `mem`, nor trace it. Children get their own dumpable flag back at
/// `exec`, so kernels are not affected. For hosts that own their process
/// (the `toolcell` binary); an embedder decides for its own process.
///
/// # Errors
/// The `prctl` failed.
pub fn forbid_inspection() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { nix::libc::prctl(nix::libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

static BATCH_KERNELS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Asks that the kernels this process starts from now on run under
/// `SCHED_BATCH` ([`apply_kernel_scheduling`], which the kernel spawn calls
/// between fork and exec); this process itself keeps its policy.
///
/// Why: a host and its kernel hand the CPU back and forth at every cell
/// and tool call. A kernel under `SCHED_OTHER` that the host's request
/// wakes preempts the host before it has gone back to its wait: switches
/// and CPU for nothing. A batch kernel is not woken into preempting. The
/// host stays under the default policy: on a busy machine a batch task
/// that wakes where another program runs waits for the scheduler's tick
/// (a few ms) instead of preempting it, and with the host batch too each
/// hop of a cell could wait one (BENCHMARKS.md, issue 38: a loaded p99 of
/// ~12 ms, three ticks, against ~4 ms with only the kernels batch, quiet
/// figures the same). Time slices, fairness and nice values are unchanged.
/// For hosts that own their process (the `toolcell` binary); an embedder
/// decides for its own.
pub fn prefer_batch_scheduling_for_kernels() {
    BATCH_KERNELS.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Between fork and exec of a kernel: switches the child to `SCHED_BATCH`
/// when [`prefer_batch_scheduling_for_kernels`] was called and the child
/// runs under the default policy (`SCHED_OTHER`); any other policy (a
/// real-time one, or `SCHED_IDLE` someone chose) is left alone, and so is
/// the nice value. Best effort, and async-signal-safe (an atomic load and
/// two syscalls). Returns whether it switched.
pub fn apply_kernel_scheduling() -> bool {
    use nix::libc as c;
    if !BATCH_KERNELS.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    // SAFETY: sched_getscheduler/sched_setscheduler on the calling thread
    // (pid 0) with a parameter struct that lives across the call.
    unsafe {
        if c::sched_getscheduler(0) != c::SCHED_OTHER {
            return false;
        }
        let param = c::sched_param { sched_priority: 0 };
        c::sched_setscheduler(0, c::SCHED_BATCH, &raw const param) == 0
    }
}

static SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): a
/// process a cell starts that double-forks or calls `setsid` is re-parented
/// to this host instead of init, so it stays a descendant the host can find
/// and kill ([`kill_adopted`]). Also starts a thread that reaps adopted
/// children once they have been zombies for two scans in a row (children
/// the host waits for itself are reaped long before that). For hosts that
/// own their process (the `toolcell` binary); an embedder decides for its
/// own process.
///
/// # Errors
/// The `prctl` failed.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { nix::libc::prctl(nix::libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if !SUBREAPER.swap(true, std::sync::atomic::Ordering::SeqCst) {
        let _ = std::thread::Builder::new()
            .name("toolcell-reaper".into())
            .spawn(|| {
                let mut seen: Vec<u32> = Vec::new();
                loop {
                    std::thread::sleep(Duration::from_secs(2));
                    seen = reap_stale_zombies(&seen);
                }
            });
    }
    Ok(())
}

/// Whether [`become_subreaper`] made this process a subreaper.
pub fn is_subreaper() -> bool {
    SUBREAPER.load(std::sync::atomic::Ordering::SeqCst)
}

/// This process's children now.
pub fn own_children() -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Reaps children that were zombies at the previous scan too (`before`);
/// returns this scan's zombies.
fn reap_stale_zombies(before: &[u32]) -> Vec<u32> {
    let now: Vec<u32> = own_children()
        .into_iter()
        .filter(|p| is_zombie(*p))
        .collect();
    for p in &now {
        if before.contains(p)
            && let Ok(pid) = i32::try_from(*p)
        {
            let _ = nix::sys::wait::waitpid(
                Pid::from_raw(pid),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            );
        }
    }
    now
}

static DETACHED: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Marks `pid`, a child this host started on purpose to outlive it (the
/// daemon a client starts), so [`kill_adopted`] leaves it alone.
pub fn detach(pid: u32) {
    if let Ok(mut d) = DETACHED.lock() {
        d.push(pid);
    }
}

/// Kills every child of this host that is not in `keep`, with its tree, and
/// reaps it: when a subreaper host ends its kernels, what is left among its
/// children are processes cells started that escaped their kernel's tree.
pub fn kill_adopted(keep: &[u32]) -> usize {
    if !is_subreaper() {
        return 0;
    }
    let detached = DETACHED.lock().map(|d| d.clone()).unwrap_or_default();
    let victims: Vec<u32> = own_children()
        .into_iter()
        .filter(|p| !keep.contains(p) && !detached.contains(p))
        .collect();
    for &p in &victims {
        Tree {
            root: p,
            pgid: None,
            marker: None,
            cgroup: None,
            started: None,
            lineage: None,
            namespace: None,
        }
        .signal(Signal::SIGKILL);
    }
    for &p in &victims {
        if let Ok(pid) = i32::try_from(p) {
            let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
        }
    }
    victims.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The policy (field 41 of `stat`) of process `pid`.
    fn policy_of(pid: u32) -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .nth(38)
            .map(str::to_owned)
    }

    /// Starts `sleep` with [`apply_kernel_scheduling`] between fork and
    /// exec; returns its policy and whether the call switched it.
    fn spawn_policy() -> (Option<String>, bool) {
        use std::os::unix::process::CommandExt;
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("5");
        let w_fd = std::os::fd::AsRawFd::as_raw_fd(&w);
        // SAFETY: apply_kernel_scheduling and write(2) are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                let switched = [u8::from(apply_kernel_scheduling())];
                nix::libc::write(w_fd, switched.as_ptr().cast(), 1);
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        drop(w);
        let mut byte = [0u8; 1];
        std::io::Read::read_exact(&mut std::fs::File::from(r), &mut byte).unwrap();
        let policy = policy_of(child.id());
        let _ = child.kill();
        let _ = child.wait();
        (policy, byte[0] == 1)
    }

    #[test]
    fn kernels_get_batch_scheduling_when_asked_and_the_host_keeps_its_own() {
        // On a thread of its own: the policy is per thread, and a test may
        // run beside others in this process.
        std::thread::spawn(|| {
            // Not asked yet: the child keeps the default policy.
            if !BATCH_KERNELS.load(std::sync::atomic::Ordering::SeqCst) {
                assert_eq!(spawn_policy(), (Some("0".into()), false));
            }
            prefer_batch_scheduling_for_kernels();
            assert_eq!(spawn_policy(), (Some("3".into()), true));
            // The calling thread is untouched.
            // SAFETY: a query of the calling thread.
            assert_eq!(
                unsafe { nix::libc::sched_getscheduler(0) },
                nix::libc::SCHED_OTHER
            );
            // Another policy someone chose is left alone (SCHED_IDLE can be
            // set, not left, without privilege: this thread ends here).
            let param = nix::libc::sched_param { sched_priority: 0 };
            // SAFETY: on the calling thread, with a live parameter struct.
            assert_eq!(
                unsafe {
                    nix::libc::sched_setscheduler(0, nix::libc::SCHED_IDLE, &raw const param)
                },
                0
            );
            assert_eq!(spawn_policy(), (Some("5".into()), false));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn finds_a_setsid_grandchild() {
        // sh starts a setsid'd sleep and waits: the sleep is in another
        // session but is still a descendant of sh.
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg("setsid sleep 30 & wait")
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut found = Vec::new();
        for _ in 0..100 {
            found = descendants(pid);
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!found.is_empty(), "no descendant found");
        Tree {
            root: pid,
            pgid: None,
            marker: None,
            cgroup: None,
            started: None,
            lineage: None,
            namespace: None,
        }
        .signal(Signal::SIGKILL);
        let _ = child.wait();
        std::thread::sleep(Duration::from_millis(100));
        for d in found {
            assert!(!alive(d), "descendant {d} survived");
        }
    }

    #[test]
    fn the_marker_finds_an_orphan_that_left_the_tree_and_only_it() {
        let marker = format!("TOOLCELL_TEST_MARK=m{}", std::process::id());
        let (name, value) = marker.split_once('=').unwrap();
        // An older process with the same marker is not the tree's: it
        // started before the root.
        let mut older = std::process::Command::new("sleep")
            .arg("30")
            .env(name, value)
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        // The root starts a setsid'd sleep in the background and exits at
        // once: the sleep is an orphan (not a descendant any more) that only
        // the marker finds.
        let mut root = std::process::Command::new("sh")
            .arg("-c")
            .arg("(setsid sleep 30 >/dev/null 2>&1 < /dev/null & echo $!); sleep 30")
            .env(name, value)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(root.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let orphan: u32 = line.trim().parse().unwrap();
        let tree = Tree {
            root: root.id(),
            pgid: None,
            marker: Some((name.to_string(), value.to_string())),
            cgroup: None,
            started: start_time(root.id()),
            lineage: None,
            namespace: None,
        };
        // The subshell that started it exits just after the echo; `setsid`
        // may still be exec'ing `sleep` (its environment is unreadable for
        // that instant): wait until it is `sleep`.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{orphan}/comm"))
            .map_or(true, |c| c.trim() != "sleep")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the orphan never became sleep"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        while descendants(root.id()).contains(&orphan) {
            assert!(
                std::time::Instant::now() < deadline,
                "the test's orphan stays a descendant"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let members = tree.members();
        assert!(members.contains(&orphan), "{members:?}");
        assert!(!members.contains(&older.id()), "an older process was taken");
        tree.signal(Signal::SIGKILL);
        let _ = root.wait();
        // With the root gone its recorded start still keeps older ones out.
        assert!(!tree.members().contains(&older.id()));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive(orphan) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(orphan), "the marked orphan survived");
        assert!(alive(older.id()), "a process outside the tree was killed");
        let _ = older.kill();
        let _ = older.wait();
    }
}
