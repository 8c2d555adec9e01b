//! What a cell did to the files (docs/result.md, "files"): the kernel's working
//! directory before and after each cell, compared.
//!
//! A [`Snapshot`] holds every entry the scan saw: relative path, kind, and
//! for files size, modification time and inode number (a replace-by-rename
//! keeps size and mtime but not the inode). The scan walks with the
//! `ignore` crate, so `.gitignore` (and `.ignore`, `.git/info/exclude`)
//! rules hold, and never enters [`SKIPPED_DIRS`], virtualenvs (a directory
//! with a `pyvenv.cfg`) or toolcell's own directories and files
//! ([`WatchSettings::skip`]: the spill directory, the kernels root, the
//! journal). It stops after [`WatchSettings::max_entries`] entries; the
//! directories whose listing it did not finish are remembered, so the
//! comparison never calls a path deleted (or created) only because one scan
//! reached it and the other did not.
//!
//! A [`Watcher`] keeps the snapshot taken after a cell and an inotify
//! instance watching every directory the scan listed. Before the next cell,
//! when no event arrived, the old snapshot still holds and nothing is
//! scanned; after the cell, when no event arrived, nothing changed and
//! nothing is scanned either: a cell that changes nothing costs two
//! non-blocking reads. Events about skipped entries (the journal's
//! `-wal`, spill files) do not count. Any other event (or no inotify: not available, or
//! [`MAX_WATCHES`] / the user's watch limit reached) means a full rescan,
//! which the registry runs on the blocking pool.
//!
//! [`diff`] and [`FilesChanged::from_changes`] are pure and unit-tested;
//! the rest is exercised through the binary (`crates/cli/tests/it/files_changed.rs`).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use crate::result::{Changes, FileCounts, FilesChanged, MAX_LISTED};

/// `[output] watch_max_entries` by default.
pub const DEFAULT_MAX_ENTRIES: usize = 20_000;

/// Directories one watcher puts inotify watches on, at most; a tree with
/// more is rescanned before and after every cell instead (still bounded by
/// `max_entries`).
pub const MAX_WATCHES: usize = 8192;

/// Deleted paths confirmed gone with `lstat`, at most (a path can drop out
/// of a scan because a `.gitignore` now covers it).
const MAX_CONFIRM: usize = 256;

/// Directory names never entered: version control, caches, dependencies.
pub const SKIPPED_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    "node_modules",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".ipynb_checkpoints",
];

/// What a scan skips and where it stops.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// Entries (files and directories) a scan records at most.
    pub max_entries: usize,
    /// Paths never scanned (toolcell's own directories and files); they
    /// are compared after resolving symbolic links.
    pub skip: Vec<PathBuf>,
    /// A tree of at most this many entries is rescanned after every cell
    /// instead of watched with inotify (0: always watch). For a kernel
    /// that runs one cell: closing an inotify instance waits for a kernel
    /// grace period (15–25 ms measured), more than rescanning a small tree
    /// costs (~10 µs an entry). The first scan that lists more entries
    /// starts the watching.
    pub inotify_min_entries: usize,
}

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            max_entries: DEFAULT_MAX_ENTRIES,
            skip: Vec::new(),
            inotify_min_entries: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    /// Regular files, symbolic links and anything else that is not a directory.
    File,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    kind: Kind,
    size: u64,
    mtime: (i64, i64),
    ino: u64,
}

impl Meta {
    fn dir(ino: u64) -> Self {
        Self {
            kind: Kind::Dir,
            size: 0,
            mtime: (0, 0),
            ino,
        }
    }

    fn file(size: u64, mtime: (i64, i64), ino: u64) -> Self {
        Self {
            kind: Kind::File,
            size,
            mtime,
            ino,
        }
    }
}

/// One scan of a working directory.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    entries: HashMap<PathBuf, Meta>,
    /// Directories whose listing the scan did not finish (the ancestors of
    /// the entry where it stopped; `""` is the root).
    unfinished: HashSet<PathBuf>,
    stopped: bool,
}

impl Snapshot {
    /// Entries recorded (files and directories).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the scan recorded nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True when the scan stopped at `max_entries`.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    fn insert_dir(&mut self, rel: &Path, ino: u64) {
        self.entries.insert(rel.to_path_buf(), Meta::dir(ino));
    }

    fn insert_file(&mut self, rel: &Path, size: u64, mtime: (i64, i64), ino: u64) {
        self.entries
            .insert(rel.to_path_buf(), Meta::file(size, mtime, ino));
    }

    /// Marks the scan stopped just before `rel`: its ancestors' listings
    /// are unfinished.
    fn stop_before(&mut self, rel: &Path) {
        self.stopped = true;
        let mut at = rel.parent();
        while let Some(p) = at {
            self.unfinished.insert(p.to_path_buf());
            at = p.parent();
        }
        self.unfinished.insert(PathBuf::new());
    }

    /// Whether the scan listed every entry of directory `dir`.
    fn listed(&self, dir: &Path) -> bool {
        if self.unfinished.contains(dir) {
            return false;
        }
        dir.as_os_str().is_empty() || self.entries.get(dir).is_some_and(|m| m.kind == Kind::Dir)
    }

    /// Whether `p` is known not to exist in this scan: it was not seen, and
    /// its parent's listing was finished (or the parent is known absent, or
    /// is a file).
    fn absent(&self, p: &Path) -> bool {
        if self.entries.contains_key(p) {
            return false;
        }
        let mut cur = p;
        loop {
            let Some(parent) = cur.parent() else {
                return false;
            };
            if self.listed(parent) {
                return true;
            }
            match self.entries.get(parent) {
                Some(m) => return m.kind == Kind::File,
                None if parent.as_os_str().is_empty() => return false,
                None => cur = parent,
            }
        }
    }
}

