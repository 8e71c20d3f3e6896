//! Resident anonymous memory that grows and shrinks on request, page-exact.
//!
//! Growing maps anonymous chunks and writes to every page, so the kernel must fault in,
//! charge to the memcg and, under memory.high or memory.max, reclaim or throttle: that is
//! the latency the replay measures. Each page gets a distinct 8-byte stamp at its start, so
//! no page is the shared zero page, none is "same-filled" (zswap stores those as a single
//! word) and none can be merged by KSM.
//!
//! With a [`PageFill`] (the replay's default), the stamp sits in a prefix of incompressible
//! bytes copied from a few blocks generated once: compressed swap (zswap, zram) then stores a
//! page in about `page / ratio` bytes, as it would a runtime's heap, instead of almost nothing
//! for a stamp and zeros. The rest of the page is the kernel's zero fill, not written: the
//! cost per page is one short copy, and an LZ compressor (lzo, lz4, zstd: zswap's choices)
//! stores the zeros in a few bytes, so the ratio depends little on which one the host uses.
//!
//! Shrinking unmaps from the top (most recently grown memory first), splitting a chunk with a
//! partial munmap when the target falls inside it. munmap returns the pages at once; with
//! MADV_FREE they would linger until reclaim and RSS would not follow the trace.

use std::io;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
#[error("mmap of {bytes} bytes failed (holding {held} bytes): {error}")]
pub struct MapError {
    pub bytes: usize,
    pub held: u64,
    pub error: io::Error,
}

/// What one call to [`Memory::set_target`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Change {
    pub grown: u64,
    pub shrunk: u64,
    /// Time spent mapping and touching (zero if nothing grew).
    pub grow_time: Duration,
    /// Time spent unmapping (zero if nothing shrank).
    pub release_time: Duration,
}

/// A fresh private anonymous read-write mapping of `len` bytes, not yet touched. The caller
/// owns it (munmap).
pub fn map_anonymous(len: usize) -> io::Result<*mut u8> {
    // SAFETY: a new mapping at an address the kernel picks; the result is checked for MAP_FAILED.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(ptr.cast())
}

/// How compressible a grown page is: `ratio` is page size over compressed size (2–4:1 for
/// interpreter and runtime heaps; see [`PageFill::DEFAULT_RATIO`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PageFill {
    pub ratio: f64,
}

impl PageFill {
    /// The kernel's zram documentation expected 2:1 (Documentation/blockdev/zram.txt, 2014:
    /// "we expect a 2:1 compression ratio"); ChromeOS, swapping browser tabs (JavaScript
    /// heaps, DOM) to zram on every device, reported "a compression ratio of almost 3:1"
    /// (linux-mm, "zram is deployed!", 2013: mail.spinics.net/lists/linux-mm/msg57717.html).
    /// 3:1 is the middle of the 2–4:1 band such heaps give.
    pub const DEFAULT_RATIO: f64 = 3.0;
    /// 1: nothing compresses (the whole page is written). Beyond 64 the 8-byte stamp and the
    /// compressor's own overhead decide the ratio, not the fill.
    pub const MIN_RATIO: f64 = 1.0;
    pub const MAX_RATIO: f64 = 64.0;

    /// A fill with this ratio; Err says why it is refused.
    pub fn new(ratio: f64) -> Result<PageFill, String> {
        if !ratio.is_finite() || !(Self::MIN_RATIO..=Self::MAX_RATIO).contains(&ratio) {
            return Err(format!(
                "compression ratio {ratio}: must be between {} (incompressible) and {}",
                Self::MIN_RATIO,
                Self::MAX_RATIO
            ));
        }
        Ok(PageFill { ratio })
    }

    /// Bytes written at the start of each page: `page / ratio`, at least the stamp.
    pub fn prefix(&self, page: usize) -> usize {
        ((page as f64 / self.ratio).round() as usize).clamp(8, page)
    }
}

impl Default for PageFill {
    fn default() -> Self {
        PageFill { ratio: Self::DEFAULT_RATIO }
    }
}

/// Distinct incompressible blocks the pages cycle through: pages are compressed one at a time,
/// so repeats across pages do not help a compressor; a few blocks keep the copies cache-warm.
const PATTERN_BLOCKS: usize = 16;

