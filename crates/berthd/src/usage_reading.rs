//! A container's or a pod's usage read now, as plain readings: what the
//! stats sampler keeps and what the stats and metrics calls read of one it
//! has no sample of (`server/` turns them into CRI messages). Only cgroup
//! files, the filesystem, `/proc` and the pod's network namespace are read:
//! never a shim, which may be stopped.

use std::path::Path;
use std::sync::Arc;

use berth_cgroups::stats::CgroupStats;

use crate::cgroup_reading::{read_cgroup, Reading};
use crate::clock::now_nanos;
use crate::container::rootfs::RootfsPaths;
use crate::container::store::ContainerRecord;
use crate::container::ContainerManager;
use crate::disk_usage::{disk_usage, DiskUsage};
use crate::pod::NetSample;
use crate::proc_counts::{self, ProcessCounts};
use crate::sandbox::store::SandboxRecord;

/// One container's readings.
#[derive(Debug, Clone)]
pub struct ContainerReading {
    /// Its cgroup (no stats once the cgroup is gone).
    pub cgroup: Reading,
    /// Its processes and what they hold open (metrics only).
    pub processes: Option<ProcessCounts>,
    /// Its writable layer, and when that was measured.
    pub layer: Option<DiskUsage>,
    pub layer_at: i64,
}

/// One pod's readings.
#[derive(Debug, Clone)]
pub struct PodReading {
    /// The sandbox's and its containers' cgroups, summed.
    pub cgroup: Reading,
    pub network: Option<NetSample>,
}

/// Reads container `record` now; `with_processes` also counts its
/// processes' open files, which walks `/proc/<pid>/fd` of each.
pub async fn container(
    containers: &ContainerManager,
    record: &ContainerRecord,
    with_processes: bool,
) -> ContainerReading {
    let cgroup = container_cgroup_path(containers, record);
    let upper = RootfsPaths::new(&record.layer_dir, &record.bundle).upper;
    let cgroups = containers.cgroups.clone();
    let init = u32::try_from(record.pid).ok().filter(|pid| *pid > 0);
    let read = tokio::task::spawn_blocking(move || {
        let reading = read_cgroup(cgroups.as_ref(), cgroup.as_deref());
        let processes = cgroup
            .as_deref()
            .filter(|_| with_processes)
            .and_then(|path| cgroups.stats_dirs(path).ok())
            .and_then(|dirs| berth_cgroups::stats::procs(&dirs).ok())
            .map(|pids| proc_counts::count(Path::new("/proc"), &pids, init));
        let layer = disk_usage(&upper).ok();
        ContainerReading {
            cgroup: reading,
            processes,
            layer,
            layer_at: now_nanos(),
        }
    })
    .await;
    read.unwrap_or_else(|_| {
        let at = now_nanos();
        ContainerReading {
            cgroup: Reading { at, stats: None },
            processes: None,
            layer: None,
            layer_at: at,
        }
    })
}

/// Reads pod `record` now; `containers` are its containers' cgroups, read
/// already for their own stats.
pub async fn pod(
    containers: &Arc<ContainerManager>,
    record: &SandboxRecord,
    container_cgroups: Vec<CgroupStats>,
) -> PodReading {
    let cgroup = crate::pod::cgroup_reading(
        &containers.sandboxes,
        containers.cgroups.clone(),
        record,
        container_cgroups,
    )
    .await;
    PodReading {
        cgroup,
        network: crate::pod::network(record).await,
    }
}

/// The container's cgroup path, from its sandbox's parent.
fn container_cgroup_path(
    containers: &ContainerManager,
    record: &ContainerRecord,
) -> Option<String> {
    if record.cgroup_dir().starts_with('/') {
        return Some(record.cgroup_dir().to_string());
    }
    let sandboxes = &containers.sandboxes;
    let parent = sandboxes
        .store
        .published(&record.sandbox_id)
        .ok()??
        .cgroup_parent
        .clone();
    berth_cgroups::container_cgroup(sandboxes.driver, &parent, &record.id)
        .ok()
        .map(|location| location.path)
}