fn shown(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The files created, modified and deleted between two scans. Directories
/// are not reported on their own (their files are). A path only one scan
/// reached (the other stopped first) is not reported.
pub fn diff(before: &Snapshot, after: &Snapshot) -> Changes {
    let mut c = Changes::default();
    for (p, m) in &after.entries {
        if m.kind == Kind::Dir {
            continue;
        }
        match before.entries.get(p) {
            Some(b) if b.kind == Kind::File && b != m => c.modified.push((shown(p), m.size)),
            Some(b) if b.kind == Kind::File => {}
            Some(_) => c.created.push((shown(p), m.size)),
            None if before.absent(p) => c.created.push((shown(p), m.size)),
            None => {}
        }
    }
    for (p, m) in &before.entries {
        if m.kind == Kind::Dir {
            continue;
        }
        match after.entries.get(p) {
            Some(a) if a.kind == Kind::File => {}
            Some(_) => c.deleted.push(shown(p)),
            None if after.absent(p) => c.deleted.push(shown(p)),
            None => {}
        }
    }
    c
}

/// Whether the walk enters (or records) `e`.
fn keep(e: &ignore::DirEntry, skip: &[PathBuf]) -> bool {
    if e.depth() == 0 {
        return true;
    }
    if e.file_type().is_some_and(|t| t.is_dir()) {
        let name = e.file_name();
        if SKIPPED_DIRS.iter().any(|n| name == OsStr::new(n)) {
            return false;
        }
        // A virtualenv (`python -m venv`, uv, virtualenv all write one).
        if std::fs::symlink_metadata(e.path().join("pyvenv.cfg")).is_ok() {
            return false;
        }
    }
    !skip.iter().any(|s| s.as_os_str() == e.path().as_os_str())
}

/// The walker of a scan of `root`: ignore rules, skipped directories and
/// toolcell's own paths left out, links not followed.
fn walker(root: &Path, settings: &WatchSettings) -> ignore::WalkBuilder {
    let skip: Arc<[PathBuf]> = settings.skip.clone().into();
    let mut b = ignore::WalkBuilder::new(root);
    b.hidden(false)
        .parents(true)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| keep(e, &skip));
    b
}

/// Scans `root` (an absolute, symlink-free path): at most
/// `settings.max_entries` entries. `on_dir` is called with every directory
/// the scan enters (the root first), before its entries are read. A scan
/// that stops still lists the root's own entries (up to `max_entries` more),
/// so a file or directory made or removed at the top of the tree is always
/// seen.
pub fn scan(root: &Path, settings: &WatchSettings, mut on_dir: impl FnMut(&Path)) -> Snapshot {
    let b = walker(root, settings);
    let mut snap = Snapshot::default();
    on_dir(root);
    let mut count = 0usize;
    for item in b.build() {
        let Ok(e) = item else {
            continue;
        };
        if e.depth() == 0 {
            continue;
        }
        let Ok(rel) = e.path().strip_prefix(root) else {
            continue;
        };
        if count >= settings.max_entries {
            snap.stop_before(rel);
            break;
        }
        count += 1;
        if e.file_type().is_some_and(|t| t.is_dir()) {
            on_dir(e.path());
            snap.insert_dir(rel, e.ino().unwrap_or(0));
        } else if let Ok(md) = e.metadata() {
            snap.insert_file(rel, md.len(), (md.mtime(), md.mtime_nsec()), md.ino());
        }
    }
    if snap.stopped {
        list_root(root, settings, &mut snap);
    }
    snap
}

