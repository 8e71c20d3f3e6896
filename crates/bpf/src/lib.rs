//! memqos's kernel-interface layer: a BTF reader and the probes that decide which optional
//! kernel interfaces (memcg tracepoints, kfuncs, struct_ops, fentry hooks) memqos can use.

pub mod btf;
pub mod features;
pub mod memcg_stats;

pub use btf::{Btf, BtfError, Kind, TypeId};
pub use features::KernelFeatures;
