//! `memqos-run`: `memqos run` as a small program of its own, for agent hosts that start it for
//! every tool call. The memqos binary links libbpf's libelf and libz and builds its whole
//! command line (every subcommand) before running a call; this one links libc and reads its
//! few options by hand, so each call pays less to start (docs/agent-hosts.md, Overhead).
//! Called as `memqos-shell` (a symlink) it is the drop-in SHELL, like the memqos binary.

use memqos_agent::Request;
use std::ffi::OsString;
use std::process::ExitCode;

const USAGE: &str = "\
Usage: memqos-run [OPTIONS] -- CMD [ARGS...]

Runs CMD (an agent's tool call) in its own cgroup below the managed root,
<root>/<session>/<tier>.<pid>, removed afterwards; exits with CMD's status and explains an
OOM kill on stderr. The same as `memqos run`, started faster.

Options:
      --tier T        tier of the call (its cgroup's name prefix); default from --hint, else tool
      --session S     session of the call; default: the session this process runs in, else
                      $MEMQOS_SESSION, else default
      --hint H        low | medium | high, or a size the call expects to need (e.g. 2G)
      --max SIZE      memory.max of the call's cgroup
      --runtime       run the agent runtime itself, in <session>/runtime
      --expect SIZE   the peak CMD expects (user.memqos.expected_peak on its cgroup): a
                      protected tier (the runtime's) reserves that room from the start
      --workload KEY  the workload CMD runs (user.memqos.workload on its cgroup): a
                      learn_peak tier learns its peak under KEY and reserves it for the
                      next call with the same KEY
      --root DIR      the managed root (default: the config's cgroup_root, $MEMQOS_ROOT,
                      /sys/fs/cgroup/agents)
      --config FILE   a daemon config: its cgroup_root is the root; the tier is checked
      --state-dir DIR the daemon's state directory (default: $MEMQOS_STATE_DIR, the
                      config's state_dir, /run/memqos): with `admission = true` there,
                      the call's memory.high is armed at its tier's allowance before it starts,
                      and a call with no room waits for some first (admission_wait_ms)
  -v, --verbose       say whether a memory ceiling was armed (and why not) and any wait
      --stats         a one-line summary on stderr after the call
      --json          the call's report as one JSON line on stderr after the call
  -h, --help          this text
  -V, --version       the version

Exit status: CMD's, 128 + signal if a signal ended it, 125 when the call could not be set up,
126/127 when CMD cannot be executed or found, 2 for a usage error. See docs/agent-hosts.md.";

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    let argv0 = args.next();
    let rest: Vec<OsString> = args.collect();
    if argv0.is_some_and(|a0| memqos_agent::shell::invoked_as_shell(&a0)) {
        let req = memqos_agent::shell::request(&rest, |k| std::env::var(k).ok());
        return ExitCode::from(memqos_agent::run(&req));
    }
    match parse(rest) {
        Ok(Parsed::Run(req)) => ExitCode::from(memqos_agent::run(&req)),
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Parsed::Version) => {
            println!("memqos-run {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memqos-run: {e}\n(memqos-run --help lists the options)");
            ExitCode::from(2)
        }
    }
}

enum Parsed {
    /// Boxed: a request is large beside the other variants.
    Run(Box<Request>),
    Help,
    Version,
}

/// The options before `--` (`--opt value` or `--opt=value`), then the command.
fn parse(args: Vec<OsString>) -> Result<Parsed, String> {
    let mut req = Request::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let Some(text) = arg.to_str() else {
            return Err(format!("{arg:?} is not an option (a command goes after --)"));
        };
        if text == "--" {
            req.command = it.collect();
            if req.command.is_empty() {
                return Err("no command after --".into());
            }
            return Ok(Parsed::Run(Box::new(req)));
        }
        let (name, inline) = match text.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ => (text, None),
        };
        let mut value = |opt: &str| -> Result<String, String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => it
                    .next()
                    .and_then(|v| v.into_string().ok())
                    .filter(|v| v != "--")
                    .ok_or_else(|| format!("{opt} needs a value")),
            }
        };
        let flag = |opt: &str| match &inline {
            Some(_) => Err(format!("{opt} takes no value")),
            None => Ok(true),
        };
        match name {
            "--tier" => req.tier = Some(value(name)?),
            "--session" => req.session = Some(value(name)?),
            "--hint" => req.hint = Some(value(name)?),
            "--max" => req.max = Some(value(name)?),
            "--expect" => req.expect = Some(value(name)?),
            "--workload" => req.workload = Some(value(name)?),
            "--root" => req.root = Some(value(name)?.into()),
            "--config" => req.config = Some(value(name)?.into()),
            "--runtime" => req.runtime = flag(name)?,
            "--stats" => req.stats = flag(name)?,
            "--json" => req.json = flag(name)?,
            "--state-dir" => req.state_dir = Some(value(name)?.into()),
            "-v" | "--verbose" => req.verbose = flag(name)?,
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            other if other.starts_with('-') => return Err(format!("unknown option {other}")),
            other => return Err(format!("{other:?} before --: the command goes after --")),
        }
    }
    Err("no command: memqos-run [OPTIONS] -- CMD [ARGS...]".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn options_in_both_spellings_then_the_command() {
        let Ok(Parsed::Run(r)) = parse(args(&[
            "--session",
            "s1",
            "--hint=low",
            "--runtime",
            "--root",
            "/r",
            "--json",
            "--",
            "ls",
            "--",
            "-l",
        ])) else {
            panic!("not a run");
        };
        assert_eq!(r.session.as_deref(), Some("s1"));
        assert_eq!(r.hint.as_deref(), Some("low"));
        assert!(r.runtime && r.json && !r.stats);
        assert_eq!(r.root.as_deref(), Some(std::path::Path::new("/r")));
        assert_eq!(r.command, args(&["ls", "--", "-l"]), "everything after the first -- is the command");
    }

    #[test]
    fn workload_in_both_spellings() {
        for a in [&["--workload", "cargo test", "--", "ls"][..], &["--workload=cargo test", "--", "ls"]] {
            let Ok(Parsed::Run(r)) = parse(args(a)) else { panic!("{a:?}: not a run") };
            assert_eq!(r.workload.as_deref(), Some("cargo test"), "{a:?}");
        }
        assert!(USAGE.contains("--workload KEY"));
    }

    #[test]
    fn usage_errors_say_what_is_wrong() {
        for (a, says) in [
            (&["--tier"][..], "--tier needs a value"),
            (&["--tier", "--", "ls"], "--tier needs a value"),
            (&["--workload"], "--workload needs a value"),
            (&["--workload", "--", "ls"], "--workload needs a value"),
            (&["--json=yes", "--", "ls"], "--json takes no value"),
            (&["--bogus", "--", "ls"], "unknown option --bogus"),
            (&["ls"], "the command goes after --"),
            (&["--json", "--"], "no command after --"),
            (&["--json"], "no command"),
        ] {
            match parse(args(a)) {
                Err(e) => assert!(e.contains(says), "{a:?}: {e}"),
                Ok(_) => panic!("{a:?} parsed"),
            }
        }
        assert!(matches!(parse(args(&["--help"])), Ok(Parsed::Help)));
        assert!(matches!(parse(args(&["-V"])), Ok(Parsed::Version)));
    }
}
