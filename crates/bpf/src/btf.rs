//! A small, self-contained reader for the kernel's BTF type format.
//!
//! The format is described in the kernel's `Documentation/bpf/btf.rst`: a fixed header
//! (`magic 0xeB9F, version 1, flags, hdr_len, type_off, type_len, str_off, str_len`; offsets
//! are relative to the end of the header), a type section of variable-length `btf_type`
//! records whose implicit ids start at 1 (id 0 is `void`), and a string section of
//! NUL-terminated names.
//!
//! memqos only needs to answer "does the running kernel have X" before it decides which BPF
//! programs to load, so this reader indexes names once and answers questions about structs,
//! unions, enums, functions and typedefs. It does not resolve CO-RE relocations (libbpf does
//! that at load time) and it does not read split BTF (`/sys/kernel/btf/<module>`), whose ids
//! and string offsets continue those of vmlinux: parse only base BTF such as
//! `/sys/kernel/btf/vmlinux`.
//!
//! Parsing `/sys/kernel/btf/vmlinux` (~5.5 MB, ~130k types) is one pass over the type section
//! that also hashes every name into an index.

use std::fmt;
use std::path::{Path, PathBuf};

pub mod builder;

/// Where the running kernel publishes its own BTF (`CONFIG_DEBUG_INFO_BTF=y`).
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The BTF magic number, as the producer's native-endian `u16`.
pub const BTF_MAGIC: u16 = 0xeb9f;

/// Size of the version-1 header; later headers may be longer (`hdr_len`).
const HEADER_LEN: usize = 24;
/// Size of the common `struct btf_type` prefix (name_off, info, size/type).
const TYPE_LEN: usize = 12;

/// A type id: the 1-based index of a record in the type section (0 is `void`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct TypeId(pub u32);

impl fmt::Display for TypeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]", self.0)
    }
}

/// The kind of a BTF type record (`BTF_KIND_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Kind {
    Int = 1,
    Ptr = 2,
    Array = 3,
    Struct = 4,
    Union = 5,
    Enum = 6,
    Fwd = 7,
    Typedef = 8,
    Volatile = 9,
    Const = 10,
    Restrict = 11,
    Func = 12,
    FuncProto = 13,
    Var = 14,
    Datasec = 15,
    Float = 16,
    DeclTag = 17,
    TypeTag = 18,
    Enum64 = 19,
}

impl Kind {
    /// Decodes the 5-bit kind field; `None` for kinds this reader does not know.
    pub fn from_raw(raw: u8) -> Option<Kind> {
        use Kind::*;
        Some(match raw {
            1 => Int,
            2 => Ptr,
            3 => Array,
            4 => Struct,
            5 => Union,
            6 => Enum,
            7 => Fwd,
            8 => Typedef,
            9 => Volatile,
            10 => Const,
            11 => Restrict,
            12 => Func,
            13 => FuncProto,
            14 => Var,
            15 => Datasec,
            16 => Float,
            17 => DeclTag,
            18 => TypeTag,
            19 => Enum64,
            _ => return None,
        })
    }

