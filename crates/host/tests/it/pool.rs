//! The warm pool (`RegistryOptions::warm_pool`) with real kernels: a new
//! session of the default shape takes a kernel that was already running,
//! the pool refills in the background, a pooled kernel is indistinguishable
//! from a fresh one, other shapes never take it, it counts against
//! `max_kernels` and yields its room to sessions, and it dies with the
//! registry.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{Fixture, alive, assert_success, eventually, show};
use toolcell_host::ExecuteRequest;

const WARM: Duration = Duration::from_secs(60);

/// Ids of the kernels whose directories exist under the fixture's root.
fn kernel_ids(f: &Fixture) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(f.kernels_root())
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("k-") && !n.ends_with("-work"))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// The pid of the kernel `id` of the fixture (its argv names its runner).
fn pid_of(root: &Path, id: &str) -> Option<u32> {
    let needle = format!("{}/{id}/runner.py", root.display());
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        (cmd.contains(&needle) && alive(pid)).then_some(pid)
    })
}

async fn warm(f: &Fixture, n: usize) {
    assert!(
        eventually(WARM, || f.reg.pool_ready() == n).await,
        "the pool never held {n} kernel(s); it holds {}",
        f.reg.pool_ready()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_takes_the_running_pooled_kernel_and_the_pool_refills() {
    let f = Fixture::with(|o| o.warm_pool = 1);
    warm(&f, 1).await;
    let pooled = kernel_ids(&f);
    assert_eq!(pooled.len(), 1, "{pooled:?}");
    let pid_before = pid_of(&f.kernels_root(), &pooled[0]).expect("pooled kernel running");
    // Which kernel a cell runs in, as the cell knows it: its tool socket
    // lives in its directory (a pid is 2 in every sandbox).
    let whoami = "import os\nprint(os.environ['TOOLCELL_RPC'])";

    let r = f.run_as("alice", whoami).await;
    assert_success(&r);
    assert_eq!(
        r.kernel.id, pooled[0],
        "the session did not get the pooled kernel"
    );
    // It was sandboxed before it was handed out: pid 2 of its own PID
    // namespace, with the default network rule.
    assert_eq!(
        r.kernel.sandbox,
        Some(toolcell_kernel::sandbox::SandboxInfo::Namespaces {
            network: "packages".into()
        }),
        "{}",
        show(&r)
    );
    let ns = f.run_as("alice", "import os\nprint(os.getpid())").await;
    assert_eq!(ns.output, "2\n", "{}", show(&ns));
    assert!(r.output.contains(&pooled[0]), "{}", show(&r));
    assert!(toolcell_sys::process::alive(pid_before));
    assert!(
        !r.kernel.reused,
        "a pooled kernel's first cell is not a reuse"
    );
    assert_eq!(r.kernel.execution_count, 1);
    assert!(!r.kernel.state_reset);

    // A replacement starts in the background; the next new session gets it.
    warm(&f, 1).await;
    let now = kernel_ids(&f);
    assert_eq!(now.len(), 2, "{now:?}");
    let replacement = now.iter().find(|id| **id != pooled[0]).unwrap().clone();
    let r = f.run_as("bob", "print('bob')").await;
    assert_eq!(r.kernel.id, replacement, "{}", show(&r));
    // The first session keeps its kernel and its state.
    let r = f.run_as("alice", whoami).await;
    assert!(r.output.contains(&pooled[0]), "{}", show(&r));
    assert!(r.kernel.reused);
}

/// When the kernel `id` was prepared: its runner copy is written once, at
/// spawn (`None`: not yet, a spawn that started just now).
fn prepared_at(f: &Fixture, id: &str) -> Option<std::time::SystemTime> {
    std::fs::metadata(f.kernels_root().join(id).join("runner.py"))
        .and_then(|m| m.modified())
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_cell_takes_the_pooled_kernel_already_starting_instead_of_a_second_spawn() {
    // The cell comes at once: the pool's first spawn is still under way.
    let f = Fixture::with(|o| o.warm_pool = 1);
    let r = f.run_as("alice", "print('hi')").await;
    assert_success(&r);
    assert_eq!(r.kernel.execution_count, 1);
    // Its kernel is the first one prepared: the pool's. Another spawn
    // beside it would have slowed both on a small machine.
    let ids = kernel_ids(&f);
    let first = ids
        .iter()
        .filter_map(|id| Some((prepared_at(&f, id)?, id)))
        .min()
        .map(|(_, id)| id)
        .expect("a kernel directory");
    assert_eq!(&r.kernel.id, first, "{ids:?}");
    // The pool refills after the cell, and the next session gets that one.
    warm(&f, 1).await;
    let r = f.run_as("bob", "print('bob')").await;
    assert_success(&r);
    assert_ne!(r.kernel.id, *first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_kernel_is_indistinguishable_from_a_fresh_one() {
    const PROBE: &str = "import os, sys\n\
        print(sorted(k for k in globals() if not k.startswith('__') or k == '__name__'))\n\
        print(sorted(os.environ))\nprint(os.getcwd())\nprint(sorted(sys.modules) == sorted(sys.modules))";
    let pooled = Fixture::with(|o| o.warm_pool = 1);
    warm(&pooled, 1).await;
    let fresh = Fixture::new();
    let a = pooled.run_as("s", PROBE).await;
    let b = fresh.run_as("s", PROBE).await;
    assert_success(&a);
    assert_success(&b);
    let lines_a: Vec<&str> = a.output.lines().collect();
    let lines_b: Vec<&str> = b.output.lines().collect();
    // Same namespace and the same environment variable names.
    assert_eq!(lines_a[0], lines_b[0], "namespaces differ");
    assert_eq!(lines_a[1], lines_b[1], "environments differ");
    // Each runs in its registry's default cwd.
    assert_eq!(
        Path::new(lines_a[2]),
        std::fs::canonicalize(pooled.work()).unwrap()
    );
    assert_eq!(
        (
            a.kernel.reused,
            a.kernel.execution_count,
            a.kernel.state_reset
        ),
        (
            b.kernel.reused,
            b.kernel.execution_count,
            b.kernel.state_reset
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_shapes_spawn_their_own_kernel_and_leave_the_pool_alone() {
    let f = Fixture::with(|o| o.warm_pool = 1);
    warm(&f, 1).await;
    let pooled = kernel_ids(&f);
    let r = f
        .reg
        .execute(
            ExecuteRequest::new("print(1)")
                .owner("narrow")
                .tools(["read_file"]),
        )
        .await;
    assert_success(&r);
    assert_ne!(r.kernel.id, pooled[0]);
    assert_eq!(f.reg.pool_ready(), 1);
    let other_cwd = f.tmp.path().join("elsewhere");
    std::fs::create_dir_all(&other_cwd).unwrap();
    let r = f
        .reg
        .execute(
            ExecuteRequest::new("print(2)")
                .owner("there")
                .cwd(&other_cwd),
        )
        .await;
    assert_success(&r);
    assert_ne!(r.kernel.id, pooled[0]);
    assert_eq!(f.reg.pool_ready(), 1);
}

/// Pids of the running (not zombie) runners of kernels under `root`:
/// session and pooled kernels alike.
fn runner_pids(root: &Path) -> Vec<u32> {
    let needle = format!("{}/k-", root.display());
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            (cmd.contains(&needle) && cmd.contains("runner.py") && alive(pid)).then_some(pid)
        })
        .collect()
}

/// Samples the number of running kernel processes under `root` every few
/// milliseconds until dropped; `max()` is the most seen at once.
struct ProcessSampler {
    stop: Arc<AtomicBool>,
    most: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProcessSampler {
    fn start(root: &Path) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let most = Arc::new(AtomicUsize::new(0));
        let (s, m, root) = (Arc::clone(&stop), Arc::clone(&most), root.to_path_buf());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                m.fetch_max(runner_pids(&root).len(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(3));
            }
        });
        Self {
            stop,
            most,
            thread: Some(thread),
        }
    }

    fn max(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

impl Drop for ProcessSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_kernels_count_against_max_kernels_and_the_pool_yields_to_sessions() {
    let f = Fixture::with(|o| {
        o.warm_pool = 1;
        o.max_kernels = 2;
    });
    let root = f.kernels_root();
    let sampler = ProcessSampler::start(&root);
    let count = || runner_pids(&root).len();
    warm(&f, 1).await;
    assert_eq!(count(), 1);

    // Session a takes the pooled kernel; the pool refills: a + 1 pooled.
    let a = f.run_as("a", "x = 'a'").await;
    assert_success(&a);
    warm(&f, 1).await;
    assert_eq!((count(), f.reg.live_kernels()), (2, 1));

    // Session b takes the pooled kernel; there is no room to refill.
    let b = f.run_as("b", "x = 'b'").await;
    assert_success(&b);
    // Passage of time is the subject: a refill that wrongly started would
    // be ready by now.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        f.reg.pool_ready(),
        0,
        "the pool refilled beyond max_kernels"
    );
    assert_eq!((count(), f.reg.live_kernels()), (2, 2));

    // Session c (another shape, so no pooled kernel fits) evicts the least
    // recently used idle session, a.
    let c = f
        .reg
        .execute(
            ExecuteRequest::new("x = 'c'")
                .owner("c")
                .tools(["read_file"]),
        )
        .await;
    assert_success(&c);
    assert_eq!((count(), f.reg.live_kernels()), (2, 2));
    let mut names: Vec<String> = f.reg.sessions().into_iter().map(|s| s.session).collect();
    names.sort();
    assert_eq!(names, ["b", "c"]);

    // b ends: its room goes back to the pool.
    assert_eq!(f.reg.shutdown("b").await, 1);
    warm(&f, 1).await;
    assert_eq!((count(), f.reg.live_kernels()), (2, 1));

    // Session d (another cwd) needs the room: the pooled kernel is closed
    // rather than the idle session c evicted, and the pool is not refilled.
    let elsewhere = f.tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let d = f
        .reg
        .execute(ExecuteRequest::new("x = 'd'").owner("d").cwd(&elsewhere))
        .await;
    assert_success(&d);
    assert_ne!(d.kernel.id, a.kernel.id);
    // Passage of time is the subject: the pool must not refill meanwhile.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(f.reg.pool_ready(), 0);
    assert_eq!((count(), f.reg.live_kernels()), (2, 2));
    let again = f
        .reg
        .execute(
            ExecuteRequest::new("print(x)")
                .owner("c")
                .tools(["read_file"]),
        )
        .await;
    assert_eq!(again.output, "c\n", "c kept its kernel: {}", show(&again));
    assert!(again.kernel.reused);

    assert!(
        sampler.max() <= 2,
        "{} kernel processes ran at once with max_kernels = 2",
        sampler.max()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_spawn_in_flight_gives_its_room_to_a_session() {
    // max_kernels = 1: the pool's first spawn is in flight when a session
    // of another shape arrives; the session must not wait for an eviction
    // that cannot come, nor run beside the pooled kernel.
    let f = Fixture::with(|o| {
        o.warm_pool = 1;
        o.max_kernels = 1;
    });
    let root = f.kernels_root();
    let sampler = ProcessSampler::start(&root);
    let r = f
        .reg
        .execute(
            ExecuteRequest::new("print('mine')")
                .owner("s")
                .tools(["read_file"]),
        )
        .await;
    assert_success(&r);
    assert_eq!(r.output, "mine\n");
    // Passage of time is the subject: no pooled kernel may appear meanwhile.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(f.reg.pool_ready(), 0);
    assert_eq!(runner_pids(&root).len(), 1);
    assert!(sampler.max() <= 1, "{} kernels at once", sampler.max());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_all_kills_pooled_kernels_and_the_pool_stays_closed() {
    let f = Fixture::with(|o| o.warm_pool = 2);
    warm(&f, 2).await;
    let pids: Vec<u32> = kernel_ids(&f)
        .iter()
        .map(|id| pid_of(&f.kernels_root(), id).unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    f.reg.shutdown_all().await;
    assert_eq!(f.reg.pool_ready(), 0);
    assert!(
        eventually(Duration::from_secs(10), || pids.iter().all(|p| !alive(*p))).await,
        "pooled kernels survived shutdown_all: {pids:?}"
    );
    assert!(kernel_ids(&f).is_empty(), "{:?}", kernel_ids(&f));
    // Passage of time is the subject: the closed pool must stay empty.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        f.reg.pool_ready(),
        0,
        "the pool refilled after shutdown_all"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_registry_kills_pooled_kernels() {
    let f = Fixture::with(|o| o.warm_pool = 1);
    warm(&f, 1).await;
    let id = kernel_ids(&f).pop().unwrap();
    let root = f.kernels_root();
    let pid = pid_of(&root, &id).unwrap();
    let Fixture { reg, tmp, .. } = f;
    drop(reg);
    assert!(
        eventually(Duration::from_secs(10), || !alive(pid)).await,
        "pooled kernel {pid} outlived its registry"
    );
    drop(tmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_kernel_that_died_is_skipped() {
    let f = Fixture::with(|o| o.warm_pool = 1);
    warm(&f, 1).await;
    let id = kernel_ids(&f).pop().unwrap();
    let pid = pid_of(&f.kernels_root(), &id).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || !alive(pid)).await);
    let r = f.run_as("s", "print('fine')").await;
    assert_success(&r);
    assert_eq!(r.output, "fine\n");
    assert_ne!(r.kernel.id, id);
}

#[test]
fn warm_pool_config_is_a_count_or_auto_and_errors_name_the_key() {
    use toolcell_host::config::Config;
    let c = Config::from_toml_str("", None).unwrap();
    assert_eq!(
        (c.warm_pool(0), c.warm_pool(1)),
        (0, 1),
        "auto: the host decides"
    );
    let c = Config::from_toml_str("[kernels]\nwarm_pool = 3\n", None).unwrap();
    assert_eq!((c.warm_pool(0), c.warm_pool(1)), (3, 3));
    let c = Config::from_toml_str("[kernels]\nwarm_pool = \"auto\"\n", None).unwrap();
    assert_eq!(c.warm_pool(1), 1);
    let c = Config::from_toml_str("[kernels]\nwarm_pool = 0\n", None).unwrap();
    assert_eq!(c.warm_pool(1), 0);
    for bad in ["-1", "65", "1.5", "\"many\"", "true"] {
        let err = Config::from_toml_str(&format!("[kernels]\nwarm_pool = {bad}\n"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("kernels.warm_pool"), "{bad}: {err}");
        assert!(err.contains("0 to 64"), "{bad}: {err}");
    }
}
