//! Property tests of the BTF reader (issue 53, deliverable 7): the kernel's BTF is outside
//! input (a file a packager, a container image or a broken kernel build provides), so any
//! bytes must give a `Btf` every query can be asked of, or an error naming the file and an
//! offset inside it; never a panic.
//!
//! Blobs are built record by record with the crate's `Builder` (well-formed most of the time,
//! so the queries get past the header checks), then some of their bytes are overwritten and
//! some are cut off. The long run: `scripts/fuzz-long.sh`.

use memqos_bpf::btf::builder::Builder;
use memqos_bpf::btf::{Btf, BtfError, Kind, TypeId};
use proptest::prelude::*;

const NAMES: [&str; 8] = ["", "task_struct", "int", "bpf_kfunc", "vm_event_item", "x", "é", "mem_cgroup"];

/// One step of building a type section: a record (kind, vlen, kind_flag, size or type, name)
/// followed by `trailer` raw words, which may or may not be the trailer its kind needs.
#[derive(Clone, Debug)]
struct Step {
    raw_kind: u8,
    vlen: u32,
    kflag: bool,
    size_or_type: u32,
    name: usize,
    trailer: Vec<u32>,
}

fn word() -> impl Strategy<Value = u32> {
    // Small values are ids, string offsets and counts that land somewhere; large ones do not.
    prop_oneof![4 => 0u32..40, 1 => any::<u32>()]
}

fn step() -> impl Strategy<Value = Step> {
    (
        0u8..22,
        prop_oneof![3 => 0u32..4, 1 => any::<u32>()],
        any::<bool>(),
        word(),
        0..NAMES.len(),
        prop::collection::vec(word(), 0..12),
    )
        .prop_map(|(raw_kind, vlen, kflag, size_or_type, name, trailer)| Step {
            raw_kind,
            vlen: vlen & 0xffff,
            kflag,
            size_or_type,
            name,
            trailer,
        })
}

fn blob() -> impl Strategy<Value = Vec<u8>> {
    let built = (
        any::<bool>(),
        prop::collection::vec(step(), 0..24),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        prop::option::of(any::<prop::sample::Index>()),
    )
        .prop_map(|(big_endian, steps, pokes, cut)| {
            let mut b = if big_endian { Builder::new().big_endian() } else { Builder::new() };
            for s in &steps {
                let name = NAMES[s.name];
                match Kind::from_raw(s.raw_kind) {
                    Some(kind) => {
                        b.record(name, kind, s.vlen, s.kflag, s.size_or_type);
                    }
                    None => {
                        // An unknown kind, written by hand.
                        let off = b.str(name);
                        b.put(off);
                        b.put(s.vlen | u32::from(s.raw_kind & 0x1f) << 24 | u32::from(s.kflag) << 31);
                        b.put(s.size_or_type);
                    }
                }
                for w in &s.trailer {
                    b.put(*w);
                }
            }
            let mut bytes = b.build();
            for (at, v) in pokes {
                let i = at.index(bytes.len());
                bytes[i] = v;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            bytes
        });
    prop_oneof![4 => built, 1 => prop::collection::vec(any::<u8>(), 0..200)]
}

/// Asks every question the reader answers, of every type.
fn ask_everything(btf: &Btf) -> Result<(), TestCaseError> {
    let n = btf.type_count();
    prop_assert!(btf.type_by_id(TypeId(0)).is_none(), "void has no record");
    prop_assert!(btf.type_by_id(TypeId(n as u32 + 1)).is_none(), "no record past the end");
    for id in 1..=n as u32 {
        let t = btf.type_by_id(TypeId(id));
        prop_assert!(t.is_some(), "type {} of {} has no record", id, n);
        let t = t.unwrap();
        prop_assert_eq!(t.id(), TypeId(id));
        let members = t.members();
        if matches!(t.kind(), Kind::Struct | Kind::Union) {
            prop_assert_eq!(members.len(), t.vlen() as usize);
        }
        let enumerators = t.enumerators();
        if matches!(t.kind(), Kind::Enum | Kind::Enum64) {
            prop_assert_eq!(enumerators.len(), t.vlen() as usize);
        }
        let _ = (t.name(), t.size(), t.referenced(), t.kind_flag(), t.decl_tag_component());
        let _ = btf.skip_modifiers(TypeId(id));
        let _ = btf.decl_tags_of(TypeId(id));
        for m in &members {
            let _ = btf.find_member(t.name(), m.name);
        }
        if !t.name().is_empty() {
            // Anonymous types are not indexed by name; a named enum's enumerators are found.
            for e in &enumerators {
                prop_assert!(btf.enum_value(t.name(), e.name).is_some(), "{}::{} not found", t.name(), e.name);
            }
        }
    }
    for name in NAMES {
        for t in btf.types_named(name) {
            prop_assert_eq!(t.name(), name, "types_named({:?}) found {:?}", name, t.name());
        }
        let _ = (btf.has_struct(name), btf.has_func(name), btf.has_typedef(name), btf.has_enum(name));
        let _ = (btf.is_tagged_kfunc(name), btf.struct_members(name), btf.find_member(name, "pid"));
    }
    let _ = btf.has_kfunc_tags();
    Ok(())
}

proptest! {
    #[test]
    fn proptest_btf_any_bytes_parse_or_name_the_offset(bytes in blob()) {
        let len = bytes.len() as u64;
        match Btf::parse(bytes, "fuzz.btf") {
            Ok(btf) => ask_everything(&btf)?,
            Err(e) => {
                prop_assert_eq!(e.file(), std::path::Path::new("fuzz.btf"));
                prop_assert!(e.to_string().starts_with("fuzz.btf: "), "{}", e);
                match e {
                    BtfError::Format { offset, .. } => prop_assert!(offset <= len, "offset {} past {} bytes", offset, len),
                    BtfError::Io { .. } => prop_assert!(false, "parse does no I/O"),
                }
            }
        }
    }
}
