//! TEMPORARY: stand-ins until env.rs / interpreter.rs land.
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub fn child_env(host: Vec<(OsString, OsString)>, _p: &[String]) -> Vec<(OsString, OsString)> {
    host.into_iter().filter(|(k, _)| { let k = k.to_string_lossy(); ["PATH","HOME","LANG"].iter().any(|p| k.starts_with(p)) }).collect()
}
pub fn host_secret_values(_host: Vec<(OsString, OsString)>) -> Vec<String> { Vec::new() }
pub fn toolcell_vars(env: &mut Vec<(OsString, OsString)>, dir: &Path, ep: &str, tok: &str) {
    env.push(("TOOLCELL_RPC".into(), ep.into()));
    env.push(("TOOLCELL_RPC_TOKEN".into(), tok.into()));
    env.push(("PYTHONPATH".into(), dir.as_os_str().to_owned()));
    env.push(("PYTHONUNBUFFERED".into(), "1".into()));
    env.push(("PYTHONIOENCODING".into(), "utf-8".into()));
    env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
    env.push(("MPLBACKEND".into(), "Agg".into()));
}
pub struct Interp { pub executable: PathBuf, pub version: String }
pub fn resolve_for_host(_python: &str, _mode: toolcell_tools::schema::Mode, _cwd: &Path) -> Result<Interp, String> {
    let out = std::process::Command::new("python3").args(["-c", "import sys; print(sys.executable); print('.'.join(map(str, sys.version_info[:3])))"]).output().map_err(|e| e.to_string())?;
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    let mut l = s.lines();
    Ok(Interp { executable: PathBuf::from(l.next().unwrap_or("python3")), version: l.next().unwrap_or("").to_string() })
}
