//! The mounts every container gets before its own: `/proc`, `/dev`, `/sys`
//! and friends, and the pod's hostname, hosts, resolv.conf and `/dev/shm`.

use std::path::PathBuf;

use cri_api::v1::Mount as CriMount;
use oci_spec::runtime::Mount;

use crate::cgroup_mounts::{cgroup_mounts, CgroupView};

/// Files the sandbox prepared for its containers. `None` leaves the
/// image's own file (or, for `shm`, a private tmpfs) in place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxFiles {
    /// Mounted at `/etc/hostname`.
    pub hostname: Option<PathBuf>,
    /// Mounted at `/etc/hosts`.
    pub hosts: Option<PathBuf>,
    /// Mounted at `/etc/resolv.conf`.
    pub resolv_conf: Option<PathBuf>,
    /// The pod's `/dev/shm` tmpfs, shared by its containers (only with the
    /// pod's own IPC namespace; with the host's, the host's `/dev/shm` is used).
    pub shm: Option<PathBuf>,
}

/// How a container gets its `/sys`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sysfs {
    /// A sysfs mounted for the container: its network namespace's view.
    Mount,
    /// The host's `/sys`, bound with the mounts below it, all read-only
    /// (containerd's and CRI-O's answer, KEP-5607). For a container in a
    /// pod user namespace on the host's network: the kernel mounts a sysfs
    /// only for a network namespace the mounter's user namespace owns, and
    /// the host's is owned by the host's. The masked paths are masked on
    /// the bind as on a sysfs.
    HostBind,
}

impl Sysfs {
    /// The `/sys` of a container in a pod with (`userns`) or without its
    /// own user namespace, on its own network or the host's (`host_network`).
    pub fn for_container(userns: bool, host_network: bool) -> Self {
        if userns && host_network {
            Sysfs::HostBind
        } else {
            Sysfs::Mount
        }
    }
}

/// The default system mounts, containerd's (without `/run`, which
/// containerd also leaves out for CRI containers), then `/sys/fs/cgroup`
/// as [`cgroup_mounts`] makes it for the host's cgroup version.
///
/// `/sys` is read-only unless the container is privileged: a writable
/// sysfs lets a container reconfigure the host's devices. The host's `/sys`
/// bound into a user namespace ([`Sysfs::HostBind`]) is read-only always,
/// as containerd binds it: even privileged, the container's root is not
/// the host's, whose sysfs it is.
pub fn default_mounts(privileged: bool, sysfs: Sysfs, cgroups: &CgroupView) -> Vec<Mount> {
    let access = if privileged { "rw" } else { "ro" };
    let sys = match sysfs {
        Sysfs::Mount => mount(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", access],
        ),
        // `rro`: read-only recursively (mount_setattr), the host's mounts
        // under /sys included.
        Sysfs::HostBind => mount(
            "/sys",
            "bind",
            "/sys",
            &["rbind", "rro", "nosuid", "nodev", "noexec"],
        ),
    };
    let mut mounts = vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        sys,
    ];
    mounts.extend(cgroup_mounts(cgroups, privileged));
    mounts
}

/// The sandbox's files as bind mounts (in CRI form, so they go through the
/// same checks as the container's own), as containerd's
/// `linuxContainerMounts` makes them.
///
/// The hostname, hosts and resolv.conf mounts are read-only exactly when
/// the root filesystem is: a container with a writable root may edit them,
/// as it could in Docker. `/dev/shm` is the host's when the container uses
/// the host's IPC namespace (`host_ipc`), else the pod's.
pub fn sandbox_mounts(
    files: &SandboxFiles,
    host_ipc: bool,
    readonly_rootfs: bool,
) -> Vec<CriMount> {
    let bind = |destination: &str, source: &PathBuf, readonly: bool| CriMount {
        container_path: destination.into(),
        host_path: source.to_string_lossy().into_owned(),
        readonly,
        ..Default::default()
    };
    let mut mounts = Vec::new();
    for (destination, source) in [
        ("/etc/hostname", &files.hostname),
        ("/etc/hosts", &files.hosts),
        ("/etc/resolv.conf", &files.resolv_conf),
    ] {
        if let Some(source) = source {
            mounts.push(bind(destination, source, readonly_rootfs));
        }
    }
    let shm = if host_ipc {
        Some(PathBuf::from("/dev/shm"))
    } else {
        files.shm.clone()
    };
    if let Some(shm) = shm {
        mounts.push(bind("/dev/shm", &shm, false));
    }
    mounts
}

