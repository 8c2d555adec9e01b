//! Sessions: keys, slots (one per key: the kernel behind a fair lock and a
//! small meta record), the registry's shared state, and what `sessions`
//! shows — including, for a session name with several kernels, the key
//! parts that tell them apart.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolcell_sys::process::Tree;

use super::Inner;
use toolcell_kernel::kernel::Kernel;

/// Keys remembered after their kernel is gone, for `state_reset`.
pub(super) const RETIRED_MEMORY: usize = 4096;

/// A session key (docs/serve.md, "sessions"):
/// `(owner, mode, interpreter, cwd, sorted tools)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The owner.
    pub owner: String,
    /// The mode.
    pub mode: &'static str,
    /// The language (docs/languages.md, "Choosing the language").
    pub language: toolcell_kernel::language::Language,
    /// The interpreter.
    pub interpreter: PathBuf,
    /// The working directory (empty for strict mode: a private one per kernel).
    pub cwd: PathBuf,
    /// Enabled tools, sorted.
    pub tools: Vec<String>,
    /// The remote the kernel runs on (`[remotes.NAME]`); empty: local.
    pub remote: String,
}

/// A part of a session key besides the owner: two kernels of one session
/// name differ in at least one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyPart {
    Mode,
    Language,
    Interpreter,
    Cwd,
    Tools,
    Remote,
}

impl KeyPart {
    const ALL: [KeyPart; 6] = [
        KeyPart::Remote,
        KeyPart::Cwd,
        KeyPart::Mode,
        KeyPart::Language,
        KeyPart::Interpreter,
        KeyPart::Tools,
    ];

    /// The name `sessions` uses (a `KeyInfo` field).
    fn name(self) -> &'static str {
        match self {
            KeyPart::Mode => "mode",
            KeyPart::Language => "language",
            KeyPart::Interpreter => "interpreter",
            KeyPart::Cwd => "cwd",
            KeyPart::Tools => "tools",
            KeyPart::Remote => "remote",
        }
    }

    /// What a sentence calls it.
    fn label(self) -> &'static str {
        match self {
            KeyPart::Mode => "mode",
            KeyPart::Language => "language",
            KeyPart::Interpreter => "interpreter",
            KeyPart::Cwd => "working directory",
            KeyPart::Tools => "tool set",
            KeyPart::Remote => "remote",
        }
    }

    fn of(self, key: &KeyInfo) -> String {
        match self {
            KeyPart::Mode => key.mode.clone(),
            KeyPart::Language => key.language.clone(),
            KeyPart::Interpreter => key.interpreter.clone(),
            KeyPart::Cwd if key.cwd.is_empty() => "a private one".into(),
            KeyPart::Cwd => key.cwd.clone(),
            KeyPart::Tools if key.tools.is_empty() => "none".into(),
            KeyPart::Tools => key.tools.join(", "),
            KeyPart::Remote if key.remote.is_empty() => "local".into(),
            KeyPart::Remote => key.remote.clone(),
        }
    }

    fn differs(self, a: &KeyInfo, b: &KeyInfo) -> bool {
        match self {
            KeyPart::Mode => a.mode != b.mode,
            KeyPart::Language => a.language != b.language,
            KeyPart::Interpreter => a.interpreter != b.interpreter,
            KeyPart::Cwd => a.cwd != b.cwd,
            KeyPart::Tools => a.tools != b.tools,
            KeyPart::Remote => a.remote != b.remote,
        }
    }
}

/// The parts in which `a` and `b` differ, owner aside.
fn differing_parts(a: &KeyInfo, b: &KeyInfo) -> Vec<KeyPart> {
    KeyPart::ALL
        .into_iter()
        .filter(|p| p.differs(a, b))
        .collect()
}

/// The warning for a cell whose session name already has kernels under
/// other keys (`others`): it runs in a separate kernel with its own state.
pub(super) fn sibling_warning(key: &SessionKey, others: &[SessionKey]) -> Option<String> {
    if others.is_empty() {
        return None;
    }
    let mine = KeyInfo::from(key);
    let described: Vec<String> = others
        .iter()
        .map(|o| {
            let theirs = KeyInfo::from(o);
            let parts: Vec<String> = differing_parts(&theirs, &mine)
                .into_iter()
                .map(|p| {
                    format!(
                        "a different {} ({}; this cell's: {})",
                        p.label(),
                        p.of(&theirs),
                        p.of(&mine)
                    )
                })
                .collect();
            join_and(&parts)
        })
        .collect();
    let which = if others.len() == 1 {
        "a kernel".to_string()
    } else {
        format!("{} kernels", others.len())
    };
    Some(format!(
        "session {:?} already has {which} with {}, so this cell runs in a separate kernel with its own state (a session's kernel is picked by its name together with its working directory, mode, interpreter and tools).",
        mine.owner,
        described.join("; another with ")
    ))
}

