//! The guest's initramfs: busybox, the modules the guest needs, and an init script that
//! mounts the host root over 9p, chroots into it and runs one job.
//!
//! Debian's packages ship no modules.dep (depmod runs at install time), so dependencies are
//! read from each module's `.modinfo` ("depends=") and loaded in dependency order.

use crate::kernels::Kernel;
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Modules the guest needs, loaded in this order after their dependencies. A name with no
/// file in the package is taken to be built in. ext4 asks the crypto API for "crc32c" at
/// mount time (a soft dependency, absent from `depends=`), and with no modprobe in the
/// guest that request fails with ENOENT, so the crc32c providers are listed explicitly.
const WANTED_MODULES: &[&str] = &[
    "netfs",
    "9pnet",
    "9pnet_virtio",
    "9p",
    "virtio_blk",
    "crc32c_generic",
    "crc32c_intel",
    "crc32c_cryptoapi",
    "ext4",
    // A second scratch file system (the dirty-page experiment's `--fs xfs`).
    "xfs",
    // The writable root of systemd guests (`Guest::systemd`).
    "overlay",
];

/// Where the host's static busybox comes from (Debian package busybox-static).
const BUSYBOX: &str = "/bin/busybox";

const INIT_SCRIPT: &str = include_str!("guest_init.sh");

/// Returns the path of a cached initramfs for `kernel`, building it if needed. The cache key
/// covers the init script and module list, so editing either rebuilds.
pub fn ensure(kernel: &Kernel) -> Result<PathBuf> {
    let key = fnv1a(format!("{INIT_SCRIPT}{WANTED_MODULES:?}").as_bytes());
    let path = kernel.dir.join(format!("initramfs-{key:016x}.cpio"));
    if path.exists() {
        return Ok(path);
    }
    if !Path::new(BUSYBOX).exists() {
        bail!("{BUSYBOX} not found: install the Debian package busybox-static (scripts/install-deps.sh does)");
    }
    let modules = resolve_modules(&kernel.modules_dir, WANTED_MODULES)?;
    let mut cpio = Cpio::default();
    for dir in ["bin", "dev", "proc", "sys", "mnt", "modules"] {
        cpio.dir(dir);
    }
    cpio.file("init", 0o755, INIT_SCRIPT.as_bytes());
    cpio.file("bin/busybox", 0o755, &std::fs::read(BUSYBOX).with_context(|| format!("reading {BUSYBOX}"))?);
    let mut order = String::new();
    for (name, bytes) in &modules {
        cpio.file(&format!("modules/{name}.ko"), 0o644, bytes);
        order.push_str(name);
        order.push('\n');
    }
    cpio.file("modules.order", 0o644, order.as_bytes());
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, cpio.finish()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Finds each wanted module and its dependencies; returns (name, decompressed .ko) in load
/// order. Names are normalised the way the kernel does ('-' == '_').
fn resolve_modules(modules_dir: &Path, wanted: &[&str]) -> Result<Vec<(String, Vec<u8>)>> {
    let mut index = BTreeMap::new();
    index_modules(&modules_dir.join("kernel"), &mut index)?;
    let mut ordered = Vec::new();
    let mut seen = HashSet::new();
    for name in wanted {
        visit(&normalise(name), &index, &mut seen, &mut ordered, 0)?;
    }
    Ok(ordered)
}

fn visit(
    name: &str,
    index: &BTreeMap<String, PathBuf>,
    seen: &mut HashSet<String>,
    ordered: &mut Vec<(String, Vec<u8>)>,
    depth: usize,
) -> Result<()> {
    if depth > 32 {
        bail!("module dependency chain too deep at {name}");
    }
    if !seen.insert(name.to_owned()) {
        return Ok(());
    }
    let Some(path) = index.get(name) else { return Ok(()) }; // built in
    let bytes = read_module(path)?;
    for dep in modinfo_depends(&bytes) {
        visit(&normalise(&dep), index, seen, ordered, depth + 1)?;
    }
    ordered.push((name.to_owned(), bytes));
    Ok(())
}

fn normalise(name: &str) -> String {
    name.replace('-', "_")
}

fn index_modules(dir: &Path, index: &mut BTreeMap<String, PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?.flatten() {
        let p = e.path();
        if p.is_dir() {
            index_modules(&p, index)?;
        } else if let Some(file) = p.file_name().and_then(|f| f.to_str()) {
            if let Some(stem) = file.split_once(".ko").map(|(s, _)| s) {
                index.insert(normalise(stem), p.clone());
            }
        }
    }
    Ok(())
}

fn read_module(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let (tool, args): (&str, &[&str]) = if name.ends_with(".xz") {
        ("xz", &["-dc"])
    } else if name.ends_with(".zst") {
        ("zstd", &["-dcq"])
    } else if name.ends_with(".gz") {
        ("gzip", &["-dc"])
    } else {
        return std::fs::read(path).with_context(|| format!("reading {name}"));
    };
    let out = Command::new(tool).args(args).arg(path).output().with_context(|| format!("running {tool} on {name}"))?;
    if !out.status.success() {
        bail!("{tool} failed on {name}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out.stdout)
}

/// The `depends=` entry of a module's .modinfo section: NUL-terminated "key=value" strings.
fn modinfo_depends(ko: &[u8]) -> Vec<String> {
    let needle = b"\0depends=";
    let Some(start) = ko.windows(needle.len()).position(|w| w == needle) else { return Vec::new() };
    let rest = &ko[start + needle.len()..];
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end]).split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// A minimal writer for the "newc" cpio format the kernel unpacks as initramfs.
#[derive(Default)]
struct Cpio {
    out: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[]);
    }

    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100000 | perm, data);
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let nlink = if mode & 0o040000 != 0 { 2 } else { 1 };
        let fields = [self.ino, mode, 0, 0, nlink, 0, data.len() as u32, 0, 0, 0, 0, name.len() as u32 + 1, 0];
        let mut header = String::from("070701");
        for f in fields {
            header.push_str(&format!("{f:08x}"));
        }
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.out.len() % 4 != 0 {
            self.out.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.ino = 0;
        self.entry("TRAILER!!!", 0, &[]);
        self.out
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modinfo_depends_parses_list() {
        let blob = b"\x7fELF....\0license=GPL\0depends=netfs,9pnet\0intree=Y\0";
        assert_eq!(modinfo_depends(blob), vec!["netfs", "9pnet"]);
        assert!(modinfo_depends(b"\0depends=\0").is_empty());
        assert!(modinfo_depends(b"nothing").is_empty());
    }

    #[test]
    fn cpio_newc_layout() {
        let mut c = Cpio::default();
        c.file("init", 0o755, b"#!/bin/sh\n");
        let out = c.finish();
        assert_eq!(&out[..6], b"070701");
        // header (110 bytes) + "init\0" padded to 4 = 116, then data padded.
        assert_eq!(&out[110..114], b"init");
        assert_eq!(out.len() % 4, 0);
        let trailer = out.windows(10).position(|w| w == b"TRAILER!!!").unwrap();
        assert!(trailer > 116);
    }
}