/// Completes a stopped scan's listing of the root: the entries it had not
/// reached are recorded (directories among them as not listed), and the
/// root counts as listed, unless it has more than `max_entries` of them.
fn list_root(root: &Path, settings: &WatchSettings, snap: &mut Snapshot) {
    let mut b = walker(root, settings);
    b.max_depth(Some(1));
    let mut added = 0usize;
    for item in b.build() {
        let Ok(e) = item else {
            continue;
        };
        if e.depth() == 0 {
            continue;
        }
        let Ok(rel) = e.path().strip_prefix(root) else {
            continue;
        };
        if snap.entries.contains_key(rel) {
            continue;
        }
        added += 1;
        if added > settings.max_entries {
            return; // the root stays unfinished
        }
        if e.file_type().is_some_and(|t| t.is_dir()) {
            snap.insert_dir(rel, e.ino().unwrap_or(0));
            snap.unfinished.insert(rel.to_path_buf());
        } else if let Ok(md) = e.metadata() {
            snap.insert_file(rel, md.len(), (md.mtime(), md.mtime_nsec()), md.ino());
        }
    }
    snap.unfinished.remove(Path::new(""));
}

/// Adds to `changes` what inotify saw in directories a stopped scan did
/// not finish: paths neither scan can speak for (one of them stopped before
/// reaching them). Each is looked at now (`lstat`); whether it existed
/// before the cell comes from the `before` scan when that reached it, else
/// from the first event that named it (a creation, or a change/removal of
/// something that was there). Directories are not listed, and paths the
/// scan would skip (ignore rules, toolcell's own) are left out.
///
/// A directory the cell made (inotify saw it created, the `before` scan
/// never had it) is walked, within `max_entries` entries in all: every
/// file in it is new. Returns false when the report is known to miss
/// something: more paths were touched than remembered, or a new
/// directory's walk stopped.
fn add_touched(
    root: &Path,
    settings: &WatchSettings,
    before: &Snapshot,
    after: &Snapshot,
    touched: &Touched,
    changes: &mut Changes,
) -> bool {
    let mut complete = !touched.overflow;
    let mut budget = settings.max_entries;
    let mut known: HashSet<String> = HashSet::new();
    known.extend(changes.created.iter().map(|(p, _)| p.clone()));
    known.extend(changes.modified.iter().map(|(p, _)| p.clone()));
    known.extend(changes.deleted.iter().cloned());
    let mut ignores = IgnoreCache::default();
    for (path, touch) in &touched.paths {
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let now = std::fs::symlink_metadata(path).ok();
        let is_dir = now.as_ref().is_some_and(std::fs::Metadata::is_dir);
        // Made by the cell: unknown before and first seen created, or a
        // directory created during the cell or with another inode than
        // before's (removed and made again), or where a file was.
        let made = now
            .as_ref()
            .is_some_and(|md| match before.entries.get(rel) {
                None => !touch.existed_before,
                Some(m) => m.kind != Kind::Dir || m.ino != md.ino() || touch.created,
            });
        if is_dir
            && made
            && !ignores.ignored(root, rel)
            && !settings.skip.iter().any(|s| s == path)
            && std::fs::symlink_metadata(path.join("pyvenv.cfg")).is_err()
        {
            // A new directory: all in it is new (what `diff` already
            // reported of it is not listed twice).
            let mut sub = settings.clone();
            sub.max_entries = budget;
            let inner = scan(path, &sub, |_| {});
            budget = budget.saturating_sub(inner.len());
            complete &= !inner.stopped();
            for (p, m) in &inner.entries {
                let shown_path = shown(&rel.join(p));
                if m.kind == Kind::File && known.insert(shown_path.clone()) {
                    changes.created.push((shown_path, m.size));
                }
            }
            continue;
        }
        let covered = |s: &Snapshot| s.entries.contains_key(rel) || s.absent(rel);
        if covered(before) && covered(after) {
            continue; // `diff` already judged it
        }
        let shown_path = shown(rel);
        if known.contains(&shown_path) {
            continue;
        }
        if is_dir || matches!(before.entries.get(rel), Some(m) if m.kind == Kind::Dir) {
            continue;
        }
        if ignores.ignored(root, rel) {
            continue;
        }
        let was = before.entries.get(rel).copied();
        let existed = was.is_some() || touch.existed_before;
        match now {
            Some(md) => {
                let meta = Meta::file(md.len(), (md.mtime(), md.mtime_nsec()), md.ino());
                match was {
                    Some(w) if w == meta => {}
                    _ if existed => changes.modified.push((shown_path, md.len())),
                    _ => changes.created.push((shown_path, md.len())),
                }
            }
            None if existed => changes.deleted.push(shown_path),
            None => {}
        }
    }
    complete
}

/// `.gitignore`/`.ignore` rules of the directories from the filesystem root
/// down to a path's parent, read once per directory, judged as the scan's
/// walker does: the deepest file that matches decides, `.ignore` before
/// `.gitignore` in one directory; `.git/info/exclude` of the root last.
#[derive(Default)]
struct IgnoreCache {
    dirs: HashMap<PathBuf, Vec<ignore::gitignore::Gitignore>>,
}

impl IgnoreCache {
    fn matchers(&mut self, dir: &Path) -> &[ignore::gitignore::Gitignore] {
        self.dirs.entry(dir.to_path_buf()).or_insert_with(|| {
            [".ignore", ".gitignore"]
                .iter()
                .filter_map(|name| {
                    let file = dir.join(name);
                    if !file.is_file() {
                        return None;
                    }
                    let (gi, _err) = ignore::gitignore::Gitignore::new(&file);
                    Some(gi)
                })
                .collect()
        })
    }

