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

/// The ground state's fast path of the ANSI stripper: from `input[i..]`,
/// appends clean runs (no byte [`is_special`]) to `out` and skips complete
/// 7-bit CSI sequences (`ESC [`, parameter/intermediate bytes 0x20–0x3F, a
/// final byte 0x40–0x7E), and returns where it stopped: at a byte that
/// needs the state machine (another special byte, a CSI it cannot see the
/// end of), or within the input's last 66 bytes (the scalar loop finishes).
/// The AVX2 version does both in one loop, each text run and each CSI
/// ending at a `tzcnt`; without AVX2 it returns `i` (the scalar loop does
/// all).
#[inline]
pub(crate) fn ground_run(input: &[u8], i: usize, out: &mut String) -> usize {
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

/// Bitmasks of one 64-byte block (bit `i` for byte `start + i`) of the byte
/// classes the separator prefilter ([`sep_candidates`]) combines. Bytes
/// past the haystack's end count as stop bytes only; bytes before its start
/// in no class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BlockMasks {
    /// `=` or `:`.
    sep: u64,
    /// `=`.
    eq: u64,
    /// ` ` or `\t` (skipped between a separator and its value).
    blank: u64,
    /// Bytes a credential value cannot hold (`rules::VALUE_STOP`).
    stop: u64,
    /// Bytes skipped back from a separator to the end of its name: blanks,
    /// `]` and the quotes.
    skip: u64,
    /// ASCII letters, digits and `_`.
    word: u64,
    /// `o`/`O`, `e`/`E`, `n`/`N`, and `n`/`N`/`y`/`Y`: the endings
    /// `on`/`en`/`ey` every header name has.
    o: u64,
    e: u64,
    n: u64,
    ny: u64,
}

/// Bytes that stop a credential value (`rules::VALUE_STOP`).
pub(crate) const STOP_BYTES: &[u8] = b" \t\n\x0c\r\"'`,;&)]}";

/// The separators of the block at `base` worth the exact check: every `=`/`:`
/// for which `rules::separator_rules` can be non-zero, and some more (a
/// superset; the caller runs the exact check on each). `prev`, `cur`, `next`
/// are the masks of the blocks at `base - 64`, `base`, `base + 64`; `before`
/// when the haystack has bytes before `base - 64`.
///
/// A separator is kept when (a) skipping back over blanks, `]` and quotes
/// reaches an `on`/`en`/`ey` ending (a header name may end there), or (b) the
/// same walk reaches a letter, digit or `_` (a name), the next byte is not
/// `=`, and one of the 4 positions after the blanks that follow it starts 16
/// bytes without a stop byte (the value: maybe after a quote and up to two
/// string-prefix letters). Bytes outside the three blocks count as "maybe":
/// never a reason to drop a separator.
#[inline]
pub(crate) fn combine(prev: &BlockMasks, cur: &BlockMasks, next: &BlockMasks, before: bool) -> u64 {
    let w = |lo: u64, hi: u64| u128::from(lo) | (u128::from(hi) << 64);
    // Value side: bit `i` is byte `base + i`.
    let stop = w(cur.stop, next.stop);
    // `t[i]`: a stop byte in `i..i + 16` (bytes past bit 127: none).
    let mut t = stop | (stop >> 1);
    t |= t >> 2;
    t |= t >> 4;
    t |= t >> 8;
    // A 16-byte stop-free run starts in `i..i + 4`.
    let ok4 = !(t & (t >> 1) & (t >> 2) & (t >> 3));
    let blank = w(cur.blank, next.blank);
    // Fill each run of blanks with the verdict of the byte after it; a run
    // reaching the window's end: maybe.
    let mut y = (ok4 & !blank) | (blank & (1u128 << 127));
    let mut m = blank;
    for s in [1u32, 2, 4, 8, 16, 32, 64] {
        y |= (y >> s) & m;
        m &= m >> s;
    }
    let eq_next = (w(cur.eq, next.eq) >> 1) as u64;
    let value = (y >> 1) as u64 & !eq_next;
    // Name side: bit `i` is byte `base - 64 + i`. The first byte that is
    // not skipped, walking back from the separator: `x + skip` carries each
    // bit of `x` at the start of a skipped run to the first byte after it.
    let skip = w(prev.skip, cur.skip);
    let n = w(prev.n, cur.n);
    let ny = w(prev.ny, cur.ny);
    let pair_end = (((w(prev.o, cur.o) << 1) & n) | ((w(prev.e, cur.e) << 1) & ny)) << 1;
    let word_end = w(prev.word, cur.word) << 1;
    // Bytes before the window: bit 0 and 1 may follow a name or a header name.
    let unknown: u128 = if before { 3 } else { 0 };
    let header = ((skip.wrapping_add(pair_end | unknown) & !skip) >> 64) as u64;
    let named = ((skip.wrapping_add(word_end | unknown) & !skip) >> 64) as u64;
    cur.sep & (header | (value & named))
}

