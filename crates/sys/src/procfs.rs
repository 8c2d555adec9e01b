//! What `/proc/<pid>/stat` says of a process: its state, its parent and
//! when it started, read in one place for every layer (process trees,
//! cgroups, lineage). A process that is gone reads as `None`/`false`.

/// The fields of one `stat` line toolcell uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    /// `R`, `S`, `D`, `Z`, `X`, …
    state: char,
    ppid: i32,
    /// Clock ticks since boot (field 22).
    start: u64,
}

/// Parses a `stat` line. The command name is in parentheses and may
/// contain spaces or parentheses itself: the fields after the last `)` are
/// fixed (state, ppid, …, starttime the 20th).
fn parse(stat: &str) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let start = fields.nth(17)?.parse().ok()?;
    Some(Stat { state, ppid, start })
}

fn stat(pid: u32) -> Option<Stat> {
    parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// One process seen in `/proc`: its parent and when it started.
pub(crate) struct Proc {
    pub(crate) pid: i32,
    pub(crate) ppid: i32,
    pub(crate) start: u64,
}

/// Every process visible in `/proc` (one read of each `stat`).
pub(crate) fn proc_table() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let s = stat(pid.unsigned_abs())?;
            Some(Proc {
                pid,
                ppid: s.ppid,
                start: s.start,
            })
        })
        .collect()
}

/// The parent of `pid` now (field 4 of its `stat`).
pub fn parent(pid: u32) -> Option<u32> {
    u32::try_from(stat(pid)?.ppid).ok()
}

/// When `pid` started (clock ticks since boot, field 22 of its `stat`).
pub fn start_time(pid: u32) -> Option<u64> {
    Some(stat(pid)?.start)
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|s| s.state != 'Z' && s.state != 'X')
}

/// Whether `pid` has exited but is not reaped yet: a zombie (`Z`, or the
/// `X` of one being reaped) in its `/proc/<pid>/stat`. Its entry, start
/// time included, lasts until its parent reaps it; it runs nothing.
pub fn is_zombie(pid: u32) -> bool {
    stat(pid).is_some_and(|s| s.state == 'Z' || s.state == 'X')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped() {
        let line = "42 (a (b) c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0";
        assert_eq!(
            parse(line),
            Some(Stat {
                state: 'S',
                ppid: 7,
                start: 12345
            })
        );
        assert_eq!(parse("42 (x"), None);
    }

    #[test]
    fn this_process_is_alive_and_its_parent_is_known() {
        let me = std::process::id();
        assert!(alive(me));
        assert!(!is_zombie(me));
        assert_eq!(parent(me), Some(std::os::unix::process::parent_id()));
        assert!(start_time(me).is_some());
        assert!(proc_table().iter().any(|p| p.pid.unsigned_abs() == me));
    }
}
