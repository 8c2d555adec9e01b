//! Byte scans on the hot paths, with an AVX2 version chosen at run time
//! (`is_x86_feature_detected!`) and a portable version everywhere else.
//! Every function here has a scalar reference in [`scalar`]; the tests
//! compare the two on arbitrary bytes.

/// True for bytes the ANSI fast path cannot copy verbatim: C0 controls other
/// than `\n`/`\t`, DEL, and every non-ASCII byte.
#[inline(always)]
pub(crate) fn is_special(b: u8) -> bool {
    (b < 0x20 && b != b'\n' && b != b'\t') || b >= 0x7f
}

/// Whether the AVX2 versions may run on this CPU (cached by std).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Appends to `out` the longest prefix of `input` made of printable ASCII,
/// `\n` and `\t` (no byte [`is_special`]) and returns its length. One pass:
/// each block is checked and copied together.
#[inline]
pub(crate) fn copy_clean_prefix(input: &[u8], out: &mut String) -> usize {
    #[cfg(target_arch = "x86_64")]
    if input.len() >= 32 && has_avx2() {
        // SAFETY: AVX2 is available on this CPU (checked just above).
        return unsafe { avx2::copy_clean_prefix(input, out) };
    }
    scalar::copy_clean_prefix(input, out)
}

/// The ground state's fast path of the ANSI stripper. From `input[i..]`,
/// when it starts with text (no byte [`is_special`]), appends clean runs to
/// `out` and skips complete 7-bit CSI sequences (`ESC [`, parameter and
/// intermediate bytes 0x20–0x3F, a final byte 0x40–0x7E); returns where it
/// stopped: at a byte that needs the state machine (another special byte,
/// or the `ESC` of a CSI it cannot see the end of), or in the input's last
/// [`GROUND_TAIL`] bytes, which the caller's byte loop finishes. The AVX2
/// version walks 64-byte blocks by bitmask (each run and each CSI ends at a
/// `tzcnt`); without AVX2 it returns `i` (the byte loop does all).
#[inline]
pub(crate) fn ground_run(input: &[u8], i: usize, out: &mut String) -> usize {
    // Entered at text only: at anything else the caller's byte loop is
    // cheaper (progress bars alternate CSI, UTF-8 runs and `\r` every few
    // bytes, and classifying a block for each would cost more).
    if input.get(i).is_none_or(|&c| is_special(c)) {
        return i;
    }
    #[cfg(target_arch = "x86_64")]
    if input.len().saturating_sub(i) >= GROUND_TAIL && has_avx2() {
        // SAFETY: AVX2 is available on this CPU (checked just above).
        return unsafe { avx2::ground_run(input, i, out) };
    }
    let _ = out;
    i
}

/// [`ground_run`] walks blocks of 64 bytes while this many are left (a text
/// run is copied with 64-byte load/stores from anywhere in its block).
const GROUND_TAIL: usize = 128;

/// Bitmasks of one 64-byte block for [`ground_run`] (bit `i`: byte `i`).
#[derive(Clone, Copy, Debug, Default)]
struct GroundMasks {
    /// Bytes that are [`is_special`].
    special: u64,
    /// ESC followed by `[`.
    csi: u64,
    /// Bytes that are not CSI parameter/intermediate bytes (0x20–0x3F).
    not_param: u64,
    /// CSI final bytes (0x40–0x7E).
    fin: u64,
}

/// Index of the first `=` or `:` in `b` at or after `at` (`None` if none):
/// like `memchr2`, but the AVX2 version keeps a bitmask of a 64-byte block
/// between calls, so dense hits (code has one per ~49 bytes) do not restart
/// a vector search each time.
#[derive(Debug, Default)]
pub(crate) struct SepFinder {
    /// Start of the block `mask` describes.
    base: usize,
    /// Separators in `b[from..scanned]`, as bits from `base`.
    mask: u64,
    from: usize,
    scanned: usize,
}

