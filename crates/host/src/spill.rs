//! Pruning the spill directory: spill files outlive their kernels (a result
//! names one for the agent to page through), so without pruning the
//! directory only grows. A prune removes toolcell's files older than the
//! retention, then the oldest ones while the total is over the cap, except
//! the files a result of a live session still reports.
//!
//! Only files toolcell names are touched (`k-…-cell<N>-<stream>-<rand>.txt`
//! from a cell, `web_extract-….md` from `web_extract`): `spill_dir` may be
//! a directory the user shares with other things. Symlinks and
//! directories are left alone.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What a prune keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rules {
    /// Files older than this go (`None`: age alone removes nothing).
    pub retention: Option<Duration>,
    /// The oldest files go while the total is over this (`None`: no cap).
    pub total_cap: Option<u64>,
}

/// One spill file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub name: OsString,
    pub modified: SystemTime,
    pub bytes: u64,
}

/// What a prune did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pruned {
    pub removed: usize,
    pub bytes: u64,
}

/// The files a prune keeps, whatever their age or the total.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Keep {
    /// Files a live session's result reported, by name.
    pub names: HashSet<OsString>,
    /// Name prefixes (`<kernel id>-cell`) of the kernels running a cell
    /// now: the file such a cell is writing is reported only when the
    /// cell ends, and must not go before.
    pub prefixes: Vec<String>,
}

impl Keep {
    fn keeps(&self, name: &OsStr) -> bool {
        self.names.contains(name)
            || name
                .to_str()
                .is_some_and(|n| self.prefixes.iter().any(|p| n.starts_with(p.as_str())))
    }
}

/// Whether `name` is a file toolcell writes to the spill directory.
fn is_spill_name(name: &OsStr) -> bool {
    let Some(n) = name.to_str() else {
        return false;
    };
    (n.starts_with("k-") && n.ends_with(".txt") && n.contains("-cell"))
        || (n.starts_with("web_extract-") && n.ends_with(".md"))
}

/// The files to remove, by name: first every unprotected file older than
/// the retention, then the oldest unprotected ones while the total (the
/// protected files count too) is over the cap.
pub(crate) fn choose(
    mut entries: Vec<Entry>,
    now: SystemTime,
    rules: Rules,
    keep: &Keep,
) -> Vec<Entry> {
    // Oldest first; the name breaks ties so the order is stable.
    entries.sort_by(|a, b| a.modified.cmp(&b.modified).then(a.name.cmp(&b.name)));
    let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
    let mut out = Vec::new();
    for e in entries {
        if keep.keeps(&e.name) {
            continue;
        }
        // A file from the future (a clock set back) has age zero.
        let age = now.duration_since(e.modified).unwrap_or_default();
        let expired = rules.retention.is_some_and(|r| age > r);
        let over = rules.total_cap.is_some_and(|cap| total > cap);
        if expired || over {
            total -= e.bytes;
            out.push(e);
        }
    }
    out
}

/// toolcell's spill files in `dir` (nothing when it cannot be read).
fn list(dir: &Path) -> Vec<Entry> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| is_spill_name(&e.file_name()))
        .filter_map(|e| {
            // `DirEntry::metadata` does not follow symlinks.
            let meta = e.metadata().ok()?;
            meta.is_file().then(|| Entry {
                name: e.file_name(),
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                bytes: meta.len(),
            })
        })
        .collect()
}

