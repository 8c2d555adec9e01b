//! The `files` field of a result (docs/result.md, "files"): what a cell (and
//! the tools it called) created, modified and deleted under the kernel's
//! working directory, and what it was seen to read ([`FilesChanged::read`]). [`crate::watch`] finds the changes; this module holds the
//! shape, the cut to [`MAX_LISTED`] per kind and the short summaries the `exec`
//! status line, the MCP text, `history` and the export use.

use serde::{Deserialize, Serialize};

/// Paths listed per kind (created, modified, deleted) at most.
pub const MAX_LISTED: usize = 50;

/// One changed path, relative to the kernel's working directory (`/`
/// separated). `bytes` is the size after the cell (created and modified
/// files); deleted files have none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedFile {
    /// Relative to the working directory.
    pub path: String,
    /// Size in bytes after the cell (absent for deleted files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// How many paths of each kind changed, listed or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FileCounts {
    /// Files created.
    pub created: u64,
    /// Files modified.
    pub modified: u64,
    /// Files deleted.
    pub deleted: u64,
    /// Files read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub read: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The `files` field: present only when something changed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FilesChanged {
    /// Files that did not exist before the cell, sorted by path.
    pub created: Vec<ChangedFile>,
    /// Files whose size, modification time or inode changed.
    pub modified: Vec<ChangedFile>,
    /// Files that existed before the cell and are gone.
    pub deleted: Vec<ChangedFile>,
    /// True when some kind had more than [`MAX_LISTED`] paths: the lists
    /// hold the first ones by path and `counts` says how many there were.
    pub truncated: bool,
    /// Every change, listed or not (only when `truncated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<FileCounts>,
    /// True when the scan of the working directory stopped at
    /// `[output] watch_max_entries`: changes beyond that point are not
    /// reported.
    #[serde(default, skip_serializing_if = "is_false")]
    pub scan_stopped: bool,
    /// The regular files the cell was seen to read, each once, in
    /// first-read order, relative to the working directory when under it
    /// (absolute elsewhere); at most [`MAX_LISTED`] (then `truncated`, and
    /// `counts.read` says how many). Absent when none was seen, or when the
    /// kernel's runner does not observe reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
}

/// Changes as found, before the cut: `(path, size)` of created and modified
/// files, paths of deleted ones, in any order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Created files and their sizes.
    pub created: Vec<(String, u64)>,
    /// Modified files and their sizes.
    pub modified: Vec<(String, u64)>,
    /// Deleted files.
    pub deleted: Vec<String>,
}

impl Changes {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.created.is_empty() && self.modified.is_empty() && self.deleted.is_empty()
    }
}

impl FilesChanged {
    /// The field for `changes`: sorted by path, at most `max` per kind
    /// (`truncated` and `counts` when more); `None` when nothing changed
    /// and the scan was complete.
    pub fn from_changes(changes: Changes, max: usize, scan_stopped: bool) -> Option<Self> {
        if changes.is_empty() && !scan_stopped {
            return None;
        }
        let counts = FileCounts {
            created: changes.created.len() as u64,
            modified: changes.modified.len() as u64,
            deleted: changes.deleted.len() as u64,
            read: 0,
        };
        let sized = |mut v: Vec<(String, u64)>| -> Vec<ChangedFile> {
            v.sort_unstable();
            v.truncate(max);
            v.into_iter()
                .map(|(path, bytes)| ChangedFile {
                    path,
                    bytes: Some(bytes),
                })
                .collect()
        };
        let truncated = [counts.created, counts.modified, counts.deleted]
            .iter()
            .any(|&n| n > max as u64);
        let mut deleted = changes.deleted;
        deleted.sort_unstable();
        deleted.truncate(max);
        Some(Self {
            created: sized(changes.created),
            modified: sized(changes.modified),
            deleted: deleted
                .into_iter()
                .map(|path| ChangedFile { path, bytes: None })
                .collect(),
            truncated,
            counts: truncated.then_some(counts),
            scan_stopped,
            read: Vec::new(),
        })
    }

