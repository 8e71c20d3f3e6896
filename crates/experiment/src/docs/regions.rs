//! The generated regions' markers: finding them in a doc and replacing their bodies.

use anyhow::{Context, Result};

const START: &str = "<!-- generated: ";
const END: &str = "<!-- end generated: ";

/// The names of the generated regions of `doc`, in order.
pub fn regions(doc: &str) -> Vec<String> {
    doc.lines()
        .filter_map(|l| l.strip_prefix(START))
        .filter_map(|rest| rest.split(' ').next())
        .map(str::to_string)
        .collect()
}

/// `doc` with region `name`'s body replaced by `body`; an error if the markers are missing.
pub fn splice(doc: &str, name: &str, body: &str) -> Result<String> {
    let start = doc
        .lines()
        .scan(0usize, |pos, l| {
            let at = *pos;
            *pos += l.len() + 1;
            Some((at, l))
        })
        .find(|(_, l)| l.strip_prefix(START).is_some_and(|r| r.split(' ').next() == Some(name)))
        .map(|(at, l)| at + l.len() + 1)
        .with_context(|| format!("no \"{START}{name} ...\" line"))?;
    let end_marker = format!("{END}{name} -->");
    let end = doc[start..].find(&end_marker).map(|i| start + i).with_context(|| format!("no \"{end_marker}\""))?;
    Ok(format!("{}{}{}", &doc[..start], body, &doc[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_found_and_spliced() {
        let doc = "a\n<!-- generated: t1 (from x) -->\nold\n<!-- end generated: t1 -->\nb\n";
        assert_eq!(regions(doc), vec!["t1"]);
        let new = splice(doc, "t1", "new\n").unwrap();
        assert_eq!(new, "a\n<!-- generated: t1 (from x) -->\nnew\n<!-- end generated: t1 -->\nb\n");
        assert!(splice(doc, "t2", "x").is_err());
        assert!(splice("<!-- generated: t1 -->\nno end\n", "t1", "x").is_err());
    }
}