/// Prunes `dir` by `rules`, keeping what `keep` names.
pub(crate) fn prune(dir: &Path, rules: Rules, keep: &Keep) -> Pruned {
    if rules.retention.is_none() && rules.total_cap.is_none() {
        return Pruned::default();
    }
    let doomed = choose(list(dir), SystemTime::now(), rules, keep);
    let mut done = Pruned::default();
    for e in doomed {
        let path: PathBuf = dir.join(&e.name);
        match std::fs::remove_file(&path) {
            Ok(()) => {
                done.removed += 1;
                done.bytes += e.bytes;
            }
            // Another host pruned it first.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(path = %path.display(), "cannot remove an old spill file: {err}");
            }
        }
    }
    done
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn entry(name: &str, days_old: u64, bytes: u64, now: SystemTime) -> Entry {
        Entry {
            name: name.into(),
            modified: now - DAY * u32::try_from(days_old).unwrap(),
            bytes,
        }
    }

    fn names(v: &[Entry]) -> Vec<&str> {
        v.iter().map(|e| e.name.to_str().unwrap()).collect()
    }

    #[test]
    fn only_toolcell_names_are_spill_files() {
        for ok in [
            "k-0a1b2c3d-cell3-stdout-9f8e.txt",
            "web_extract-abcdef123456.md",
        ] {
            assert!(is_spill_name(OsStr::new(ok)), "{ok}");
        }
        for not in [
            "notes.txt",
            "k-0a1b.md",
            "kernel.txt",
            "web_extract-x.txt",
            ".k-x-cell1-stdout-1.txt",
        ] {
            assert!(!is_spill_name(OsStr::new(not)), "{not}");
        }
    }

    #[test]
    fn expired_files_go_then_the_oldest_while_over_the_cap() {
        let now = SystemTime::now();
        let entries = vec![
            entry("new", 0, 400, now),
            entry("old", 10, 100, now),
            entry("mid", 3, 400, now),
            entry("older", 2, 400, now),
        ];
        let rules = Rules {
            retention: Some(DAY * 7),
            total_cap: Some(900),
        };
        let gone = choose(entries, now, rules, &Keep::default());
        // `old` expired; 1200 bytes left, over 900: `mid` (the oldest) goes.
        assert_eq!(names(&gone), ["old", "mid"]);
    }

    #[test]
    fn protected_files_stay_but_count_toward_the_total() {
        let now = SystemTime::now();
        let entries = vec![
            entry("kept", 30, 800, now),
            entry("a", 2, 100, now),
            entry("b", 1, 100, now),
        ];
        let rules = Rules {
            retention: Some(DAY * 7),
            total_cap: Some(900),
        };
        let keep = Keep {
            names: [OsString::from("kept")].into(),
            prefixes: Vec::new(),
        };
        let gone = choose(entries, now, rules, &keep);
        assert_eq!(
            names(&gone),
            ["a"],
            "1000 > 900: the oldest unprotected goes"
        );
    }

    #[test]
    fn a_running_cells_files_stay_before_any_result_reports_them() {
        let now = SystemTime::now();
        let entries = vec![
            entry("k-aa-cell3-stdout-01.txt", 30, 800, now),
            entry("k-aab-cell1-stdout-02.txt", 30, 800, now),
            entry("k-bb-cell9-stderr-03.txt", 30, 800, now),
        ];
        let rules = Rules {
            retention: Some(DAY),
            total_cap: Some(1),
        };
        let keep = Keep {
            names: HashSet::new(),
            prefixes: vec!["k-aa-cell".into()],
        };
        let gone = choose(entries, now, rules, &keep);
        assert_eq!(
            names(&gone),
            ["k-aab-cell1-stdout-02.txt", "k-bb-cell9-stderr-03.txt"],
            "only the running kernel's files stay, not a longer id's"
        );
    }

    #[test]
    fn no_rules_no_removals_and_future_files_are_young() {
        let now = SystemTime::now();
        let entries = vec![
            entry("x", 100, 1 << 40, now),
            Entry {
                name: "future".into(),
                modified: now + DAY,
                bytes: 1,
            },
        ];
        let none = Rules {
            retention: None,
            total_cap: None,
        };
        assert!(choose(entries.clone(), now, none, &Keep::default()).is_empty());
        let age_only = Rules {
            retention: Some(DAY),
            total_cap: None,
        };
        assert_eq!(
            names(&choose(entries, now, age_only, &Keep::default())),
            ["x"]
        );
    }

    #[test]
    fn prune_removes_real_files_by_mtime_and_leaves_other_files_alone() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let make = |name: &str, days_old: u32, bytes: usize| {
            let p = dir.path().join(name);
            std::fs::write(&p, vec![b'x'; bytes]).unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(now - DAY * days_old).unwrap();
            p
        };
        let old = make("k-aa-cell1-stdout-01.txt", 8, 10);
        let web = make("web_extract-0001.md", 9, 10);
        let young = make("k-aa-cell2-stdout-02.txt", 1, 10);
        let foreign = make("mine.txt", 400, 10);
        let sub = dir.path().join("k-dir-cell1-stdout-03.txt");
        std::fs::create_dir(&sub).unwrap();
        let link = dir.path().join("k-ln-cell1-stdout-04.txt");
        std::os::unix::fs::symlink(&foreign, &link).unwrap();
        let rules = Rules {
            retention: Some(DAY * 7),
            total_cap: None,
        };
        let done = prune(dir.path(), rules, &Keep::default());
        assert_eq!(
            done,
            Pruned {
                removed: 2,
                bytes: 20
            }
        );
        assert!(!old.exists() && !web.exists());
        assert!(young.exists() && foreign.exists() && sub.is_dir());
        assert!(link.symlink_metadata().is_ok());
        // A missing directory is nothing to prune.
        let gone = dir.path().join("nope");
        assert_eq!(prune(&gone, rules, &Keep::default()), Pruned::default());
    }
}