/// Finds the next separator (`=` or `:`) worth the exact name/value check
/// of `rules::separator_rules`, at or after a position. The AVX2 version
/// classifies each 64-byte block once ([`BlockMasks`]) and drops, with a
/// few mask operations per block, the separators that cannot start a
/// name/header match ([`combine`]); elsewhere (no AVX2) every separator is
/// returned. Blocks are kept between calls, so dense hits (code has one per
/// ~49 bytes) do not restart a search each time.
#[derive(Debug, Default)]
pub(crate) struct SepFinder {
    /// Start of the block `mask` describes.
    base: usize,
    /// Separators in `b[from..scanned]`, as bits from `base`.
    mask: u64,
    from: usize,
    scanned: usize,
    /// Masks of the last block classified and of the block after it, and
    /// where that block starts (`None`: nothing cached).
    cur: BlockMasks,
    next: BlockMasks,
    masks_at: Option<usize>,
}

impl SepFinder {
    /// Next kept separator at or after `at`. Any `at` is answered; the fast
    /// case is `at` growing (each call's result + 1), as the redactor searches.
    #[inline]
    pub(crate) fn next(&mut self, b: &[u8], at: usize) -> Option<usize> {
        if at < self.from || at > self.scanned {
            // Outside what the mask covers: start over at `at`.
            self.base = at;
            self.mask = 0;
            self.from = at;
            self.scanned = at;
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
            if self.scanned >= b.len() {
                return None;
            }
            let base = self.scanned;
            let end = (base + 64).min(b.len());
            self.mask = self.block(b, base);
            // Separators past the haystack's end do not exist; bits there
            // are zero (their bytes are classified as stop bytes only).
            self.base = base;
            self.from = base;
            self.scanned = end;
        }
    }

    /// Kept separators of the block at `base` (the bits up to the
    /// haystack's end).
    #[inline]
    fn block(&mut self, b: &[u8], base: usize) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            let (prev, cur, next) = if self.masks_at.is_some_and(|m| m + 64 == base) {
                (self.cur, self.next, masks(b, base + 64))
            } else {
                (
                    if base >= 64 {
                        masks(b, base - 64)
                    } else {
                        scalar::block_masks(b, base as isize - 64)
                    },
                    masks(b, base),
                    masks(b, base + 64),
                )
            };
            self.cur = cur;
            self.next = next;
            self.masks_at = Some(base);
            return combine(&prev, &cur, &next, base > 64);
        }
        scalar::sep_mask(&b[base..(base + 64).min(b.len())])
    }
}

/// [`BlockMasks`] of the 64 bytes at `start`: AVX2 when the block is whole
/// (the caller checked AVX2), else the scalar version (padding past the end).
#[cfg(target_arch = "x86_64")]
#[inline]
fn masks(b: &[u8], start: usize) -> BlockMasks {
    if start + 64 <= b.len() {
        // SAFETY: AVX2 is available on this CPU (every caller checks
        // `has_avx2()` first); the block is in bounds (checked by the
        // function, which panics rather than read out of bounds).
        unsafe { avx2::block_masks(b, start) }
    } else {
        scalar::block_masks(b, start as isize)
    }
}