    /// The name bpftool prints (`STRUCT`, `ENUM64`, ...).
    pub fn as_str(self) -> &'static str {
        use Kind::*;
        match self {
            Int => "INT",
            Ptr => "PTR",
            Array => "ARRAY",
            Struct => "STRUCT",
            Union => "UNION",
            Enum => "ENUM",
            Fwd => "FWD",
            Typedef => "TYPEDEF",
            Volatile => "VOLATILE",
            Const => "CONST",
            Restrict => "RESTRICT",
            Func => "FUNC",
            FuncProto => "FUNC_PROTO",
            Var => "VAR",
            Datasec => "DATASEC",
            Float => "FLOAT",
            DeclTag => "DECL_TAG",
            TypeTag => "TYPE_TAG",
            Enum64 => "ENUM64",
        }
    }

    /// Bytes that follow the 12-byte common record for a type of this kind with `vlen`
    /// entries (Documentation/bpf/btf.rst, section 2.2).
    fn trailer_len(self, vlen: u32) -> u64 {
        use Kind::*;
        let vlen = u64::from(vlen);
        match self {
            Int => 4,
            Array => 12,
            Struct | Union => 12 * vlen,
            Enum => 8 * vlen,
            FuncProto => 8 * vlen,
            Var => 4,
            Datasec => 12 * vlen,
            DeclTag => 4,
            Enum64 => 12 * vlen,
            Ptr | Fwd | Typedef | Volatile | Const | Restrict | Func | Float | TypeTag => 0,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a BTF blob could not be read. Every variant names the file (or the label given to
/// [`Btf::parse`]) and, for format problems, the byte offset in it.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("{}: cannot read BTF: {source}", file.display())]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: byte {offset}: {problem}", file.display())]
    Format {
        file: PathBuf,
        /// Offset from the start of the file.
        offset: u64,
        problem: FormatError,
    },
}

impl BtfError {
    /// The file (or label) the error is about.
    pub fn file(&self) -> &Path {
        match self {
            BtfError::Io { file, .. } | BtfError::Format { file, .. } => file,
        }
    }
}

/// What exactly is wrong with a malformed BTF blob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("file is {len} bytes, shorter than the {HEADER_LEN}-byte BTF header")]
    TooShort { len: u64 },
    #[error("bad magic {found:#06x}, expected {BTF_MAGIC:#06x} (not a BTF blob)")]
    BadMagic { found: u16 },
    #[error("unsupported BTF version {version} (this reader knows version 1)")]
    UnsupportedVersion { version: u8 },
    #[error("header length {hdr_len} is shorter than {HEADER_LEN} or past the end of the file")]
    BadHeaderLength { hdr_len: u32 },
    #[error("{section} section of {len} bytes at {start} runs past the end of the {file_len}-byte file")]
    SectionOutOfBounds { section: &'static str, start: u64, len: u64, file_len: u64 },
    #[error("string section must start and end with a NUL byte")]
    StringsNotTerminated,
    #[error("string section is not valid UTF-8")]
    StringsNotUtf8,
    #[error("type {id} record is cut short by the end of the type section")]
    TruncatedType { id: u32 },
    #[error("type {id} has unknown kind {kind} (newer BTF than this reader?)")]
    UnknownKind { id: u32, kind: u8 },
    #[error("type {id} names string offset {name_off}, outside the {str_len}-byte string section")]
    NameOutOfBounds { id: u32, name_off: u32, str_len: u32 },
    #[error("type {id} names string offset {name_off}, which splits a UTF-8 character")]
    NameNotCharBoundary { id: u32, name_off: u32 },
    #[error("file is {len} bytes; this reader handles BTF up to 4 GiB")]
    TooLarge { len: u64 },
    #[error("type section holds more than {max} types")]
    TooManyTypes { max: u32 },
}

/// A member of a struct or union.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Member<'a> {
    /// Empty for anonymous struct/union members.
    pub name: &'a str,
    pub type_id: TypeId,
    /// Offset from the start of the enclosing struct, in bits.
    pub bit_offset: u32,
    /// Width of a bitfield member; 0 for ordinary members.
    pub bitfield_size: u8,
}

/// An enumerator of an ENUM or ENUM64. Values are widened to `i128` so both signed and
/// unsigned 64-bit enumerators are exact.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Enumerator<'a> {
    pub name: &'a str,
    pub value: i128,
}

/// A parsed BTF blob with a name index. Cheap queries; all borrowed strings live as long as
/// the `Btf`.
pub struct Btf {
    file: PathBuf,
    data: Vec<u8>,
    big_endian: bool,
    /// Absolute offset of the string section.
    str_start: usize,
    str_len: usize,
    /// Absolute offset of each type record; `records[i]` is type id `i + 1`.
    records: Vec<u32>,
    /// Type ids by name.
    names: NameIndex,
    /// Ids of every DECL_TAG (few hundred in vmlinux), for tag look-ups by target.
    decl_tags: Vec<u32>,
}

/// Open-addressing hash table from a name to the ids of the types so called. It is built in
/// one pass; sorting vmlinux's ~70k names instead took two thirds of the parse time.
struct NameIndex {
    /// A type id per slot, 0 for empty. The length is a power of two, at least twice the
    /// number of named types, so probe sequences stay short.
    slots: Vec<u32>,
    shift: u32,
}

impl NameIndex {
    fn build(named: &[(u64, u32)]) -> NameIndex {
        let len = (named.len() * 2).next_power_of_two().max(2);
        let mut slots = vec![0u32; len];
        let shift = 64 - len.trailing_zeros();
        let mask = len - 1;
        // Ids go in ascending order, so same-named types sit along one probe run in id order.
        for &(hash, id) in named {
            let mut i = (hash >> shift) as usize;
            while slots[i] != 0 {
                i = (i + 1) & mask;
            }
            slots[i] = id;
        }
        NameIndex { slots, shift }
    }

    /// Ids whose name satisfies `is_name`, probing from the slot of `hash`, in id order.
    fn lookup(&self, hash: u64, mut is_name: impl FnMut(u32) -> bool) -> Vec<u32> {
        let mask = self.slots.len() - 1;
        let mut i = (hash >> self.shift) as usize;
        let mut found = Vec::new();
        while self.slots[i] != 0 {
            if is_name(self.slots[i]) {
                found.push(self.slots[i]);
            }
            i = (i + 1) & mask;
        }
        found.sort_unstable();
        found
    }
}

/// FxHash-style hash of a name: fast on short identifiers, and the input is the kernel's
/// own type names, so there is no flooding to defend against. The index uses the high bits.
fn name_hash(name: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = name.len() as u64;
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        let word = u64::from_le_bytes(c.try_into().expect("8-byte chunk"));
        h = (h.rotate_left(5) ^ word).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(buf)).wrapping_mul(K);
    }
    h
}

