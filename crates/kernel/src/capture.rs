//! Output capture as docs/result.md ("output") describes it: count everything,
//! keep a head (40% of the cap) and a tail (60%), and once the cap is passed
//! write the whole cleaned stream to a spill file as it goes. Memory is O(cap)
//! whatever a cell prints.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use toolcell_redact::HeadTail;

/// What a capture produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Captured {
    /// The text to return: everything, or head + truncation notice + tail.
    pub text: String,
    /// True when any byte of the stream was left out: folded, a long line
    /// cut, or the middle cut.
    pub truncated: bool,
    /// True when the middle was cut (head and tail kept).
    pub cut: bool,
    /// Bytes of stream text included in `text` (notice excluded).
    pub bytes_captured: u64,
    /// Bytes the stream had in all.
    pub bytes_total: u64,
    /// `bytes_total - bytes_captured`.
    pub bytes_omitted: u64,
    /// The spill file holding the whole stream, when it was cut.
    pub spill_path: Option<PathBuf>,
    /// Why the spill file could not be written, if it could not.
    pub spill_error: Option<String>,
    /// True when the spill file itself hit its size cap.
    pub spill_capped: bool,
    /// What folding left out (runs of same-shape lines, long-line middles).
    pub folded: crate::fold::FoldStats,
}

/// Where and how big spill files are.
#[derive(Debug, Clone)]
pub struct SpillTarget {
    /// Directory for spill files (created 0700).
    pub dir: PathBuf,
    /// File name prefix, e.g. `k-3f9…-cell12-stdout`. The file is
    /// `<prefix>-<random>.txt`, named only when the cap is first passed (most
    /// cells never spill, so they never pay for the random suffix).
    pub prefix: String,
    /// Most bytes written to the file.
    pub cap_bytes: u64,
}

/// Head/tail capture of one stream of one cell: the cut itself is
/// [`HeadTail`] (shared with every other head/tail cut); this adds the spill
/// file.
#[derive(Debug)]
pub struct Capture {
    kept: HeadTail,
    /// Folds repetition before the cut; `None` when folding is off (or,
    /// with `"auto"`, until the stream passes its cap).
    folder: Option<crate::fold::Folder>,
    /// With `"auto"`: the settings a folder starts with once the stream
    /// passes its cap.
    fold_later: Option<crate::fold::FoldOptions>,
    /// Bytes of the stream so far, before folding.
    raw_total: u64,
    cap: usize,
    /// Folded output of the current push, handed to `kept` at its end:
    /// its text, and the `[start, end)` ranges of it that are markers.
    folded: String,
    folded_markers: Vec<(usize, usize)>,
    spill_target: Option<SpillTarget>,
    spill: Option<Spill>,
    spill_error: Option<String>,
}

#[derive(Debug)]
struct Spill {
    path: PathBuf,
    file: File,
    written: u64,
    cap: u64,
    capped: bool,
    /// The newest bytes, held back from the file (at most the notice's
    /// length) so that the capped notice fits within `cap` if it is needed.
    pending: Vec<u8>,
}

/// What ends a spill file that hit its cap.
fn capped_notice(cap: u64) -> String {
    format!(
        "\n\n... [spill file capped at {cap} bytes; the rest of the output was not saved] ...\n"
    )
}

impl Spill {
    /// Bytes kept back for the notice.
    fn reserve(&self) -> usize {
        let cap = usize::try_from(self.cap).unwrap_or(usize::MAX);
        capped_notice(self.cap).len().min(cap)
    }