/// The separators of the block at `base` that the AVX2 finder keeps, all
/// computed by the scalar reference (for the tests).
#[cfg(test)]
pub(crate) fn sep_candidates(b: &[u8], base: usize) -> u64 {
    let base_i = base as isize;
    combine(
        &scalar::block_masks(b, base_i - 64),
        &scalar::block_masks(b, base_i),
        &scalar::block_masks(b, base_i + 64),
        base > 64,
    )
}

/// The reference implementations (and the fallback on CPUs without AVX2).
pub(crate) mod scalar {
    use super::{BlockMasks, STOP_BYTES, is_special};

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

    /// [`BlockMasks`] of the 64 bytes at `start` (which may lie partly or
    /// wholly before the haystack's start or past its end).
    pub(crate) fn block_masks(b: &[u8], start: isize) -> BlockMasks {
        let mut m = BlockMasks::default();
        for i in 0..64 {
            let pos = start + i as isize;
            let bit = 1u64 << i;
            if pos < 0 {
                continue;
            }
            let Some(&c) = b.get(pos as usize) else {
                m.stop |= bit;
                continue;
            };
            let l = c | 0x20;
            let set = |mask: &mut u64, yes: bool| *mask |= u64::from(yes) << i;
            set(&mut m.sep, c == b'=' || c == b':');
            set(&mut m.eq, c == b'=');
            set(&mut m.blank, c == b' ' || c == b'\t');
            set(&mut m.stop, STOP_BYTES.contains(&c));
            set(
                &mut m.skip,
                matches!(c, b' ' | b'\t' | b']' | b'"' | b'\'' | b'`'),
            );
            set(&mut m.word, c.is_ascii_alphanumeric() || c == b'_');
            set(&mut m.o, l == b'o');
            set(&mut m.e, l == b'e');
            set(&mut m.n, l == b'n');
            set(&mut m.ny, l == b'n' || l == b'y');
        }
        m
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
        __m256i, _mm_loadu_si128, _mm256_and_si256, _mm256_andnot_si256,
        _mm256_broadcastsi128_si256, _mm256_cmpeq_epi8, _mm256_cmpgt_epi8, _mm256_loadu_si256,
        _mm256_movemask_epi8, _mm256_or_si256, _mm256_set1_epi8, _mm256_setzero_si256,
        _mm256_shuffle_epi8, _mm256_srli_epi16, _mm256_storeu_si256,
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

    /// Nibble tables of an ASCII byte set for [`member`]: entry `l` has bit
    /// `h` set when byte `h << 4 | l` is in `set` (`h < 8`).
    const fn nibble_table(set: &[u8]) -> [u8; 16] {
        let mut t = [0u8; 16];
        let mut k = 0;
        while k < set.len() {
            let c = set[k];
            if c < 0x80 {
                t[(c & 15) as usize] |= 1 << (c >> 4);
            }
            k += 1;
        }
        t
    }

    const fn word_bytes() -> [u8; 63] {
        let mut v = [0u8; 63];
        let mut k = 0;
        let mut c = 0u8;
        while c < 0x80 {
            if c.is_ascii_alphanumeric() || c == b'_' {
                v[k] = c;
                k += 1;
            }
            c += 1;
        }
        v
    }

    static STOP_TABLE: [u8; 16] = nibble_table(super::STOP_BYTES);
    static WORD_TABLE: [u8; 16] = nibble_table(&word_bytes());
    /// Bit `h` for high nibble `h < 8`, none for non-ASCII bytes.
    static HIGH_BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 0, 0, 0, 0, 0, 0, 0, 0];