    /// Whether the scan of `root` skips `rel` (a file) or a directory above it.
    fn ignored(&mut self, root: &Path, rel: &Path) -> bool {
        let path = root.join(rel);
        let name_skipped = rel
            .components()
            .any(|c| SKIPPED_DIRS.iter().any(|n| c.as_os_str() == OsStr::new(n)));
        if name_skipped {
            return true;
        }
        // Deepest first (each is an ancestor, so the matchers' "path under
        // the root" precondition holds).
        for dir in path.ancestors().skip(1) {
            for gi in self.matchers(dir) {
                let m = gi.matched_path_or_any_parents(&path, false);
                if m.is_ignore() {
                    return true;
                }
                if m.is_whitelist() {
                    return false;
                }
            }
        }
        let exclude = root.join(".git").join("info").join("exclude");
        if exclude.is_file() {
            let mut b = ignore::gitignore::GitignoreBuilder::new(root);
            let _ = b.add(&exclude);
            if let Ok(gi) = b.build()
                && gi.matched_path_or_any_parents(&path, false).is_ignore()
            {
                return true;
            }
        }
        false
    }
}

/// The inotify instance of a watcher and the directories it watches.
#[derive(Debug)]
struct Notify {
    fd: Inotify,
    /// The directory each watch is on.
    watches: HashMap<WatchDescriptor, PathBuf>,
}

impl Notify {
    fn new() -> Option<Self> {
        match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
            Ok(fd) => Some(Self {
                fd,
                watches: HashMap::new(),
            }),
            Err(e) => {
                tracing::debug!("inotify unavailable ({e}): working directories are rescanned");
                None
            }
        }
    }

    fn mask() -> AddWatchFlags {
        AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_ONLYDIR
            | AddWatchFlags::IN_DONT_FOLLOW
    }

    /// Watches `dir`; false when it cannot (the limit is reached).
    fn add(&mut self, dir: &Path) -> bool {
        if self.watches.len() >= MAX_WATCHES {
            return false;
        }
        match self.fd.add_watch(dir, Self::mask()) {
            Ok(wd) => {
                self.watches.insert(wd, dir.to_path_buf());
                true
            }
            // Gone meanwhile, or unreadable: nothing there to miss.
            Err(Errno::ENOENT | Errno::EACCES | Errno::ENOTDIR) => true,
            Err(e) => {
                tracing::debug!("inotify watch on {} failed: {e}", dir.display());
                false
            }
        }
    }

    /// Reads every pending event: `Some(true)` when there was any about
    /// a path the scan covers (events about `skip`ped entries — toolcell's
    /// own journal, spill files — do not count), `None` when the instance
    /// is broken. At most [`MAX_DRAIN_READS`] reads: a process the cell
    /// left writing in the tree makes events as fast as they are read, and
    /// an endless drain would hold the host's thread. Stopping there counts
    /// as a change (the tree is being written; what is still queued could
    /// be anything).
    fn drain(&mut self, skip: &[PathBuf], touched: &mut Touched) -> Option<bool> {
        let mut any = false;
        for _ in 0..MAX_DRAIN_READS {
            match self.fd.read_events() {
                Ok(events) if events.is_empty() => return Some(any),
                Ok(events) => {
                    for ev in events {
                        if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                            self.watches.remove(&ev.wd);
                        }
                        let skipped = match (&ev.name, self.watches.get(&ev.wd)) {
                            (Some(name), Some(dir)) => {
                                let p = dir.join(name);
                                let skipped = skip.contains(&p);
                                if !skipped {
                                    touched.note(p, ev.mask);
                                }
                                skipped
                            }
                            _ => false,
                        };
                        any |= !skipped;
                    }
                }
                Err(Errno::EAGAIN) => return Some(any),
                Err(Errno::EINTR) => {}
                Err(e) => {
                    tracing::debug!("reading inotify events failed: {e}");
                    return None;
                }
            }
        }
        Some(true)
    }
}

/// Reads of the inotify instance per [`Notify::drain`] (each takes up to a
/// buffer of events, about a hundred).
const MAX_DRAIN_READS: usize = 64;

/// Paths named by inotify events during a cell, remembered at most.
const MAX_TOUCHED: usize = 1024;

/// What inotify said about one path during a cell.
#[derive(Debug, Clone, Copy)]
struct Touch {
    /// The first event said the path existed before it (a change or a
    /// removal, not a creation).
    existed_before: bool,
    /// Some event created the path (made or moved in) during the cell: a
    /// directory removed and made again can get back its old inode
    /// number, so this, not the inode, says it is new.
    created: bool,
}