impl fmt::Debug for Btf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Btf")
            .field("file", &self.file)
            .field("bytes", &self.data.len())
            .field("types", &self.records.len())
            .finish()
    }
}

/// A view of one type record.
#[derive(Debug, Clone, Copy)]
pub struct TypeRef<'a> {
    btf: &'a Btf,
    id: TypeId,
    kind: Kind,
    name: &'a str,
    vlen: u32,
    kind_flag: bool,
    size_or_type: u32,
    /// Absolute offset of the kind-specific trailer.
    trailer: usize,
}

impl<'a> TypeRef<'a> {
    pub fn id(&self) -> TypeId {
        self.id
    }
    pub fn kind(&self) -> Kind {
        self.kind
    }
    /// Empty for anonymous types.
    pub fn name(&self) -> &'a str {
        self.name
    }
    /// Number of members/enumerators/params; for FUNC, the linkage.
    pub fn vlen(&self) -> u32 {
        self.vlen
    }
    pub fn kind_flag(&self) -> bool {
        self.kind_flag
    }
    /// Size in bytes for INT, ENUM, ENUM64, STRUCT, UNION, DATASEC, FLOAT.
    pub fn size(&self) -> u32 {
        self.size_or_type
    }
    /// Referenced type for PTR, TYPEDEF, modifiers, FUNC, FUNC_PROTO (return), VAR, DECL_TAG.
    pub fn referenced(&self) -> TypeId {
        TypeId(self.size_or_type)
    }

    /// Members of a STRUCT or UNION (empty for other kinds).
    pub fn members(&self) -> Vec<Member<'a>> {
        if !matches!(self.kind, Kind::Struct | Kind::Union) {
            return Vec::new();
        }
        (0..self.vlen as usize)
            .map(|i| {
                let at = self.trailer + i * 12;
                let raw_offset = self.btf.u32_at(at + 8);
                // With kind_flag set, the offset packs bitfield size (high 8) and bit offset.
                let (bit_offset, bitfield_size) =
                    if self.kind_flag { (raw_offset & 0x00ff_ffff, (raw_offset >> 24) as u8) } else { (raw_offset, 0) };
                Member {
                    name: self.btf.str_at(self.btf.u32_at(at)),
                    type_id: TypeId(self.btf.u32_at(at + 4)),
                    bit_offset,
                    bitfield_size,
                }
            })
            .collect()
    }

    /// Enumerators of an ENUM or ENUM64 (empty for other kinds). `kind_flag` marks signed
    /// values (the encoding since kernel 6.0, which libbpf also follows). BTF written before
    /// that stored ENUM values as `s32` with `kind_flag` 0, so a negative enumerator from such
    /// a producer reads here as a large unsigned value; kernel enums memqos looks at are
    /// non-negative.
    pub fn enumerators(&self) -> Vec<Enumerator<'a>> {
        let signed = self.kind_flag;
        match self.kind {
            Kind::Enum => (0..self.vlen as usize)
                .map(|i| {
                    let at = self.trailer + i * 8;
                    let raw = self.btf.u32_at(at + 4);
                    let value = if signed { i128::from(raw as i32) } else { i128::from(raw) };
                    Enumerator { name: self.btf.str_at(self.btf.u32_at(at)), value }
                })
                .collect(),
            Kind::Enum64 => (0..self.vlen as usize)
                .map(|i| {
                    let at = self.trailer + i * 12;
                    let lo = u64::from(self.btf.u32_at(at + 4));
                    let hi = u64::from(self.btf.u32_at(at + 8));
                    let raw = (hi << 32) | lo;
                    let value = if signed { i128::from(raw as i64) } else { i128::from(raw) };
                    Enumerator { name: self.btf.str_at(self.btf.u32_at(at)), value }
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The `component_idx` of a DECL_TAG (-1: the tag applies to the whole target).
    pub fn decl_tag_component(&self) -> Option<i32> {
        (self.kind == Kind::DeclTag).then(|| self.btf.u32_at(self.trailer) as i32)
    }
}

impl Btf {
    /// Reads and parses the running kernel's BTF from [`VMLINUX_BTF`].
    pub fn load_vmlinux() -> Result<Btf, BtfError> {
        Btf::load(VMLINUX_BTF)
    }

    /// Reads and parses a base (non-split) BTF file.
    pub fn load(path: impl AsRef<Path>) -> Result<Btf, BtfError> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|source| BtfError::Io { file: path.to_path_buf(), source })?;
        Btf::parse(data, path)
    }

    /// Parses a BTF blob already in memory; `file` labels errors.
    pub fn parse(data: Vec<u8>, file: impl Into<PathBuf>) -> Result<Btf, BtfError> {
        let file = file.into();
        match Parser::run(&data) {
            Ok(layout) => Ok(Btf {
                file,
                data,
                big_endian: layout.big_endian,
                str_start: layout.str_start,
                str_len: layout.str_len,
                records: layout.records,
                names: layout.names,
                decl_tags: layout.decl_tags,
            }),
            Err((offset, problem)) => Err(BtfError::Format { file, offset, problem }),
        }
    }

    /// The file (or label) this BTF came from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Number of types, not counting `void`.
    pub fn type_count(&self) -> usize {
        self.records.len()
    }

    /// The record of type `id`; `None` for `void` (0) and ids past the end.
    pub fn type_by_id(&self, id: TypeId) -> Option<TypeRef<'_>> {
        let at = *self.records.get((id.0 as usize).checked_sub(1)?)? as usize;
        let info = self.u32_at(at + 4);
        Some(TypeRef {
            btf: self,
            id,
            // Every record was checked for a known kind while parsing.
            kind: Kind::from_raw(((info >> 24) & 0x1f) as u8)?,
            name: self.str_at(self.u32_at(at)),
            vlen: info & 0xffff,
            kind_flag: info >> 31 == 1,
            size_or_type: self.u32_at(at + 8),
            trailer: at + TYPE_LEN,
        })
    }

    /// All types called `name`, of any kind, in id order.
    pub fn types_named<'a>(&'a self, name: &str) -> impl Iterator<Item = TypeRef<'a>> + 'a {
        let key = name.as_bytes();
        let strs = &self.data[self.str_start..self.str_start + self.str_len];
        let ids = self.names.lookup(name_hash(key), |id| {
            let Some(&at) = self.records.get(id as usize - 1) else {
                return false;
            };
            // Equal if the stored name starts with `key` and ends right after it.
            let off = self.u32_at(at as usize) as usize;
            strs.get(off..off + key.len()) == Some(key) && strs.get(off + key.len()) == Some(&0)
        });
        ids.into_iter().filter_map(move |id| self.type_by_id(TypeId(id)))
    }

    /// The first type called `name` of kind `kind`.
    pub fn find(&self, kind: Kind, name: &str) -> Option<TypeRef<'_>> {
        self.types_named(name).find(|t| t.kind == kind)
    }

    /// The first STRUCT or UNION called `name` (forward declarations do not count).
    pub fn find_composite(&self, name: &str) -> Option<TypeRef<'_>> {
        self.types_named(name).find(|t| matches!(t.kind, Kind::Struct | Kind::Union))
    }

    /// Whether a STRUCT or UNION called `name` exists.
    pub fn has_struct(&self, name: &str) -> bool {
        self.find_composite(name).is_some()
    }

    /// Direct members of the struct or union `name`; `None` if there is none.
    pub fn struct_members(&self, name: &str) -> Option<Vec<Member<'_>>> {
        self.find_composite(name).map(|t| t.members())
    }

    /// Finds member `member` of struct/union `name`, looking through anonymous struct and
    /// union members as C does; the returned offset is from the start of the outer type.
    pub fn find_member(&self, name: &str, member: &str) -> Option<Member<'_>> {
        let outer = self.find_composite(name)?;
        self.find_member_in(outer, member, 0, 0)
    }

    fn find_member_in<'a>(&'a self, t: TypeRef<'a>, member: &str, base_bits: u32, depth: u32) -> Option<Member<'a>> {
        // Anonymous nesting in real kernels is a few levels; the bound only stops cycles in
        // hostile input.
        if depth > 32 {
            return None;
        }
        for m in t.members() {
            if m.name == member {
                return Some(Member { bit_offset: base_bits + m.bit_offset, ..m });
            }
            if m.name.is_empty() {
                let inner = self.skip_modifiers(m.type_id)?;
                if matches!(inner.kind, Kind::Struct | Kind::Union) {
                    if let Some(found) = self.find_member_in(inner, member, base_bits + m.bit_offset, depth + 1) {
                        return Some(found);
                    }
                }
            }
        }
        None
    }

    /// Follows TYPEDEF, CONST, VOLATILE, RESTRICT and TYPE_TAG to the underlying type.
    pub fn skip_modifiers(&self, mut id: TypeId) -> Option<TypeRef<'_>> {
        for _ in 0..64 {
            let t = self.type_by_id(id)?;
            match t.kind {
                Kind::Typedef | Kind::Const | Kind::Volatile | Kind::Restrict | Kind::TypeTag => id = t.referenced(),
                _ => return Some(t),
            }
        }
        None
    }

    /// Whether a FUNC called `name` exists. In vmlinux BTF this covers global and static
    /// functions that pahole kept (not inlined, one consistent prototype), including kfuncs
    /// and fentry/fexit targets.
    pub fn has_func(&self, name: &str) -> bool {
        self.find(Kind::Func, name).is_some()
    }

    /// Whether a TYPEDEF called `name` exists (e.g. `btf_trace_<tracepoint>`).
    pub fn has_typedef(&self, name: &str) -> bool {
        self.find(Kind::Typedef, name).is_some()
    }

    /// The first ENUM or ENUM64 called `name`.
    pub fn find_enum(&self, name: &str) -> Option<TypeRef<'_>> {
        self.types_named(name).find(|t| matches!(t.kind, Kind::Enum | Kind::Enum64))
    }

    /// Whether an ENUM or ENUM64 called `name` exists.
    pub fn has_enum(&self, name: &str) -> bool {
        self.find_enum(name).is_some()
    }

    /// Value of `enumerator` in enum `enum_name` (e.g. `vm_event_item`, `PGSCAN_DIRECT`).
    /// Searches every enum of that name, since duplicate definitions can survive dedup.
    pub fn enum_value(&self, enum_name: &str, enumerator: &str) -> Option<i128> {
        self.types_named(enum_name)
            .filter(|t| matches!(t.kind, Kind::Enum | Kind::Enum64))
            .find_map(|t| t.enumerators().into_iter().find(|e| e.name == enumerator))
            .map(|e| e.value)
    }

    /// Names of DECL_TAGs attached to the whole of type `id` (e.g. `bpf_kfunc` on a FUNC).
    pub fn decl_tags_of(&self, id: TypeId) -> Vec<&str> {
        self.decl_tags
            .iter()
            .filter_map(|&tag| self.type_by_id(TypeId(tag)))
            .filter(|t| t.referenced() == id && t.decl_tag_component() == Some(-1))
            .map(|t| t.name)
            .collect()
    }

    /// Whether any FUNC called `name` carries the `bpf_kfunc` decl tag that pahole (1.25+)
    /// adds to registered kfuncs.
    pub fn is_tagged_kfunc(&self, name: &str) -> bool {
        self.types_named(name).filter(|t| t.kind == Kind::Func).any(|t| self.decl_tags_of(t.id).contains(&"bpf_kfunc"))
    }

    /// Whether this BTF has any `bpf_kfunc` decl tags at all (older pahole emits none, so a
    /// missing tag then says nothing).
    pub fn has_kfunc_tags(&self) -> bool {
        self.decl_tags.iter().filter_map(|&tag| self.type_by_id(TypeId(tag))).any(|t| t.name == "bpf_kfunc")
    }

    fn u32_at(&self, at: usize) -> u32 {
        read_u32(&self.data, at, self.big_endian)
    }

    /// The NUL-terminated string at `off` in the string section. A type's own name offset was
    /// checked while parsing; the names in trailers (members, enumerators, parameters) were
    /// not (that would walk every trailer of vmlinux at start-up), so an offset past the
    /// section or inside a UTF-8 character reads as "" (anonymous) instead of panicking.
    fn str_at(&self, off: u32) -> &str {
        let strs = &self.data[self.str_start..self.str_start + self.str_len];
        let Some(bytes) = strs.get(off as usize..) else {
            return "";
        };
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        std::str::from_utf8(&bytes[..end]).unwrap_or("")
    }
}

