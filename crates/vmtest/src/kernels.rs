//! Debian kernel packages: resolve the newest version of a series, download and unpack it
//! once, cache it by exact version.
//!
//! The machine's apt configuration is never changed: apt runs with a private sources list
//! and private list/cache directories under the memqos cache, reusing the Debian mirror the
//! machine already has configured.

use crate::cache::{cache_dir, FileLock};
use anyhow::{anyhow, bail, Context, Result};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// A kernel series memqos is tested on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Series {
    /// Debian 12 (bookworm) 6.12 kernels: no memcg tracepoints, no memcg kfuncs.
    V6_12,
    /// The newest 7.x from sid: memcg tracepoints and memcg BPF kfuncs (7.0+).
    V7,
}

impl Series {
    pub const ALL: [Series; 2] = [Series::V6_12, Series::V7];

    pub fn parse(s: &str) -> Result<Series> {
        match s.trim() {
            "6.12" | "6" => Ok(Series::V6_12),
            "7" | "7.x" => Ok(Series::V7),
            other => bail!("unknown kernel series {other:?}: expected \"6.12\" or \"7\""),
        }
    }

    /// Parses a comma-separated list such as "6.12,7"; "all" means both.
    pub fn parse_list(s: &str) -> Result<Vec<Series>> {
        if s.trim() == "all" {
            return Ok(Series::ALL.to_vec());
        }
        s.split(',').filter(|p| !p.trim().is_empty()).map(Series::parse).collect()
    }

    fn suite(self) -> &'static str {
        match self {
            Series::V6_12 => "bookworm",
            Series::V7 => "sid",
        }
    }

    /// From a package name, the kernel version it carries, if it is this series' generic
    /// (non-cloud, non-rt) image. The -cloud kernels lack 9p, which the guest needs.
    fn version_of(self, pkg: &str) -> Option<String> {
        let (prefix, series_prefix) = match self {
            Series::V6_12 => ("linux-image-", "6.12."),
            Series::V7 => ("linux-binary-", "7."),
        };
        let ver = pkg.strip_prefix(prefix)?.strip_suffix("-amd64")?;
        if !ver.starts_with(series_prefix) || ver.contains("-") {
            return None;
        }
        Some(ver.to_owned())
    }

    fn packages(self, version: &str) -> Vec<String> {
        match self {
            Series::V6_12 => vec![format!("linux-image-{version}-amd64")],
            Series::V7 => vec![format!("linux-binary-{version}-amd64"), format!("linux-modules-{version}-amd64")],
        }
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Series::V6_12 => "6.12",
            Series::V7 => "7",
        })
    }
}

/// An unpacked kernel in the cache.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub series: Series,
    /// Debian's kernel release, e.g. "7.2.13+deb14" (uname -r adds "-amd64").
    pub version: String,
    pub vmlinuz: PathBuf,
    /// `lib/modules/<release>` of the unpacked package.
    pub modules_dir: PathBuf,
    pub dir: PathBuf,
}

impl Kernel {
    pub fn release(&self) -> String {
        format!("{}-amd64", self.version)
    }
}

/// Compares Debian kernel versions numerically field by field ("6.12.117" > "6.12.99").
fn version_key(v: &str) -> Vec<u64> {
    v.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap_or(0)).collect()
}

fn newest(mut versions: Vec<String>) -> Option<String> {
    versions.sort_by_key(|v| version_key(v));
    versions.pop()
}

/// How long a resolved package list is trusted before apt is asked again.
const LIST_FRESHNESS: Duration = Duration::from_secs(6 * 3600);

/// Returns the newest kernel of `series`, downloading it if this exact version is not cached.
/// If the mirror cannot be reached but some version is cached, that one is used, with a
/// warning on stderr.
pub fn ensure(series: Series) -> Result<Kernel> {
    let _lock = FileLock::acquire("kernels.lock").context("locking the kernel cache")?;
    let resolved = resolve_newest(series);
    let version = match resolved {
        Ok(v) => v,
        Err(e) => match cached_versions(series).into_iter().last() {
            Some(v) => {
                eprintln!("memqos-vm: warning: could not resolve the newest {series} kernel ({e:#}); using cached {v}");
                v
            }
            None => return Err(e.context(format!("no {series} kernel is cached and none could be downloaded"))),
        },
    };
    if let Some(k) = load_cached(series, &version) {
        return Ok(k);
    }
    download(series, &version)
}