    /// Appends `bytes`; the file never grows past `cap`, notice included.
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.capped || bytes.is_empty() {
            return Ok(());
        }
        let accepted = self.written + self.pending.len() as u64;
        if accepted + bytes.len() as u64 <= self.cap {
            self.pending.extend_from_slice(bytes);
            let keep = self.reserve();
            if self.pending.len() > keep {
                // Flush on a character boundary, so a later cut can stop here.
                let mut n = self.pending.len() - keep;
                while n > 0 && (self.pending[n] & 0xC0) == 0x80 {
                    n -= 1;
                }
                self.file.write_all(&self.pending[..n])?;
                self.written += n as u64;
                self.pending.drain(..n);
            }
            return Ok(());
        }
        // Over the cap: what fits before the notice, then the notice.
        self.capped = true;
        let notice = capped_notice(self.cap);
        let room = usize::try_from(
            self.cap
                .saturating_sub(self.reserve() as u64)
                .saturating_sub(self.written),
        )
        .unwrap_or(usize::MAX);
        let mut joined = std::mem::take(&mut self.pending);
        // One byte past the cut too, to see whether it splits a character.
        let more = room
            .saturating_sub(joined.len())
            .saturating_add(1)
            .min(bytes.len());
        joined.extend_from_slice(&bytes[..more]);
        let mut end = room.min(joined.len());
        // Never cut a UTF-8 character in the file either.
        while end > 0 && end < joined.len() && (joined[end] & 0xC0) == 0x80 {
            end -= 1;
        }
        self.file.write_all(&joined[..end])?;
        self.written += end as u64;
        let left = usize::try_from(self.cap.saturating_sub(self.written)).unwrap_or(usize::MAX);
        let notice = &notice.as_bytes()[..notice.len().min(left)];
        self.file.write_all(notice)?;
        self.written += notice.len() as u64;
        Ok(())
    }

    /// Writes what was held back and flushes.
    fn finish(&mut self) -> std::io::Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.file.write_all(&pending)?;
        self.written += pending.len() as u64;
        self.file.flush()
    }
}

fn open_spill(target: &SpillTarget) -> std::io::Result<(PathBuf, File)> {
    // The spill dir is verified private (ours, 0700, no planted link) and
    // the file made inside it through its fd (O_EXCL | O_NOFOLLOW, 0600).
    let dir = toolcell_sys::private_dir::PrivateDir::ensure(&target.dir)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()))?;
    let rand = toolcell_protocol::random_hex(4)
        .map_err(|e| std::io::Error::other(format!("no randomness for a spill file name: {e}")))?;
    let name = format!("{}-{rand}.txt", target.prefix);
    let file = dir
        .create_file(&name)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok((dir.path().join(name), file))
}

/// Saves a whole text that is about to be shown cut (a traceback) to a
/// spill file of `target`, within its cap: the file's path, and whether the
/// cap cut it.
pub fn spill_whole(target: &SpillTarget, text: &str) -> Result<(PathBuf, bool), String> {
    let (path, file) = open_spill(target).map_err(|e| {
        format!(
            "cannot create a spill file in {}: {e}",
            target.dir.display()
        )
    })?;
    let mut spill = Spill {
        path,
        file,
        written: 0,
        cap: target.cap_bytes,
        capped: false,
        pending: Vec::new(),
    };
    spill
        .write(text.as_bytes())
        .and_then(|()| spill.finish())
        .map_err(|e| e.to_string())?;
    Ok((spill.path, spill.capped))
}

impl Capture {
    /// A capture keeping `cap` bytes; spills to `spill` once over the cap.
    pub fn new(cap: usize, spill: Option<SpillTarget>) -> Self {
        Self::with_fold(cap, spill, crate::fold::FoldOptions::off())
    }

    /// [`Capture::new`] that also folds runs of same-shape lines and cuts
    /// long lines ([`crate::fold`]) before the head/tail cut; the spill
    /// file starts before anything is left out, so it has the whole text.
    pub fn with_fold(
        cap: usize,
        spill: Option<SpillTarget>,
        fold: crate::fold::FoldOptions,
    ) -> Self {
        use crate::fold::FoldWhen;
        let active = fold.active();
        Self {
            kept: HeadTail::new(cap),
            folder: (active && fold.when == FoldWhen::Always)
                .then(|| crate::fold::Folder::bounded(fold, cap)),
            fold_later: (active && fold.when == FoldWhen::OverCap).then_some(fold),
            raw_total: 0,
            cap,
            folded: String::new(),
            folded_markers: Vec::new(),
            spill_target: spill,
            spill: None,
            spill_error: None,
        }
    }

    /// Bytes seen so far.
    pub fn total(&self) -> u64 {
        self.raw_total
    }

