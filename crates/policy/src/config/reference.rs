//! The configuration reference, generated from [`KEYS`] and [`PROFILES`]: a markdown page
//! (`docs/guide/configuration.md`) and the memqos.toml(5) man page
//! (`packaging/memqos.toml.5`). `bash scripts/docs.sh` rewrites both; a test here fails when
//! the committed files differ.

use super::keys::{KeyDoc, KEYS, SECTIONS};
use super::profiles::PROFILES;

/// Where the generated files live in the repository, with their text.
pub fn files() -> [(&'static str, String); 2] {
    [("docs/guide/configuration.md", markdown()), ("packaging/memqos.toml.5", man())]
}

const INTRO: &str = "The daemon reads one TOML file (`memqos daemon --config FILE`; the package's is \
`/etc/memqos/memqos.toml`). Unknown keys are errors, and every error names `file:line:col` and the key; \
`memqos daemon --check --config FILE` validates a file without touching anything, and \
`systemctl reload memqos` applies a changed one whole or not at all. Sizes are bytes, as an integer or a \
string with a binary suffix (`\"64M\"`, `\"1G\"`).";

const MEASURED: &str = "\"Measured\" names the experiment series that ran a value of the key (QEMU guests, \
replayed traces; docs/results/evidence.md and docs/agent-hosts.md have the figures); a key without it \
runs at its default everywhere or was not measured.";

fn keys_of(section: &str) -> impl Iterator<Item = &'static KeyDoc> + '_ {
    KEYS.iter().filter(move |k| k.section() == section)
}

/// docs/guide/configuration.md.
pub fn markdown() -> String {
    let mut out = String::from("# Configuration reference (memqos.toml)\n\n");
    out.push_str(
        "<!-- Generated from crates/policy/src/config/keys/table.rs by `bash scripts/docs.sh` (memqos-docs): \
         edit the table, not this page. Also installed as memqos.toml(5). -->\n\n",
    );
    out.push_str(&format!("{INTRO}\n\n{MEASURED}\n\n## Profiles\n\n"));
    out.push_str(
        "`memqos init --profile NAME` writes one of these to `/etc/memqos/memqos.toml` after checking the host; \
         the package also installs them in `/usr/share/memqos/profiles/`.\n\n| profile | file | for |\n| --- | --- | --- |\n",
    );
    for p in PROFILES {
        out.push_str(&format!("| `{}` | [`{}`](../../{}) | {} |\n", p.name, p.file, p.file, p.summary));
    }
    for (section, about) in SECTIONS {
        let title = if section.is_empty() { "Top level" } else { section };
        out.push_str(&format!("\n## {title}\n\n{about}\n\n"));
        for k in keys_of(section) {
            out.push_str(&format!(
                "- **`{}`** ({}; default {}; {}). {}",
                k.key,
                k.kind,
                k.default.text(),
                k.allowed.text(),
                k.effect
            ));
            if !k.measured.is_empty() {
                out.push_str(&format!(" *Measured:* {}.", k.measured));
            }
            out.push('\n');
        }
    }
    out
}

/// memqos.toml(5), in roff.
pub fn man() -> String {
    let mut out = format!(
        ".TH memqos.toml 5 \"\" \"memqos {}\" \"File Formats\"\n\
         .\\\" Generated from crates/policy/src/config/keys/table.rs by scripts/docs.sh; do not edit.\n\
         .SH NAME\nmemqos.toml \\- memqos daemon configuration\n\
         .SH SYNOPSIS\n/etc/memqos/memqos.toml\n.SH DESCRIPTION\n{}\n.PP\n{}\n.SH PROFILES\n",
        env!("CARGO_PKG_VERSION"),
        roff(INTRO),
        roff(MEASURED)
    );
    out.push_str(&roff(
        "`memqos init --profile NAME` writes one of these after checking the host; the package installs them in `/usr/share/memqos/profiles/`.",
    ));
    out.push('\n');
    for p in PROFILES {
        out.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(p.name), roff(p.summary)));
    }
    for (section, about) in SECTIONS {
        let title = if section.is_empty() { "TOP LEVEL".to_string() } else { format!("[{}]", section.to_uppercase()) };
        out.push_str(&format!(".SH {}\n{}\n", roff(&title), roff(about)));
        for k in keys_of(section) {
            out.push_str(&format!(
                ".TP\n\\fB{}\\fR\n{}; default {}; {}.\n.br\n{}\n",
                roff(k.key),
                roff(k.kind),
                roff(&k.default.text()),
                roff(&k.allowed.text()),
                roff(k.effect)
            ));
            if !k.measured.is_empty() {
                out.push_str(&format!(".br\nMeasured: {}.\n", roff(k.measured)));
            }
        }
    }
    out.push_str(".SH FILES\n/etc/memqos/memqos.toml\n.br\n/usr/share/memqos/profiles/\n");
    out.push_str(".SH SEE ALSO\nmemqos(1), memqos\\-daemon(1), memqos\\-init(1)\n");
    out
}

/// Markdown-ish text as roff: code spans bold, `*emphasis*` italic, backslashes and hyphens
/// escaped, and no line starting with a control character.
fn roff(text: &str) -> String {
    let (mut out, mut code, mut em) = (String::new(), false, false);
    for c in text.chars() {
        match c {
            '`' => {
                out.push_str(if code { "\\fR" } else { "\\fB" });
                code = !code;
            }
            '*' if !code => {
                out.push_str(if em { "\\fR" } else { "\\fI" });
                em = !em;
            }
            '\\' => out.push_str("\\e"),
            '-' => out.push_str("\\-"),
            '\n' => out.push(' '),
            c => out.push(c),
        }
    }
    if out.starts_with(['.', '\'']) {
        out.insert_str(0, "\\&");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_reference_is_what_the_table_gives() {
        let repo = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        for (rel, text) in files() {
            let committed = std::fs::read_to_string(repo.join(rel)).unwrap_or_default();
            assert!(
                committed == text,
                "{rel} is not what crates/policy/src/config/keys/table.rs gives: run bash scripts/docs.sh"
            );
        }
    }

    #[test]
    fn every_key_is_in_both_pages() {
        let (md, man) = (markdown(), man());
        for k in KEYS {
            assert!(md.contains(&format!("**`{}`**", k.key)), "{} missing from the markdown", k.key);
            assert!(man.contains(&format!("\\fB{}\\fR", roff(k.key))), "{} missing from the man page", k.key);
        }
    }

    #[test]
    fn roff_escapes() {
        assert_eq!(roff("`a-b` *x* c\\d"), "\\fBa\\-b\\fR \\fIx\\fR c\\ed");
        assert_eq!(roff(".x"), "\\&.x");
    }
}
