//! `KEYS` against the parser: the same keys, the same defaults, the same bounds.

use super::{Allowed, KeyDefault, KEYS, SECTIONS};
use crate::Config;
use serde::de::{self, Deserialize, Deserializer, Visitor};

/// The field names serde derives for `T` (a struct), as it passes them to the deserializer.
pub(in crate::config) fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Recorder<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Recorder<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("recorded"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Recorder(&mut fields));
    assert!(!fields.is_empty(), "{} is not a struct with fields", std::any::type_name::<T>());
    fields
}

#[test]
fn the_reference_names_every_key_the_parser_accepts_and_no_other() {
    let tables = super::super::raw::tables();
    let mut accepted = Vec::new();
    for (table, fields) in &tables {
        for f in fields.iter() {
            let dotted = if table.is_empty() { f.to_string() } else { format!("{table}.{f}") };
            // A field that is itself a table is listed by its own keys.
            if !tables.iter().any(|(t, _)| *t == dotted) {
                accepted.push(dotted);
            }
        }
    }
    accepted.sort();
    let mut documented: Vec<String> = KEYS.iter().map(|k| k.key.to_string()).collect();
    documented.sort();
    let missing: Vec<_> = accepted.iter().filter(|k| !documented.contains(k)).collect();
    let extra: Vec<_> = documented.iter().filter(|k| !accepted.contains(k)).collect();
    assert!(missing.is_empty(), "keys the parser accepts that config/keys/table.rs does not document: {missing:?}");
    assert!(extra.is_empty(), "keys config/keys/table.rs documents that the parser does not accept: {extra:?}");
    let mut dedup = documented.clone();
    dedup.dedup();
    assert_eq!(dedup, documented, "a key is documented twice");
}

#[test]
fn keys_are_grouped_by_section_in_file_order() {
    let order: Vec<&str> = SECTIONS.iter().map(|(s, _)| *s).collect();
    let positions: Vec<usize> = KEYS
        .iter()
        .map(|k| order.iter().position(|s| *s == k.section()).unwrap_or_else(|| panic!("{}: no section", k.key)))
        .collect();
    assert!(positions.windows(2).all(|w| w[0] <= w[1]), "KEYS is not in SECTIONS' order");
}

/// A config that sets `key` to `value` (TOML), or leaves it out, in one protected, throttled
/// tier (so that every tier key is allowed) below a fixed root.
fn config_text(key: &str, value: Option<&str>) -> String {
    type Lines = Vec<(String, String)>;
    fn set(lines: &mut Lines, k: &str, v: Option<&str>) {
        lines.retain(|(n, _)| n != k);
        if let Some(v) = v {
            lines.push((k.into(), v.into()));
        }
    }
    let pairs = |l: &[(&str, &str)]| -> Lines { l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() };
    let mut top = pairs(&[("cgroup_root", "\"/sys/fs/cgroup/t\"")]);
    let mut tier = pairs(&[("name", "\"t\""), ("match", "[\"**\"]"), ("protect", "\"low\""), ("throttle", "true")]);
    let mut table: Lines = Vec::new();
    let (section, rest) = key.split_once('.').unwrap_or(("", key));
    match (section, rest.split_once('.')) {
        ("", _) => set(&mut top, rest, value),
        ("tier", Some((inline, sub))) => set(&mut tier, inline, value.map(|v| format!("{{ {sub} = {v} }}")).as_deref()),
        ("tier", None) => set(&mut tier, rest, value),
        _ => set(&mut table, rest, value),
    }
    let lines = |l: &Lines| l.iter().map(|(k, v)| format!("{k} = {v}\n")).collect::<String>();
    let mut text = format!("{}[[tier]]\n{}", lines(&top), lines(&tier));
    if !section.is_empty() && section != "tier" {
        text.push_str(&format!("[{section}]\n{}", lines(&table)));
    }
    text
}

/// Everything a parsed config holds, comparable.
fn parsed(text: &str) -> Result<String, String> {
    let c = Config::from_str(text, "test.toml").map_err(|e| e.to_string())?;
    let tiers: Vec<_> = c.tiers.iter().map(|(_, t)| t.clone()).collect();
    Ok(format!("{:?}", (c.cgroup_root, c.state_dir, c.history_file, c.signals, c.policy, c.metrics, c.control, tiers)))
}

#[test]
fn each_documented_default_parses_as_leaving_the_key_out() {
    assert!(parsed(&config_text("policy.hold_ms", None)).is_ok(), "the test's base config parses");
    for k in KEYS {
        let KeyDefault::Value(v) = k.default else { continue };
        let without = parsed(&config_text(k.key, None)).unwrap_or_else(|e| panic!("{}: {e}", k.key));
        let with = parsed(&config_text(k.key, Some(v))).unwrap_or_else(|e| panic!("{} = {v}: {e}", k.key));
        assert_eq!(with, without, "{}: the documented default {v} is not the parser's", k.key);
    }
}

#[test]
fn each_documented_range_is_the_parsers() {
    for k in KEYS {
        let (ok, bad): (Vec<String>, Vec<String>) = match k.allowed {
            Allowed::Bool => (vec!["true".into(), "false".into()], vec!["\"yes\"".into()]),
            Allowed::Int(lo, hi) => {
                (vec![lo.to_string(), hi.to_string()], vec![(lo - 1).to_string(), (hi + 1).to_string()])
            }
            Allowed::Float { min: (lo, lo_in), max: (hi, hi_in) } => {
                let (mut ok, mut bad) = (Vec::new(), vec![format!("{:?}", lo - 1.0), format!("{:?}", hi + 1.0)]);
                for (x, incl) in [(lo, lo_in), (hi, hi_in)] {
                    if incl { &mut ok } else { &mut bad }.push(format!("{x:?}"));
                }
                (ok, bad)
            }
            Allowed::Size(min) => {
                (vec![min.to_string()], min.checked_sub(1).map(|m| m.to_string()).into_iter().collect())
            }
            Allowed::OneOf(values) => (values.iter().map(|v| format!("\"{v}\"")).collect(), vec!["\"bogus\"".into()]),
            Allowed::AbsolutePath => (vec!["\"/x/y.prom\"".into()], vec!["\"x/y.prom\"".into()]),
            Allowed::Other(_) => continue,
        };
        for v in ok {
            if let Err(e) = parsed(&config_text(k.key, Some(&v))) {
                panic!("{} = {v} is documented as allowed ({}), the parser says: {e}", k.key, k.allowed.text());
            }
        }
        for v in bad {
            assert!(
                parsed(&config_text(k.key, Some(&v))).is_err(),
                "{} = {v} is documented as out of range ({}), the parser takes it",
                k.key,
                k.allowed.text()
            );
        }
    }
}
