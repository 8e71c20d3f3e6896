//! `sigkill`: the daemon SIGKILLed at random instants under churn, its guardian restoring.

use super::*;

/// splitmix64: the kill instants from the seed, reproducibly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub(super) fn sigkill(kills: usize, seed: u64) -> Result<SigkillResult> {
    let tree = Tree::setup("256M")?;
    config()?;
    let state_buf = state_path();
    let state = state_buf.as_path();
    let _ = std::fs::remove_dir_all(state);
    let churn = Churner::start(tree.low.clone());
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    let mut rng = Rng(seed);
    let mut r = SigkillResult { seed, kills_asked: kills, ..Default::default() };
    let mut first_reads = HashMap::new();
    let (mut restores, mut gaps) = (Vec::new(), Vec::new());
    let mut gap_from: Option<u64> = None;
    for life in 0..=kills {
        let last = life == kills;
        let launched = Instant::now();
        let mut child = spawn_daemon(state, &[], Stdio::null(), None)?;
        let mut killed_at = None;
        if last {
            // A last life, stopped in order once it protects: it closes the last gap.
            while launched.elapsed() < RESTORE_PATIENCE && child.try_wait()?.is_none() {
                if caps(&events::read(state)).next().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let st = child.wait()?;
            if !st.success() {
                r.unexpected_exits.push(format!("last life: {st} at SIGTERM ({})", daemon_stderr_tail()));
            }
        } else {
            let after = Duration::from_secs_f64(0.2 + 2.8 * rng.unit());
            let mut exited = None;
            while launched.elapsed() < after {
                if let Some(st) = child.try_wait()? {
                    exited = Some(st);
                    break;
                }
                std::thread::sleep(Duration::from_millis(5).min(after.saturating_sub(launched.elapsed())));
            }
            if let Some(st) = exited {
                r.unexpected_exits.push(format!(
                    "life {life}: {st} after {:.2} s ({})",
                    launched.elapsed().as_secs_f64(),
                    daemon_stderr_tail()
                ));
            } else {
                let in_startup = !state.join(memqos_daemon::status::STATUS_FILE).exists();
                let s = churn.pause();
                let capped = s
                    .slots
                    .iter()
                    .flatten()
                    .filter(|slot| {
                        std::fs::read_to_string(root_path().as_path().join(&slot.rel).join("memory.high"))
                            .ok()
                            .and_then(|t| t.trim().parse::<u64>().ok())
                            .is_some_and(|v| v < V_BASE)
                    })
                    .count();
                let at = mono_ns();
                let _ = child.kill();
                let _ = child.wait();
                drop(s);
                killed_at = Some(at);
                r.kills += 1;
                r.killed_in_startup += usize::from(in_startup);
                r.capped_at_kill += capped;
                r.kills_with_caps += usize::from(capped > 0);
                r.kill_after_s.push(after.as_secs_f64());
            }
            match await_restore(state) {
                Ok(_) => restores.extend(killed_at.map(|k| ms_between(k, mono_ns()))),
                Err(why) => {
                    r.restore_timeouts += 1;
                    eprintln!("faults: life {life}: no restore within {} s: {why}", RESTORE_PATIENCE.as_secs());
                }
            }
        }
        let log = events::read(state);
        note_first_reads(&log, &mut first_reads);
        if let Some(c) = caps(&log).next() {
            if let Some(from) = gap_from.take() {
                gaps.push(ms_between(from, c.mono_done_ns));
            }
        }
        if gap_from.is_none() {
            gap_from = killed_at;
        }
        let found = check(&root_path(), &mut churn.pause(), &first_reads, &tree.prot);
        if found.lost + found.wrong > 0 {
            eprintln!("faults: life {life}: {} lost, {} wrong: {:?}", found.lost, found.wrong, found.examples);
        }
        r.check.add(&found);
        if r.restore_timeouts > 0 && state.join(memqos_daemon::journal::JOURNAL_FILE).exists() {
            restore_by_hand(state);
        }
        if life % 10 == 0 {
            eprintln!(
                "faults: sigkill life {life}: {} kills, {} lost, {} wrong, {} exits, {:.0} s",
                r.kills,
                r.check.lost,
                r.check.wrong,
                r.unexpected_exits.len(),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    r.duration_s = t0.elapsed().as_secs_f64();
    r.restore = Spread::of(restores);
    r.unprotected = Spread::of(gaps);
    (r.churn_made, r.churn_rate, r.churn_errors) = churn.stop();
    drop(tree);
    Ok(r)
}