fn read_u32(data: &[u8], at: usize, big_endian: bool) -> u32 {
    let b: [u8; 4] = data[at..at + 4].try_into().expect("4-byte slice");
    if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

/// The result of a successful parse, before it is moved into a [`Btf`].
struct Parser {
    big_endian: bool,
    str_start: usize,
    str_len: usize,
    records: Vec<u32>,
    names: NameIndex,
    decl_tags: Vec<u32>,
}

type ParseResult<T> = Result<T, (u64, FormatError)>;

impl Parser {
    fn run(data: &[u8]) -> ParseResult<Parser> {
        let file_len = data.len() as u64;
        // Type records are indexed by u32 offsets; real BTF is a few MB.
        if file_len > u64::from(u32::MAX) {
            return Err((0, FormatError::TooLarge { len: file_len }));
        }
        if data.len() < HEADER_LEN {
            return Err((0, FormatError::TooShort { len: file_len }));
        }
        // The magic is written in the producer's byte order: that decides the blob's.
        let big_endian = match [data[0], data[1]] {
            m if u16::from_le_bytes(m) == BTF_MAGIC => false,
            m if u16::from_be_bytes(m) == BTF_MAGIC => true,
            m => return Err((0, FormatError::BadMagic { found: u16::from_le_bytes(m) })),
        };
        if data[2] != 1 {
            return Err((2, FormatError::UnsupportedVersion { version: data[2] }));
        }
        let u32_at = |at: usize| read_u32(data, at, big_endian);
        let hdr_len = u32_at(4);
        if (hdr_len as usize) < HEADER_LEN || u64::from(hdr_len) > file_len {
            return Err((4, FormatError::BadHeaderLength { hdr_len }));
        }
        // Longer headers (future fields) are skipped: offsets stay relative to hdr_len.
        let section = |field_at: usize, name: &'static str| -> ParseResult<(usize, usize)> {
            let start = u64::from(hdr_len) + u64::from(u32_at(field_at));
            let len = u64::from(u32_at(field_at + 4));
            if start + len > file_len {
                return Err((field_at as u64, FormatError::SectionOutOfBounds { section: name, start, len, file_len }));
            }
            Ok((start as usize, len as usize))
        };
        let (type_start, type_len) = section(8, "type")?;
        let (str_start, str_len) = section(16, "string")?;

        let strs = &data[str_start..str_start + str_len];
        if str_len > 0 && (strs[0] != 0 || strs[str_len - 1] != 0) {
            return Err((str_start as u64, FormatError::StringsNotTerminated));
        }
        let strs = std::str::from_utf8(strs)
            .map_err(|e| ((str_start + e.valid_up_to()) as u64, FormatError::StringsNotUtf8))?;

        // vmlinux averages ~40 bytes per record; reserve to avoid regrowth.
        let mut records = Vec::with_capacity(type_len / 32);
        let mut named = Vec::with_capacity(type_len / 64);
        let mut decl_tags = Vec::new();
        let end = type_start + type_len;
        let mut at = type_start;
        while at < end {
            let id = u32::try_from(records.len() + 1)
                .map_err(|_| (at as u64, FormatError::TooManyTypes { max: u32::MAX - 1 }))?;
            if end - at < TYPE_LEN {
                return Err((at as u64, FormatError::TruncatedType { id }));
            }
            let name_off = u32_at(at);
            let info = u32_at(at + 4);
            let raw_kind = ((info >> 24) & 0x1f) as u8;
            let kind = Kind::from_raw(raw_kind).ok_or((at as u64, FormatError::UnknownKind { id, kind: raw_kind }))?;
            let next = at as u64 + TYPE_LEN as u64 + kind.trailer_len(info & 0xffff);
            if next > end as u64 {
                return Err((at as u64, FormatError::TruncatedType { id }));
            }
            if name_off != 0 {
                let off = name_off as usize;
                if off >= str_len {
                    return Err((at as u64, FormatError::NameOutOfBounds { id, name_off, str_len: str_len as u32 }));
                }
                if !strs.is_char_boundary(off) {
                    return Err((at as u64, FormatError::NameNotCharBoundary { id, name_off }));
                }
                // The section ends in NUL, so a terminator always exists.
                let rest = &strs.as_bytes()[off..];
                let name = &rest[..rest.iter().position(|&b| b == 0).unwrap_or(0)];
                named.push((name_hash(name), id));
            }
            if kind == Kind::DeclTag {
                decl_tags.push(id);
            }
            records.push(at as u32);
            at = next as usize;
        }

        let names = NameIndex::build(&named);

        Ok(Parser { big_endian, str_start, str_len, records, names, decl_tags })
    }
}

