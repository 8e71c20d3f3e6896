//! inotify records as read(2) returns them: `struct inotify_event` (wd, mask, cookie, len)
//! followed by `len` bytes of name, NUL-padded. One walker for the daemon's two inotify
//! descriptors (memory.events watches and the tree watches), so neither trusts `len` to stay
//! inside what was read.

/// One event record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub wd: i32,
    pub mask: u32,
    /// The name (a directory entry of a watched directory) up to its first NUL; empty for an
    /// event on the watched file itself. Cut at the end of the buffer if `len` runs past it.
    pub name: &'a [u8],
}

const HEAD: usize = std::mem::size_of::<libc::inotify_event>();

/// The records in `buf` (the bytes one read(2) returned), in order. A header cut short by
/// the end of the buffer ends the walk.
pub fn records(buf: &[u8]) -> impl Iterator<Item = Record<'_>> {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        let head = buf.get(off..off.checked_add(HEAD)?)?;
        // SAFETY: `head` is HEAD bytes long; inotify_event is plain data, read unaligned.
        let ev: libc::inotify_event = unsafe { std::ptr::read_unaligned(head.as_ptr().cast()) };
        let start = off + HEAD;
        let end = start.saturating_add(ev.len as usize).min(buf.len());
        let name = buf[start..end].split(|b| *b == 0).next().unwrap_or_default();
        off = start.saturating_add(ev.len as usize);
        Some(Record { wd: ev.wd, mask: ev.mask, name })
    })
}

/// A record as the kernel writes it (name NUL-padded to `len`), for tests.
#[doc(hidden)]
pub fn encode(wd: i32, mask: u32, cookie: u32, name: &[u8], len: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD + len as usize);
    out.extend_from_slice(&wd.to_ne_bytes());
    out.extend_from_slice(&mask.to_ne_bytes());
    out.extend_from_slice(&cookie.to_ne_bytes());
    out.extend_from_slice(&len.to_ne_bytes());
    let mut padded = name.to_vec();
    padded.resize(len as usize, 0);
    out.extend_from_slice(&padded);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_records_and_stops_at_a_cut_header() {
        let mut buf = encode(3, libc::IN_MODIFY, 0, b"", 0);
        buf.extend(encode(4, libc::IN_CREATE | libc::IN_ISDIR, 0, b"job", 16));
        buf.extend(&[1, 2, 3]);
        let got: Vec<_> = records(&buf).collect();
        assert_eq!(
            got,
            [
                Record { wd: 3, mask: libc::IN_MODIFY, name: b"" },
                Record { wd: 4, mask: libc::IN_CREATE | libc::IN_ISDIR, name: b"job" }
            ]
        );
    }
}