/// `PATTERN_BLOCKS` blocks of `len` pseudo-random bytes (xorshift64*: incompressible to any
/// LZ or entropy coder), the same on every run.
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::with_capacity(PATTERN_BLOCKS * len + 8);
    while out.len() < PATTERN_BLOCKS * len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(PATTERN_BLOCKS * len);
    out
}

struct Region {
    ptr: *mut u8,
    len: usize,
}

pub struct Memory {
    regions: Vec<Region>,
    held: u64,
    peak: u64,
    chunk: usize,
    page: usize,
    stamp: u64,
    /// `PATTERN_BLOCKS` blocks of `prefix` bytes; empty: stamp only.
    pattern: Vec<u8>,
    prefix: usize,
}

impl Memory {
    /// `chunk_bytes` is clamped to [1 page, 1 GiB] and rounded up to whole pages. Pages get
    /// the stamp alone (see the module's text).
    pub fn new(chunk_bytes: usize) -> Memory {
        Memory::with_fill(chunk_bytes, None)
    }

    /// As [`Memory::new`], each page filled to compress by `fill`'s ratio.
    pub fn with_fill(chunk_bytes: usize, fill: Option<PageFill>) -> Memory {
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => 4096,
        };
        let chunk = chunk_bytes.clamp(1, 1 << 30).div_ceil(page) * page;
        let prefix = fill.map_or(8, |f| f.prefix(page));
        let pattern = if fill.is_some() { pattern(prefix) } else { Vec::new() };
        Memory { regions: Vec::new(), held: 0, peak: 0, chunk, page, stamp: 0, pattern, prefix }
    }

    pub fn page_size(&self) -> usize {
        self.page
    }

    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    /// Bytes currently mapped and touched (a multiple of the page size).
    pub fn held(&self) -> u64 {
        self.held
    }

    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Grows or shrinks to `target` rounded up to a whole page.
    pub fn set_target(&mut self, target: u64) -> Result<Change, MapError> {
        let page = self.page as u64;
        // Every length mapped or unmapped is a whole number of pages; grow()'s stamping relies
        // on it. (A target beyond the last page multiple below 2^64 cannot be mapped anyway.)
        let target = target.checked_next_multiple_of(page).unwrap_or(u64::MAX - u64::MAX % page);
        let mut change = Change::default();
        if target > self.held {
            let start = Instant::now();
            let before = self.held;
            let result = self.grow(target);
            change.grown = self.held - before;
            change.grow_time = start.elapsed();
            result?;
        } else if target < self.held {
            let start = Instant::now();
            let before = self.held;
            self.shrink(target);
            change.shrunk = before - self.held;
            change.release_time = start.elapsed();
        }
        Ok(change)
    }

    fn grow(&mut self, target: u64) -> Result<(), MapError> {
        while self.held < target {
            let len = self.chunk.min(usize::try_from(target - self.held).unwrap_or(usize::MAX));
            let ptr = map_anonymous(len).map_err(|error| MapError { bytes: len, held: self.held, error })?;
            for off in (0..len).step_by(self.page) {
                self.stamp += 1;
                if !self.pattern.is_empty() {
                    let block = (self.stamp as usize % PATTERN_BLOCKS) * self.prefix;
                    // SAFETY: prefix <= page and off is a page boundary inside the mapping, so
                    // the copy stays inside it; the source is a separate heap buffer.
                    unsafe { std::ptr::copy_nonoverlapping(self.pattern[block..].as_ptr(), ptr.add(off), self.prefix) };
                }
                // SAFETY: off + 8 <= len because len is a multiple of the page size (>= 8) and
                // off is page-aligned, so the write stays inside the mapping; pages are
                // page-aligned, so the u64 write is aligned. Volatile, because nothing in
                // this program reads the memory back and the fault is the point.
                unsafe { std::ptr::write_volatile(ptr.add(off).cast::<u64>(), self.stamp) };
            }
            self.regions.push(Region { ptr, len });
            self.held += len as u64;
            self.peak = self.peak.max(self.held);
        }
        Ok(())
    }

    fn shrink(&mut self, target: u64) {
        while self.held > target {
            let Some(top) = self.regions.last_mut() else { break };
            let excess = usize::try_from(self.held - target).unwrap_or(usize::MAX);
            if excess >= top.len {
                // SAFETY: the region was mapped by grow() with exactly this address and length
                // and is removed from the list, so it is unmapped once and never touched again.
                unsafe { libc::munmap(top.ptr.cast(), top.len) };
                self.held -= top.len as u64;
                self.regions.pop();
            } else {
                // excess is a multiple of the page size (both held and target are), so the
                // tail starts on a page boundary inside the region.
                let keep = top.len - excess;
                // SAFETY: [ptr+keep, ptr+len) lies inside the region and is no longer used.
                unsafe { libc::munmap(top.ptr.add(keep).cast(), excess) };
                top.len = keep;
                self.held -= excess as u64;
            }
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        self.shrink(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_targets_page_exact() {
        let mut m = Memory::new(1 << 20);
        let page = m.page_size() as u64;
        let c = m.set_target(3 * (1 << 20) + 1).unwrap();
        assert_eq!(m.held(), 3 * (1 << 20) + page);
        assert_eq!(c.grown, m.held());
        assert_eq!(c.shrunk, 0);
        // Into the middle of a chunk: partial munmap.
        let c = m.set_target((1 << 20) + 5 * page).unwrap();
        assert_eq!(m.held(), (1 << 20) + 5 * page);
        assert_eq!(c.shrunk, 2 * (1 << 20) - 4 * page);
        let c = m.set_target(m.held()).unwrap();
        assert_eq!(c, Change::default());
        m.set_target(0).unwrap();
        assert_eq!(m.held(), 0);
        assert_eq!(m.peak(), 3 * (1 << 20) + page);
    }

    /// The pages `m` holds, as byte slices.
    fn pages(m: &Memory) -> Vec<&[u8]> {
        let page = m.page_size();
        m.regions
            .iter()
            // SAFETY: every region is mapped and touched, and `m` is borrowed while in use.
            .flat_map(|r| unsafe { std::slice::from_raw_parts(r.ptr, r.len) }.chunks(page))
            .collect()
    }

    /// Page size over compressed size, each page compressed alone (as zswap and zram do).
    fn ratio(pages: &[&[u8]], compress: impl Fn(&[u8]) -> usize) -> f64 {
        let compressed: usize = pages.iter().map(|p| compress(p)).sum();
        pages.iter().map(|p| p.len()).sum::<usize>() as f64 / compressed as f64
    }

    #[test]
    fn pages_compress_by_the_configured_ratio() {
        for r in [1.0, 2.0, PageFill::DEFAULT_RATIO, 4.0, 8.0] {
            let mut m = Memory::with_fill(1 << 20, Some(PageFill::new(r).unwrap()));
            m.set_target(4 << 20).unwrap();
            let pages = pages(&m);
            // Distinct pages: not same-filled, not mergeable.
            let mut heads: Vec<&[u8]> = pages.iter().map(|p| &p[..16]).collect();
            heads.sort();
            heads.dedup();
            assert_eq!(heads.len(), pages.len(), "ratio {r}: pages are not distinct");
            // lz4 as zswap runs it (one page, no dictionary). The random prefix is
            // incompressible to any coder; the zeros cost an LZ coder a few bytes.
            let got = ratio(&pages, |p| lz4_flex::block::compress(p).len());
            assert!((got / r - 1.0).abs() <= 0.10, "pages filled for {r}:1 compress {got:.2}:1 (lz4), outside ±10%");
        }
    }

    #[test]
    fn stamp_only_pages_compress_to_almost_nothing() {
        // What the fill replaces: a stamp and zeros, far beyond any real heap.
        let mut m = Memory::new(1 << 20);
        m.set_target(1 << 20).unwrap();
        let got = ratio(&pages(&m), |p| lz4_flex::block::compress(p).len());
        assert!(got > 50.0, "stamp-only pages compress {got:.1}:1");
    }

    #[test]
    fn fill_ratio_is_validated() {
        assert!(PageFill::new(3.0).is_ok());
        for bad in [0.5, 0.0, -1.0, 65.0, f64::NAN, f64::INFINITY] {
            let e = PageFill::new(bad).unwrap_err();
            assert!(e.contains("between 1 (incompressible) and 64"), "{bad}: {e}");
        }
        assert_eq!(PageFill::new(1.0).unwrap().prefix(4096), 4096);
        assert_eq!(PageFill::new(64.0).unwrap().prefix(4096), 64);
    }

    #[test]
    fn chunk_is_rounded_to_pages() {
        let m = Memory::new(1000);
        assert_eq!(m.chunk_size(), m.page_size());
        assert_eq!(Memory::new(0).chunk_size(), m.page_size());
        assert_eq!(Memory::new(usize::MAX).chunk_size(), 1 << 30);
    }
}