/// `a`, `a and b`, `a, b and c`.
fn join_and(items: &[String]) -> String {
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

/// Sets each entry's `differs`: the key parts in which it differs from
/// other entries of the same session name.
pub(super) fn mark_differences(list: &mut [SessionInfo]) {
    let keys: Vec<KeyInfo> = list.iter().map(|s| s.key.clone()).collect();
    for (i, entry) in list.iter_mut().enumerate() {
        let mut parts: Vec<&'static str> = Vec::new();
        for (j, other) in keys.iter().enumerate() {
            if i == j || other.owner != entry.key.owner {
                continue;
            }
            for p in differing_parts(&entry.key, other) {
                if !parts.contains(&p.name()) {
                    parts.push(p.name());
                }
            }
        }
        entry.differs = KeyPart::ALL
            .into_iter()
            .map(KeyPart::name)
            .filter(|n| parts.contains(n))
            .map(String::from)
            .collect();
    }
}

/// A session key as `sessions` shows it (docs/serve.md, "sessions": owner,
/// mode, interpreter, cwd, sorted tools).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyInfo {
    /// The owner (session name).
    pub owner: String,
    /// `project` or `strict`.
    pub mode: String,
    /// `python`, `r` or `javascript`.
    pub language: String,
    /// Interpreter path.
    pub interpreter: String,
    /// Working directory (empty in strict mode: a private one per kernel).
    pub cwd: String,
    /// Enabled tools, sorted.
    pub tools: Vec<String>,
    /// The remote the kernel runs on; absent: local.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub remote: String,
}

/// A live kernel, as `sessions` lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SessionInfo {
    /// The session key.
    pub key: KeyInfo,
    /// The owner.
    pub session: String,
    /// The kernel id.
    pub kernel_id: String,
    /// `project` or `strict`.
    pub mode: String,
    /// Working directory.
    pub cwd: String,
    /// Interpreter path.
    pub interpreter: String,
    /// Enabled tools.
    pub tools: Vec<String>,
    /// The runner's pid.
    pub pid: u32,
    /// Cells run.
    pub execution_count: u64,
    /// Seconds since the last cell ended.
    pub idle_seconds: f64,
    /// Cells running or waiting.
    pub busy: usize,
    /// When other kernels of the same session name are listed: the key
    /// parts (`cwd`, `mode`, `interpreter`, `tools`) in which this one
    /// differs from them. Omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differs: Vec<String>,
    /// A lifecycle remote's allocation (container, job, pod) the kernel
    /// runs in: the id its `start` printed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation: Option<String>,
}

impl From<&SessionKey> for KeyInfo {
    fn from(k: &SessionKey) -> Self {
        Self {
            owner: k
                .owner
                .split('\u{0}')
                .next()
                .unwrap_or_default()
                .to_string(),
            mode: k.mode.to_string(),
            language: k.language.as_str().to_string(),
            interpreter: k.interpreter.display().to_string(),
            cwd: k.cwd.display().to_string(),
            tools: k.tools.clone(),
            remote: k.remote.clone(),
        }
    }
}

pub(super) struct SlotMeta {
    pub(super) busy: usize,
    pub(super) last_used: Instant,
    pub(super) live: bool,
    pub(super) had_kernel: bool,
    pub(super) interrupt: CancellationToken,
    pub(super) tree: Option<Tree>,
    pub(super) kernel_id: String,
    /// Its allocation, on a remote with `start`.
    pub(super) allocation: Option<String>,
    pub(super) execution_count: u64,
    /// Set when the session was shut down (the running cell's result says so).
    pub(super) shut_down: bool,
    /// How the session's remote kernel was lost during its last cell (the
    /// connection ended): said in a warning by the cell that starts the
    /// next one.
    pub(super) lost: Option<String>,
    /// Spill files its results reported (newest last, at most
    /// [`SPILLS_KEPT`]): kept by the spill pruner while the slot lives.
    pub(super) spills: VecDeque<OsString>,
}

/// Spill files per session protected from pruning (the newest).
pub(super) const SPILLS_KEPT: usize = 256;

impl SlotMeta {
    /// The record of a new slot; `had_kernel` when its key was retired
    /// (the next kernel's first cell says `state_reset`).
    pub(super) fn new(had_kernel: bool) -> Self {
        Self {
            busy: 0,
            last_used: Instant::now(),
            live: false,
            had_kernel,
            interrupt: CancellationToken::new(),
            tree: None,
            kernel_id: String::new(),
            allocation: None,
            execution_count: 0,
            shut_down: false,
            lost: None,
            spills: VecDeque::new(),
        }
    }

    pub(super) fn remember_spill(&mut self, path: Option<&Path>) {
        let Some(name) = path.and_then(Path::file_name) else {
            return;
        };
        if self.spills.len() >= SPILLS_KEPT {
            self.spills.pop_front();
        }
        self.spills.push_back(name.to_os_string());
    }
}

pub(super) struct Slot {
    pub(super) key: SessionKey,
    pub(super) kernel: tokio::sync::Mutex<Option<Kernel>>,
    pub(super) meta: Mutex<SlotMeta>,
}

