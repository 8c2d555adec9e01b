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
            if self.scanned >= b.len() {
                return None;
            }
            #[cfg(target_arch = "x86_64")]
            if self.scanned + 64 <= b.len() && has_avx2() {
                // SAFETY: AVX2 is available on this CPU (checked just above);
                // the block is in bounds (checked by the function).
                self.mask = unsafe { avx2::sep_mask64(b, self.scanned) };
                self.base = self.scanned;
                self.from = self.scanned;
                self.scanned += 64;
                continue;
            }
            let end = (self.scanned + 64).min(b.len());
            self.mask = scalar::sep_mask(&b[self.scanned..end]);
            self.base = self.scanned;
            self.from = self.scanned;
            self.scanned = end;
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
        __m256i, _mm256_andnot_si256, _mm256_cmpeq_epi8, _mm256_cmpgt_epi8, _mm256_loadu_si256,
        _mm256_movemask_epi8, _mm256_or_si256, _mm256_set1_epi8, _mm256_storeu_si256,
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
