//! `memqos generate man|completions DIR`: man pages and shell completions from the CLI
//! definition itself, so they never drift from `--help`. Used by `scripts/build-deb.sh`
//! (named after the binary that runs it).

use anyhow::{Context, Result};
use clap::{Args, Command, Subcommand, ValueEnum};
use clap_complete::Shell;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// memqos.1 and one memqos-SUBCOMMAND.1 per visible subcommand (nested ones too).
    Man { dir: PathBuf },
    /// memqos.bash, _memqos (zsh) and memqos.fish.
    Completions { dir: PathBuf },
}

pub fn run(a: GenerateArgs, cli: Command) -> Result<u8> {
    match a.what {
        What::Man { dir } => {
            create_dir(&dir)?;
            let mut written = Vec::new();
            man_pages(cli, &dir, &mut written)?;
            for p in written {
                println!("{}", p.display());
            }
        }
        What::Completions { dir } => {
            create_dir(&dir)?;
            let bin = cli.get_name().to_string();
            for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
                let mut cli = cli.clone();
                let path = clap_complete::generate_to(shell, &mut cli, &bin, &dir).with_context(|| {
                    format!(
                        "writing {} completions into {}",
                        shell.to_possible_value().unwrap().get_name(),
                        dir.display()
                    )
                })?;
                println!("{}", path.display());
            }
        }
    }
    Ok(0)
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

/// Writes the page for `cmd`, then recurses into its visible subcommands. A subcommand's page
/// is named after its full path (memqos-bench-stats.1), as git and cargo name theirs.
fn man_pages(cmd: Command, dir: &Path, written: &mut Vec<PathBuf>) -> Result<()> {
    let cmd = cmd.disable_help_subcommand(true);
    let mut built = cmd.clone();
    built.build();
    let name = built.get_display_name().unwrap_or_else(|| built.get_name()).to_string();
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(built.clone()).render(&mut out).with_context(|| format!("rendering {name}.1"))?;
    std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
    written.push(path);
    for sub in built.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_pages(sub.clone(), dir, written)?;
    }
    Ok(())
}