impl Slot {
    pub(super) fn meta(&self) -> std::sync::MutexGuard<'_, SlotMeta> {
        self.meta
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Default)]
pub(super) struct State {
    pub(super) slots: HashMap<SessionKey, Arc<Slot>>,
    pub(super) retired: VecDeque<SessionKey>,
    /// Cells waiting in `reserve` for room (the pool does not refill then).
    pub(super) waiting: usize,
    /// Kernel starts their cells gave up (cancelled, interrupted) that are
    /// still running: each holds its room under `max_kernels` until it
    /// lands, so cancelling cannot start more kernels than the bound.
    pub(super) abandoned: usize,
}

impl State {
    pub(super) fn retire(&mut self, key: SessionKey) {
        if !self.retired.contains(&key) {
            if self.retired.len() >= RETIRED_MEMORY {
                self.retired.pop_front();
            }
            self.retired.push_back(key);
        }
    }

    pub(super) fn live_count(&self) -> usize {
        self.slots.values().filter(|s| s.meta().live).count() + self.abandoned
    }
}

pub(super) struct BusyGuard {
    pub(super) inner: Arc<Inner>,
    pub(super) slot: Arc<Slot>,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        {
            let mut m = self.slot.meta();
            m.busy = m.busy.saturating_sub(1);
            m.last_used = Instant::now();
        }
        self.inner.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(owner: &str, cwd: &str, mode: &'static str, tools: &[&str]) -> SessionKey {
        SessionKey {
            owner: owner.into(),
            mode,
            language: toolcell_kernel::language::Language::Python,
            interpreter: PathBuf::from("/usr/bin/python3"),
            cwd: PathBuf::from(cwd),
            tools: tools.iter().map(|t| (*t).to_string()).collect(),
            remote: String::new(),
        }
    }

    #[test]
    fn retired_keys_are_remembered_once_and_bounded() {
        let mut st = State::default();
        st.retire(key("a", "/w", "project", &[]));
        st.retire(key("a", "/w", "project", &[]));
        assert_eq!(st.retired.len(), 1);
        for i in 0..RETIRED_MEMORY + 10 {
            st.retire(key(&format!("k{i}"), "/w", "project", &[]));
        }
        assert_eq!(st.retired.len(), RETIRED_MEMORY);
        assert!(
            !st.retired.contains(&key("a", "/w", "project", &[])),
            "oldest forgotten"
        );
    }

    #[test]
    fn the_warning_names_each_differing_part_with_both_values() {
        let mine = key("cw2", "/b", "project", &["read_file"]);
        assert_eq!(sibling_warning(&mine, &[]), None);
        let w = sibling_warning(&mine, &[key("cw2", "/a", "project", &["read_file"])]).unwrap();
        assert!(
            w.starts_with(
                "session \"cw2\" already has a kernel with a different working directory (/a; this cell's: /b), so this cell runs in a separate kernel with its own state"
            ),
            "{w}"
        );
        let strict = key("cw2", "", "strict", &[]);
        let w = sibling_warning(&strict, &[key("cw2", "/a", "project", &["read_file"])]).unwrap();
        assert!(
            w.contains("a different working directory (/a; this cell's: a private one), a different mode (project; this cell's: strict) and a different tool set (read_file; this cell's: none)"),
            "{w}"
        );
        let two = [
            key("cw2", "/a", "project", &["read_file"]),
            key("cw2", "/b", "strict", &["read_file"]),
        ];
        let w = sibling_warning(&mine, &two).unwrap();
        assert!(
            w.contains("already has 2 kernels with a different working directory"),
            "{w}"
        );
        assert!(
            w.contains("; another with a different mode (strict; this cell's: project)"),
            "{w}"
        );
    }

    fn info(k: &SessionKey) -> SessionInfo {
        let key = KeyInfo::from(k);
        SessionInfo {
            session: key.owner.clone(),
            kernel_id: "k-1".into(),
            mode: key.mode.clone(),
            cwd: key.cwd.clone(),
            interpreter: key.interpreter.clone(),
            tools: key.tools.clone(),
            key,
            pid: 1,
            execution_count: 0,
            idle_seconds: 0.0,
            busy: 0,
            differs: Vec::new(),
            allocation: None,
        }
    }

    #[test]
    fn sessions_mark_the_parts_that_tell_kernels_of_one_name_apart() {
        let mut list = vec![
            info(&key("a", "/x", "project", &["t"])),
            info(&key("a", "/y", "project", &["t"])),
            info(&key("a", "/y", "project", &["t", "u"])),
            info(&key("b", "/z", "strict", &[])),
        ];
        mark_differences(&mut list);
        assert_eq!(list[0].differs, ["cwd", "tools"]);
        assert_eq!(list[1].differs, ["cwd", "tools"]);
        assert_eq!(list[2].differs, ["cwd", "tools"]);
        assert!(list[3].differs.is_empty(), "a name used once");
        // Per-call owners show under their session name.
        let per_call = key("c\u{0}per-call-1234", "/z", "project", &[]);
        assert_eq!(KeyInfo::from(&per_call).owner, "c");
    }
}