#[cfg(test)]
mod tests {
    use super::builder::Builder;
    use super::*;

    /// A blob with the shapes memqos probes for.
    fn sample(big_endian: bool) -> Vec<u8> {
        let mut b = if big_endian { Builder::new().big_endian() } else { Builder::new() };
        let int = b.int("int", 4);
        let long = b.int("long unsigned int", 8);
        let inner = b.composite(Kind::Struct, "", 8, &[("nested", long, 0)]);
        let task =
            b.composite(Kind::Struct, "task_struct", 24, &[("pid", int, 0), ("", inner, 64), ("flags", long, 128)]);
        b.ptr(task);
        b.composite(Kind::Union, "u", 8, &[("a", int, 0), ("b", long, 0)]);
        b.record("fwd_only", Kind::Fwd, 0, false, 0);
        b.enum32("vm_event_item", false, &[("PGPGIN", 0), ("PGFAULT", 7), ("PGSCAN_DIRECT", 40)]);
        b.enum32("signed_e", true, &[("NEG", -2)]);
        b.enum64("big_e", false, &[("HUGE", u64::MAX)]);
        b.enum64("big_s", true, &[("MINUS", (-5i64) as u64)]);
        let proto = b.func_proto(long, &[("memcg", int)]);
        let kf = b.func("bpf_mem_cgroup_usage", proto);
        b.decl_tag("bpf_kfunc", kf, -1);
        b.func("try_to_free_mem_cgroup_pages", proto);
        b.typedef("btf_trace_count_memcg_events", proto);
        b.build()
    }

