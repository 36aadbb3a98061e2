//! berthd: the berth CRI v1 runtime daemon.
//!
//! `main.rs` only wires these modules together; each has one job.

pub mod block_devices;
pub mod cgroup_driver;
pub mod cgroup_reading;
pub mod cli;
pub mod clock;
pub mod config;
pub mod container;
pub mod cpu_rate;
pub mod daemon;
pub mod disk_usage;
pub mod events;
#[cfg(test)]
pub(crate) mod fakes;
pub mod fs_capacity;
pub mod fs_usage;
pub mod helper_binary;
pub mod ids;
pub mod image_import;
pub mod journal_file;
pub mod kernel_features;
pub mod layout;
pub mod listener;
pub mod logging;
pub mod lsm;
pub mod metrics;
pub mod metrics_sampler;
pub mod net_stats;
pub mod pidfd;
pub mod pod;
pub mod pod_checkpoint;
pub mod proc_counts;
pub mod process_metrics;
pub mod procs;
pub mod recovery;
pub mod registry;
pub mod reload;
pub mod root_lock;
pub mod runtime_handlers;
pub mod sandbox;
pub mod server;
pub mod state_store;
pub mod stats_sampler;
pub mod stream_runtime;
#[cfg(test)]
pub(crate) mod test_child;
pub mod usage_reading;