/// The paths (absolute) inotify events named since the cell started,
/// bounded. They let a stopped scan still report what happened in the
/// directories it listed but did not finish.
#[derive(Debug, Default)]
struct Touched {
    paths: HashMap<PathBuf, Touch>,
    /// More paths were named than [`MAX_TOUCHED`].
    overflow: bool,
}

impl Touched {
    fn note(&mut self, path: PathBuf, mask: AddWatchFlags) {
        let created = mask.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO);
        if let Some(t) = self.paths.get_mut(&path) {
            t.created |= created;
            return;
        }
        if self.paths.len() >= MAX_TOUCHED {
            self.overflow = true;
            return;
        }
        self.paths.insert(
            path,
            Touch {
                existed_before: !created,
                created,
            },
        );
    }

    fn clear(&mut self) {
        self.paths.clear();
        self.overflow = false;
    }
}

/// The files of one kernel's working directory, cell after cell.
#[derive(Debug)]
pub struct Watcher {
    /// The directory as given.
    given: PathBuf,
    root: PathBuf,
    settings: WatchSettings,
    snap: Option<Snapshot>,
    notify: Option<Notify>,
    /// No inotify instance yet: the first scan that lists more than
    /// [`WatchSettings::inotify_min_entries`] entries makes one.
    lazy: bool,
    /// The notice that the scan stopped was given in full (later cells get
    /// a short one).
    told_stopped: bool,
    /// Paths inotify named since the cell started.
    touched: Touched,
}

impl Watcher {
    /// A watcher of `root` (nothing scanned yet). Blocking: resolves the
    /// paths.
    pub fn new(root: &Path, mut settings: WatchSettings) -> Self {
        let given = root.to_path_buf();
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        settings.skip = settings.skip.iter().filter_map(|p| resolve(p)).collect();
        let lazy = settings.inotify_min_entries > 0;
        Self {
            given,
            root,
            settings,
            snap: None,
            notify: if lazy { None } else { Notify::new() },
            lazy,
            told_stopped: false,
            touched: Touched::default(),
        }
    }

    /// A watcher of `root` with its first scan done. Blocking.
    pub fn scanned(root: &Path, settings: WatchSettings) -> Box<Self> {
        let mut w = Box::new(Self::new(root, settings));
        w.rescan();
        w
    }

    /// The directory watched (symbolic links resolved).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory as given to [`Watcher::new`].
    pub fn given_root(&self) -> &Path {
        &self.given
    }

    /// True when the last snapshot still describes the tree: nothing
    /// touched a watched directory since. Never blocks (one non-blocking
    /// read of the inotify instance).
    pub fn is_current(&mut self) -> bool {
        if self.snap.is_none() {
            return false;
        }
        let Some(n) = self.notify.as_mut() else {
            return false;
        };
        match n.drain(&self.settings.skip, &mut self.touched) {
            Some(any) => !any,
            None => {
                self.notify = None;
                false
            }
        }
    }

    /// Scans the tree again (and watches what it lists). Blocking.
    pub fn rescan(&mut self) {
        let mut notify = self.notify.take();
        if let Some(n) = notify.as_mut() {
            // Events so far are covered by this scan.
            if n.drain(&self.settings.skip, &mut self.touched).is_none() {
                notify = None;
            }
        }
        let mut watching = notify.is_some();
        // Lazy: the directories listed, watched only if the tree is big.
        let mut listed: Vec<PathBuf> = Vec::new();
        let lazy = self.lazy;
        let snap = scan(&self.root, &self.settings, |dir| {
            if watching && let Some(n) = notify.as_mut() {
                watching = n.add(dir);
            } else if lazy && listed.len() <= MAX_WATCHES {
                listed.push(dir.to_path_buf());
            }
        });
        if lazy && snap.len() > self.settings.inotify_min_entries {
            self.lazy = false;
            notify = Notify::new();
            if let Some(n) = notify.as_mut() {
                // What changes between the listing and the watch is not
                // the next cell's doing: it has not started.
                watching = listed.iter().all(|d| n.add(d));
            }
        }
        if !watching && notify.is_some() {
            tracing::debug!(
                "{}: too many directories to watch; it is rescanned around every cell",
                self.root.display()
            );
            notify = None;
        }
        self.notify = notify;
        self.snap = Some(snap);
    }

    /// Before a cell: the snapshot made current (rescanned when anything
    /// changed since the last one). Blocking.
    pub fn before_cell(&mut self) {
        if !self.is_current() {
            self.rescan();
        }
        self.touched.clear();
    }

    /// After a cell: what changed since [`Watcher::before_cell`], cut for a
    /// result; `None` when nothing did. Blocking when it has to rescan.
    pub fn after_cell(&mut self) -> Option<FilesChanged> {
        if self.is_current() {
            return self.unchanged();
        }
        self.rescan_and_compare()
    }

    /// The report of a cell after which inotify saw nothing: nothing, or —
    /// when the scan stopped early, so the cell may have changed what no
    /// watch covers — an empty report that says so.
    fn unchanged(&mut self) -> Option<FilesChanged> {
        self.touched.clear();
        let stopped = self.snap.as_ref().is_some_and(Snapshot::stopped);
        FilesChanged::from_changes(Changes::default(), MAX_LISTED, stopped)
    }