    fn parse(bytes: Vec<u8>) -> Result<Btf, BtfError> {
        Btf::parse(bytes, "test.btf")
    }

    #[test]
    fn answers_struct_enum_func_questions() {
        for be in [false, true] {
            let btf = parse(sample(be)).unwrap();
            assert_eq!(btf.type_count(), 16);
            assert!(btf.has_struct("task_struct"));
            assert!(btf.has_struct("u"), "unions count as composites");
            assert!(!btf.has_struct("fwd_only"), "a forward declaration is not a definition");
            assert!(btf.find(Kind::Fwd, "fwd_only").is_some());
            assert!(!btf.has_struct("nope"));

            let m = btf.struct_members("task_struct").unwrap();
            let names: Vec<_> = m.iter().map(|m| m.name).collect();
            assert_eq!(names, ["pid", "", "flags"]);
            assert_eq!(m[2].bit_offset, 128);
            let nested = btf.find_member("task_struct", "nested").unwrap();
            assert_eq!(nested.bit_offset, 64, "offset accumulates through anonymous members");
            assert!(btf.find_member("task_struct", "missing").is_none());

            assert!(btf.has_func("bpf_mem_cgroup_usage"));
            assert!(btf.has_func("try_to_free_mem_cgroup_pages"));
            assert!(!btf.has_func("calculate_high_delay"));
            assert!(!btf.has_func("task_struct"), "kind matters");
            assert!(btf.is_tagged_kfunc("bpf_mem_cgroup_usage"));
            assert!(!btf.is_tagged_kfunc("try_to_free_mem_cgroup_pages"));
            assert!(btf.has_kfunc_tags());
            assert!(btf.has_typedef("btf_trace_count_memcg_events"));

            assert!(btf.has_enum("vm_event_item"));
            assert!(btf.has_enum("big_e"), "ENUM64 counts");
            assert_eq!(btf.enum_value("vm_event_item", "PGSCAN_DIRECT"), Some(40));
            assert_eq!(btf.enum_value("vm_event_item", "PGFAULT"), Some(7));
            assert_eq!(btf.enum_value("vm_event_item", "NOPE"), None);
            assert_eq!(btf.enum_value("signed_e", "NEG"), Some(-2));
            assert_eq!(btf.enum_value("big_e", "HUGE"), Some(i128::from(u64::MAX)));
            assert_eq!(btf.enum_value("big_s", "MINUS"), Some(-5));
        }
    }

