//! `/proc/PID/stat`, read in one place: the daemon identifies processes by their start time,
//! and the experiments and benches measure the daemon's CPU time.

/// The fields after the command name (field 2, which may hold spaces and parentheses, so we
/// count from the last ')'): index 0 is field 3, `state`. None if the process is gone.
fn fields_after_comm(pid: u32) -> Option<Vec<String>> {
    split(&read(pid)?)
}

/// The text of /proc/PID/stat; None if the process is gone. The command name is whatever
/// bytes the process chose (prctl PR_SET_NAME): not UTF-8 is no reason to lose the numbers
/// after it, so invalid bytes are replaced (never by a ')').
pub fn read(pid: u32) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn split(stat: &str) -> Option<Vec<String>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_ascii_whitespace().map(str::to_owned).collect())
}

/// Field 22 of a /proc/PID/stat text already read (e.g. through a /proc/PID dir fd).
pub fn start_time_of(stat: &str) -> Option<u64> {
    field(&split(stat)?, 22)
}

/// Field 4, the parent's pid, of a /proc/PID/stat text.
pub fn ppid_of(stat: &str) -> Option<u32> {
    field(&split(stat)?, 4).map(|p| p as u32)
}

fn field(fields: &[String], number: usize) -> Option<u64> {
    fields.get(number - 3)?.parse().ok()
}

/// Field 22, `starttime`, in clock ticks after boot: with the pid, it names one process.
pub fn start_time(pid: u32) -> Option<u64> {
    field(&fields_after_comm(pid)?, 22)
}

/// The kernel's PF_EXITING: the process has begun to exit (`flags`, field 9).
const PF_EXITING: u64 = 0x4;

/// The process's start time and whether it is on its way out: exiting (a killed task drops
/// out of cgroup.procs while it tears down, before it is a zombie), a zombie, or dead. One
/// read of /proc/PID/stat; None if it is gone.
pub fn start_time_and_exiting(pid: u32) -> Option<(u64, bool)> {
    start_time_and_exiting_of(&read(pid)?)
}

/// [`start_time_and_exiting`] of a /proc/PID/stat text already read.
pub fn start_time_and_exiting_of(stat: &str) -> Option<(u64, bool)> {
    let f = split(stat)?;
    let state = f.first()?;
    let exiting = state == "Z" || state == "X" || field(&f, 9)? & PF_EXITING != 0;
    Some((field(&f, 22)?, exiting))
}

/// Fields 14 and 15, `utime + stime`, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let f = fields_after_comm(pid)?;
    Some(field(&f, 14)? + field(&f, 15)?)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
pub fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn our_own_process() {
        let pid = std::process::id();
        let start = super::start_time(pid).expect("we exist");
        assert_eq!(super::start_time(pid), Some(start), "start time is stable");
        assert!(super::cpu_ticks(pid).is_some());
        assert_eq!(super::start_time(u32::MAX), None);
        assert_eq!(super::start_time_and_exiting(pid), Some((start, false)));
        assert_eq!(super::start_time_and_exiting(u32::MAX), None);
    }

    #[test]
    fn a_zombie_is_exiting() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: it stays a zombie until wait().
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while super::start_time_and_exiting(pid).map(|(_, exiting)| exiting) != Some(true) {
            assert!(std::time::Instant::now() < deadline, "child {pid} never showed as exiting");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.wait().unwrap();
    }
}
