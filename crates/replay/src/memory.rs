//! Resident anonymous memory that grows and shrinks on request, page-exact.
//!
//! Growing maps anonymous chunks and writes to every page, so the kernel must fault in,
//! charge to the memcg and, under memory.high or memory.max, reclaim or throttle: that is
//! the latency the replay measures. Each page gets a distinct 8-byte stamp at its start, so
//! no page is the shared zero page, none is "same-filled" (zswap stores those as a single
//! word) and none can be merged by KSM. The rest of each page stays zero: compressed swap
//! (zram, zswap) shrinks these pages well, which matters only for experiments with swap.
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
}

impl Memory {
    /// `chunk_bytes` is clamped to [1 page, 1 GiB] and rounded up to whole pages.
    pub fn new(chunk_bytes: usize) -> Memory {
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => 4096,
        };
        let chunk = chunk_bytes.clamp(1, 1 << 30).div_ceil(page) * page;
        Memory { regions: Vec::new(), held: 0, peak: 0, chunk, page, stamp: 0 }
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

    #[test]
    fn chunk_is_rounded_to_pages() {
        let m = Memory::new(1000);
        assert_eq!(m.chunk_size(), m.page_size());
        assert_eq!(Memory::new(0).chunk_size(), m.page_size());
        assert_eq!(Memory::new(usize::MAX).chunk_size(), 1 << 30);
    }
}