    #[test]
    fn bitfield_members_unpack_size_and_offset() {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        b.record("bits", Kind::Struct, 1, true, 4);
        let n = b.str("flag");
        b.put(n);
        b.put(int);
        b.put((3 << 24) | 5);
        let btf = parse(b.build()).unwrap();
        let m = &btf.struct_members("bits").unwrap()[0];
        assert_eq!((m.name, m.bit_offset, m.bitfield_size), ("flag", 5, 3));
    }

    #[test]
    fn duplicate_names_are_all_found() {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        b.record("dup", Kind::Fwd, 0, false, 0);
        b.composite(Kind::Struct, "dup", 4, &[("x", int, 0)]);
        b.enum32("dup", false, &[("D", 1)]);
        let btf = parse(b.build()).unwrap();
        let kinds: Vec<_> = btf.types_named("dup").map(|t| t.kind()).collect();
        assert_eq!(kinds, [Kind::Fwd, Kind::Struct, Kind::Enum]);
        assert_eq!(btf.enum_value("dup", "D"), Some(1));
    }

    #[test]
    fn name_index_finds_every_name_and_only_those() {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        for i in 0..2000 {
            b.composite(Kind::Struct, &format!("s{i}"), 4, &[("x", int, 0)]);
        }
        let btf = parse(b.build()).unwrap();
        for i in 0..2000 {
            let ids: Vec<_> = btf.types_named(&format!("s{i}")).map(|t| t.id()).collect();
            assert_eq!(ids, [TypeId(i + 2)]);
        }
        assert_eq!(btf.types_named("s2000").count(), 0);
        assert_eq!(btf.types_named("s").count(), 0, "a prefix is not a match");
        assert_eq!(btf.types_named("s10x").count(), 0, "nor is a longer name");
        assert_eq!(btf.types_named("").count(), 0, "anonymous types are not indexed");
    }

    /// Found by `proptest_btf_any_bytes_parse_or_name_the_offset` (tests/proptest_btf.rs): a
    /// member's name offset is not checked while parsing, and reading it past the string
    /// section panicked.
    #[test]
    fn trailer_names_outside_the_string_section_read_as_anonymous() {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        b.record("s", Kind::Struct, 2, false, 8);
        b.put(1_000); // member name: past the string section
        b.put(int);
        b.put(0);
        b.put(u32::MAX);
        b.put(int);
        b.put(32);
        b.record("e", Kind::Enum, 1, false, 4);
        b.put(1_000);
        b.put(7);
        let btf = parse(b.build()).unwrap();
        let names: Vec<_> = btf.struct_members("s").unwrap().iter().map(|m| m.name).collect();
        assert_eq!(names, ["", ""]);
        assert!(btf.find_member("s", "x").is_none());
        assert_eq!(btf.enum_value("e", ""), Some(7));
    }

    #[test]
    fn longer_header_is_skipped() {
        // A future header with 8 more bytes: sections stay relative to hdr_len.
        let mut bytes = sample(false);
        bytes[4..8].copy_from_slice(&32u32.to_le_bytes());
        bytes.splice(24..24, [0u8; 8]);
        let btf = parse(bytes).unwrap();
        assert_eq!(btf.enum_value("vm_event_item", "PGFAULT"), Some(7));
    }

