//! UpdatePodSandboxResources (KEP-5419, in-place pod-level resize): kubelet
//! has resized the pod's cgroup (the sandbox's cgroup parent) and tells
//! the runtime the pod's new totals. berth records them in the sandbox's
//! config and applies them to that parent, through the driver's manager so
//! a systemd slice keeps them across a daemon-reload. A parent shared by
//! every pod (the default one, when the pod named none) is left alone: a
//! limit there would bind every pod.

use berth_cgroups::ResourceUpdate;
use cri_api::v1::LinuxContainerResources;

use super::{SandboxError, SandboxManager};

/// The period kubelet uses when it sends a quota without one (CFS default).
const DEFAULT_CPU_PERIOD: i64 = 100_000;

impl SandboxManager {
    /// Records the pod-level `overhead` and `resources` and applies their
    /// sum to the pod's cgroup parent (see the module doc).
    pub async fn update_resources(
        &self,
        id: &str,
        overhead: Option<LinuxContainerResources>,
        resources: Option<LinuxContainerResources>,
    ) -> Result<(), SandboxError> {
        let handle = self.get(id)?;
        // Held across the cgroup write and the record write, so two updates
        // cannot interleave.
        let mut record = handle.lock().await;
        let update = pod_update(overhead.as_ref(), resources.as_ref());
        if update != ResourceUpdate::default() && record.cgroup_parent != self.default_parent {
            let parent = berth_cgroups::parent_path(self.driver, &record.cgroup_parent)
                .map_err(|err| SandboxError::CgroupParentName(Box::new(err)))?;
            let cgroups = self.cgroups.clone();
            let path = parent.clone();
            tokio::task::spawn_blocking(move || cgroups.update(&path, &update))
                .await
                .map_err(|err| {
                    SandboxError::io("pod resources update task", std::io::Error::other(err))
                })?
                .map_err(|source| SandboxError::ResourcesRefused {
                    id: record.id.clone(),
                    parent,
                    source: Box::new(source),
                })?;
        }
        let linux = record.config.linux.get_or_insert_with(Default::default);
        if overhead.is_some() {
            linux.overhead = overhead;
        }
        if resources.is_some() {
            linux.resources = resources;
        }
        Ok(self.store.persist(&record)?)
    }
}

/// The pod cgroup's limits for the pod's containers' total `resources`
/// plus the sandbox `overhead`, as kubelet sizes the pod cgroup: memory
/// and shares add up, the overhead's quota is scaled to the resources'
/// period and added. Values a side leaves at zero are not limits; nothing
/// set on the resources side means nothing to change.
pub fn pod_update(
    overhead: Option<&LinuxContainerResources>,
    resources: Option<&LinuxContainerResources>,
) -> ResourceUpdate {
    let none = LinuxContainerResources::default();
    let overhead = overhead.unwrap_or(&none);
    let Some(resources) = resources else {
        return ResourceUpdate::default();
    };
    let positive = |value: i64| Some(value).filter(|v| *v > 0);
    let memory_limit = positive(resources.memory_limit_in_bytes)
        .map(|limit| limit.saturating_add(overhead.memory_limit_in_bytes.max(0)));
    let cpu_shares = positive(resources.cpu_shares)
        .map(|shares| shares.saturating_add(overhead.cpu_shares.max(0)) as u64);
    let (cpu_quota, cpu_period) = match positive(resources.cpu_quota) {
        Some(quota) => {
            let period = positive(resources.cpu_period).unwrap_or(DEFAULT_CPU_PERIOD);
            let extra = match positive(overhead.cpu_quota) {
                Some(extra) => {
                    let their_period = positive(overhead.cpu_period).unwrap_or(DEFAULT_CPU_PERIOD);
                    (extra as i128 * period as i128 / their_period as i128) as i64
                }
                None => 0,
            };
            (Some(quota.saturating_add(extra)), Some(period as u64))
        }
        None => (None, None),
    };
    ResourceUpdate {
        cpu_shares,
        cpu_quota,
        cpu_period,
        cpuset_cpus: Some(resources.cpuset_cpus.clone()).filter(|cpus| !cpus.is_empty()),
        cpuset_mems: Some(resources.cpuset_mems.clone()).filter(|mems| !mems.is_empty()),
        memory_limit,
        memory_swap_limit: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(memory: i64, shares: i64, quota: i64, period: i64) -> LinuxContainerResources {
        LinuxContainerResources {
            memory_limit_in_bytes: memory,
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: period,
            ..Default::default()
        }
    }

    #[test]
    fn the_overhead_is_added_to_the_containers_total() {
        let update = pod_update(
            Some(&res(64 << 20, 10, 5_000, 50_000)),
            Some(&res(256 << 20, 512, 50_000, 100_000)),
        );
        assert_eq!(update.memory_limit, Some(320 << 20));
        assert_eq!(update.cpu_shares, Some(522));
        // 5 ms per 50 ms is 10 ms per 100 ms.
        assert_eq!(update.cpu_quota, Some(60_000));
        assert_eq!(update.cpu_period, Some(100_000));
    }

    #[test]
    fn unset_values_change_nothing() {
        assert_eq!(
            pod_update(Some(&res(1, 1, 1, 1)), None),
            ResourceUpdate::default()
        );
        assert_eq!(
            pod_update(None, Some(&res(0, 0, 0, 0))),
            ResourceUpdate::default()
        );
        // An unlimited quota (-1) is not a limit to add to.
        let update = pod_update(None, Some(&res(0, 0, -1, 0)));
        assert_eq!(update.cpu_quota, None);
    }

    #[test]
    fn a_quota_without_period_uses_the_cfs_default() {
        let update = pod_update(None, Some(&res(0, 0, 20_000, 0)));
        assert_eq!(update.cpu_quota, Some(20_000));
        assert_eq!(update.cpu_period, Some(100_000));
    }
}
