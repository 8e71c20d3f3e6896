//! Limit writes off the loop. Writing memory.high or memory.max below a cgroup's usage makes
//! the *writer* reclaim the difference (`memory_high_write` in mm/memcontrol.c) unless the
//! file was opened `O_NONBLOCK` on a kernel that honours it (7.2 does, 6.12 does not:
//! measured in a guest, a 300 MiB cut under zswap took the writer 1.1–2.7 s on both kernels
//! without the flag, 0.000 s with it on 7.2 only). The daemon has one loop; a cut of ten
//! lows by 500 MiB each must not delay the protected cgroup's next reaction by the sum of
//! their reclaims. So limit-lowering writes run on a few worker threads, always opened
//! `O_NONBLOCK`: where the kernel honours it they finish at once and the loop sees them
//! finished (it waits [`INLINE_WAIT`] for them); where it does not, one cgroup's reclaim
//! delays neither another cgroup's write nor the next tick.
//!
//! Both kernels set the new limit before the writer reclaims (a read during a 6.12 blocking
//! write already shows it), so a later write of a higher value, made at once by the loop,
//! is the value that stays: an earlier write still reclaiming never sets its value again.

use crate::beneath::{self, FileError};
use std::os::fd::OwnedFd;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many limit writes may reclaim at once.
pub const WORKERS: usize = 4;
/// How long a batch waits for its limit writes before leaving them in flight: long enough for
/// a write that does not reclaim (a thread hand-off), short beside any reaction.
pub const INLINE_WAIT: Duration = Duration::from_millis(5);

/// One write for a worker, with what the caller needs back when it is done.
pub struct Job<T> {
    pub fd: OwnedFd,
    pub file: &'static str,
    pub value: String,
    pub payload: T,
}

/// A finished write.
pub struct Done<T> {
    pub result: Result<(), FileError>,
    pub took: Duration,
    pub payload: T,
}

/// The worker pool, started on first use. Dropping it closes the queue; workers finish the
/// write they are in (the kernel's own loop ends it) and exit.
pub struct LimitWriter<T: Send + 'static> {
    jobs: Option<mpsc::Sender<Job<T>>>,
    done: Option<mpsc::Receiver<Done<T>>>,
    in_flight: usize,
}

impl<T: Send + 'static> Default for LimitWriter<T> {
    fn default() -> Self {
        LimitWriter { jobs: None, done: None, in_flight: 0 }
    }
}

impl<T: Send + 'static> LimitWriter<T> {
    /// Writes now in a worker's hands.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Hands `job` to a worker. Err gives it back when no worker thread could be started
    /// (the caller then writes it itself: protection before promptness).
    pub fn send(&mut self, job: Job<T>) -> Result<(), Job<T>> {
        if self.jobs.is_none() && self.start().is_err() {
            return Err(job);
        }
        let Some(tx) = &self.jobs else { return Err(job) };
        match tx.send(job) {
            Ok(()) => {
                self.in_flight += 1;
                Ok(())
            }
            Err(mpsc::SendError(job)) => Err(job),
        }
    }

    fn start(&mut self) -> std::io::Result<()> {
        let (tx, rx) = mpsc::channel::<Job<T>>();
        let (done_tx, done_rx) = mpsc::channel::<Done<T>>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..WORKERS {
            let (rx, done_tx) = (rx.clone(), done_tx.clone());
            std::thread::Builder::new().name(format!("limits-{i}")).spawn(move || work(&rx, &done_tx))?;
        }
        self.jobs = Some(tx);
        self.done = Some(done_rx);
        Ok(())
    }

    /// Writes finished since the last call, waiting until `deadline` for more while some
    /// are in flight (no deadline: only those already finished).
    pub fn finished(&mut self, deadline: Option<Instant>) -> Vec<Done<T>> {
        let mut out = Vec::new();
        let Some(rx) = &self.done else { return out };
        while self.in_flight > 0 {
            let next = match deadline {
                Some(at) => match at.checked_duration_since(Instant::now()) {
                    Some(left) => rx.recv_timeout(left).ok(),
                    None => rx.try_recv().ok(),
                },
                None => rx.try_recv().ok(),
            };
            let Some(done) = next else { break };
            self.in_flight -= 1;
            out.push(done);
        }
        out
    }
}

fn work<T>(jobs: &Mutex<mpsc::Receiver<Job<T>>>, done: &mpsc::Sender<Done<T>>) {
    loop {
        let job = match jobs.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return, // the actuator is gone
        };
        let started = Instant::now();
        let result = beneath::write_at_nonblocking(&job.fd, job.file, &job.value);
        drop(job.fd);
        if done.send(Done { result, took: started.elapsed(), payload: job.payload }).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_go_through_the_workers_and_come_back_with_their_payload() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer: LimitWriter<u32> = LimitWriter::default();
        for i in 0..8u32 {
            let cg = dir.path().join(format!("c{i}"));
            std::fs::create_dir(&cg).unwrap();
            std::fs::write(cg.join("memory.high"), "max\n").unwrap();
            let fd: OwnedFd = std::fs::File::open(&cg).unwrap().into();
            assert!(writer
                .send(Job { fd, file: "memory.high", value: format!("{}", (i + 1) << 20), payload: i })
                .is_ok());
        }
        let mut done = Vec::new();
        let until = Instant::now() + Duration::from_secs(10);
        while done.len() < 8 && Instant::now() < until {
            done.extend(writer.finished(Some(Instant::now() + Duration::from_millis(100))));
        }
        assert_eq!(writer.in_flight(), 0);
        let mut got: Vec<u32> = done.iter().map(|d| d.payload).collect();
        got.sort();
        assert_eq!(got, (0..8).collect::<Vec<_>>());
        assert!(done.iter().all(|d| d.result.is_ok()));
        for i in 0..8u32 {
            let v = std::fs::read_to_string(dir.path().join(format!("c{i}/memory.high"))).unwrap();
            assert_eq!(v, format!("{}", (i + 1) << 20));
        }
    }
}
