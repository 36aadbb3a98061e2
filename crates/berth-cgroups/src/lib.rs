//! berth's cgroup handling.
//!
//! - [`naming`]: where sandbox and container cgroups go under each driver
//!   (cgroupfs paths, systemd slices and scopes). Pure.
//! - [`manager`]: the privileged operations behind the [`CgroupManager`]
//!   trait, and [`CgroupfsManager`], which does them on the host through
//!   cgroups-rs (cgroup v1, hybrid and v2 hosts).
//! - [`tracker`]: [`ParentTracker`], which creates missing parents and later
//!   removes exactly the ones berth created, once empty.
//! - [`stats`]: usage read from cgroup files (cpu, memory, swap, pids),
//!   v1 and v2.
//! - [`systemd`]: [`SystemdManager`], the systemd driver: pod parents as
//!   slices and sandbox cgroups as scopes, transient units over D-Bus;
//!   [`systemd_resources`]: resource updates as unit properties.
//! - [`host`]: what the host's cgroups offer (v2, hugetlb, swap), read once.
//! - [`prime`]: starting early the kernel's wait in a move between cgroups.
//! - [`devices`]: a container's device policy (runc's defaults, the
//!   spec's rules) as an eBPF program, v1 rules and systemd properties.
//!   Pure; [`device_filter`] makes the kernel calls.
//! - [`fake`]: an in-memory [`CgroupManager`] for unit tests.

pub mod device_filter;
pub mod devices;
pub mod fake;
pub mod host;
pub mod manager;
pub mod naming;
pub mod prime;
pub mod stats;
pub mod systemd;
pub mod systemd_resources;
pub mod tracker;
pub mod update;

pub use devices::DevicePolicy;
pub use host::HostFeatures;
pub use manager::{CgroupError, CgroupManager, CgroupfsManager, Layout};
pub use naming::{
    container_cgroup, expand_slice, parent_path, sandbox_cgroup, systemd_booted, CgroupLocation,
    Driver, NamingError,
};
pub use systemd::{DbusSystemd, SystemdManager};
pub use tracker::ParentTracker;
pub use update::ResourceUpdate;