fn kernels_dir() -> PathBuf {
    cache_dir().join("kernels")
}

fn cached_versions(series: Series) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(kernels_dir()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if load_cached(series, &name).is_some() {
                out.push(name);
            }
        }
    }
    out.sort_by_key(|v| version_key(v));
    out
}

fn load_cached(series: Series, version: &str) -> Option<Kernel> {
    let dir = kernels_dir().join(version);
    if !dir.join("complete").exists() {
        return None;
    }
    let (vmlinuz, modules_dir) = locate_image(&dir.join("root")).ok()?;
    Some(Kernel { series, version: version.to_owned(), vmlinuz, modules_dir, dir })
}

/// Finds vmlinuz and the modules directory in an unpacked package tree. Layouts differ:
/// bookworm ships /boot/vmlinuz-<rel> and /lib/modules/<rel>; sid ships
/// /usr/lib/modules/<rel>/vmlinuz.
fn locate_image(root: &Path) -> Result<(PathBuf, PathBuf)> {
    for mods in ["usr/lib/modules", "lib/modules"] {
        let Ok(rd) = std::fs::read_dir(root.join(mods)) else { continue };
        for e in rd.flatten() {
            let rel = e.file_name().to_string_lossy().into_owned();
            let modules_dir = e.path();
            for candidate in [modules_dir.join("vmlinuz"), root.join(format!("boot/vmlinuz-{rel}"))] {
                if candidate.is_file() {
                    return Ok((candidate, modules_dir));
                }
            }
        }
    }
    bail!("no vmlinuz found under {}", root.display())
}

/// The private apt configuration for one suite.
struct PrivateApt {
    dir: PathBuf,
}

impl PrivateApt {
    fn new(series: Series) -> Result<PrivateApt> {
        let dir = cache_dir().join("apt").join(series.suite());
        std::fs::create_dir_all(dir.join("lists/partial"))?;
        std::fs::create_dir_all(dir.join("cache/archives/partial"))?;
        let (mirror, security) = debian_mirrors();
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        let mut list = String::new();
        match series {
            Series::V6_12 => {
                for suite in ["bookworm", "bookworm-updates"] {
                    list += &format!("deb [signed-by={keyring}] {mirror} {suite} main\n");
                }
                if let Some(sec) = security {
                    list += &format!("deb [signed-by={keyring}] {sec} bookworm-security main\n");
                }
            }
            Series::V7 => list += &format!("deb [signed-by={keyring}] {mirror} sid main\n"),
        }
        std::fs::write(dir.join("sources.list"), list)?;
        Ok(PrivateApt { dir })
    }

    fn command(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        let d = &self.dir;
        c.arg("-q")
            .arg("-o")
            .arg(format!("Dir::Etc::sourcelist={}", d.join("sources.list").display()))
            .arg("-o")
            .arg("Dir::Etc::sourceparts=-")
            .arg("-o")
            .arg(format!("Dir::State::lists={}", d.join("lists").display()))
            .arg("-o")
            .arg(format!("Dir::Cache={}", d.join("cache").display()))
            .arg("-o")
            .arg("APT::Sandbox::User=root");
        c
    }

    fn update_if_stale(&self) -> Result<()> {
        let stamp = self.dir.join("updated");
        let fresh = std::fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .map(|t| SystemTime::now().duration_since(t).unwrap_or_default() < LIST_FRESHNESS)
            .unwrap_or(false);
        if fresh && std::env::var_os("MEMQOS_KERNEL_REFRESH").is_none() {
            return Ok(());
        }
        run(self.command("apt-get").arg("update"), "apt-get update (private lists)")?;
        std::fs::write(stamp, "")?;
        Ok(())
    }
}

