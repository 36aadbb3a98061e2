//! What the container sees at `/sys/fs/cgroup`.
//!
//! On cgroup v2 it is one `cgroup` mount, which the runtime turns into a
//! cgroup2 mount (namespaced when the container has its own cgroup
//! namespace).
//!
//! On cgroup v1 the spec spells out what runc's v1 `cgroup` mount amounts
//! to without a cgroup namespace: a tmpfs at `/sys/fs/cgroup`, then each
//! hierarchy's directory of the container's own cgroup bound at
//! `/sys/fs/cgroup/<hierarchy>`. Plain tmpfs and bind mounts, which every
//! OCI runtime makes as written; berth's in-process runtime cannot be
//! given a v1 `cgroup` mount (it looks the init's cgroups up in the wrong
//! PID namespace: berth-shim's in-process backend says how). A
//! co-mounted hierarchy (`cpu,cpuacct`) is bound under each controller's
//! name too, where the host has symlinks, which a spec cannot express. The
//! caller passes only hierarchies whose container directory exists before
//! the mounts are made (the runtime's cgroup manager creates them when it
//! adds the init, before the init prepares its rootfs).

use std::path::PathBuf;

use oci_spec::runtime::Mount;

/// Where cgroup file systems are mounted, on the host and in containers.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// One cgroup v1 hierarchy as the container sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V1Hierarchy {
    /// Its directory name under `/sys/fs/cgroup`: `memory`, `cpu,cpuacct`.
    pub name: String,
    /// The container's cgroup directory in it, on the host.
    pub dir: PathBuf,
}

/// The host's cgroup version, with what a v1 container mounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupView {
    /// cgroup v2 only: a `cgroup` mount.
    V2,
    /// cgroup v1 (alone or with systemd's hybrid unified hierarchy): these
    /// hierarchies, bound from the host.
    V1(Vec<V1Hierarchy>),
}

/// The mounts at and below `/sys/fs/cgroup`, read-only unless the
/// container is privileged (a writable cgroupfs lets a container lift its
/// own limits).
///
/// On v1 the tmpfs itself is mounted writable, as the binds need mount
/// points in it; [`readonly_paths`] makes it read-only afterwards.
pub fn cgroup_mounts(view: &CgroupView, privileged: bool) -> Vec<Mount> {
    let access = if privileged { "rw" } else { "ro" };
    let hierarchies = match view {
        CgroupView::V2 => {
            return vec![mount(
                CGROUP_ROOT.into(),
                "cgroup",
                "cgroup".into(),
                &["nosuid", "noexec", "nodev", "relatime", access],
            )]
        }
        CgroupView::V1(hierarchies) => hierarchies,
    };
    let mut mounts = vec![mount(
        CGROUP_ROOT.into(),
        "tmpfs",
        "tmpfs".into(),
        &["nosuid", "noexec", "nodev", "mode=755"],
    )];
    let names: Vec<&str> = hierarchies.iter().map(|h| h.name.as_str()).collect();
    for hierarchy in hierarchies {
        let controllers: Vec<&str> = hierarchy.name.split(',').collect();
        let aliases = controllers
            .iter()
            .filter(|c| controllers.len() > 1 && !names.contains(c))
            .copied();
        for name in std::iter::once(hierarchy.name.as_str()).chain(aliases) {
            mounts.push(mount(
                format!("{CGROUP_ROOT}/{name}").into(),
                "bind",
                hierarchy.dir.clone(),
                &["rbind", "nosuid", "noexec", "nodev", access],
            ));
        }
    }
    mounts
}

/// Paths the runtime makes read-only once all mounts are made: the v1
/// tmpfs of an unprivileged container (runc remounts it read-only the same
/// way). Its binds are read-only by their own options.
pub fn readonly_paths(view: &CgroupView, privileged: bool) -> Vec<String> {
    match view {
        CgroupView::V1(_) if !privileged => vec![CGROUP_ROOT.to_string()],
        _ => Vec::new(),
    }
}