    /// Adds cleaned text.
    pub fn push(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if let Some(opts) = self.fold_later
            && self.raw_total + text.len() as u64 > self.cap as u64
        {
            // `"auto"`, and the stream no longer fits: fold it from its
            // start. Nothing was left out yet, so `kept` holds all of it.
            self.fold_later = None;
            let mut so_far = String::with_capacity(self.raw_total as usize + text.len());
            so_far.push_str(self.kept.head());
            let (a, b) = self.kept.tail();
            let mut tail = Vec::with_capacity(a.len() + b.len());
            tail.extend_from_slice(a);
            tail.extend_from_slice(b);
            // The head ends on a character boundary and nothing was
            // dropped, so the tail is whole characters.
            so_far.push_str(&String::from_utf8_lossy(&tail));
            so_far.push_str(text);
            self.kept = HeadTail::new(self.cap);
            self.raw_total = 0;
            self.folder = Some(crate::fold::Folder::bounded(opts, self.cap));
            self.push(&so_far);
            return;
        }
        if self.folder.is_none() {
            self.raw_total += text.len() as u64;
            self.write_spill(text);
            if self.spill.is_none() && self.spill_error.is_none() && self.kept.would_drop(text) {
                self.start_spill(text);
            }
            self.kept.push(text);
            return;
        }
        // Where in `text` the spill file's share starts (written in one go
        // at the end: one write per push, not one per line).
        let mut spill_from = self.spill.is_some().then_some(0);
        let mut offset = 0;
        for segment in text.split_inclusive('\n') {
            // Before anything is left out (cut by the cap, folded, or a
            // long line cut), the whole text so far is in `kept` and the
            // folder's pending lines: the spill file starts with them.
            if self.spill.is_none() && self.spill_error.is_none() && self.spill_target.is_some() {
                let over_cap = self.raw_total + segment.len() as u64 > self.cap as u64;
                let omits = over_cap || self.folder.as_mut().is_some_and(|f| f.will_omit(segment));
                if omits {
                    self.start_spill("");
                    if self.spill.is_some() {
                        spill_from = Some(offset);
                    }
                }
            }
            self.raw_total += segment.len() as u64;
            offset += segment.len();
            if let Some(folder) = &mut self.folder {
                let (out, markers) = (&mut self.folded, &mut self.folded_markers);
                folder.push_segment(segment, &mut |p| collect(out, markers, p));
            }
        }
        if let Some(from) = spill_from {
            self.write_spill(&text[from..]);
        }
        self.keep_folded();
    }

    /// Hands the folded output of this push to `kept`, markers as markers.
    fn keep_folded(&mut self) {
        let mut at = 0;
        for &(a, b) in &self.folded_markers {
            self.kept.push(&self.folded[at..a]);
            self.kept.push_marker(&self.folded[a..b]);
            at = b;
        }
        self.kept.push(&self.folded[at..]);
        self.folded.clear();
        self.folded_markers.clear();
    }

    fn write_spill(&mut self, text: &str) {
        if let Some(spill) = &mut self.spill
            && let Err(e) = spill.write(text.as_bytes())
        {
            self.spill_error = Some(e.to_string());
            self.spill = None;
        }
    }

    /// Something is about to be left out: everything so far is in head +
    /// tail (nothing was dropped yet) and the folder's pending text, so the
    /// file starts with them, then `pending`.
    fn start_spill(&mut self, pending: &str) {
        let Some(target) = &self.spill_target else {
            return;
        };
        match open_spill(target) {
            Ok((path, file)) => {
                let mut spill = Spill {
                    path,
                    file,
                    written: 0,
                    cap: target.cap_bytes,
                    capped: false,
                    pending: Vec::new(),
                };
                let (a, b) = self.kept.tail();
                let mut res = spill
                    .write(self.kept.head().as_bytes())
                    .and_then(|()| spill.write(a))
                    .and_then(|()| spill.write(b));
                // Lines the folder gave out during this push, not yet in
                // `kept`, come before its pending ones.
                res = res.and_then(|()| spill.write(self.folded.as_bytes()));
                if let Some(folder) = &self.folder {
                    for piece in folder.pending_raw() {
                        res = res.and_then(|()| spill.write(piece.as_bytes()));
                    }
                }
                let res = res.and_then(|()| spill.write(pending.as_bytes()));
                match res {
                    Ok(()) => self.spill = Some(spill),
                    Err(e) => self.spill_error = Some(e.to_string()),
                }
            }
            Err(e) => {
                self.spill_error = Some(format!(
                    "cannot create a spill file in {}: {e}",
                    target.dir.display()
                ));
            }
        }
    }

