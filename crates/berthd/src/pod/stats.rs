//! A pod's own usage, as plain readings (`server/` turns them into CRI
//! stats and cadvisor metrics, as it does a container's).
//!
//! A pod's usage is the sum of its sandbox cgroup (the infra process) and
//! its containers' cgroups, which are siblings under the pod's parent: the
//! parent itself may be shared by many pods (berth's default parent).
//! Pressure cannot be summed: it is read from the parent when the parent
//! is the pod's own (kubelet's pod cgroup), and is absent otherwise.

use std::sync::Arc;

use berth_cgroups::stats::CgroupStats;
use berth_cgroups::CgroupManager;

use crate::cgroup_reading::{read_cgroup, Reading};
use crate::clock::now_nanos;
use crate::net_stats::NetCounters;
use crate::sandbox::store::{SandboxRecord, SandboxState};
use crate::sandbox::SandboxManager;

/// A pod's network counters and when they were read.
#[derive(Debug, Clone)]
pub struct NetSample {
    pub at: i64,
    pub counters: NetCounters,
}

/// The sandbox cgroup's reading plus its containers' (`containers`,
/// already read for their own stats), with the pressure of the pod's own
/// parent; `cgroups` reads them (as files, under either driver).
pub async fn cgroup_reading(
    sandboxes: &SandboxManager,
    cgroups: Arc<dyn CgroupManager>,
    record: &SandboxRecord,
    containers: Vec<CgroupStats>,
) -> Reading {
    let own_parent = (record.cgroup_parent != sandboxes.default_parent)
        .then(|| berth_cgroups::parent_path(sandboxes.driver, &record.cgroup_parent).ok())
        .flatten();
    let path = record.cgroup_path.clone();
    let summed = tokio::task::spawn_blocking(move || {
        let reading = read_cgroup(cgroups.as_ref(), Some(&path));
        let mut sum: Option<CgroupStats> = None;
        for stats in reading.stats.iter().chain(&containers) {
            sum.get_or_insert_with(CgroupStats::default)
                .accumulate(stats);
        }
        if let (Some(sum), Some(parent)) = (sum.as_mut(), own_parent) {
            // Only the pressure files: the parent's usage is the sum
            // above already.
            sum.pressure = match cgroups.stats_dirs(&parent) {
                Ok(berth_cgroups::stats::StatsDirs::V2 { dir }) => {
                    berth_cgroups::stats::pressure::read(&dir)
                }
                _ => None,
            };
        }
        Reading {
            at: reading.at,
            stats: sum,
        }
    })
    .await;
    summed.unwrap_or_else(|_| Reading {
        at: now_nanos(),
        stats: None,
    })
}

/// The pod's network counters: none unless it is ready with a network
/// namespace.
pub async fn network(record: &SandboxRecord) -> Option<NetSample> {
    let (SandboxState::Ready, Some(netns)) = (&record.state, record.namespaces.get("net")) else {
        return None;
    };
    match crate::net_stats::read(netns).await {
        Ok(counters) => Some(NetSample {
            at: now_nanos(),
            counters,
        }),
        Err(err) => {
            tracing::debug!(sandbox = %record.id, error = %err, "pod network stats");
            None
        }
    }
}