impl SepFinder {
    /// Next `=`/`:` at or after `at`. Any `at` is answered; the fast case
    /// is `at` growing (each call's result + 1), as the redactor searches.
    #[inline]
    pub(crate) fn next(&mut self, b: &[u8], at: usize) -> Option<usize> {
        if at < self.from || at > self.scanned {
            // Outside what the mask covers: start over at `at`.
            *self = Self {
                base: at,
                mask: 0,
                from: at,
                scanned: at,
            };
        } else {
            // Drop the bits before `at` (`at - base <= 64`).
            let d = at - self.base;
            self.mask = if d >= 64 { 0 } else { self.mask & (!0u64 << d) };
            self.from = at;
        }
        loop {
            if self.mask != 0 {
                return Some(self.base + self.mask.trailing_zeros() as usize);
            }
            if !self.refill(b) {
                return None;
            }
        }
    }

    /// Next `=`/`:` at or after `at` for which `keep` holds: like calling
    /// [`next`](Self::next) until `keep` says yes, but the separators it
    /// rejects are skipped in one loop over the mask (this runs at every
    /// separator of the text).
    #[inline]
    pub(crate) fn next_where(
        &mut self,
        b: &[u8],
        at: usize,
        mut keep: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        let mut p = self.next(b, at)?;
        loop {
            if keep(p) {
                return Some(p);
            }
            // `p` is the mask's lowest bit: drop it; the mask now covers
            // `p + 1..scanned`.
            self.mask &= self.mask - 1;
            self.from = p + 1;
            while self.mask == 0 {
                if !self.refill(b) {
                    return None;
                }
            }
            p = self.base + self.mask.trailing_zeros() as usize;
        }
    }

    /// Classify the next block (after `scanned`) into `mask`; false at the
    /// haystack's end.
    #[inline]
    fn refill(&mut self, b: &[u8]) -> bool {
        {
            if self.scanned >= b.len() {
                return false;
            }
            #[cfg(target_arch = "x86_64")]
            if self.scanned + 64 <= b.len() && has_avx2() {
                // SAFETY: AVX2 is available on this CPU (checked just above);
                // the block is in bounds (checked by the function).
                self.mask = unsafe { avx2::sep_mask64(b, self.scanned) };
                self.base = self.scanned;
                self.from = self.scanned;
                self.scanned += 64;
                return true;
            }
            let end = (self.scanned + 64).min(b.len());
            self.mask = scalar::sep_mask(&b[self.scanned..end]);
            self.base = self.scanned;
            self.from = self.scanned;
            self.scanned = end;
            true
        }
    }
}

/// The reference implementations (and the fallback on CPUs without AVX2).
pub(crate) mod scalar {
    use super::is_special;

    /// Length of the longest prefix of `bytes` with no byte [`is_special`].
    #[inline]
    pub(crate) fn clean_prefix_len(bytes: &[u8]) -> usize {
        const W: usize = 32;
        let mut i = 0;
        for chunk in bytes.chunks_exact(W) {
            // Written as a branch-free fold so that it vectorizes.
            let any = chunk.iter().fold(false, |acc, &b| acc | is_special(b));
            if any {
                break;
            }
            i += W;
        }
        while i < bytes.len() && !is_special(bytes[i]) {
            i += 1;
        }
        i
    }

    /// [`super::copy_clean_prefix`], scan then copy.
    #[inline]
    pub(crate) fn copy_clean_prefix(input: &[u8], out: &mut String) -> usize {
        let n = clean_prefix_len(input);
        // Only printable ASCII, `\n` and `\t`: always valid UTF-8.
        if let Ok(s) = std::str::from_utf8(&input[..n]) {
            out.push_str(s);
        }
        n
    }

