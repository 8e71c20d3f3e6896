//! memqos's kernel-interface layer: a BTF reader, the probes that decide which optional
//! kernel interfaces (memcg tracepoints, kfuncs, struct_ops, fentry hooks) memqos can use,
//! and the BPF pressure source (`pressure`).

pub mod btf;
pub mod features;
pub mod memcg_stats;
pub mod pressure;

pub use btf::{Btf, BtfError, Kind, TypeId};
pub use features::KernelFeatures;