    /// A 16-byte table in both 128-bit lanes (`vpshufb` looks up per lane).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn table(t: &[u8; 16]) -> __m256i {
        // SAFETY: `t` has 16 bytes; unaligned load.
        let x = unsafe { _mm_loadu_si128(t.as_ptr().cast()) };
        _mm256_broadcastsi128_si256(x)
    }

    /// Bit per byte of `v` in the set of `table` (see [`nibble_table`]);
    /// `lo` is `v`'s low nibbles, `high` the bit of its high nibble.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn member(table: __m256i, lo: __m256i, high: __m256i) -> u32 {
        let hit = _mm256_and_si256(_mm256_shuffle_epi8(table, lo), high);
        !(_mm256_movemask_epi8(_mm256_cmpeq_epi8(hit, _mm256_setzero_si256())) as u32)
    }

    /// [`super::scalar::block_masks`] of a whole block, 32 bytes at a time.
    /// Panics (no UB) if `b[start..start + 64]` is out of bounds.
    #[target_feature(enable = "avx2")]
    pub(super) fn block_masks(b: &[u8], start: usize) -> super::BlockMasks {
        let blk = &b[start..start + 64];
        let p = blk.as_ptr();
        let stop_t = table(&STOP_TABLE);
        let word_t = table(&WORD_TABLE);
        let high_t = table(&HIGH_BIT);
        let nib = _mm256_set1_epi8(0x0f);
        let set1 = |c: u8| _mm256_set1_epi8(c as i8);
        let eqm = |v: __m256i, c: u8| _mm256_cmpeq_epi8(v, set1(c));
        let bits = |v: __m256i| _mm256_movemask_epi8(v) as u32;
        let mut m = super::BlockMasks::default();
        for half in 0..2 {
            // SAFETY: `blk` has 64 bytes, so the 32 at `32 * half` are in
            // bounds; unaligned loads have no alignment requirement.
            let v = unsafe { _mm256_loadu_si256(p.add(32 * half).cast()) };
            let lo = _mm256_and_si256(v, nib);
            let high = _mm256_shuffle_epi8(high_t, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
            let eq = eqm(v, b'=');
            let blank = _mm256_or_si256(eqm(v, b' '), eqm(v, b'\t'));
            let skip = _mm256_or_si256(
                _mm256_or_si256(blank, eqm(v, b']')),
                _mm256_or_si256(_mm256_or_si256(eqm(v, b'"'), eqm(v, b'\'')), eqm(v, b'`')),
            );
            let l = _mm256_or_si256(v, set1(0x20));
            let n = eqm(l, b'n');
            let shift = 32 * half as u32;
            let put = |mask: &mut u64, x: u32| *mask |= u64::from(x) << shift;
            put(&mut m.sep, bits(_mm256_or_si256(eq, eqm(v, b':'))));
            put(&mut m.eq, bits(eq));
            put(&mut m.blank, bits(blank));
            put(&mut m.stop, member(stop_t, lo, high));
            put(&mut m.skip, bits(skip));
            put(&mut m.word, member(word_t, lo, high));
            put(&mut m.o, bits(eqm(l, b'o')));
            put(&mut m.e, bits(eqm(l, b'e')));
            put(&mut m.n, bits(n));
            put(&mut m.ny, bits(_mm256_or_si256(n, eqm(l, b'y'))));
        }
        m
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

    /// Code-like text around separators: secret and header names, blanks,
    /// quotes, `]`, string prefixes, credential-like values of every length
    /// around 16, stop bytes and arbitrary bytes; long enough for several
    /// 64-byte blocks.
    fn code() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            4 => prop::sample::select(vec![
                "Authorization", "PROXY-AUTHORIZATION", "x-api-key", "X-Auth-Token",
                "apiKey", "API_KEY", "db_password", "token", "SECRET", "Private-Token",
                "monkey", "author", "region", "on", "EY", "en", "name", "x", "_", "9",
            ]).prop_map(|s| s.as_bytes().to_vec()),
            4 => prop::sample::select(vec![
                "=", ":", "==", ": ", " = ", "\t:\t", "\"", "'", "`", "]", "\"]", "[\"",
                " ", "  ", "\t", "f\"", "rb'", "b", "\n", ",", ";", "&", ")", "}",
                "(", "{", "-", ".", "/", "+", "::",
            ]).prop_map(|s| s.as_bytes().to_vec()),
            3 => "[A-Za-z0-9+/_.-]{8,24}".prop_map(String::into_bytes),
            1 => " {20,80}".prop_map(String::into_bytes),
            1 => proptest::collection::vec(any::<u8>(), 0..4),
        ];
        proptest::collection::vec(piece, 0..60).prop_map(|v| v.concat())
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

        #[test]
        fn block_masks_match_scalar(input in bytes(), start in 0usize..300) {
            #[cfg(target_arch = "x86_64")]
            if has_avx2() && start + 64 <= input.len() {
                // SAFETY: AVX2 is available (checked just above).
                let v = unsafe { avx2::block_masks(&input, start) };
                prop_assert_eq!(v, scalar::block_masks(&input, start as isize));
            }
        }

        /// Every separator the exact check takes is kept, whatever the
        /// block's alignment; the AVX2 finder keeps what the scalar masks give.
        #[test]
        fn sep_candidates_keep_every_rule_hit(input in code(), shift in 0usize..64) {
            let mut base = shift.min(input.len());
            while base < input.len() {
                let kept = sep_candidates(&input, base);
                for i in 0..64 {
                    let p = base + i;
                    if p >= input.len() {
                        prop_assert_eq!(kept >> i, 0);
                        break;
                    }
                    let sep = input[p] == b'=' || input[p] == b':';
                    let want = sep && crate::rules::separator_rules(&input, p) != 0;
                    let got = kept >> i & 1 == 1;
                    prop_assert!(!want || got, "separator at {} dropped (block {})", p, base);
                    prop_assert!(sep || !got, "{} is no separator", p);
                }
                let mut f = SepFinder::default();
                let mut from_finder = 0u64;
                let mut at = base;
                while let Some(p) = f.next(&input, at) {
                    if p >= base + 64 { break; }
                    from_finder |= 1 << (p - base);
                    at = p + 1;
                }
                #[cfg(target_arch = "x86_64")]
                if has_avx2() {
                    prop_assert_eq!(from_finder, kept, "block {}", base);
                }
                base += 64;
            }
        }

        /// The finder, then the exact check, finds what every separator
        /// through the exact check finds, for any order of starts.
        #[test]
        fn sep_finder_then_rules_matches_memchr2(input in code(), starts in proptest::collection::vec(0usize..40, 0..50)) {
            let exact = |at: usize| {
                memchr::memchr2_iter(b'=', b':', input.get(at..).unwrap_or(&[]))
                    .map(|p| at + p)
                    .find(|&p| crate::rules::separator_candidate(&input, p))
            };
            let filtered = |f: &mut SepFinder, mut at: usize| {
                while let Some(p) = f.next(&input, at) {
                    prop_assert!(input[p] == b'=' || input[p] == b':');
                    if crate::rules::separator_candidate(&input, p) {
                        return Ok(Some(p));
                    }
                    at = p + 1;
                }
                Ok(None)
            };
            // Walk every hit in order, as the redactor does.
            let mut f = SepFinder::default();
            let mut at = 0;
            loop {
                let want = exact(at);
                prop_assert_eq!(filtered(&mut f, at)?, want);
                match want {
                    Some(p) => at = p + 1,
                    None => break,
                }
            }
            // Arbitrary forward jumps, and a fresh start anywhere.
            let mut f = SepFinder::default();
            let mut at = 0;
            for &s in &starts {
                at += s * 7;
                let want = exact(at);
                prop_assert_eq!(filtered(&mut f, at)?, want);
                if let Some(p) = want { at = p; }
            }
            // Any order at all, on one finder.
            let mut f = SepFinder::default();
            for (k, s) in starts.iter().enumerate() {
                let at = (s * 37 + k * 11) % (input.len() + 1);
                prop_assert_eq!(filtered(&mut f, at)?, exact(at));
            }
            let mut f = SepFinder::default();
            for at in (0..=input.len()).rev() {
                prop_assert_eq!(filtered(&mut f, at)?, exact(at));
            }
        }
    }
}
