//! Changing a running container's resources (UpdateContainerResources),
//! applied as kubelet sends them: no unit conversion on cgroup v1.

use cgroups_rs::fs::cpu::CpuController;
use cgroups_rs::fs::cpuset::CpuSetController;
use cgroups_rs::fs::memory::MemController;
use cgroups_rs::fs::Controller;

use crate::manager::{CgroupError, CgroupfsManager};

/// The limits an update may set; `None` leaves a value as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceUpdate {
    pub cpu_shares: Option<u64>,
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    pub cpuset_cpus: Option<String>,
    pub cpuset_mems: Option<String>,
    pub memory_limit: Option<i64>,
    /// Memory plus swap (cgroup v1's `memsw`); with a memory limit and
    /// without this, swap is kept off (memsw = limit), as at creation.
    pub memory_swap_limit: Option<i64>,
}

impl CgroupfsManager {
    /// Applies `update` to the cgroup at `path` (which must exist); what
    /// [`crate::CgroupManager::update`] does under the cgroupfs driver.
    pub(crate) fn update_files(
        &self,
        path: &str,
        update: &ResourceUpdate,
    ) -> Result<(), CgroupError> {
        let cgroup = self.load_existing(path)?;
        let failed = |op: &'static str| {
            let path = path.to_string();
            move |source| CgroupError::Cgroups { op, path, source }
        };
        if let Some(cpu) = cgroup.controller_of::<CpuController>() {
            if let Some(shares) = update.cpu_shares {
                cpu.set_shares(shares).map_err(failed("cpu.shares"))?;
            }
            if update.cpu_quota.is_some() || update.cpu_period.is_some() {
                cpu.set_cfs_quota_and_period(update.cpu_quota, update.cpu_period)
                    .map_err(failed("cpu quota and period"))?;
            }
        }
        if let Some(cpuset) = cgroup.controller_of::<CpuSetController>() {
            if let Some(cpus) = &update.cpuset_cpus {
                cpuset.set_cpus(cpus).map_err(failed("cpuset.cpus"))?;
            }
            if let Some(mems) = &update.cpuset_mems {
                cpuset.set_mems(mems).map_err(failed("cpuset.mems"))?;
            }
        }
        if let (Some(memory), Some(limit)) =
            (cgroup.controller_of::<MemController>(), update.memory_limit)
        {
            // Only v1 has memsw, and only where swap is accounted.
            let memsw = memory
                .path()
                .join("memory.memsw.limit_in_bytes")
                .exists()
                .then(|| update.memory_swap_limit.unwrap_or(limit));
            match memsw {
                // v1 wants limit <= memsw at every moment: raise memsw
                // first when the limit grows, lower it last when it shrinks.
                Some(memsw) => {
                    if memory.set_limit(limit).is_err() {
                        memory
                            .set_memswap_limit(memsw)
                            .map_err(failed("memory+swap limit"))?;
                        memory.set_limit(limit).map_err(failed("memory limit"))?;
                    }
                    memory
                        .set_memswap_limit(memsw)
                        .map_err(failed("memory+swap limit"))?;
                }
                None => memory.set_limit(limit).map_err(failed("memory limit"))?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::CgroupManager;

    /// Runs on the real cgroupfs as root; elsewhere it has nothing to test.
    #[test]
    fn updates_cpu_and_memory_of_a_real_cgroup() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let manager = CgroupfsManager::new().unwrap();
        let path = format!("/berth-update-test-{}", std::process::id());
        manager.create(&path).unwrap();
        let result = manager.update(
            &path,
            &ResourceUpdate {
                cpu_shares: Some(512),
                cpu_quota: Some(50_000),
                cpu_period: Some(100_000),
                memory_limit: Some(64 << 20),
                ..Default::default()
            },
        );
        let read = |file: &str| {
            manager
                .hierarchy_dirs(&path)
                .unwrap()
                .into_iter()
                .map(|dir| dir.join(file))
                .find(|file| file.exists())
                .and_then(|file| std::fs::read_to_string(file).ok())
                .map(|text| text.trim().to_string())
        };
        let values = (
            read("cpu.shares"),
            read("cpu.cfs_quota_us"),
            read("memory.limit_in_bytes"),
        );
        manager.remove(&path).unwrap();
        result.unwrap();
        if std::path::Path::new("/sys/fs/cgroup/cpu,cpuacct").exists()
            || std::path::Path::new("/sys/fs/cgroup/cpu").exists()
        {
            assert_eq!(values.0.as_deref(), Some("512"));
            assert_eq!(values.1.as_deref(), Some("50000"));
            assert_eq!(values.2.as_deref(), Some("67108864"));
        }
        assert!(
            manager.update(&path, &ResourceUpdate::default()).is_err(),
            "gone"
        );
    }
}
