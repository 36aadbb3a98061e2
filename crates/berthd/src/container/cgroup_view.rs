//! Which cgroup hierarchies a container sees at `/sys/fs/cgroup`: on a
//! cgroup v1 host, its own directory in each hierarchy libcontainer puts it
//! in (see `berth_spec::cgroup_mounts` for why berth, not libcontainer,
//! lays them out).

use std::path::{Component, Path, PathBuf};

use berth_cgroups::Layout;
use berth_spec::{CgroupView, V1Hierarchy};

/// Where the host's cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The v1 controllers libcontainer's cgroup manager creates the container's
/// directory for (libcgroups 0.7, `v1::controller_type::CONTROLLERS`),
/// before the container's init prepares its rootfs. Other hierarchies
/// (`name=systemd`, `rdma`, `misc`, the hybrid unified one) have no such
/// directory, so they are left out rather than bound from a missing source.
const LIBCONTAINER_CONTROLLERS: [&str; 12] = [
    "cpu",
    "cpuacct",
    "cpuset",
    "devices",
    "hugetlb",
    "memory",
    "pids",
    "perf_event",
    "blkio",
    "net_prio",
    "net_cls",
    "freezer",
];

/// The container's view for a host `layout`, given its cgroup directory
/// in every hierarchy (`CgroupfsManager::hierarchy_dirs`): the hierarchy's
/// name is the directory's first component under `/sys/fs/cgroup`.
pub fn cgroup_view(layout: Layout, dirs: &[PathBuf]) -> CgroupView {
    if layout == Layout::Unified {
        return CgroupView::V2;
    }
    let hierarchies = dirs
        .iter()
        .filter_map(|dir| {
            let name = hierarchy_name(dir)?;
            let known = name
                .split(',')
                .any(|controller| LIBCONTAINER_CONTROLLERS.contains(&controller));
            known.then(|| V1Hierarchy {
                name: name.to_string(),
                dir: dir.clone(),
            })
        })
        .collect();
    CgroupView::V1(hierarchies)
}

/// `/sys/fs/cgroup/cpu,cpuacct/pod/c1` → `cpu,cpuacct`.
fn hierarchy_name(dir: &Path) -> Option<&str> {
    match dir.strip_prefix(CGROUP_ROOT).ok()?.components().next()? {
        Component::Normal(name) => name.to_str(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(paths: &[&str]) -> Vec<PathBuf> {
        paths.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn unified_hosts_mount_cgroup2() {
        let view = cgroup_view(Layout::Unified, &dirs(&["/sys/fs/cgroup/pod/c1"]));
        assert_eq!(view, CgroupView::V2);
    }

    #[test]
    fn v1_hosts_bind_the_hierarchies_libcontainer_fills() {
        let view = cgroup_view(
            Layout::Hybrid,
            &dirs(&[
                "/sys/fs/cgroup/memory/pod/c1",
                "/sys/fs/cgroup/cpu,cpuacct/pod/c1",
                "/sys/fs/cgroup/net_cls,net_prio/pod/c1",
                "/sys/fs/cgroup/systemd/pod/c1",
                "/sys/fs/cgroup/rdma/pod/c1",
                "/sys/fs/cgroup/unified/pod/c1",
                "/elsewhere/memory/pod/c1",
            ]),
        );
        let h = |name: &str| V1Hierarchy {
            name: name.to_string(),
            dir: format!("/sys/fs/cgroup/{name}/pod/c1").into(),
        };
        assert_eq!(
            view,
            CgroupView::V1(vec![h("memory"), h("cpu,cpuacct"), h("net_cls,net_prio")])
        );
    }

    #[test]
    fn legacy_hosts_are_v1_too() {
        let view = cgroup_view(Layout::Legacy, &dirs(&["/sys/fs/cgroup/pids/c1"]));
        assert!(matches!(view, CgroupView::V1(h) if h.len() == 1));
    }
}