    #[test]
    fn empty_type_section_parses() {
        let btf = parse(Builder::new().build()).unwrap();
        assert_eq!(btf.type_count(), 0);
        assert!(btf.type_by_id(TypeId(0)).is_none());
        assert!(btf.type_by_id(TypeId(1)).is_none());
    }

    fn problem(bytes: Vec<u8>) -> (u64, FormatError) {
        match parse(bytes) {
            Err(BtfError::Format { file, offset, problem }) => {
                assert_eq!(file, Path::new("test.btf"));
                (offset, problem)
            }
            other => panic!("expected a format error, got {other:?}"),
        }
    }

    #[test]
    fn malformed_headers_name_the_offset() {
        assert_eq!(problem(vec![0; 10]), (0, FormatError::TooShort { len: 10 }));

        let mut bad = sample(false);
        bad[0] = 0x12;
        assert!(matches!(problem(bad), (0, FormatError::BadMagic { .. })));

        let mut bad = sample(false);
        bad[2] = 2;
        assert_eq!(problem(bad), (2, FormatError::UnsupportedVersion { version: 2 }));

        let mut bad = sample(false);
        bad[4..8].copy_from_slice(&8u32.to_le_bytes());
        assert_eq!(problem(bad), (4, FormatError::BadHeaderLength { hdr_len: 8 }));

        let mut bad = sample(false);
        bad[20..24].copy_from_slice(&1_000_000u32.to_le_bytes());
        assert!(matches!(problem(bad), (16, FormatError::SectionOutOfBounds { section: "string", .. })));

        let mut bad = sample(false);
        let last = bad.len() - 1;
        bad[last] = b'x';
        let str_start = 24 + u32::from_le_bytes(bad[16..20].try_into().unwrap()) as u64;
        assert_eq!(problem(bad), (str_start, FormatError::StringsNotTerminated));
    }

    #[test]
    fn malformed_types_name_the_record() {
        // Unknown kind 31 as the second record.
        let mut b = Builder::new();
        b.int("int", 4);
        b.record("future", Kind::Int, 0, false, 0);
        let mut bytes = b.build();
        let second = 24 + 16;
        bytes[second + 7] = 31; // high byte of info (little endian)
        assert_eq!(problem(bytes), (second as u64, FormatError::UnknownKind { id: 2, kind: 31 }));

        // A struct that claims more members than the section holds.
        let mut b = Builder::new();
        b.record("s", Kind::Struct, 5, false, 4);
        assert_eq!(problem(b.build()), (24, FormatError::TruncatedType { id: 1 }));

        // A name offset past the string section.
        let mut b = Builder::new();
        b.int("int", 4);
        let mut bytes = b.build();
        bytes[24..28].copy_from_slice(&999u32.to_le_bytes());
        assert!(matches!(problem(bytes), (24, FormatError::NameOutOfBounds { id: 1, name_off: 999, .. })));

        // Trailing bytes shorter than a record.
        let mut b = Builder::new();
        b.int("int", 4);
        b.raw(&[0; 5]);
        assert_eq!(problem(b.build()), (24 + 16, FormatError::TruncatedType { id: 2 }));
    }

    #[test]
    fn io_errors_name_the_file() {
        let err = Btf::load("/nonexistent/memqos/vmlinux").unwrap_err();
        assert!(matches!(err, BtfError::Io { .. }));
        assert!(err.to_string().starts_with("/nonexistent/memqos/vmlinux: cannot read BTF"));
    }

    #[test]
    fn host_vmlinux_cross_check() {
        let path = Path::new(VMLINUX_BTF);
        if !path.exists() {
            eprintln!("SKIP host_vmlinux_cross_check: {VMLINUX_BTF} absent (kernel without CONFIG_DEBUG_INFO_BTF or not Linux)");
            return;
        }
        let btf = Btf::load(path).unwrap();
        assert!(btf.type_count() > 10_000, "vmlinux has tens of thousands of types");
        assert!(btf.has_struct("task_struct"));
        assert!(btf.find_member("task_struct", "pid").is_some());
        assert!(btf.has_enum("vm_event_item"));
        assert!(btf.enum_value("vm_event_item", "PGFAULT").is_some());
        assert_eq!(btf.enum_value("vm_event_item", "PGPGIN"), Some(0), "first vm event");
        assert!(btf.has_func("schedule"));
        assert!(btf.has_typedef("u32"));
        if btf.has_enum("memcg_memory_event") {
            assert_eq!(btf.enum_value("memcg_memory_event", "MEMCG_LOW"), Some(0));
            assert_eq!(btf.enum_value("memcg_memory_event", "MEMCG_HIGH"), Some(1));
        }
    }
}
