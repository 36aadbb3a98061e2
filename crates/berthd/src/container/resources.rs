//! `UpdateContainerResources`: what a request changes in the cgroup, and
//! the resources `ContainerStatus` reports afterwards.

use cri_api::v1::LinuxContainerResources;

/// The cgroup writes for an update request. Unset (zero or empty) fields
/// leave the cgroup's value alone, as kubelet sends only what it manages.
pub fn cgroup_update(resources: &LinuxContainerResources) -> berth_cgroups::ResourceUpdate {
    berth_cgroups::ResourceUpdate {
        cpu_shares: u64::try_from(resources.cpu_shares)
            .ok()
            .filter(|shares| *shares > 0),
        cpu_quota: Some(resources.cpu_quota).filter(|quota| *quota != 0),
        cpu_period: u64::try_from(resources.cpu_period)
            .ok()
            .filter(|period| *period > 0),
        cpuset_cpus: Some(resources.cpuset_cpus.clone()).filter(|cpus| !cpus.is_empty()),
        cpuset_mems: Some(resources.cpuset_mems.clone()).filter(|mems| !mems.is_empty()),
        memory_limit: Some(resources.memory_limit_in_bytes).filter(|limit| *limit > 0),
        memory_swap_limit: Some(resources.memory_swap_limit_in_bytes).filter(|limit| *limit > 0),
    }
}

/// `current` with the fields [`cgroup_update`] applies taken from `update`
/// where it sets them: the resources in effect after the update. Fields an
/// update cannot change on a running container (`oom_score_adj`, hugepages,
/// swap, `unified`) keep their values from creation.
pub fn after_update(
    current: &LinuxContainerResources,
    update: &LinuxContainerResources,
) -> LinuxContainerResources {
    let applied = cgroup_update(update);
    let mut merged = current.clone();
    if let Some(shares) = applied.cpu_shares {
        merged.cpu_shares = shares as i64;
    }
    if let Some(quota) = applied.cpu_quota {
        merged.cpu_quota = quota;
    }
    if let Some(period) = applied.cpu_period {
        merged.cpu_period = period as i64;
    }
    if let Some(cpus) = applied.cpuset_cpus {
        merged.cpuset_cpus = cpus;
    }
    if let Some(mems) = applied.cpuset_mems {
        merged.cpuset_mems = mems;
    }
    if let Some(limit) = applied.memory_limit {
        merged.memory_limit_in_bytes = limit;
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_fields_leave_the_cgroup_alone() {
        let update = cgroup_update(&LinuxContainerResources {
            cpu_quota: 50_000,
            ..Default::default()
        });
        assert_eq!(update.cpu_quota, Some(50_000));
        assert_eq!(update.cpu_shares, None);
        assert_eq!(update.memory_limit, None);
        assert_eq!(update.cpuset_cpus, None);
    }

    #[test]
    fn an_update_overrides_only_what_it_sets() {
        let created = LinuxContainerResources {
            cpu_shares: 512,
            cpu_quota: 20_000,
            cpu_period: 100_000,
            memory_limit_in_bytes: 64 << 20,
            oom_score_adj: 100,
            cpuset_cpus: "0".into(),
            ..Default::default()
        };
        let update = LinuxContainerResources {
            cpu_quota: 50_000,
            memory_limit_in_bytes: 128 << 20,
            oom_score_adj: 999,
            ..Default::default()
        };
        let merged = after_update(&created, &update);
        assert_eq!(merged.cpu_quota, 50_000);
        assert_eq!(merged.memory_limit_in_bytes, 128 << 20);
        assert_eq!(merged.cpu_shares, 512);
        assert_eq!(merged.cpu_period, 100_000);
        assert_eq!(merged.cpuset_cpus, "0");
        assert_eq!(merged.oom_score_adj, 100, "not changeable after start");
    }
}