fn mount(destination: &str, typ: &str, source: &str, options: &[&str]) -> Mount {
    let mut mount = Mount::default();
    mount
        .set_destination(destination.into())
        .set_typ(Some(typ.into()))
        .set_source(Some(source.into()))
        .set_options(Some(options.iter().map(|o| o.to_string()).collect()));
    mount
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn find<'a>(mounts: &'a [Mount], destination: &str) -> &'a Mount {
        mounts
            .iter()
            .find(|m| m.destination().to_str() == Some(destination))
            .unwrap()
    }

    fn has_option(mount: &Mount, option: &str) -> bool {
        mount
            .options()
            .as_ref()
            .is_some_and(|o| o.iter().any(|x| x == option))
    }

    #[test]
    fn defaults_cover_the_system_filesystems() {
        let mounts = default_mounts(false, Sysfs::Mount, &CgroupView::V2);
        let destinations: Vec<_> = mounts.iter().map(|m| m.destination().clone()).collect();
        for expected in [
            "/proc",
            "/dev",
            "/dev/pts",
            "/dev/shm",
            "/dev/mqueue",
            "/sys",
            "/sys/fs/cgroup",
        ] {
            assert!(
                destinations.contains(&PathBuf::from(expected)),
                "{expected}"
            );
        }
        assert_eq!(find(&mounts, "/proc").typ().as_deref(), Some("proc"));
    }

    #[test]
    fn sysfs_and_cgroupfs_are_read_only_unless_privileged() {
        let normal = default_mounts(false, Sysfs::Mount, &CgroupView::V2);
        assert!(has_option(find(&normal, "/sys"), "ro"));
        assert!(has_option(find(&normal, "/sys/fs/cgroup"), "ro"));
        let privileged = default_mounts(true, Sysfs::Mount, &CgroupView::V2);
        assert!(has_option(find(&privileged, "/sys"), "rw"));
        assert!(has_option(find(&privileged, "/sys/fs/cgroup"), "rw"));
    }

    #[test]
    fn a_user_namespace_on_the_hosts_network_binds_the_hosts_sys_read_only() {
        assert_eq!(Sysfs::for_container(true, true), Sysfs::HostBind);
        for (userns, host_network) in [(true, false), (false, true), (false, false)] {
            assert_eq!(Sysfs::for_container(userns, host_network), Sysfs::Mount);
        }
        for privileged in [false, true] {
            let mounts = default_mounts(privileged, Sysfs::HostBind, &CgroupView::V2);
            let sys = find(&mounts, "/sys");
            assert_eq!(sys.typ().as_deref(), Some("bind"));
            assert_eq!(sys.source().as_deref(), Some(Path::new("/sys")));
            for option in ["rbind", "rro", "nosuid", "nodev", "noexec"] {
                assert!(has_option(sys, option), "{option} missing: {sys:?}");
            }
            assert!(!has_option(sys, "rw"), "{sys:?}");
            // Only /sys changes: the cgroup mount still covers the host's.
            let cgroup = find(&mounts, "/sys/fs/cgroup");
            assert_eq!(cgroup.typ().as_deref(), Some("cgroup"));
            assert_eq!(
                mounts
                    .iter()
                    .filter(|m| m.typ().as_deref() == Some("sysfs"))
                    .count(),
                0
            );
        }
    }

    #[test]
    fn cgroup_mounts_come_after_sysfs() {
        let view = CgroupView::V1(vec![crate::cgroup_mounts::V1Hierarchy {
            name: "memory".into(),
            dir: "/sys/fs/cgroup/memory/c1".into(),
        }]);
        let destinations: Vec<_> = default_mounts(false, Sysfs::Mount, &view)
            .iter()
            .map(|m| m.destination().display().to_string())
            .collect();
        assert_eq!(
            destinations[destinations.len() - 3..],
            ["/sys", "/sys/fs/cgroup", "/sys/fs/cgroup/memory"]
        );
    }

    fn files() -> SandboxFiles {
        SandboxFiles {
            hostname: Some("/run/pod/hostname".into()),
            hosts: Some("/run/pod/hosts".into()),
            resolv_conf: Some("/run/pod/resolv.conf".into()),
            shm: Some("/run/pod/shm".into()),
        }
    }

    #[test]
    fn sandbox_files_become_binds_read_only_with_the_rootfs() {
        let mounts = sandbox_mounts(&files(), false, true);
        let pairs: Vec<_> = mounts
            .iter()
            .map(|m| (m.container_path.as_str(), m.host_path.as_str(), m.readonly))
            .collect();
        assert_eq!(
            pairs,
            [
                ("/etc/hostname", "/run/pod/hostname", true),
                ("/etc/hosts", "/run/pod/hosts", true),
                ("/etc/resolv.conf", "/run/pod/resolv.conf", true),
                ("/dev/shm", "/run/pod/shm", false),
            ]
        );
        assert!(sandbox_mounts(&files(), false, false)
            .iter()
            .all(|m| !m.readonly));
    }

    #[test]
    fn host_ipc_uses_the_hosts_dev_shm() {
        let mounts = sandbox_mounts(&files(), true, false);
        let shm = mounts
            .iter()
            .find(|m| m.container_path == "/dev/shm")
            .unwrap();
        assert_eq!(shm.host_path, "/dev/shm");
    }

    #[test]
    fn missing_files_are_left_out() {
        assert!(sandbox_mounts(&SandboxFiles::default(), false, false).is_empty());
    }
}