/// The Debian mirror (and security mirror) this machine already uses, from deb822 or
/// one-line sources; deb.debian.org if none is configured.
fn debian_mirrors() -> (String, Option<String>) {
    let mut mirror = None;
    let mut security = None;
    let mut texts = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/etc/apt/sources.list.d") {
        for e in rd.flatten() {
            texts.push(std::fs::read_to_string(e.path()).unwrap_or_default());
        }
    }
    texts.push(std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default());
    for text in &texts {
        // deb822 stanzas: URIs: + Suites:
        for stanza in text.split("\n\n") {
            let field = |name: &str| stanza.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()));
            if let (Some(uris), Some(suites)) = (field("URIs:"), field("Suites:")) {
                let uri = uris.split_whitespace().next().unwrap_or_default().to_owned();
                if suites.split_whitespace().any(|s| s == "bookworm") && uri.contains("debian") {
                    mirror.get_or_insert(uri.clone());
                }
                if suites.split_whitespace().any(|s| s == "bookworm-security") {
                    security.get_or_insert(uri);
                }
            }
        }
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().filter(|w| !w.starts_with('[')).collect();
            if f.len() >= 3 && f[0] == "deb" {
                if f[2] == "bookworm" && f[1].contains("debian") {
                    mirror.get_or_insert(f[1].to_owned());
                } else if f[2] == "bookworm-security" {
                    security.get_or_insert(f[1].to_owned());
                }
            }
        }
    }
    (mirror.unwrap_or_else(|| "http://deb.debian.org/debian".into()), security)
}

fn resolve_newest(series: Series) -> Result<String> {
    let apt = PrivateApt::new(series)?;
    apt.update_if_stale()?;
    let out = apt.command("apt-cache").arg("pkgnames").output().context("running apt-cache (is apt installed?)")?;
    let names = String::from_utf8_lossy(&out.stdout);
    let versions: Vec<String> = names.lines().filter_map(|p| series.version_of(p.trim())).collect();
    newest(versions).ok_or_else(|| anyhow!("no {series} kernel package found in Debian {}", series.suite()))
}

fn download(series: Series, version: &str) -> Result<Kernel> {
    let apt = PrivateApt::new(series)?;
    let staging = kernels_dir().join(format!(".{version}.partial"));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(staging.join("debs"))?;
    eprintln!("memqos-vm: downloading Debian kernel {version} ({series}) into {}", kernels_dir().display());
    let mut cmd = apt.command("apt-get");
    cmd.arg("download").args(series.packages(version)).current_dir(staging.join("debs"));
    run(&mut cmd, "apt-get download")?;
    for deb in std::fs::read_dir(staging.join("debs"))?.flatten() {
        run(Command::new("dpkg-deb").arg("-x").arg(deb.path()).arg(staging.join("root")), "dpkg-deb -x")?;
    }
    std::fs::remove_dir_all(staging.join("debs"))?;
    locate_image(&staging.join("root"))?;
    std::fs::write(staging.join("complete"), format!("{series} {version}\n"))?;
    let dir = kernels_dir().join(version);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&staging, &dir)?;
    load_cached(series, version).ok_or_else(|| anyhow!("kernel {version} unpacked but not found in {}", dir.display()))
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd.output().with_context(|| format!("{what}: could not start {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!("{what} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_select_generic_images_only() {
        assert_eq!(Series::V6_12.version_of("linux-image-6.12.117+deb12-amd64").as_deref(), Some("6.12.117+deb12"));
        assert_eq!(Series::V6_12.version_of("linux-image-6.12.117+deb12-cloud-amd64"), None);
        assert_eq!(Series::V6_12.version_of("linux-image-6.12.117+deb12-rt-amd64"), None);
        assert_eq!(Series::V6_12.version_of("linux-image-6.1.0-37-amd64"), None);
        assert_eq!(Series::V7.version_of("linux-binary-7.2.13+deb14-amd64").as_deref(), Some("7.2.13+deb14"));
        assert_eq!(Series::V7.version_of("linux-binary-unsigned-7.2.13+deb14-amd64"), None);
        assert_eq!(Series::V7.version_of("linux-binary-7.2.13+deb14-cloud-amd64"), None);
    }

    #[test]
    fn newest_compares_numerically() {
        let v = vec!["6.12.99+deb12".to_string(), "6.12.117+deb12".into(), "6.12.9+deb12".into()];
        assert_eq!(newest(v).unwrap(), "6.12.117+deb12");
        assert_eq!(newest(vec!["7.10.1+deb14".into(), "7.9.30+deb14".into()]).unwrap(), "7.10.1+deb14");
    }

    #[test]
    fn series_parsing() {
        assert_eq!(Series::parse_list("6.12,7").unwrap(), vec![Series::V6_12, Series::V7]);
        assert_eq!(Series::parse_list("all").unwrap(), Series::ALL.to_vec());
        assert!(Series::parse("5.10").unwrap_err().to_string().contains("5.10"));
    }
}
