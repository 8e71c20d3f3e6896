//! `memqos-shell`: a drop-in SHELL that runs every command through `memqos run`.
//!
//! An agent runtime runs its tool calls as `$SHELL -c 'command'`. Pointing SHELL at
//! `memqos-shell` (a symlink to the memqos binary; it acts on the name it is called by) puts
//! each of those calls in its own cgroup with no change to the agent:
//!
//! ```text
//! memqos-shell -c 'pytest -x'  ==  memqos run -- /bin/bash -c 'pytest -x'
//! ```
//!
//! The environment steers it, since an unmodified agent passes no flags:
//! `MEMQOS_SHELL_REAL` (the real shell; default /bin/bash, else /bin/sh), `MEMQOS_HINT`,
//! `MEMQOS_TIER`, `MEMQOS_SESSION`, `MEMQOS_ROOT` / `MEMQOS_CONFIG`, `MEMQOS_RUN_STATS=1`,
//! `MEMQOS_RUN_JSON=1`. A call inside a call (make running recipe lines through SHELL)
//! stays in the outer call's cgroup.

use std::ffi::OsString;
use std::path::Path;

use crate::run::Request;

/// The name under which the memqos binary acts as the shell wrapper.
pub const SHELL_NAME: &str = "memqos-shell";

/// True when argv[0]'s file name is `memqos-shell`.
pub fn invoked_as_shell(argv0: &std::ffi::OsStr) -> bool {
    Path::new(argv0).file_name().is_some_and(|n| n == SHELL_NAME)
}

/// The `memqos run` request for `memqos-shell ARGS...`; `env` looks variables up.
pub fn request(args: &[OsString], env: impl Fn(&str) -> Option<String>) -> Request {
    let var = |k: &str| env(k).filter(|v| !v.is_empty());
    let real = var("MEMQOS_SHELL_REAL")
        .unwrap_or_else(|| if Path::new("/bin/bash").exists() { "/bin/bash" } else { "/bin/sh" }.to_owned());
    let mut command = vec![OsString::from(real)];
    command.extend(args.iter().cloned());
    let flag = |k: &str| var(k).is_some_and(|v| v != "0");
    Request {
        session: var("MEMQOS_SESSION"),
        tier: var("MEMQOS_TIER"),
        hint: var("MEMQOS_HINT"),
        stats: flag("MEMQOS_RUN_STATS"),
        json: flag("MEMQOS_RUN_JSON"),
        command,
        ..Request::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn shell_args_become_a_run_of_the_real_shell() {
        assert!(invoked_as_shell("/usr/local/bin/memqos-shell".as_ref()));
        assert!(!invoked_as_shell("/usr/bin/memqos".as_ref()));
        let env: HashMap<&str, &str> =
            [("MEMQOS_SHELL_REAL", "/bin/sh"), ("MEMQOS_HINT", "low"), ("MEMQOS_RUN_STATS", "1"), ("MEMQOS_TIER", "")]
                .into();
        let r = request(&["-c".into(), "echo hi".into()], |k| env.get(k).map(|v| v.to_string()));
        assert_eq!(r.command, vec![OsString::from("/bin/sh"), "-c".into(), "echo hi".into()]);
        assert_eq!((r.hint.as_deref(), r.tier.as_deref(), r.stats, r.json), (Some("low"), None, true, false));
        assert!(!r.runtime && r.root.is_none());
    }
}
