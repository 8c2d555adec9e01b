#![allow(clippy::unwrap_used, clippy::expect_used)]
use toolcell_kernel::{ExecuteRequest, Registry, RegistryOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = RegistryOptions { kernels_root: Some(tmp.path().join("k")), spill_dir: tmp.path().join("spill"), default_cwd: tmp.path().to_path_buf(), ..Default::default() };
    let reg = Registry::new(opts).unwrap();
    let t = std::time::Instant::now();
    let r = reg.execute(ExecuteRequest::new("x = 41\nprint('hi')")).await;
    println!("{} {:?}", serde_json::to_string_pretty(&r).unwrap(), t.elapsed());
    let r = reg.execute(ExecuteRequest::new("x + 1")).await;
    println!("{}", serde_json::to_string_pretty(&r).unwrap());
    let r = reg.execute(ExecuteRequest::new("from toolcell_tools import read_file\nprint(read_file('nope'))")).await;
    println!("{}", serde_json::to_string_pretty(&r).unwrap());
    let t = std::time::Instant::now();
    for _ in 0..100 { reg.execute(ExecuteRequest::new("x += 1")).await; }
    println!("100 cells {:?}", t.elapsed());
}
