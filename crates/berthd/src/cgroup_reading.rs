//! One reading of a cgroup's stats and when it was taken: what container
//! and pod stats are made of.

use berth_cgroups::stats::CgroupStats;

use crate::clock::now_nanos;

/// One reading of a cgroup, with when it was taken.
#[derive(Debug, Clone)]
pub struct Reading {
    pub at: i64,
    pub stats: Option<CgroupStats>,
}

/// Reads the cgroup at `path` now; no path or no cgroup is no stats.
pub fn read_cgroup(cgroups: &dyn berth_cgroups::CgroupManager, path: Option<&str>) -> Reading {
    let stats = path
        .and_then(|path| cgroups.stats_dirs(path).ok())
        .and_then(|dirs| berth_cgroups::stats::read(&dirs).ok());
    Reading {
        at: now_nanos(),
        stats,
    }
}