    /// `files` with the files the cell read added: `paths` absolute (as the
    /// runner reports them), each made relative to `cwd` when under it, at
    /// most [`MAX_LISTED`]; `total` the number read in all. `None` stays
    /// `None` when nothing was read.
    pub fn with_reads(
        files: Option<Self>,
        paths: Vec<String>,
        total: u64,
        cwd: &std::path::Path,
    ) -> Option<Self> {
        let mut read: Vec<String> = Vec::with_capacity(paths.len().min(MAX_LISTED));
        for p in paths {
            let shown = std::path::Path::new(&p)
                .strip_prefix(cwd)
                .ok()
                .filter(|rel| !rel.as_os_str().is_empty())
                .map_or(p.clone(), |rel| rel.to_string_lossy().into_owned());
            if read.len() < MAX_LISTED && !read.contains(&shown) {
                read.push(shown);
            }
        }
        if read.is_empty() {
            return files;
        }
        let total = total.max(read.len() as u64);
        let mut f = files.unwrap_or_default();
        if total > read.len() as u64 {
            let mut counts = f.totals();
            counts.read = total;
            f.counts = Some(counts);
            f.truncated = true;
        } else if let Some(c) = f.counts.as_mut() {
            c.read = total;
        }
        f.read = read;
        Some(f)
    }

    /// How many files changed of each kind (listed or not), and were read.
    pub fn totals(&self) -> FileCounts {
        self.counts.unwrap_or(FileCounts {
            created: self.created.len() as u64,
            modified: self.modified.len() as u64,
            deleted: self.deleted.len() as u64,
            read: self.read.len() as u64,
        })
    }

    /// `2 files created, 1 modified, 1 deleted` (kinds with none left out).
    pub fn summary(&self) -> String {
        let t = self.totals();
        let mut parts: Vec<String> = Vec::new();
        let mut first = true;
        for (n, word) in [
            (t.created, "created"),
            (t.modified, "modified"),
            (t.deleted, "deleted"),
        ] {
            if n == 0 {
                continue;
            }
            if first {
                let noun = if n == 1 { "file" } else { "files" };
                parts.push(format!("{n} {noun} {word}"));
                first = false;
            } else {
                parts.push(format!("{n} {word}"));
            }
        }
        if parts.is_empty() {
            return if self.scan_stopped {
                "no file changes seen".into()
            } else {
                "no files changed".into()
            };
        }
        parts.join(", ")
    }

    /// Whether the cell changed a file (or the scan stopped early), as
    /// opposed to only reading.
    pub fn changed(&self) -> bool {
        let t = self.totals();
        t.created + t.modified + t.deleted > 0 || self.scan_stopped
    }

    /// `read data/orders.csv and 3 more` (`None` when nothing was read).
    pub fn read_brief(&self) -> Option<String> {
        let first = self.read.first()?;
        let more = self.totals().read.saturating_sub(1);
        Some(if more == 0 {
            format!("read {first}")
        } else {
            format!("read {first} and {more} more")
        })
    }