    /// Ends the capture.
    pub fn finish(mut self) -> Captured {
        let mut stats = crate::fold::FoldStats::default();
        if let Some(mut folder) = self.folder.take() {
            let (out, markers) = (&mut self.folded, &mut self.folded_markers);
            folder.finish(&mut |p| collect(out, markers, p));
            self.keep_folded();
            stats = folder.stats();
        }
        let mut spill_capped = false;
        let spill_path = self.spill.take().and_then(|mut s| {
            spill_capped = s.capped;
            match s.finish() {
                Ok(()) => Some(s.path),
                Err(e) => {
                    self.spill_error = Some(e.to_string());
                    None
                }
            }
        });
        let kept = self.kept.finish_parts();
        // Counts are the stream's: what of it the text holds (fold markers
        // and the notice are not the stream's), of all it wrote. The notice
        // shows the same figures as the result's fields.
        let captured = kept
            .captured()
            .saturating_sub(kept.markers)
            .min(self.raw_total);
        let omitted = self.raw_total - captured;
        let cut = kept.truncated;
        let left_out = cut || stats.lines_folded > 0 || stats.lines_cut > 0;
        Captured {
            text: kept.render("OUTPUT", omitted, self.raw_total),
            truncated: left_out,
            cut,
            bytes_captured: captured,
            bytes_total: self.raw_total,
            bytes_omitted: omitted,
            spill_path,
            spill_error: self.spill_error,
            spill_capped,
            folded: stats,
        }
    }
}

