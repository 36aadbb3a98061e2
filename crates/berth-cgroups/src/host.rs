//! What the host's cgroups can do, read once at start-up and never assumed:
//! the spec builder leaves out limits the host cannot apply and gives
//! containers a cgroup namespace on v2.

use std::path::Path;

use crate::manager::Layout;

/// Where the cgroup file systems are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The host's cgroup capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostFeatures {
    /// Containers use the unified hierarchy (cgroup v2 only).
    pub v2: bool,
    /// A hugetlb controller containers' cgroups can use: in
    /// `cgroup.controllers` on v2, a v1 `hugetlb` hierarchy otherwise (on a
    /// hybrid host it may be attached to the unified hierarchy instead,
    /// where v1 containers cannot use it).
    pub hugetlb: bool,
    /// Swap is accounted: `memory.memsw.*` on v1, `memory.swap.max` on v2.
    pub swap: bool,
}

impl HostFeatures {
    /// Reads the host's features for `layout` under `/sys/fs/cgroup`.
    pub fn detect(layout: Layout) -> Self {
        Self::detect_under(Path::new(CGROUP_ROOT), layout)
    }

    /// [`HostFeatures::detect`] under another root (for tests).
    pub fn detect_under(root: &Path, layout: Layout) -> Self {
        if layout == Layout::Unified {
            let controllers =
                std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
            return Self {
                v2: true,
                hugetlb: has_controller(&controllers, "hugetlb"),
                swap: v2_swap_accounted(root),
            };
        }
        Self {
            v2: false,
            hugetlb: has_any_hugetlb_limit(&root.join("hugetlb")),
            swap: root
                .join("memory")
                .join("memory.memsw.limit_in_bytes")
                .exists(),
        }
    }
}

/// Whether a `cgroup.controllers` line names `controller`.
fn has_controller(controllers: &str, controller: &str) -> bool {
    controllers.split_whitespace().any(|c| c == controller)
}

/// The root cgroup has no `memory.swap.max`: look in its children, where
/// the kernel creates it whenever swap is accounted.
fn v2_swap_accounted(root: &Path) -> bool {
    std::fs::read_dir(root).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|entry| entry.path().join("memory.swap.max").exists())
    })
}

/// v1 hugetlb files are named per page size (`hugetlb.2MB.limit_in_bytes`).
fn has_any_hugetlb_limit(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with("hugetlb.") && name.ends_with(".limit_in_bytes")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
    }

    #[test]
    fn v2_reads_controllers_and_child_swap_files() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(
            root.path().join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids\n",
        )
        .unwrap();
        let bare = HostFeatures::detect_under(root.path(), Layout::Unified);
        assert_eq!(
            bare,
            HostFeatures {
                v2: true,
                hugetlb: true,
                swap: false
            }
        );
        touch(&root.path().join("system.slice/memory.swap.max"));
        assert!(HostFeatures::detect_under(root.path(), Layout::Unified).swap);
    }

    #[test]
    fn v1_looks_for_the_hierarchies_files() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(
            HostFeatures::detect_under(root.path(), Layout::Hybrid),
            HostFeatures::default()
        );
        touch(&root.path().join("memory/memory.memsw.limit_in_bytes"));
        touch(&root.path().join("hugetlb/hugetlb.2MB.limit_in_bytes"));
        let found = HostFeatures::detect_under(root.path(), Layout::Legacy);
        assert!(found.swap && found.hugetlb && !found.v2);
    }
}