    /// One short line for a model: `files: created a.csv, b.txt; modified
    /// c.yaml; deleted tmp/x (+3 more)`, at most `names` paths per kind.
    pub fn brief(&self, names: usize) -> String {
        let t = self.totals();
        let mut kinds: Vec<String> = Vec::new();
        fn paths(list: &[ChangedFile], names: usize) -> Vec<&str> {
            list.iter().take(names).map(|f| f.path.as_str()).collect()
        }
        for (shown, total, word) in [
            (paths(&self.created, names), t.created, "created"),
            (paths(&self.modified, names), t.modified, "modified"),
            (paths(&self.deleted, names), t.deleted, "deleted"),
            (
                self.read.iter().take(names).map(String::as_str).collect(),
                t.read,
                "read",
            ),
        ] {
            if total == 0 {
                continue;
            }
            let more = total.saturating_sub(shown.len() as u64);
            let mut s = format!("{word} {}", shown.join(", "));
            if more > 0 {
                s.push_str(&format!(" (+{more} more)"));
            }
            kinds.push(s);
        }
        let mut line = if kinds.is_empty() {
            format!("files: {}", self.summary())
        } else {
            format!("files: {}", kinds.join("; "))
        };
        if self.scan_stopped {
            line.push_str(" (the scan stopped early: the report may be incomplete)");
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(created: usize, modified: usize, deleted: usize) -> Changes {
        Changes {
            created: (0..created)
                .rev()
                .map(|i| (format!("c{i:03}"), 1))
                .collect(),
            modified: (0..modified).map(|i| (format!("m{i}"), 2)).collect(),
            deleted: (0..deleted).map(|i| format!("d{i}")).collect(),
        }
    }

    #[test]
    fn nothing_changed_is_no_field_unless_the_scan_stopped() {
        assert_eq!(
            FilesChanged::from_changes(Changes::default(), 50, false),
            None
        );
        // A stopped scan cannot say "nothing changed": the field says it
        // stopped, with empty lists.
        let f = FilesChanged::from_changes(Changes::default(), 50, true).unwrap();
        assert!(f.scan_stopped);
        assert!(f.created.is_empty() && f.modified.is_empty() && f.deleted.is_empty());
    }

    #[test]
    fn lists_are_sorted_and_cut_with_counts() {
        let f = FilesChanged::from_changes(changes(60, 2, 1), 50, false).unwrap();
        assert_eq!(f.created.len(), 50);
        assert_eq!(f.created[0].path, "c000");
        assert_eq!(f.created[49].path, "c049");
        assert!(f.truncated);
        assert_eq!(
            f.counts,
            Some(FileCounts {
                created: 60,
                modified: 2,
                deleted: 1,
                read: 0,
            })
        );
        assert_eq!(f.deleted[0].bytes, None);
        assert_eq!(f.summary(), "60 files created, 2 modified, 1 deleted");
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["counts"]["created"], 60);
        assert!(v["deleted"][0].get("bytes").is_none());
        assert!(v.get("scan_stopped").is_none());
    }

    #[test]
    fn small_changes_are_not_truncated() {
        let f = FilesChanged::from_changes(changes(0, 1, 0), 50, true).unwrap();
        assert!(!f.truncated);
        assert_eq!(f.counts, None);
        assert_eq!(f.summary(), "1 file modified");
        let v = serde_json::to_value(&f).unwrap();
        assert!(v.get("counts").is_none());
        assert_eq!(v["scan_stopped"], true);
        assert_eq!(v["modified"][0]["bytes"], 2);
    }

    #[test]
    fn brief_names_a_few_and_counts_the_rest() {
        let f = FilesChanged::from_changes(changes(60, 1, 2), 50, false).unwrap();
        assert_eq!(
            f.brief(3),
            "files: created c000, c001, c002 (+57 more); modified m0; deleted d0, d1"
        );
    }

    #[test]
    fn reads_are_relative_under_the_working_directory_once_each_and_counted_past_the_list() {
        let cwd = std::path::Path::new("/w/proj");
        let paths = vec![
            "/w/proj/data/orders.csv".to_string(),
            "/etc/hostname".to_string(),
            "/w/proj/data/orders.csv".to_string(),
        ];
        let f = FilesChanged::with_reads(None, paths, 2, cwd).unwrap();
        assert_eq!(f.read, ["data/orders.csv", "/etc/hostname"]);
        assert!(!f.truncated && f.counts.is_none() && !f.changed());
        assert_eq!(f.read_brief().unwrap(), "read data/orders.csv and 1 more");
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["read"][0], "data/orders.csv");
        assert!(v.get("counts").is_none());

        let many: Vec<String> = (0..50).map(|i| format!("/w/proj/f{i:02}")).collect();
        let f = FilesChanged::with_reads(None, many, 60, cwd).unwrap();
        assert_eq!(f.read.len(), 50);
        assert!(f.truncated);
        assert_eq!(f.counts.unwrap().read, 60);
        assert_eq!(f.read_brief().unwrap(), "read f00 and 59 more");
        assert!(
            f.brief(2).contains("read f00, f01 (+58 more)"),
            "{}",
            f.brief(2)
        );

        // Nothing read: what changed stays as it was.
        assert_eq!(FilesChanged::with_reads(None, vec![], 0, cwd), None);
    }
}
