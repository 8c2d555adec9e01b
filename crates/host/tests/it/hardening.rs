//! Issue-14 hardening with real kernels: request tools only narrow the
//! configured set, shared directories are verified before use, the runner is
//! launched from a descriptor (never a re-resolved path), and no process a
//! cell starts outlives its kernel.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use crate::common::*;
use toolcell_host::ExecuteRequest;
use toolcell_kernel::Status;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_tools_only_narrow_the_configured_set() {
    let fx = Fixture::with(|o| o.tools = vec!["read_file".into()]);
    // Widening is refused, naming every extra tool; nothing runs.
    let marker = fx.work().join("ran");
    let code = py_mark(&marker, "1");
    let r = fx
        .reg
        .execute(ExecuteRequest::new(code.clone()).tools(["read_file", "terminal", "write_file"]))
        .await;
    assert_eq!(r.status, Status::Error, "{}", show(&r));
    let e = r.error.clone().unwrap_or_default();
    assert!(
        e.contains("`terminal`") && e.contains("`write_file`"),
        "{e}"
    );
    assert!(e.contains("narrow"), "{e}");
    assert!(!marker.exists(), "the widened cell ran");
    // Narrowing (and the configured set itself) work.
    let r = fx
        .reg
        .execute(ExecuteRequest::new("import toolcell_tools as t; print(sorted(n for n in dir(t) if n in ('read_file','terminal')))").tools(["read_file"]))
        .await;
    assert_success(&r);
    assert!(r.output.contains("['read_file']"), "{}", show(&r));
    let r = fx
        .reg
        .execute(ExecuteRequest::new("import toolcell_tools").tools(Vec::<String>::new()))
        .await;
    assert_success(&r);
}

/// The attacker, run as `nobody`: it plants a world-writable
/// `<shared>/toolcell-<uid>/kernels` (the default kernels root when
/// `XDG_RUNTIME_DIR` is unset) and, until told to stop, swaps every `k-*`
/// directory the host creates there for its own, whose `runner.py` and
/// `toolcell_tools.py` write `<shared>/pwned`.
const ATTACKER: &str = r#"
import os, sys, time
shared, uid = sys.argv[1], sys.argv[2]
root = os.path.join(shared, "toolcell-" + uid, "kernels")
os.makedirs(root, exist_ok=True)
os.chmod(os.path.dirname(root), 0o777)
os.chmod(root, 0o777)
evil = "open(%r, 'w').write('pwned')\n" % os.path.join(shared, "pwned")
stop = os.path.join(shared, "stop")
swaps = 0
open(os.path.join(shared, "ready"), "w").close()
deadline = time.time() + 120
while not os.path.exists(stop) and time.time() < deadline:
    for name in os.listdir(root):
        if not name.startswith("k-") or name.endswith(".mine"):
            continue
        p = os.path.join(root, name)
        try:
            os.rename(p, os.path.join(root, "old-%d" % swaps))
            os.mkdir(p, 0o777)
            for f in ("runner.py", "toolcell_tools.py"):
                with open(os.path.join(p, f), "w") as fh:
                    fh.write(evil)
            open(p + ".mine", "w").close()
            swaps += 1
        except OSError:
            pass
print("swaps", swaps)
"#;

#[test]
fn another_user_racing_the_kernels_root_never_gets_code_run() {
    const TEST: &str = "hardening::another_user_racing_the_kernels_root_never_gets_code_run";
    if is_child(TEST) {
        // The host: default kernels root under the shared TMPDIR.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
            std::fs::create_dir_all(tmp.path().join("work")).unwrap();
            let mut o = opts(tmp.path());
            o.kernels_root = None;
            let reg = toolcell_host::Registry::new(o).unwrap();
            for i in 0..100 {
                let r = reg
                    .execute(ExecuteRequest::new(format!("print({i} * 2)")).reset(true))
                    .await;
                assert_success(&r);
                assert!(r.output.contains(&(i * 2).to_string()), "{}", show(&r));
            }
            reg.shutdown_all().await;
        });
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        crate::common::missing("needs root, to run the attacker as nobody");
        return;
    }
    // A world-writable sticky directory standing in for /tmp, reachable by
    // nobody.
    let outer = tempfile::tempdir_in("/var/tmp").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(outer.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = outer.path().join("tmp");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let script = outer.path().join("attacker.py");
    std::fs::write(&script, ATTACKER).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let uid = nix::unistd::getuid().to_string();
    let attacker = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
        ])
        .arg(&script)
        .arg(&shared)
        .arg(&uid)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        eventually_blocking(std::time::Duration::from_secs(20), || shared
            .join("ready")
            .exists()),
        "the attacker did not start"
    );
    let shared_s = shared.display().to_string();
    run_child(
        TEST,
        &[("TMPDIR", shared_s.as_str()), ("XDG_RUNTIME_DIR", "")],
    );
    std::fs::write(shared.join("stop"), "").unwrap();
    let out = attacker.wait_with_output().unwrap();
    println!("attacker: {}", String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        !shared.join("pwned").exists(),
        "the attacker's code ran as the toolcell user"
    );
    // The planted root was refused: the host used a fresh private directory.
    let planted = shared.join(format!("toolcell-{uid}/kernels"));
    let ours: Vec<_> = std::fs::read_dir(&planted)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("k-"))
        .collect();
    assert!(
        ours.is_empty(),
        "kernels were made in the planted root: {ours:?}"
    );
}

/// A process that clears its environment and starts a new session, so no
/// marker, group or parent link leads to it, is still killed with its kernel
/// (its cgroup, where the machine has cgroup v2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_env_cleared_setsid_orphan_dies_with_its_kernel() {
    if toolcell_sys::cgroup::HostCgroup::get().is_none() {
        println!(
            "skipped: no writable cgroup v2 here (the binary's subreaper path is tested in the cli)"
        );
        return;
    }
    let fx = Fixture::new();
    let tag = format!("77{}", std::process::id() % 100_000);
    let code = format!(
        "import subprocess\nsubprocess.run(['/bin/sh', '-c', 'env -i setsid sleep {tag} </dev/null >/dev/null 2>&1 &'])\n"
    );
    assert_success(&fx.run(&code).await);
    let find = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .map(|c| {
                        String::from_utf8_lossy(&c).replace('\0', " ").trim()
                            == format!("sleep {tag}")
                    })
                    .unwrap_or(false)
            })
            .collect::<Vec<u32>>()
    };
    assert!(
        eventually(std::time::Duration::from_secs(5), || !find().is_empty()).await,
        "the orphan never started"
    );
    let orphan = find()[0];
    // Its environment has no toolcell marker and it leads its own session.
    let env = std::fs::read(format!("/proc/{orphan}/environ")).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&env).contains("TOOLCELL_RPC"));
    // Resetting the session ends the kernel: the orphan goes with it.
    assert_success(
        &fx.reg
            .execute(ExecuteRequest::new("pass").reset(true))
            .await,
    );
    assert!(
        eventually(std::time::Duration::from_secs(5), || !alive(orphan)).await,
        "the setsid orphan {orphan} outlived its kernel"
    );
}