/// Appends a folder's piece to `out`, noting where a marker is.
fn collect(out: &mut String, markers: &mut Vec<(usize, usize)>, piece: crate::fold::Piece<'_>) {
    let start = out.len();
    out.push_str(piece.as_str());
    if let crate::fold::Piece::Marker(_) = piece {
        markers.push((start, out.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(cap: usize, chunks: &[&str], spill: Option<SpillTarget>) -> Captured {
        let mut c = Capture::new(cap, spill);
        for ch in chunks {
            c.push(ch);
        }
        c.finish()
    }

    #[test]
    fn under_the_cap_everything_is_kept() {
        let r = run(100, &["hello ", "world"], None);
        assert_eq!(r.text, "hello world");
        assert!(!r.truncated);
        assert_eq!(
            (r.bytes_captured, r.bytes_total, r.bytes_omitted),
            (11, 11, 0)
        );
    }

    #[test]
    fn over_the_cap_head_and_tail_with_notice() {
        let text: String = (0..100)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let r = run(10, &[&text], None);
        assert!(r.truncated);
        assert!(r.text.starts_with(
            "abcd\n\n... [OUTPUT TRUNCATED - 90 bytes omitted out of 100 total] ...\n\n"
        ));
        assert!(r.text.ends_with(&text[94..]));
        assert_eq!(
            (r.bytes_captured, r.bytes_total, r.bytes_omitted),
            (10, 100, 90)
        );
    }

    #[test]
    fn the_spill_file_has_the_whole_stream_and_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let target = SpillTarget {
            dir: tmp.path().join("spill"),
            prefix: "x".into(),
            cap_bytes: 1 << 20,
        };
        let chunks: Vec<String> = (0..50).map(|i| format!("line {i}\n")).collect();
        let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
        let r = run(40, &refs, Some(target));
        let path = r.spill_path.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), chunks.concat());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(tmp.path().join("spill"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dmode, 0o700);
    }

    #[test]
    fn the_spill_file_is_capped() {
        let tmp = tempfile::tempdir().unwrap();
        let target = SpillTarget {
            dir: tmp.path().to_path_buf(),
            prefix: "x".into(),
            cap_bytes: 200,
        };
        let big = "y".repeat(1000);
        let r = run(10, &[&big], Some(target));
        assert!(r.spill_capped);
        let saved = std::fs::read_to_string(r.spill_path.unwrap()).unwrap();
        // The notice fits within the cap: the file is exactly the cap.
        let notice = capped_notice(200);
        assert!(notice.contains("spill file capped at 200 bytes"));
        assert_eq!(saved.len(), 200);
        assert_eq!(saved, "y".repeat(200 - notice.len()) + &notice);
    }

    #[test]
    fn a_stream_exactly_at_the_spill_cap_is_saved_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let target = SpillTarget {
            dir: tmp.path().to_path_buf(),
            prefix: "x".into(),
            cap_bytes: 200,
        };
        let chunks = ["a".repeat(150), "b".repeat(50)];
        let r = run(10, &[&chunks[0], &chunks[1]], Some(target));
        assert!(!r.spill_capped);
        let saved = std::fs::read_to_string(r.spill_path.unwrap()).unwrap();
        assert_eq!(saved, chunks.concat());
    }

    proptest! {
        #[test]
        fn spill_files_never_pass_their_cap_nor_split_characters(
            parts in proptest::collection::vec("[a-zé€😀\n]{0,40}", 1..30),
            spill_cap in 80u64..400,
        ) {
            let tmp = tempfile::tempdir().unwrap();
            let target = SpillTarget {
                dir: tmp.path().to_path_buf(),
                prefix: "x".into(),
                cap_bytes: spill_cap,
            };
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let r = run(4, &refs, Some(target));
            let whole = parts.concat();
            if let Some(path) = r.spill_path {
                let saved = std::fs::read(path).unwrap();
                prop_assert!(saved.len() as u64 <= spill_cap);
                let saved = String::from_utf8(saved).unwrap();
                if r.spill_capped {
                    let notice = capped_notice(spill_cap);
                    let kept = saved.strip_suffix(notice.as_str()).unwrap();
                    prop_assert!(whole.starts_with(kept));
                } else {
                    prop_assert_eq!(saved, whole);
                }
            }
        }
    }

    #[test]
    fn no_spill_file_under_the_cap() {
        let tmp = tempfile::tempdir().unwrap();
        let target = SpillTarget {
            dir: tmp.path().to_path_buf(),
            prefix: "x".into(),
            cap_bytes: 100,
        };
        let r = run(100, &["short"], Some(target));
        assert_eq!(r.spill_path, None);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    proptest! {
        #[test]
        fn cuts_never_split_characters_and_counts_add_up(
            parts in proptest::collection::vec("[a-zé€😀\n]{0,12}", 0..20),
            cap in 1usize..40,
        ) {
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let r = run(cap, &refs, None);
            let total: usize = parts.iter().map(String::len).sum();
            prop_assert_eq!(r.bytes_total, total as u64);
            prop_assert_eq!(r.bytes_captured + r.bytes_omitted, r.bytes_total);
            prop_assert!(r.bytes_captured as usize <= cap);
            let whole = parts.concat();
            if !r.truncated {
                prop_assert_eq!(&r.text, &whole);
            } else {
                let (head, tail) = r.text.split_once("\n\n... [OUTPUT TRUNCATED").unwrap();
                prop_assert!(whole.starts_with(head));
                let tail = tail.split_once("] ...\n\n").unwrap().1;
                prop_assert!(whole.ends_with(tail));
            }
        }
    }

    proptest! {
        /// With folding, whatever is left out (folded, cut, or beyond the
        /// cap), the spill file has the whole stream; when nothing was
        /// left out, the text is the stream itself.
        #[test]
        fn folding_never_loses_text(
            lines in proptest::collection::vec(
                prop_oneof!["row [0-9]{1,3}", "[a-c]{0,30}", "x{0,50}"],
                0..60,
            ),
            split in proptest::collection::vec(1usize..40, 1..6),
            cap in 20usize..400,
            auto in any::<bool>(),
        ) {
            use crate::fold::{FoldOptions, FoldWhen, Folder, Piece};
            let whole: String = lines.iter().map(|l| format!("{l}\n")).collect();
            let tmp = tempfile::tempdir().unwrap();
            let target = SpillTarget { dir: tmp.path().to_path_buf(), prefix: "f".into(), cap_bytes: 1 << 20 };
            let when = if auto { FoldWhen::OverCap } else { FoldWhen::Always };
            let opts = FoldOptions { max_line_chars: 20, when, ..FoldOptions::default() };
            let mut c = Capture::with_fold(cap, Some(target), opts);
            let mut rest = whole.as_str();
            let mut i = 0;
            while !rest.is_empty() {
                let mut n = split[i % split.len()].min(rest.len());
                while !rest.is_char_boundary(n) {
                    n += 1;
                }
                c.push(&rest[..n]);
                rest = &rest[n..];
                i += 1;
            }
            let r = c.finish();
            prop_assert_eq!(r.bytes_total, whole.len() as u64);
            match &r.spill_path {
                Some(p) => prop_assert_eq!(std::fs::read_to_string(p).unwrap(), whole.clone()),
                None => prop_assert_eq!(&r.text, &whole),
            }

            // The reference: the whole text folded in one go (with "auto",
            // only when it is over the cap), each byte marked as the
            // stream's or a marker's, then cut as a whole text.
            let mut folded = String::new();
            let mut stream_byte: Vec<bool> = Vec::new();
            if auto && whole.len() <= cap {
                folded.push_str(&whole);
                stream_byte.resize(whole.len(), true);
            } else {
                let mut f = Folder::bounded(opts, cap);
                let mut add = |p: Piece<'_>| {
                    folded.push_str(p.as_str());
                    stream_byte.extend(std::iter::repeat_n(matches!(p, Piece::Text(_)), p.as_str().len()));
                };
                f.push(&whole, &mut add);
                f.finish(&mut add);
            }
            let count = |r: std::ops::Range<usize>| stream_byte[r].iter().filter(|&&b| b).count() as u64;
            let (captured, expect_text) = match toolcell_redact::HeadTailCut::plan(&folded, cap, toolcell_redact::Unit::Bytes) {
                None => (count(0..folded.len()), folded.clone()),
                Some(cut) => {
                    let captured = count(0..cut.head_end) + count(cut.tail_start..folded.len());
                    let notice = toolcell_redact::truncation_notice("OUTPUT", whole.len() as u64 - captured, whole.len() as u64);
                    (captured, format!("{}{notice}{}", cut.head(&folded), cut.tail(&folded)))
                }
            };
            prop_assert_eq!(&r.text, &expect_text);
            prop_assert_eq!(r.bytes_captured, captured);
            prop_assert_eq!(r.bytes_omitted, whole.len() as u64 - captured);
            prop_assert_eq!(r.truncated, captured < whole.len() as u64);
            if auto && whole.len() <= cap {
                prop_assert!(!r.truncated);
            }
        }
    }

    /// A fold followed by a cut whose dropped middle holds fold markers:
    /// the counts are the stream's bytes in `text`, never less.
    #[test]
    fn markers_in_the_cut_middle_do_not_eat_the_count() {
        // Runs of 8 same-shape lines (2 folded each) between other lines:
        // the folded text is longer than the stream, and over the cap.
        let mut whole = String::new();
        for e in 0..600 {
            for b in 0..8 {
                whole.push_str(&format!("batch {b} loss 0.{:04}\n", (e * 7 + b) % 10_000));
            }
            whole.push_str(&format!("== epoch {e} ==\n"));
        }
        let mut c = Capture::with_fold(50_000, None, crate::fold::FoldOptions::auto());
        for chunk in whole.as_bytes().chunks(4096) {
            c.push(std::str::from_utf8(chunk).unwrap());
        }
        let r = c.finish();
        assert!(r.cut && r.truncated);
        // What of the stream is shown: the text less the notice and markers.
        let notice = toolcell_redact::truncation_notice("OUTPUT", r.bytes_omitted, r.bytes_total);
        assert!(
            r.text.contains(&notice),
            "the notice shows the result's figures"
        );
        let shown: usize = r
            .text
            .replace(&notice, "")
            .split_inclusive('\n')
            .filter(|l| !l.starts_with("... ["))
            .map(str::len)
            .sum();
        // The head and tail may each start or end inside a marker line.
        let slack = 2 * 200;
        assert!(
            (r.bytes_captured as i64 - shown as i64).unsigned_abs() <= slack,
            "captured {} vs shown {shown}",
            r.bytes_captured
        );
        assert!(r.bytes_captured > 20_000, "{}", r.bytes_captured);
        assert_eq!(r.bytes_captured + r.bytes_omitted, r.bytes_total);
    }

    /// With `max_line_chars = 0` ("no limit") folding still holds O(cap):
    /// a 20 MB line is cut at the cap, not buffered whole.
    #[test]
    fn an_unlimited_line_is_still_bounded_by_the_cap() {
        let opts = crate::fold::FoldOptions {
            max_line_chars: 0,
            ..crate::fold::FoldOptions::auto()
        };
        let mut c = Capture::with_fold(1000, None, opts);
        let chunk = "x".repeat(1 << 16);
        for _ in 0..320 {
            c.push(&chunk);
            let f = c.folder.as_ref().map_or(0, crate::fold::Folder::held_bytes);
            assert!(f <= 8 * 1000, "the folder holds {f} bytes");
        }
        c.push("\n");
        let r = c.finish();
        assert_eq!(r.bytes_total, 320 * (1 << 16) + 1);
        assert!(r.truncated);
        assert!(r.text.len() < 1200, "{}", r.text.len());
    }
}
