//! What the bench records (serialized to stats-bench-KERNEL.json) and the text it prints.

use serde::Serialize;

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(super) struct Cost {
    pub(super) wall_s: f64,
    pub(super) user_s: f64,
    pub(super) sys_s: f64,
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, o: Cost) {
        self.wall_s += o.wall_s;
        self.user_s += o.user_s;
        self.sys_s += o.sys_s;
    }
}

/// One method measured in batches.
#[derive(Debug, Default, Serialize)]
pub(super) struct Series {
    pub(super) method: String,
    /// What one operation is.
    pub(super) op: String,
    pub(super) ops: u64,
    pub(super) total: Cost,
    pub(super) per_op_us_median: f64,
    pub(super) per_op_us_min: f64,
    pub(super) per_op_us_max: f64,
    /// control per-op median / this per-op median (>1: faster than the control).
    pub(super) speedup_vs_control: Option<f64>,
    #[serde(skip)]
    pub(super) batches: Vec<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) unavailable: Option<String>,
}

impl Series {
    pub(super) fn new(method: &str, op: &str) -> Series {
        Series { method: method.into(), op: op.into(), ..Default::default() }
    }

    pub(super) fn add(&mut self, ops: u64, c: Cost) {
        self.ops += ops;
        self.total += c;
        self.batches.push(c.wall_s / ops as f64 * 1e6);
    }

    pub(super) fn finish(&mut self) {
        let mut b = self.batches.clone();
        b.sort_by(f64::total_cmp);
        if b.is_empty() {
            return;
        }
        self.per_op_us_median =
            if b.len() % 2 == 1 { b[b.len() / 2] } else { (b[b.len() / 2 - 1] + b[b.len() / 2]) / 2.0 };
        self.per_op_us_min = b[0];
        self.per_op_us_max = b[b.len() - 1];
    }
}

#[derive(Debug, Serialize)]
pub(super) struct TreeResult {
    pub(super) size: usize,
    pub(super) iterations: u64,
    pub(super) series: Vec<Series>,
}

#[derive(Debug, Serialize)]
pub(super) struct Report {
    pub(super) kernel: String,
    pub(super) machine: String,
    pub(super) cpus: usize,
    pub(super) mode: String,
    /// What the single-cgroup runs read.
    pub(super) single_target: String,
    pub(super) iterations: u64,
    pub(super) batches: u64,
    pub(super) single: Vec<Series>,
    pub(super) trees: Vec<TreeResult>,
    pub(super) notes: Vec<String>,
}

pub(super) fn finish(series: &mut [Series]) {
    for s in series.iter_mut() {
        s.finish();
    }
    let control = series[0].per_op_us_median;
    for s in series.iter_mut() {
        if s.ops > 0 && s.per_op_us_median > 0.0 {
            s.speedup_vs_control = Some(control / s.per_op_us_median);
        }
    }
}

pub(super) fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(o, "kernel {} on {} ({} CPUs), {}", r.kernel, r.machine, r.cpus, r.mode);
    let row = |o: &mut String, s: &Series| {
        if let Some(why) = &s.unavailable {
            let _ = writeln!(o, "  {:<40} unavailable: {why}", s.method);
            return;
        }
        let _ = writeln!(
            o,
            "  {:<40} n={:<8} {:>9.2} us/op (min {:.2}, max {:.2})  wall {:.2} s user {:.2} s sys {:.2} s  x{:.1} vs control",
            s.method,
            s.ops,
            s.per_op_us_median,
            s.per_op_us_min,
            s.per_op_us_max,
            s.total.wall_s,
            s.total.user_s,
            s.total.sys_s,
            s.speedup_vs_control.unwrap_or(0.0)
        );
    };
    let _ = writeln!(
        o,
        "single cgroup ({}), {} iterations in {} batches, median per op over batches:",
        r.single_target, r.iterations, r.batches
    );
    for s in &r.single {
        row(&mut o, s);
    }
    for t in &r.trees {
        let _ =
            writeln!(o, "tree of {} cgroups, {} snapshots (per op = one whole-tree snapshot):", t.size, t.iterations);
        for s in &t.series {
            row(&mut o, s);
        }
    }
    for n in &r.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}
