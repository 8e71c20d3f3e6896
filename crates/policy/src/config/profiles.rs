//! The shipped profiles: one self-contained config per kind of host (`configs/*.toml`),
//! embedded so that `memqos init --profile NAME` works without the package's copies.

/// One profile: a config file in `configs/` and what it is for.
#[derive(Clone, Copy, Debug)]
pub struct Profile {
    /// What `--profile` takes.
    pub name: &'static str,
    /// The file in the repository (and, by its file name, in `/usr/share/memqos/profiles/`).
    pub file: &'static str,
    /// One line: the host it is for.
    pub summary: &'static str,
    /// The file's text.
    pub text: &'static str,
}

/// Every profile, in the order `memqos init --help` lists them.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "systemd",
        file: "configs/systemd.toml",
        summary: "a server's systemd slices: services protected, agents.slice throttled",
        text: include_str!("../../../../configs/systemd.toml"),
    },
    Profile {
        name: "kubernetes",
        file: "configs/kubernetes.toml",
        summary: "a Kubernetes node's QoS classes: Guaranteed protected, BestEffort throttled (the DaemonSet's)",
        text: include_str!("../../../../configs/kubernetes.toml"),
    },
    Profile {
        name: "agent-host",
        file: "configs/agent-host.toml",
        summary: "agent sessions and their tool calls under one root, for `memqos run`",
        text: include_str!("../../../../configs/agent-host.toml"),
    },
];

/// The profile called `name`.
pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}

/// The profiles' names, comma-separated, for error messages.
pub fn names() -> String {
    PROFILES.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use std::path::Path;

    fn repo() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
    }

    #[test]
    fn embedded_profiles_are_the_files_in_configs_and_parse() {
        for p in PROFILES {
            let path = repo().join(p.file);
            let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(on_disk == p.text, "profile {}: the embedded copy differs from {}", p.name, p.file);
            let cfg = Config::from_str(p.text, p.file).unwrap_or_else(|e| panic!("profile {}: {e}", p.name));
            assert!(cfg.tiers.len() >= 2, "profile {}: a profile sorts cgroups into tiers", p.name);
        }
    }

    #[test]
    fn every_file_in_configs_is_a_profile() {
        let mut files: Vec<String> = std::fs::read_dir(repo().join("configs"))
            .unwrap()
            .map(|e| format!("configs/{}", e.unwrap().file_name().to_string_lossy()))
            .filter(|f| f.ends_with(".toml"))
            .collect();
        files.sort();
        let mut listed: Vec<String> = PROFILES.iter().map(|p| p.file.to_string()).collect();
        listed.sort();
        assert_eq!(files, listed, "configs/ and PROFILES disagree");
        assert!(PROFILES.iter().all(|p| p.file == format!("configs/{}.toml", p.name)));
    }

    #[test]
    fn lookup_by_name() {
        assert_eq!(profile("agent-host").unwrap().file, "configs/agent-host.toml");
        assert!(profile("laptop").is_none());
        assert_eq!(names(), "systemd, kubernetes, agent-host");
    }
}
