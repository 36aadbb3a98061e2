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
//! - [`fake`]: an in-memory [`CgroupManager`] for unit tests.
//!
//! The systemd driver is supported for naming only; its manager (transient
//! units over D-Bus) is not written yet.

pub mod fake;
pub mod manager;
pub mod naming;
pub mod stats;
pub mod tracker;
pub mod update;

pub use manager::{CgroupError, CgroupManager, CgroupfsManager, Layout};
pub use naming::{
    container_cgroup, expand_slice, sandbox_cgroup, systemd_booted, CgroupLocation, Driver,
    NamingError,
};
pub use tracker::ParentTracker;
pub use update::ResourceUpdate;