fn mount(destination: PathBuf, typ: &str, source: PathBuf, options: &[&str]) -> Mount {
    let mut mount = Mount::default();
    mount
        .set_destination(destination)
        .set_typ(Some(typ.into()))
        .set_source(Some(source))
        .set_options(Some(options.iter().map(|o| o.to_string()).collect()));
    mount
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1() -> CgroupView {
        CgroupView::V1(vec![
            V1Hierarchy {
                name: "memory".into(),
                dir: "/sys/fs/cgroup/memory/pod/c1".into(),
            },
            V1Hierarchy {
                name: "cpu,cpuacct".into(),
                dir: "/sys/fs/cgroup/cpu,cpuacct/pod/c1".into(),
            },
        ])
    }

    fn summary(mounts: &[Mount]) -> Vec<(String, String, String)> {
        mounts
            .iter()
            .map(|m| {
                (
                    m.destination().display().to_string(),
                    m.typ().clone().unwrap_or_default(),
                    m.source()
                        .as_ref()
                        .map(|s| s.display().to_string())
                        .unwrap_or_default(),
                )
            })
            .collect()
    }

    fn options(mount: &Mount) -> Vec<String> {
        mount.options().clone().unwrap_or_default()
    }

    #[test]
    fn v2_is_one_cgroup_mount() {
        let mounts = cgroup_mounts(&CgroupView::V2, false);
        assert_eq!(
            summary(&mounts),
            [("/sys/fs/cgroup".into(), "cgroup".into(), "cgroup".into())]
        );
        assert!(options(&mounts[0]).contains(&"ro".to_string()));
        assert!(options(&cgroup_mounts(&CgroupView::V2, true)[0]).contains(&"rw".to_string()));
        assert!(readonly_paths(&CgroupView::V2, false).is_empty());
    }

    #[test]
    fn v1_is_a_tmpfs_and_the_containers_own_dirs_never_a_cgroup_mount() {
        let mounts = cgroup_mounts(&v1(), false);
        let s = |d: &str, t: &str, src: &str| (d.to_string(), t.to_string(), src.to_string());
        assert_eq!(
            summary(&mounts),
            [
                s("/sys/fs/cgroup", "tmpfs", "tmpfs"),
                s(
                    "/sys/fs/cgroup/memory",
                    "bind",
                    "/sys/fs/cgroup/memory/pod/c1"
                ),
                s(
                    "/sys/fs/cgroup/cpu,cpuacct",
                    "bind",
                    "/sys/fs/cgroup/cpu,cpuacct/pod/c1"
                ),
                s(
                    "/sys/fs/cgroup/cpu",
                    "bind",
                    "/sys/fs/cgroup/cpu,cpuacct/pod/c1"
                ),
                s(
                    "/sys/fs/cgroup/cpuacct",
                    "bind",
                    "/sys/fs/cgroup/cpu,cpuacct/pod/c1"
                ),
            ]
        );
        assert!(mounts.iter().all(|m| m.typ().as_deref() != Some("cgroup")));
    }

    #[test]
    fn v1_is_read_only_unless_privileged() {
        let normal = cgroup_mounts(&v1(), false);
        // The tmpfs must take the binds' mount points first.
        assert!(!options(&normal[0]).contains(&"ro".to_string()));
        assert!(normal[1..]
            .iter()
            .all(|m| options(m).contains(&"ro".to_string())));
        assert_eq!(readonly_paths(&v1(), false), ["/sys/fs/cgroup"]);

        let privileged = cgroup_mounts(&v1(), true);
        assert!(privileged[1..]
            .iter()
            .all(|m| options(m).contains(&"rw".to_string())));
        assert!(readonly_paths(&v1(), true).is_empty());
    }

    #[test]
    fn an_alias_never_hides_a_hierarchy_of_that_name() {
        let view = CgroupView::V1(vec![
            V1Hierarchy {
                name: "cpu".into(),
                dir: "/sys/fs/cgroup/cpu/c1".into(),
            },
            V1Hierarchy {
                name: "cpu,cpuacct".into(),
                dir: "/sys/fs/cgroup/cpu,cpuacct/c1".into(),
            },
        ]);
        let destinations: Vec<_> = summary(&cgroup_mounts(&view, false))
            .into_iter()
            .map(|(d, _, _)| d)
            .collect();
        assert_eq!(
            destinations,
            [
                "/sys/fs/cgroup",
                "/sys/fs/cgroup/cpu",
                "/sys/fs/cgroup/cpu,cpuacct",
                "/sys/fs/cgroup/cpuacct"
            ]
        );
    }
}