    /// [`super::ground_run`], byte by byte (the same stopping points: the
    /// same 64-byte blocks from `start`, while 128 bytes are left).
    #[cfg(test)]
    pub(crate) fn ground_run(input: &[u8], start: usize, out: &mut String) -> usize {
        let n = input.len();
        let mut i = start.min(n);
        if input.get(i).is_none_or(|&c| is_special(c)) {
            return i;
        }
        let push = |out: &mut String, b: &[u8]| {
            // Only printable ASCII, `\n` and `\t`: always valid UTF-8.
            if let Ok(s) = std::str::from_utf8(b) {
                out.push_str(s);
            }
        };
        let mut block_end = i + 64;
        // Walk byte by byte; the walk may only go on in a block that
        // `ground_run` would classify (`block start + 128 <= n`).
        let mut run = i;
        let mut esc: Option<usize> = None;
        loop {
            while i >= block_end {
                block_end += 64;
            }
            if block_end - 64 + super::GROUND_TAIL > n {
                return match esc {
                    Some(e) => e,
                    None => {
                        push(out, &input[run..i]);
                        i
                    }
                };
            }
            let c = input[i];
            match esc {
                None => {
                    if !is_special(c) {
                        i += 1;
                        continue;
                    }
                    push(out, &input[run..i]);
                    if c != 0x1b || input[i + 1] != b'[' {
                        return i;
                    }
                    esc = Some(i);
                    i += 2;
                }
                Some(e) => {
                    if c & 0xe0 == 0x20 {
                        i += 1;
                        continue;
                    }
                    if !(0x40..=0x7e).contains(&c) {
                        return e;
                    }
                    esc = None;
                    i += 1;
                    run = i;
                }
            }
        }
    }

    /// Bit `i` set when `b[i]` is `=` or `:` (`b.len() <= 64`).
    #[inline]
    pub(crate) fn sep_mask(b: &[u8]) -> u64 {
        let mut m = 0u64;
        for (i, &c) in b.iter().enumerate().take(64) {
            m |= u64::from(c == b'=' || c == b':') << i;
        }
        m
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256i, _mm256_and_si256, _mm256_andnot_si256, _mm256_cmpeq_epi8, _mm256_cmpgt_epi8,
        _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_or_si256, _mm256_set1_epi8,
        _mm256_storeu_si256,
    };

