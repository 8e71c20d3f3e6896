//! Compiles every `src/bpf/*.bpf.c` into a libbpf-rs skeleton `$OUT_DIR/<name>.skel.rs`.
//! Programs are CO-RE against the one `include/vmlinux.h`, so a single object loads on
//! 6.12 and 7.x guests alike.

use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let include_dir = manifest_dir.join("include");
    let bpf_dir = manifest_dir.join("src/bpf");
    println!("cargo:rerun-if-changed={}", include_dir.display());
    println!("cargo:rerun-if-changed={}", bpf_dir.display());

    let mut sources: Vec<PathBuf> = std::fs::read_dir(&bpf_dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    sources.retain(|p| p.to_string_lossy().ends_with(".bpf.c"));
    sources.sort();
    for source in sources {
        println!("cargo:rerun-if-changed={}", source.display());
        let name = skeleton_name(&source);
        SkeletonBuilder::new()
            .source(&source)
            .clang_args([
                std::ffi::OsString::from("-I"),
                include_dir.clone().into_os_string(),
                std::ffi::OsString::from("-Wall"),
            ])
            .build_and_generate(out_dir.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building BPF program {}: {e:#}", source.display()));
    }
}

/// `src/bpf/signals.bpf.c` -> `signals`.
fn skeleton_name(source: &Path) -> String {
    let file = source.file_name().unwrap().to_string_lossy();
    file.trim_end_matches(".bpf.c").to_string()
}
