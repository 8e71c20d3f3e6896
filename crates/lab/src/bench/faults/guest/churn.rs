//! The churn of low cgroups that runs under every fault, and the check of their knobs after
//! a restore.

use super::*;

/// A live low cgroup of the churn and the memory.high its tenant gave it.
pub(super) struct Slot {
    pub(super) rel: String,
    pub(super) id: u64,
    /// The incarnation: the churn's call number.
    k: u64,
    value: u64,
}

#[derive(Default)]
pub(super) struct ChurnState {
    pub(super) slots: Vec<Option<Slot>>,
    /// Every tenant value ever written, and the incarnation it was written to (by call
    /// number, not cgroup id: a rehearsal's fake tree reuses inode numbers).
    owner: HashMap<u64, u64>,
    /// Incarnations already counted lost or wrong (a knob left wrong is counted once, not
    /// at every later check).
    counted: HashSet<u64>,
    k: u64,
    made: usize,
    errors: Vec<String>,
}

/// Low cgroups removed and made again at 100/s from a thread; holding the state's lock
/// pauses it (a check never sees a cgroup between its mkdir and its tenant's write).
pub(super) struct Churner {
    state: Arc<Mutex<ChurnState>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    t0: Instant,
}

impl Churner {
    pub(super) fn start(low: Cgroup) -> Churner {
        let state =
            Arc::new(Mutex::new(ChurnState { slots: (0..SLOTS).map(|_| None).collect(), ..Default::default() }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, halt) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut next = Instant::now();
            while !halt.load(Ordering::Relaxed) {
                {
                    let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
                    if let Err(e) = step(&low, &mut s) {
                        if s.errors.len() < 20 {
                            s.errors.push(format!("{e:#}"));
                        }
                    }
                }
                next += CHURN_PERIOD;
                match next.checked_duration_since(Instant::now()) {
                    Some(d) => std::thread::sleep(d),
                    None => next = Instant::now(), // behind (paused by a check): no burst
                }
            }
        });
        Churner { state, stop, thread: Some(thread), t0: Instant::now() }
    }

    pub(super) fn pause(&self) -> MutexGuard<'_, ChurnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops the thread: (made, per second, errors).
    pub(super) fn stop(mut self) -> (usize, f64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let s = self.pause();
        (s.made, s.made as f64 / self.t0.elapsed().as_secs_f64(), s.errors.clone())
    }
}

impl Drop for Churner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One churn call: remove the slot's cgroup, make it again, give it its own memory.high.
fn step(low: &Cgroup, s: &mut ChurnState) -> Result<()> {
    let slot = (s.k % SLOTS) as usize;
    let name = format!("tool.{slot}");
    let cg = low.child(&name);
    if s.slots[slot].is_some() {
        unmake(&cg)?;
        s.slots[slot] = None;
    }
    make(&cg)?;
    let k = s.k;
    let value = V_BASE + k * 4096;
    s.k += 1;
    cg.write_string("memory.high", &value.to_string())?;
    let id = std::fs::metadata(cg.path())?.ino();
    s.owner.insert(value, k);
    s.slots[slot] = Some(Slot { rel: format!("low/{name}"), id, k, value });
    s.made += 1;
    Ok(())
}

/// A memqos cap on a low cgroup: a successful memory.high write below the tenants' values.
pub(super) fn is_cap(w: &WriteEvent) -> bool {
    w.file == "memory.high"
        && w.outcome == Outcome::Ok
        && w.cgroup.starts_with("low/")
        && w.value.trim().parse::<u64>().is_ok_and(|v| v < V_BASE)
}

pub(super) fn caps(lines: &[LogLine]) -> impl Iterator<Item = &WriteEvent> {
    events::writes(lines).map(|(_, w)| w).filter(|w| is_cap(w))
}

/// What the daemon found in each low cgroup's memory.high before its first write there.
pub(super) fn note_first_reads(lines: &[LogLine], first: &mut HashMap<u64, String>) {
    for (_, w) in events::writes(lines) {
        if w.file == "memory.high" && w.cgroup.starts_with("low/") {
            if let Some(p) = &w.previous {
                first.entry(w.cgroup_id).or_insert_with(|| p.trim().to_string());
            }
        }
    }
}

