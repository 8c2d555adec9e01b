//! Shared input generators for the toolcell benchmarks (`benches/benches/`).
//!
//! Inputs are deterministic (a fixed xorshift seed), so figures are
//! comparable from run to run.

pub mod files;
pub mod frames;
pub mod scale;
pub mod text;
pub mod web;

/// A deterministic xorshift64 generator for input generators.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next pseudo-random value.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// One of `items`.
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The runtime the kernel benches drive the registry on: multi-threaded,
/// two workers (this project's CI machine has two cores).
#[allow(clippy::expect_used)]
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The `toolcell` binary of the running bench's profile
/// (`target/<profile>/toolcell`, next to `deps/`), built with cargo if it
/// is missing (`--release` for a release or bench profile).
///
/// # Panics
/// When the bench's own path has no parent or the build fails: a bench
/// cannot run without the binary.
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub fn toolcell_binary() -> std::path::PathBuf {
    use std::path::Path;
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<bench>-<hash> → target/<profile>/toolcell
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let bin = profile_dir.join("toolcell");
    if !bin.exists() {
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let mut cmd =
            std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "-p", "toolcell-cli"]);
        if release {
            cmd.arg("--release");
        }
        assert!(cmd.status().unwrap().success(), "building toolcell failed");
    }
    bin
}

/// Called where a bench cannot measure its subject on this machine; `what`
/// says what is missing and how to get it. Under `TOOLCELL_REQUIRE=1`
/// (`scripts/test-all.sh` sets it, and runs every bench once as a test)
/// that is a failure; elsewhere the bench says so on stderr and goes on
/// without that part.
///
/// # Panics
/// Under `TOOLCELL_REQUIRE=1`.
#[allow(clippy::print_stderr)]
pub fn missing(what: &str) {
    assert!(
        std::env::var_os("TOOLCELL_REQUIRE").is_none_or(|v| v != "1"),
        "TOOLCELL_REQUIRE=1, and this bench cannot measure its subject here: {what}"
    );
    eprintln!("SKIPPED: {what}");
}

/// Waits (up to a minute, polling every millisecond) until `ready` holds,
/// e.g. until a registry's warm pool holds a kernel again; panics past
/// that with `what`.
pub fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
