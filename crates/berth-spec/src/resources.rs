//! Cgroup resources, exactly as kubelet sends them.
//!
//! kubelet has already turned millicores and memory requests into shares,
//! quota, period and limits (the pod resource management formulas), so
//! these are copied, never converted again: zero means "not set". On
//! cgroup v2 libcgroups maps shares to `cpu.weight` itself, with the
//! formula [`cpu_shares_to_weight`] also implements (for reporting), so the
//! spec carries shares on both versions.

use std::collections::HashMap;

use cri_api::v1::LinuxContainerResources;
use oci_spec::runtime::{LinuxCpu, LinuxHugepageLimit, LinuxMemory, LinuxResources};

use crate::error::SpecError;

/// What the host's cgroups can do, decided once by the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupFeatures {
    /// The unified hierarchy (cgroup v2) is in use.
    pub v2: bool,
    /// A hugetlb controller is available to containers. Where it is not
    /// (here: attached to v2 while containers use v1), hugepage limits are
    /// left out and the caller warns once.
    pub hugetlb: bool,
    /// Swap accounting is available (`memory.memsw.*` on v1,
    /// `memory.swap.max` on v2); without it, swap limits are left out.
    pub swap: bool,
}

/// The cgroup v2 unified key that sets the swap limit itself.
const UNIFIED_SWAP_MAX: &str = "memory.swap.max";

/// The OCI resources of a container (device rules are added separately).
///
/// Memory swap equals the memory limit unless kubelet sent a swap limit,
/// so a container cannot swap by default (containerd and runc do the
/// same), and unless `unified` sets `memory.swap.max`, which wins on v2.
/// `unified` needs cgroup v2: on v1 it is an error naming the keys, not a
/// silent no-op.
pub fn container_resources(
    resources: Option<&LinuxContainerResources>,
    features: CgroupFeatures,
) -> Result<LinuxResources, SpecError> {
    let mut oci = LinuxResources::default();
    let Some(resources) = resources else {
        return Ok(oci);
    };
    let positive = |value: i64| u64::try_from(value).ok().filter(|v| *v != 0);

    let mut cpu = LinuxCpu::default();
    cpu.set_shares(positive(resources.cpu_shares))
        .set_quota((resources.cpu_quota != 0).then_some(resources.cpu_quota))
        .set_period(positive(resources.cpu_period))
        .set_cpus(non_empty(&resources.cpuset_cpus))
        .set_mems(non_empty(&resources.cpuset_mems));
    if cpu != LinuxCpu::default() {
        oci.set_cpu(Some(cpu));
    }

    let limit = (resources.memory_limit_in_bytes != 0).then_some(resources.memory_limit_in_bytes);
    let unified_swap = features.v2 && resources.unified.contains_key(UNIFIED_SWAP_MAX);
    let swap = if !features.swap || unified_swap {
        None
    } else if resources.memory_swap_limit_in_bytes != 0 {
        Some(resources.memory_swap_limit_in_bytes)
    } else {
        limit
    };
    if limit.is_some() || swap.is_some() {
        let mut memory = LinuxMemory::default();
        memory.set_limit(limit).set_swap(swap);
        oci.set_memory(Some(memory));
    }

    if features.hugetlb && !resources.hugepage_limits.is_empty() {
        let limits = resources
            .hugepage_limits
            .iter()
            .map(|hp| {
                let limit = i64::try_from(hp.limit).map_err(|_| SpecError::HugepageLimit {
                    page_size: hp.page_size.clone(),
                    limit: hp.limit,
                })?;
                let mut oci = LinuxHugepageLimit::default();
                oci.set_page_size(hp.page_size.clone()).set_limit(limit);
                Ok(oci)
            })
            .collect::<Result<Vec<_>, SpecError>>()?;
        oci.set_hugepage_limits(Some(limits));
    }

    if !resources.unified.is_empty() {
        if !features.v2 {
            let mut keys: Vec<String> = resources.unified.keys().cloned().collect();
            keys.sort();
            return Err(SpecError::UnifiedOnCgroupV1(keys));
        }
        let unified: HashMap<String, String> = resources.unified.clone();
        oci.set_unified(Some(unified));
    }
    Ok(oci)
}

/// The process's `oom_score_adj`: kubelet's value clamped to
/// `[floor, 1000]`, where `floor` is berthd's own score. Lowering a score
/// needs CAP_SYS_RESOURCE, which root lacks on some hosts (this one); the
/// write would fail with EACCES and the container with it. containerd
/// calls this `restrict_oom_score_adj`. Without resources the value is 0,
/// as containerd's CRI writes it: left unset, the container would inherit
/// the shim's score, which is berthd's (-999 under its unit), and be the
/// kernel's last OOM victim instead of an ordinary process.
pub fn oom_score_adj(resources: Option<&LinuxContainerResources>, floor: i32) -> i32 {
    let wanted = resources.map_or(0, |r| r.oom_score_adj);
    let floor = i64::from(floor.clamp(-1000, 1000));
    // In [-1000, 1000] after the clamp: the conversion cannot fail.
    i32::try_from(wanted.clamp(floor, 1000)).unwrap_or(0)
}

/// cgroup v1 `cpu.shares` to cgroup v2 `cpu.weight`, the formula of runc
/// and youki: the v1 range [2, 262144] maps linearly onto [1, 10000], so
/// the default 1024 shares become weight 39 and the minimum stays the
/// minimum. 0 means unset and stays 0; values outside the range are first
/// clamped to it (the kernel clamps shares the same way).
pub fn cpu_shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262_142
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}

#[cfg(test)]
#[path = "resources_tests.rs"]
mod tests;
