//! A tiny BTF writer for synthetic blobs in tests (this crate's and its dependents', e.g. a
//! fake `/sys/kernel/btf/vmlinux` for `memqos doctor` tests). It writes what it is told, in
//! order: ids are assigned from 1 as records are added, nothing is validated or deduplicated,
//! so it can also produce the malformed input that parser tests need.

use super::{Kind, BTF_MAGIC};

/// Builds a BTF blob record by record. Ids are raw `u32` so member lists stay short to write.
pub struct Builder {
    types: Vec<u8>,
    strs: Vec<u8>,
    next_id: u32,
    big_endian: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder { types: Vec::new(), strs: vec![0], next_id: 1, big_endian: false }
    }
}

impl Builder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes the blob in big-endian byte order (as an s390x kernel would).
    pub fn big_endian(mut self) -> Self {
        self.big_endian = true;
        self
    }

    /// Appends a `u32` in the blob's byte order to the type section.
    pub fn put(&mut self, v: u32) {
        let b = if self.big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
        self.types.extend_from_slice(&b);
    }

    /// Appends raw bytes to the type section (for malformed-input tests).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.types.extend_from_slice(bytes);
    }

    /// Adds `s` to the string section and returns its offset (0 for the empty name).
    pub fn str(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let off = self.strs.len() as u32;
        self.strs.extend_from_slice(s.as_bytes());
        self.strs.push(0);
        off
    }

    /// Writes the 12-byte common record and returns its id; the caller appends the
    /// kind-specific trailer with [`Builder::put`].
    pub fn record(&mut self, name: &str, kind: Kind, vlen: u32, kflag: bool, size_or_type: u32) -> u32 {
        let name_off = self.str(name);
        self.put(name_off);
        self.put(vlen | (kind as u32) << 24 | u32::from(kflag) << 31);
        self.put(size_or_type);
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub fn int(&mut self, name: &str, size: u32) -> u32 {
        let id = self.record(name, Kind::Int, 0, false, size);
        self.put(size * 8);
        id
    }

    pub fn ptr(&mut self, to: u32) -> u32 {
        self.record("", Kind::Ptr, 0, false, to)
    }

    pub fn typedef(&mut self, name: &str, to: u32) -> u32 {
        self.record(name, Kind::Typedef, 0, false, to)
    }

    /// A STRUCT or UNION; `members` are (name, type id, bit offset).
    pub fn composite(&mut self, kind: Kind, name: &str, size: u32, members: &[(&str, u32, u32)]) -> u32 {
        let id = self.record(name, kind, members.len() as u32, false, size);
        for &(n, t, off) in members {
            let n = self.str(n);
            self.put(n);
            self.put(t);
            self.put(off);
        }
        id
    }

    /// A 4-byte ENUM; `signed` sets kind_flag.
    pub fn enum32(&mut self, name: &str, signed: bool, values: &[(&str, i64)]) -> u32 {
        let id = self.record(name, Kind::Enum, values.len() as u32, signed, 4);
        for &(n, v) in values {
            let n = self.str(n);
            self.put(n);
            self.put(v as u32);
        }
        id
    }

    /// An 8-byte ENUM64; `signed` sets kind_flag.
    pub fn enum64(&mut self, name: &str, signed: bool, values: &[(&str, u64)]) -> u32 {
        let id = self.record(name, Kind::Enum64, values.len() as u32, signed, 8);
        for &(n, v) in values {
            let n = self.str(n);
            self.put(n);
            self.put(v as u32);
            self.put((v >> 32) as u32);
        }
        id
    }

    pub fn func_proto(&mut self, ret: u32, params: &[(&str, u32)]) -> u32 {
        let id = self.record("", Kind::FuncProto, params.len() as u32, false, ret);
        for &(n, t) in params {
            let n = self.str(n);
            self.put(n);
            self.put(t);
        }
        id
    }

    /// A global FUNC (vlen holds the linkage: 1 = global).
    pub fn func(&mut self, name: &str, proto: u32) -> u32 {
        self.record(name, Kind::Func, 1, false, proto)
    }

    /// A DECL_TAG on `target`; `component` -1 tags the whole type.
    pub fn decl_tag(&mut self, name: &str, target: u32, component: i32) -> u32 {
        let id = self.record(name, Kind::DeclTag, 0, false, target);
        self.put(component as u32);
        id
    }

    /// The blob: a version-1 header, the type section, then the string section.
    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.types.len() + self.strs.len());
        let be = self.big_endian;
        let p32 =
            |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&if be { v.to_be_bytes() } else { v.to_le_bytes() });
        out.extend_from_slice(&if be { BTF_MAGIC.to_be_bytes() } else { BTF_MAGIC.to_le_bytes() });
        out.push(1); // version
        out.push(0); // flags
        p32(&mut out, 24); // hdr_len
        p32(&mut out, 0); // type_off
        p32(&mut out, self.types.len() as u32);
        p32(&mut out, self.types.len() as u32); // str_off
        p32(&mut out, self.strs.len() as u32);
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strs);
        out
    }
}
