//! Resolves memory.stat keys against a BTF file, as the BPF backend does at start-up, and
//! prints where each key comes from. For checking a kernel without booting it:
//!
//!     cargo run --release -p memqos-stats --example keyplan -- BTF_FILE MEMORY_STAT_FILE

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [btf, stat] = args.as_slice() else {
        return Err("usage: keyplan BTF_FILE MEMORY_STAT_FILE (or a file of space-separated keys)".into());
    };
    let btf = memqos_bpf::Btf::load(btf)?;
    let text = std::fs::read_to_string(stat)?;
    // Either memory.stat itself ("key value" lines) or a bare key list.
    let keys: Vec<&str> = if text.lines().all(|l| l.split_whitespace().count() == 2) {
        text.lines().filter_map(|l| l.split_whitespace().next()).collect()
    } else {
        text.split_whitespace().collect()
    };
    let plan = memqos_stats::stat_key_plan(&keys, &btf);
    for (k, src) in plan.keys.iter().zip(&plan.sources) {
        match src {
            memqos_stats::KeySource::Fetched(slot) => println!("{k:<28} {:?}", plan.fetches[*slot]),
            memqos_stats::KeySource::Sum(parts) => {
                println!("{k:<28} sum of {:?}", parts.iter().map(|&p| plan.keys[p].as_str()).collect::<Vec<_>>())
            }
        }
    }
    if !plan.unresolved.is_empty() {
        return Err(format!("unresolved: {}", plan.unresolved.join(", ")).into());
    }
    Ok(())
}