    /// The rescan after a cell that touched the tree, compared with the
    /// snapshot before it. Blocking.
    fn rescan_and_compare(&mut self) -> Option<FilesChanged> {
        let before = self.snap.take();
        self.rescan();
        let (Some(before), Some(after)) = (before, self.snap.as_ref()) else {
            return None;
        };
        let mut changes = diff(&before, after);
        // A path a new `.gitignore` rule hides is not deleted.
        let root = &self.root;
        let mut checked = 0;
        changes.deleted.retain(|p| {
            checked += 1;
            checked > MAX_CONFIRM || std::fs::symlink_metadata(root.join(p)).is_err()
        });
        let stopped = before.stopped() || after.stopped();
        let touched = std::mem::take(&mut self.touched);
        let mut complete = true;
        if stopped {
            complete = add_touched(root, &self.settings, &before, after, &touched, &mut changes);
        }
        let mut files = FilesChanged::from_changes(changes, MAX_LISTED, stopped);
        if !complete && let Some(f) = files.as_mut() {
            // Some changes are surely missing: the counts are a floor.
            f.truncated = true;
            f.counts.get_or_insert(FileCounts {
                created: f.created.len() as u64,
                modified: f.modified.len() as u64,
                deleted: f.deleted.len() as u64,
                read: 0,
            });
        }
        files
    }

    /// The sentence for a result whose files report says the scan stopped
    /// at `max_entries` (`scan_stopped`): in full the first time, short
    /// after.
    pub fn stopped_notice(&mut self, scan_stopped: bool) -> Option<String> {
        if !scan_stopped {
            return None;
        }
        if std::mem::replace(&mut self.told_stopped, true) {
            return Some(format!(
                "The files report may be incomplete: the scan of the working directory stops at {} entries ([output] watch_max_entries; `files.scan_stopped`).",
                self.settings.max_entries
            ));
        }
        Some(format!(
            "The working directory has more than {} entries ([output] watch_max_entries): the scan for changed files stopped there, so the files report may be incomplete (`files.scan_stopped`): beyond that point only the top of the tree, directories the cell made and changes inotify saw in directories the scan reached are listed.",
            self.settings.max_entries
        ))
    }

    /// The last snapshot.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.snap.as_ref()
    }

    /// Whether inotify watches the tree (else every cell rescans).
    pub fn watching(&self) -> bool {
        self.notify.is_some()
    }
}

/// `p` with symbolic links resolved; a file that does not exist yet (a
/// journal's `-wal`) through its parent.
fn resolve(p: &Path) -> Option<PathBuf> {
    if let Ok(r) = std::fs::canonicalize(p) {
        return Some(r);
    }
    let parent = std::fs::canonicalize(p.parent()?).ok()?;
    Some(parent.join(p.file_name()?))
}

/// [`Watcher::before_cell`], scanning on the blocking pool only when it must.
pub async fn before(mut w: Box<Watcher>) -> Option<Box<Watcher>> {
    if w.is_current() {
        w.touched.clear();
        return Some(w);
    }
    tokio::task::spawn_blocking(move || {
        w.rescan();
        w.touched.clear();
        w
    })
    .await
    .ok()
}