/// Every live low cgroup must hold its own tenant value, the protected cgroup no protection.
/// `root`: the tree the slots' paths are relative to.
pub(super) fn check(root: &Path, s: &mut ChurnState, first: &HashMap<u64, String>, prot: &Cgroup) -> Check {
    let mut c = Check::default();
    let ChurnState { slots, owner, counted, .. } = s;
    for slot in slots.iter().flatten() {
        let dir = root.join(&slot.rel);
        match std::fs::metadata(&dir) {
            Ok(m) if m.ino() == slot.id => {}
            _ => continue,
        }
        let Ok(text) = std::fs::read_to_string(dir.join("memory.high")) else { continue };
        c.checked += 1;
        let found = text.trim().parse::<u64>().ok();
        if found == Some(slot.value) || !counted.insert(slot.k) {
            continue;
        }
        match found.and_then(|v| owner.get(&v)) {
            Some(&other) if other != slot.k => {
                c.wrong += 1;
                if c.examples.len() < 20 {
                    c.examples.push(format!(
                        "{} (id {}): holds {}, call {other}'s value; its own is {}",
                        slot.rel,
                        slot.id,
                        text.trim(),
                        slot.value
                    ));
                }
            }
            _ => {
                c.lost += 1;
                let raced = first.get(&slot.id).is_some_and(|p| *p != slot.value.to_string());
                c.raced += usize::from(raced);
                if c.examples.len() < 20 {
                    c.examples.push(format!(
                        "{} (id {}): holds {}, its own is {}{}",
                        slot.rel,
                        slot.id,
                        text.trim(),
                        slot.value,
                        if raced { " (the daemon had read it before its tenant's write)" } else { "" }
                    ));
                }
            }
        }
    }
    for file in ["memory.low", "memory.min"] {
        c.checked += 1;
        match prot.read_string(file) {
            Ok(v) if v.trim() == "0" => {}
            other => {
                c.lost += 1;
                c.examples.push(format!("prot/{file}: {other:?}, was 0"));
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree of plain files: the counting only, no kernel.
    #[test]
    fn a_check_tells_kept_lost_raced_and_wrong_apart_and_counts_each_knob_once() {
        let base = std::env::temp_dir().join(format!("memqos-faults-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let mut s = ChurnState::default();
        // k: 0 kept its value, 1 holds a memqos cap, 2 a cap it was read before its tenant
        // wrote, 3 holds call 7's value (an earlier incarnation of another cgroup).
        let held = [V_BASE, 32 * MIB, 32 * MIB, V_BASE + 7 * 4096];
        let mut first = HashMap::new();
        for (k, found) in held.into_iter().enumerate() {
            let rel = format!("low/tool.{k}");
            std::fs::create_dir_all(base.join(&rel)).unwrap();
            std::fs::write(base.join(&rel).join("memory.high"), format!("{found}\n")).unwrap();
            let id = std::fs::metadata(base.join(&rel)).unwrap().ino();
            let (k, value) = (k as u64, V_BASE + k as u64 * 4096);
            s.owner.insert(value, k);
            s.slots.push(Some(Slot { rel, id, k, value }));
            if k == 2 {
                first.insert(id, "max".to_string());
            }
        }
        s.owner.insert(V_BASE + 7 * 4096, 7);
        let prot = base.join("prot");
        std::fs::create_dir_all(&prot).unwrap();
        std::fs::write(prot.join("memory.low"), "0\n").unwrap();
        std::fs::write(prot.join("memory.min"), "16777216\n").unwrap();
        let c = check(&base, &mut s, &first, &Cgroup::new(&prot));
        assert_eq!((c.checked, c.lost, c.raced, c.wrong), (6, 3, 1, 1), "{c:?}");
        // Again: the same knobs are not counted twice (the protected one is: a second restore).
        let again = check(&base, &mut s, &first, &Cgroup::new(&prot));
        assert_eq!((again.lost, again.wrong), (1, 0), "{again:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
