//! Real Linux kernels in QEMU guests, for tests and experiments.
//!
//! The build machines bind the memory controller to cgroup v1, so every cgroup v2 behaviour
//! memqos relies on is exercised inside a guest running a real Debian kernel:
//!
//! - [`kernels`] resolves the newest Debian package of a kernel series (6.12 from bookworm,
//!   7.x from sid) with a private apt state, downloads it once, and caches it by exact version;
//! - [`initramfs`] packs busybox, the few modules a guest needs (9p, virtio-blk, ext4) and an
//!   init script into a newc cpio archive;
//! - [`guest`] boots QEMU (TCG unless KVM really works), shares the host root read-only over
//!   9p so host-built binaries run unchanged, gives the guest a writable results directory,
//!   runs one command and returns its exit status and console output;
//! - [`self_run`] runs the current program in a guest per kernel (the lab's commands);
//! - [`host_cpu`] measures how much of the host's CPU other work took while a guest ran;
//! - [`guest_test!`] turns a test body into a `cargo test` test that re-runs itself inside a
//!   guest on every kernel series under test.

pub mod cache;
pub mod guest;
pub mod host_cpu;
pub mod initramfs;
pub mod kernels;
pub mod self_run;
mod testing;

pub use guest::{Accel, Disk, Guest, GuestRun, VmError};
pub use host_cpu::HostCpu;
pub use kernels::{Kernel, Series};
pub use testing::{in_guest, results_dir, run_test_in_guests, skip, test_series};

/// Declares a test that runs inside a guest on each kernel series under test
/// (`MEMQOS_TEST_KERNELS`, default `6.12,7`).
///
/// ```ignore
/// memqos_vmtest::guest_test!(memory_high_throttles, |opts| opts.memory_mb(1024), {
///     // runs as root inside the guest, cgroup2 mounted at /sys/fs/cgroup
/// });
/// ```
#[macro_export]
macro_rules! guest_test {
    ($name:ident, $configure:expr, $body:block) => {
        #[test]
        fn $name() {
            if $crate::in_guest() {
                $body
                return;
            }
            let test_path = {
                let module = module_path!();
                let inner = module.split_once("::").map(|(_, rest)| rest.to_owned());
                match inner {
                    Some(m) => format!("{}::{}", m, stringify!($name)),
                    None => stringify!($name).to_owned(),
                }
            };
            $crate::run_test_in_guests(&test_path, $configure);
        }
    };
}