/// [`Watcher::after_cell`], scanning on the blocking pool only when it
/// must; the watcher comes back with the change list.
pub async fn after(mut w: Box<Watcher>) -> Option<(Box<Watcher>, Option<FilesChanged>)> {
    if w.is_current() {
        let files = w.unchanged();
        return Some((w, files));
    }
    tokio::task::spawn_blocking(move || {
        // The events were read just now: rescan without asking again.
        let files = w.rescan_and_compare();
        (w, files)
    })
    .await
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(size, mtime, inode)` of a file; `None` for a directory.
    type Entry<'a> = (&'a str, Option<(u64, i64, u64)>);

    fn snap(entries: &[Entry<'_>]) -> Snapshot {
        let mut s = Snapshot::default();
        for (p, m) in entries {
            match m {
                None => s.insert_dir(Path::new(p), 1),
                Some((size, mtime, ino)) => {
                    s.insert_file(Path::new(p), *size, (*mtime, 0), *ino);
                }
            }
        }
        s
    }

    /// A path removed and made again during a cell counts as created
    /// (its inode number may be the old one), and a first event that is a
    /// change or removal still says it existed before.
    #[test]
    fn a_path_removed_and_made_again_is_created() {
        let mut t = Touched::default();
        let p = PathBuf::from("/w/d0");
        t.note(
            p.clone(),
            AddWatchFlags::IN_DELETE | AddWatchFlags::IN_ISDIR,
        );
        assert!(!t.paths[&p].created);
        t.note(
            p.clone(),
            AddWatchFlags::IN_CREATE | AddWatchFlags::IN_ISDIR,
        );
        let touch = t.paths[&p];
        assert!(touch.created && touch.existed_before);
        let q = PathBuf::from("/w/new");
        t.note(q.clone(), AddWatchFlags::IN_MOVED_TO);
        assert!(t.paths[&q].created && !t.paths[&q].existed_before);
    }

    fn sorted(mut c: Changes) -> Changes {
        c.created.sort();
        c.modified.sort();
        c.deleted.sort();
        c
    }

    #[test]
    fn create_modify_delete_and_replace_by_rename() {
        let before = snap(&[
            ("a.txt", Some((1, 10, 100))),
            ("b.txt", Some((2, 10, 101))),
            ("c.txt", Some((3, 10, 102))),
            ("d.txt", Some((4, 10, 103))),
            ("sub", None),
            ("sub/e.txt", Some((5, 10, 104))),
        ]);
        let after = snap(&[
            ("a.txt", Some((1, 10, 100))),       // same
            ("b.txt", Some((9, 11, 101))),       // rewritten
            ("c.txt", Some((3, 10, 200))),       // replaced by a rename
            ("sub", None),                       // d.txt and sub/e.txt deleted
            ("sub/new.csv", Some((7, 12, 201))), // created
            ("newdir", None),
            ("newdir/x", Some((0, 12, 202))),
        ]);
        let c = sorted(diff(&before, &after));
        assert_eq!(
            c.created,
            vec![("newdir/x".to_string(), 0), ("sub/new.csv".to_string(), 7)]
        );
        assert_eq!(
            c.modified,
            vec![("b.txt".to_string(), 9), ("c.txt".to_string(), 3)]
        );
        assert_eq!(
            c.deleted,
            vec!["d.txt".to_string(), "sub/e.txt".to_string()]
        );
        assert!(diff(&after, &after).is_empty());
    }

    #[test]
    fn a_file_that_became_a_directory() {
        let before = snap(&[("x", Some((1, 1, 1)))]);
        let after = snap(&[("x", None), ("x/y", Some((2, 2, 2)))]);
        let c = sorted(diff(&before, &after));
        assert_eq!(c.deleted, vec!["x".to_string()]);
        assert_eq!(c.created, vec![("x/y".to_string(), 2)]);
    }

    #[test]
    fn a_stopped_scan_reports_only_what_both_scans_covered() {
        // Before: stopped inside `big/` (after big/a); after: stopped
        // earlier, so big/a is not in it, nor is the rest of the root.
        let mut before = snap(&[
            ("big", None),
            ("big/a", Some((1, 1, 1))),
            ("small", None),
            ("small/s", Some((1, 1, 2))),
        ]);
        before.stop_before(Path::new("big/b"));
        let mut after = snap(&[
            ("small", None),
            ("small/s", Some((2, 2, 2))),
            ("small/t", Some((3, 3, 3))),
            ("big", None),
        ]);
        after.stop_before(Path::new("big/a"));
        let c = sorted(diff(&before, &after));
        // small/ was listed in both: its changes count; big/a only dropped
        // out of the second scan.
        assert_eq!(c.created, vec![("small/t".to_string(), 3)]);
        assert_eq!(c.modified, vec![("small/s".to_string(), 2)]);
        assert!(c.deleted.is_empty(), "{c:?}");
        assert!(after.stopped());
    }

    #[test]
    fn an_entry_missing_under_an_unlisted_directory_is_unknown() {
        let mut s = snap(&[("d", None)]);
        s.stop_before(Path::new("d/z"));
        assert!(!s.absent(Path::new("d/q")));
        assert!(!s.absent(Path::new("other")));
        let full = snap(&[("d", None)]);
        assert!(full.absent(Path::new("d/q")));
        assert!(full.absent(Path::new("e/f/g")));
    }

    #[test]
    fn scan_skips_ignored_and_own_directories_and_stops_at_the_bound() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let w = |p: &str| {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        };
        w(".gitignore");
        std::fs::write(root.join(".gitignore"), "build/\n*.log\n").unwrap();
        w("src/main.py");
        w("build/out.o");
        w("run.log");
        w(".git/HEAD");
        w("__pycache__/m.pyc");
        w("venv/pyvenv.cfg");
        w("venv/lib/x.py");
        w("spill/s.txt");
        w(".env");
        let settings = WatchSettings {
            max_entries: 100,
            skip: vec![root.join("spill")],
            ..WatchSettings::default()
        };
        let mut dirs = Vec::new();
        let s = scan(&root, &settings, |d| dirs.push(d.to_path_buf()));
        let mut names: Vec<String> = s.entries.keys().map(|p| shown(p)).collect();
        names.sort();
        assert_eq!(names, [".env", ".gitignore", "src", "src/main.py"]);
        assert_eq!(dirs, [root.clone(), root.join("src")]);
        assert!(!s.stopped());

        let small = WatchSettings {
            max_entries: 2,
            ..WatchSettings::default()
        };
        let s = scan(&root, &small, |_| {});
        assert!(s.stopped());
        // The walk stopped after 2 entries, then the root's own listing
        // was finished: every top-level entry is known, and so is the
        // absence of any other.
        for top in [".env", ".gitignore", "src", "spill"] {
            assert!(s.entries.contains_key(Path::new(top)), "{top}: {s:?}");
        }
        assert!(s.listed(Path::new("")));
        assert!(s.absent(Path::new("new.txt")));
        // With a root of more entries than the bound, the root stays
        // unfinished: nothing at the top is called absent.
        for i in 0..5 {
            w(&format!("f{i}.txt"));
        }
        let s = scan(&root, &small, |_| {});
        assert!(!s.listed(Path::new("")));
        assert!(!s.absent(Path::new("new.txt")));
    }

    #[test]
    fn watcher_reports_nothing_without_changes_and_sees_changes() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a"), "1").unwrap();
        let mut w = Watcher::new(tmp.path(), WatchSettings::default());
        w.before_cell();
        assert_eq!(w.after_cell(), None);
        w.before_cell();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("d/b"), "22").unwrap();
        std::fs::remove_file(tmp.path().join("a")).unwrap();
        let f = w.after_cell().unwrap();
        assert_eq!(f.created[0].path, "d/b");
        assert_eq!(f.created[0].bytes, Some(2));
        assert_eq!(f.deleted[0].path, "a");
        // Now current again, and a change in the new directory is seen.
        w.before_cell();
        std::fs::write(tmp.path().join("d/b"), "333").unwrap();
        let f = w.after_cell().unwrap();
        assert_eq!(f.modified[0].path, "d/b");
    }

    #[test]
    fn a_small_tree_under_inotify_min_entries_is_rescanned_not_watched() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("d/a"), "1").unwrap();
        let lazy = WatchSettings {
            inotify_min_entries: 3,
            ..WatchSettings::default()
        };
        // Two entries: no inotify instance, yet changes are found.
        let mut w = Watcher::scanned(tmp.path(), lazy.clone());
        assert!(!w.watching());
        w.before_cell();
        std::fs::write(tmp.path().join("d/a"), "22").unwrap();
        let f = w.after_cell().unwrap();
        assert_eq!(f.modified[0].path, "d/a");
        w.before_cell();
        assert!(
            w.after_cell().is_none(),
            "a rescan of an unchanged tree found changes"
        );
        // Past the threshold, the scan that sees it starts watching every
        // directory listed, the new one included.
        std::fs::create_dir(tmp.path().join("e")).unwrap();
        std::fs::write(tmp.path().join("e/b"), "1").unwrap();
        w.before_cell();
        assert!(w.watching());
        assert!(w.is_current());
        std::fs::write(tmp.path().join("e/c"), "1").unwrap();
        // (`is_current` would take the event: `after_cell` asks it.)
        let f = w
            .after_cell()
            .expect("a change in a directory listed before watching was missed");
        assert_eq!(f.created[0].path, "e/c");
    }

    #[test]
    fn writes_to_skipped_files_do_not_make_the_next_cell_rescan() {
        // The journal's -wal file next to the cells' files: every cell's
        // record changes it, and that must not cost a rescan per cell.
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("data")).unwrap();
        std::fs::write(tmp.path().join("data/journal.db-wal"), "1").unwrap();
        std::fs::write(tmp.path().join("notes.txt"), "a").unwrap();
        let settings = WatchSettings {
            skip: vec![tmp.path().join("data/journal.db-wal")],
            ..WatchSettings::default()
        };
        let mut w = Watcher::scanned(tmp.path(), settings);
        assert!(w.watching());
        assert!(w.is_current());
        std::fs::write(tmp.path().join("data/journal.db-wal"), "22").unwrap();
        assert!(w.is_current(), "a skipped file's change counted");
        std::fs::write(tmp.path().join("data/other"), "x").unwrap();
        assert!(!w.is_current(), "a real change was missed");
    }

    #[test]
    fn one_check_reads_a_bounded_number_of_events() {
        // A process a cell left behind can write in the tree as fast as
        // events are read: one check must not read until the queue is
        // empty. 12,000 events are more than one check reads (64 reads of
        // about 128 short-named events); it stops, says "changed", and the
        // rest stays queued for the next check.
        let tmp = tempfile::tempdir().unwrap();
        let mut w = Watcher::scanned(tmp.path(), WatchSettings::default());
        assert!(w.watching());
        for i in 0..6000 {
            let p = tmp.path().join(format!("f{i}"));
            std::fs::write(&p, "").unwrap();
            std::fs::remove_file(&p).unwrap();
        }
        assert!(!w.is_current(), "a tree being written is not current");
        let n = w.notify.as_mut().expect("still watching");
        let left = n.fd.read_events().map(|e| e.len()).unwrap_or(0);
        assert!(left > 0, "the check read the whole queue");
    }
}
