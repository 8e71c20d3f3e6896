//! The C control: the seed's way of reading memory.stat, compiled here with `cc -O2`.

use super::report::Cost;
use super::trees::TempDir;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The seed's control method, written fresh: stdio + scanf family, seek back each time.
const CONTROL_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>

/* control ITERATIONS FILE...: per iteration, read every FILE line by line with fgets,
 * convert "key value" with sscanf into numbers, then fseek back to the start. */
int main(int argc, char **argv)
{
	if (argc < 3) { fprintf(stderr, "usage: control ITERATIONS FILE...\n"); return 2; }
	long iters = atol(argv[1]);
	int n = argc - 2;
	FILE **f = calloc(n, sizeof(*f));
	for (int i = 0; i < n; i++) {
		f[i] = fopen(argv[2 + i], "r");
		if (!f[i]) { perror(argv[2 + i]); return 2; }
	}
	static unsigned long long vals[512];
	char line[512], key[256];
	unsigned long long checksum = 0, lines = 0;
	struct timespec t0, t1;
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long it = 0; it < iters; it++) {
		for (int i = 0; i < n; i++) {
			int k = 0;
			while (k < 512 && fgets(line, sizeof(line), f[i]))
				if (sscanf(line, "%255s %llu", key, &vals[k]) == 2)
					k++;
			checksum += vals[0];
			lines += k;
			if (fseek(f[i], 0, SEEK_SET)) { perror("fseek"); return 2; }
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	getrusage(RUSAGE_SELF, &r1);
#define TV(a, b) ((b.tv_sec - a.tv_sec) + (b.tv_usec - a.tv_usec) / 1e6)
	printf("{\"wall_s\":%.6f,\"user_s\":%.6f,\"sys_s\":%.6f,\"lines\":%llu,\"checksum\":%llu}\n",
	       (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
	       TV(r0.ru_utime, r1.ru_utime), TV(r0.ru_stime, r1.ru_stime), lines, checksum);
	return 0;
}
"#;

pub(super) struct Control {
    exe: PathBuf,
    _dir: TempDir,
}

impl Control {
    pub(super) fn build() -> Result<Control> {
        let dir = TempDir::new("memqos-bench-control")?;
        let src = dir.0.join("control.c");
        std::fs::write(&src, CONTROL_C)?;
        let exe = dir.0.join("control");
        let out = Command::new("cc")
            .args(["-O2", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .context("running cc to build the C control (install gcc)")?;
        if !out.status.success() {
            bail!("cc failed building the C control:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(Control { exe, _dir: dir })
    }

    pub(super) fn run(&self, iterations: u64, files: &[PathBuf]) -> Result<Cost> {
        let out = Command::new(&self.exe)
            .arg(iterations.to_string())
            .args(files)
            .output()
            .context("running the C control")?;
        if !out.status.success() {
            bail!("C control failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("C control output")?;
        let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
        if v["lines"].as_u64().unwrap_or(0) == 0 {
            bail!("C control parsed no lines from {files:?}");
        }
        Ok(Cost { wall_s: f("wall_s"), user_s: f("user_s"), sys_s: f("sys_s") })
    }
}