    /// Bit per byte of `v` that [`super::is_special`].
    #[inline]
    #[target_feature(enable = "avx2")]
    fn special(v: __m256i) -> u32 {
        // Signed compare: bytes >= 0x80 are negative, so `v < 0x20` also
        // catches every non-ASCII byte.
        let low = _mm256_cmpgt_epi8(_mm256_set1_epi8(0x20), v);
        let ok = _mm256_or_si256(
            _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\n' as i8)),
            _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\t' as i8)),
        );
        let del = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(0x7f));
        let sp = _mm256_or_si256(_mm256_andnot_si256(ok, low), del);
        _mm256_movemask_epi8(sp) as u32
    }

    /// [`super::copy_clean_prefix`]: each 32-byte block is loaded once,
    /// checked, and stored straight into `out`'s spare capacity.
    #[target_feature(enable = "avx2")]
    pub(super) fn copy_clean_prefix(input: &[u8], out: &mut String) -> usize {
        let n = input.len();
        out.reserve(n);
        let old = out.len();
        let mut i = 0;
        {
            // SAFETY: the bytes written below are only ever committed (by
            // `set_len`) up to the first special byte, so the committed
            // part is printable ASCII, `\n` and `\t`: valid UTF-8.
            let v = unsafe { out.as_mut_vec() };
            let src = input.as_ptr();
            // SAFETY: `reserve(n)` above: `old + n <= capacity`.
            let dst = unsafe { v.as_mut_ptr().add(old) };
            let mut stop = None;
            while i + 32 <= n {
                // SAFETY: `i + 32 <= n`: the 32 bytes at `src + i` are in
                // `input`, and the 32 at `dst + i` in `v`'s allocation
                // (`old + i + 32 <= old + n <= capacity`). Unaligned
                // load/store intrinsics have no alignment requirement.
                let blk = unsafe { _mm256_loadu_si256(src.add(i).cast()) };
                unsafe { _mm256_storeu_si256(dst.add(i).cast(), blk) };
                let m = special(blk);
                if m != 0 {
                    stop = Some(i + m.trailing_zeros() as usize);
                    break;
                }
                i += 32;
            }
            let end = match stop {
                Some(e) => e,
                None => i + super::scalar::clean_prefix_len(&input[i..]),
            };
            if stop.is_none() && end > i {
                // SAFETY: `input[i..end]` and `dst + i .. dst + end` are in
                // bounds (`end <= n`, capacity as above) and do not overlap
                // (`input` is borrowed shared while `out` is borrowed
                // mutably).
                unsafe { std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), end - i) };
            }
            // SAFETY: `old + end <= capacity`, and `v[old..old + end]` was
            // initialised above with `input[..end]`, which has no special
            // byte (see the first SAFETY comment).
            unsafe { v.set_len(old + end) };
            i = end;
        }
        i
    }

    /// Bitmasks of the 64-byte block at `src` for [`ground_run`]: bytes that
    /// are [`super::is_special`], ESC followed by `[` (reads byte 64), CSI
    /// parameter/intermediate bytes (0x20–0x3F) negated, CSI final bytes
    /// (0x40–0x7E).
    ///
    /// # Safety
    /// `src..src + 65` must be readable.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn ground_masks(src: *const u8) -> super::GroundMasks {
        let mut g = super::GroundMasks::default();
        for half in 0..2 {
            // SAFETY: the caller guarantees 65 readable bytes; these loads
            // read `src + 32 * half ..` 32 bytes and one byte further.
            let (v, v1) = unsafe {
                (
                    _mm256_loadu_si256(src.add(32 * half).cast()),
                    _mm256_loadu_si256(src.add(32 * half + 1).cast()),
                )
            };
            let esc = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(0x1b));
            let csi = _mm256_and_si256(esc, _mm256_cmpeq_epi8(v1, _mm256_set1_epi8(b'[' as i8)));
            let param = _mm256_cmpeq_epi8(
                _mm256_and_si256(v, _mm256_set1_epi8(0xe0u8 as i8)),
                _mm256_set1_epi8(0x20),
            );
            // 0x40..=0x7E: positive as signed bytes, above 0x3F, below 0x7F.
            let fin = _mm256_and_si256(
                _mm256_cmpgt_epi8(v, _mm256_set1_epi8(0x3f)),
                _mm256_cmpgt_epi8(_mm256_set1_epi8(0x7f), v),
            );
            let shift = 32 * half as u32;
            let bits = |x: __m256i| u64::from(_mm256_movemask_epi8(x) as u32) << shift;
            g.special |= u64::from(special(v)) << shift;
            g.csi |= bits(csi);
            g.not_param |= bits(param);
            g.fin |= bits(fin);
        }
        g.not_param = !g.not_param;
        g
    }

    /// [`super::ground_run`]: blocks of 64 bytes are classified once
    /// ([`ground_masks`]), then walked with `tzcnt`: each text run is copied
    /// with two 32-byte load/stores and each CSI sequence skipped, with no
    /// per-byte branch and no load waiting on the walk.
    #[target_feature(enable = "avx2")]
    pub(super) fn ground_run(input: &[u8], start: usize, out: &mut String) -> usize {
        let n = input.len();
        let start = start.min(n);
        out.reserve(n - start);
        let old = out.len();
        let src = input.as_ptr();
        let mut w = 0;
        let mut base = start;
        // Bit of the block where the walk goes on (may reach 65: a CSI
        // whose `[` is the next block's first byte).
        let mut pos = 0u32;
        // Inside a CSI sequence that started at `esc`.
        let mut esc: Option<usize> = None;
        let stop;
        {
            // SAFETY: bytes are only committed (by `set_len`) up to `w`,
            // and every committed byte was copied from a text run (no byte
            // `is_special`): printable ASCII, `\n`, `\t`: valid UTF-8.
            let v = unsafe { out.as_mut_vec() };
            // SAFETY: `reserve` above: `old + (n - start) <= capacity`.
            let dst = unsafe { v.as_mut_ptr().add(old) };
            stop = 'walk: loop {
                if base + super::GROUND_TAIL > n {
                    break 'walk match esc {
                        Some(e) => e,
                        None => base + pos as usize,
                    };
                }
                if esc.is_none() {
                    // SAFETY: `base + 128 <= n`: both loads are inside
                    // `input`; `w <= base + pos - start`, so the stores end
                    // at `old + w + 64 <= old + n - start <= capacity`.
                    let clean = unsafe {
                        let x = _mm256_loadu_si256(src.add(base).cast());
                        let y = _mm256_loadu_si256(src.add(base + 32).cast());
                        if pos == 0 && special(x) | special(y) == 0 {
                            _mm256_storeu_si256(dst.add(w).cast(), x);
                            _mm256_storeu_si256(dst.add(w + 32).cast(), y);
                            true
                        } else {
                            false
                        }
                    };
                    if clean {
                        // A clean block (plain text): copied whole.
                        w += 64;
                        base += 64;
                        continue;
                    }
                }
                // SAFETY: `base + 128 <= n`: 65 bytes readable.
                let g = unsafe { ground_masks(src.add(base)) };
                while pos < 64 {
                    match esc {
                        None => {
                            let m = g.special & (!0u64 << pos);
                            let t = if m == 0 { 64 } else { m.trailing_zeros() };
                            let a = base + pos as usize;
                            // SAFETY: `a < base + 64`, so `a + 64 <= n`: both
                            // loads are inside `input`. `w <= a - start`
                            // (each committed byte consumed one input byte),
                            // so the stores end at `old + w + 64 <= old + n -
                            // start <= capacity`. Unaligned loads/stores.
                            unsafe {
                                let x = _mm256_loadu_si256(src.add(a).cast());
                                let y = _mm256_loadu_si256(src.add(a + 32).cast());
                                _mm256_storeu_si256(dst.add(w).cast(), x);
                                _mm256_storeu_si256(dst.add(w + 32).cast(), y);
                            }
                            w += (t - pos) as usize;
                            if t == 64 {
                                pos = 64;
                                break;
                            }
                            if g.csi >> t & 1 == 0 {
                                break 'walk base + t as usize;
                            }
                            esc = Some(base + t as usize);
                            pos = t + 2;
                        }
                        Some(e) => {
                            let m = g.not_param & (!0u64 << pos);
                            if m == 0 {
                                pos = 64;
                                break;
                            }
                            let j = m.trailing_zeros();
                            if g.fin >> j & 1 == 0 {
                                break 'walk e;
                            }
                            esc = None;
                            pos = j + 1;
                        }
                    }
                }
                base += 64;
                pos -= 64;
            };
            // SAFETY: `old + w <= capacity` (above) and `v[old..old + w]`
            // was initialised by the stores, from text runs only.
            unsafe { v.set_len(old + w) };
        }
        stop
    }

    /// Bitmask of `=`/`:` in `b[at..at + 64]`.
    /// Panics (no UB) if `b[at..at + 64]` is out of bounds.
    #[target_feature(enable = "avx2")]
    pub(super) fn sep_mask64(b: &[u8], at: usize) -> u64 {
        let blk = &b[at..at + 64];
        let p = blk.as_ptr();
        // SAFETY: `blk` has 64 bytes: both 32-byte loads are in bounds;
        // unaligned loads have no alignment requirement.
        let (lo, hi) = unsafe {
            (
                _mm256_loadu_si256(p.cast()),
                _mm256_loadu_si256(p.add(32).cast()),
            )
        };
        let eq = _mm256_set1_epi8(b'=' as i8);
        let co = _mm256_set1_epi8(b':' as i8);
        let ml = _mm256_movemask_epi8(_mm256_or_si256(
            _mm256_cmpeq_epi8(lo, eq),
            _mm256_cmpeq_epi8(lo, co),
        )) as u32;
        let mh = _mm256_movemask_epi8(_mm256_or_si256(
            _mm256_cmpeq_epi8(hi, eq),
            _mm256_cmpeq_epi8(hi, co),
        )) as u32;
        u64::from(ml) | (u64::from(mh) << 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300),
            // Mostly clean text with rare special bytes, so long clean
            // prefixes (several 32-byte blocks) are common.
            proptest::collection::vec(
                prop_oneof![
                    40 => 0x20u8..0x7f,
                    2 => Just(b'\n'),
                    1 => Just(b'\t'),
                    1 => any::<u8>(),
                    1 => Just(b'='),
                    1 => Just(b':'),
                ],
                0..400
            ),
        ]
    }

    /// Colored output: text runs, CSI sequences (some with 32+ parameter
    /// bytes, some cut by other bytes), other escapes and arbitrary bytes.
    fn escapes() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            4 => "[ -~\n\t]{0,40}".prop_map(String::into_bytes),
            4 => prop::sample::select(vec![
                "\x1b[0m", "\x1b[1;31m", "\x1b[38;5;208m", "\x1b[?25l", "\x1b[K", "\x1b[",
                "\x1b[31", "\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15m", "\x1b]0;t\x07",
                "\x1b(B", "\r", "\x08", "\x1b", "\x1b[\n", "é",
            ]).prop_map(|s| s.as_bytes().to_vec()),
            1 => proptest::collection::vec(any::<u8>(), 0..4),
        ];
        proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn copy_clean_prefix_matches_scalar(input in bytes(), pre in "[a-z]{0,5}", from in 0usize..64) {
            let from = from.min(input.len());
            let input = &input[from..];
            let mut a = pre.clone();
            let na = copy_clean_prefix(input, &mut a);
            let mut b = pre.clone();
            let nb = scalar::copy_clean_prefix(input, &mut b);
            prop_assert_eq!(na, nb);
            prop_assert_eq!(&a, &b);
            let expect = input.iter().position(|&c| is_special(c)).unwrap_or(input.len());
            prop_assert_eq!(na, expect);
            let want = [pre.as_bytes(), &input[..na]].concat();
            prop_assert_eq!(a.as_bytes(), want.as_slice());
        }

        #[test]
        fn ground_run_matches_scalar(input in escapes(), pre in "[a-z]{0,5}", from in 0usize..80) {
            let from = from.min(input.len());
            let mut a = pre.clone();
            let ia = ground_run(&input, from, &mut a);
            let mut b = pre.clone();
            let ib = scalar::ground_run(&input, from, &mut b);
            prop_assert_eq!(ia, ib);
            prop_assert_eq!(&a, &b);
        }

        /// `next_where` skips what the predicate rejects, and leaves the
        /// finder right for `next` and `next_where` calls after it.
        #[test]
        fn sep_finder_next_where_matches_filter(input in bytes(), starts in proptest::collection::vec(0usize..40, 0..50), modulo in 1usize..5) {
            let keep = |p: usize| (p + usize::from(input[p])).is_multiple_of(modulo);
            let want = |at: usize, pred: bool| {
                memchr::memchr2_iter(b'=', b':', input.get(at..).unwrap_or(&[]))
                    .map(|p| at + p)
                    .find(|&p| !pred || keep(p))
            };
            let mut f = SepFinder::default();
            let mut at = 0;
            loop {
                let w = want(at, true);
                prop_assert_eq!(f.next_where(&input, at, keep), w);
                match w { Some(p) => at = p + 1, None => break }
            }
            let mut f = SepFinder::default();
            let mut at = 0;
            for (k, &s) in starts.iter().enumerate() {
                at = if k % 5 == 4 { (s * 13) % (input.len() + 1) } else { at + s };
                let pred = k % 3 != 0;
                let got = if pred { f.next_where(&input, at, keep) } else { f.next(&input, at) };
                let w = want(at, pred);
                prop_assert_eq!(got, w);
                if let Some(p) = w { at = p + 1; }
            }
        }

        #[test]
        fn sep_finder_matches_memchr2(input in bytes(), starts in proptest::collection::vec(0usize..40, 0..50)) {
            let expect: Vec<usize> = memchr::memchr2_iter(b'=', b':', &input).collect();
            // Walk every hit in order, as the redactor does.
            let mut f = SepFinder::default();
            let mut got = Vec::new();
            let mut at = 0;
            while let Some(p) = f.next(&input, at) {
                got.push(p);
                at = p + 1;
            }
            prop_assert_eq!(&got, &expect);
            // Arbitrary forward jumps, and a fresh start anywhere.
            let mut f = SepFinder::default();
            let mut at = 0;
            for &s in &starts {
                at += s * 7;
                let want = memchr::memchr2(b'=', b':', input.get(at..).unwrap_or(&[])).map(|p| at + p);
                prop_assert_eq!(f.next(&input, at), want);
                if let Some(p) = want { at = p; }
            }
            // Any order at all, on one finder.
            let mut f = SepFinder::default();
            for (k, s) in starts.iter().enumerate() {
                let at = (s * 37 + k * 11) % (input.len() + 1);
                let want = memchr::memchr2(b'=', b':', &input[at..]).map(|p| at + p);
                prop_assert_eq!(f.next(&input, at), want);
            }
            let mut f = SepFinder::default();
            for at in (0..=input.len()).rev() {
                let want = memchr::memchr2(b'=', b':', &input[at..]).map(|p| at + p);
                prop_assert_eq!(f.next(&input, at), want);
            }
        }
    }
}
