//! Whole-exchange deadlines for the daemon's servers (control socket, metrics listener).
//!
//! A per-read timeout alone lets a slow client hold a server thread for as long as it likes
//! by sending one byte just inside each timeout. Every read and write here gets the time
//! left of one deadline for the whole exchange instead, so a client gets at most that.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// A socket whose read and write timeouts can be set (Unix and TCP streams).
pub trait Timeouts: Read + Write {
    fn set_timeouts(&self, d: Duration);
}

impl Timeouts for std::os::unix::net::UnixStream {
    fn set_timeouts(&self, d: Duration) {
        let _ = self.set_read_timeout(Some(d));
        let _ = self.set_write_timeout(Some(d));
    }
}

impl Timeouts for std::net::TcpStream {
    fn set_timeouts(&self, d: Duration) {
        let _ = self.set_read_timeout(Some(d));
        let _ = self.set_write_timeout(Some(d));
    }
}

/// One client's exchange, due by `at`.
pub struct Exchange<'a, S: Timeouts> {
    stream: &'a mut S,
    at: Instant,
}

impl<'a, S: Timeouts> Exchange<'a, S> {
    pub fn new(stream: &'a mut S, within: Duration) -> Self {
        Exchange { stream, at: Instant::now() + within }
    }

    /// Time left, or a TimedOut error naming the limit.
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "client too slow: deadline passed"));
        }
        Ok(left)
    }
}

impl<S: Timeouts> Read for Exchange<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.stream.set_timeouts(left);
        self.stream.read(buf)
    }
}

impl<S: Timeouts> Write for Exchange<'_, S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.stream.set_timeouts(left);
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

/// How long a server thread waits after a failed accept (out of descriptors) before the next.
pub const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_client_that_trickles_bytes_is_cut_off_at_the_deadline() {
        let (mut server, mut client) = UnixStream::pair().unwrap();
        let trickle = std::thread::spawn(move || {
            for _ in 0..40 {
                if client.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let t0 = Instant::now();
        let mut ex = Exchange::new(&mut server, Duration::from_millis(200));
        let mut got = 0;
        let mut buf = [0u8; 1];
        let err = loop {
            match ex.read(&mut buf) {
                Ok(0) => panic!("EOF before the deadline"),
                Ok(n) => got += n,
                Err(e) => break e,
            }
        };
        assert!(matches!(err.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock), "{err}");
        assert!(got > 0 && got < 40, "some bytes read before the cut: {got}");
        assert!(t0.elapsed() < Duration::from_secs(2), "cut near the deadline, not per byte");
        drop(server);
        trickle.join().unwrap();
    }
}
