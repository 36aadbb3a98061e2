use super::*;
use crate::testing::FakeHost;
use cri_api::v1::ImageSpec;
use std::path::PathBuf;

fn cri(container: &str, host: &str) -> CriMount {
    CriMount {
        container_path: container.into(),
        host_path: host.into(),
        ..Default::default()
    }
}

fn options(mount: &Mount) -> Vec<String> {
    mount.options().clone().unwrap_or_default()
}

fn destinations(plan: &MountPlan) -> Vec<String> {
    plan.mounts
        .iter()
        .map(|m| m.destination().to_string_lossy().into_owned())
        .collect()
}

fn default_mount(destination: &str) -> Mount {
    let mut mount = Mount::default();
    mount
        .set_destination(destination.into())
        .set_typ(Some("tmpfs".into()));
    mount
}

#[test]
fn private_read_write_bind() {
    let host = FakeHost::new().with_path("/data");
    let (mount, root) = bind_mount(&cri("/mnt", "/data"), &host).unwrap();
    assert_eq!(mount.destination(), &PathBuf::from("/mnt"));
    assert_eq!(mount.source(), &Some(PathBuf::from("/data")));
    assert_eq!(mount.typ(), &Some("bind".to_string()));
    assert_eq!(options(&mount), ["rbind", "rprivate", "rw"]);
    assert_eq!(root, None);
}

#[test]
fn mount_options_are_added_once_and_others_refused() {
    let host = FakeHost::new().with_path("/data");
    let mut m = cri("/mnt", "/data");
    m.mount_options = vec![
        "noexec".into(),
        "nosuid".into(),
        "noexec".into(),
        "nodev".into(),
    ];
    assert_eq!(
        options(&bind_mount(&m, &host).unwrap().0),
        ["rbind", "rprivate", "rw", "noexec", "nosuid", "nodev"]
    );
    m.mount_options = vec!["nosuid".into(), "exec".into()];
    let err = bind_mount(&m, &host).unwrap_err().to_string();
    assert!(
        err.contains("mount_options") && err.contains("\"exec\""),
        "{err}"
    );
}

#[test]
fn readonly_and_recursive_readonly() {
    let host = FakeHost::new().with_path("/data");
    let mut m = cri("/mnt", "/data");
    m.readonly = true;
    assert_eq!(
        options(&bind_mount(&m, &host).unwrap().0),
        ["rbind", "rprivate", "ro"]
    );
    m.recursive_read_only = true;
    assert_eq!(
        options(&bind_mount(&m, &host).unwrap().0),
        ["rbind", "rprivate", "rro"]
    );
}

#[test]
fn recursive_readonly_needs_readonly() {
    let host = FakeHost::new().with_path("/data");
    let mut m = cri("/mnt", "/data");
    m.recursive_read_only = true;
    let err = bind_mount(&m, &host).unwrap_err();
    assert!(matches!(err, SpecError::RecursiveReadOnlyNeedsReadOnly(path) if path == "/data"));
}

#[test]
fn recursive_readonly_needs_private_propagation() {
    let host = FakeHost::new()
        .with_path("/data")
        .with_propagation("/data", HostPropagation::Shared);
    for propagation in [
        MountPropagation::PropagationHostToContainer,
        MountPropagation::PropagationBidirectional,
    ] {
        let mut m = cri("/mnt", "/data");
        m.readonly = true;
        m.recursive_read_only = true;
        m.propagation = propagation as i32;
        let err = bind_mount(&m, &host).unwrap_err();
        assert!(
            matches!(err, SpecError::RecursiveReadOnlyNeedsPrivate { .. }),
            "{propagation:?}"
        );
    }
}

#[test]
fn propagation_modes_map_to_rslave_and_rshared() {
    let host = FakeHost::new()
        .with_path("/shared")
        .with_propagation("/shared", HostPropagation::Shared);
    let mut m = cri("/mnt", "/shared");
    m.propagation = MountPropagation::PropagationHostToContainer as i32;
    let (mount, root) = bind_mount(&m, &host).unwrap();
    assert_eq!(options(&mount)[1], "rslave");
    assert_eq!(root, Some("slave"));
    m.propagation = MountPropagation::PropagationBidirectional as i32;
    let (mount, root) = bind_mount(&m, &host).unwrap();
    assert_eq!(options(&mount)[1], "rshared");
    assert_eq!(root, Some("shared"));
}

#[test]
fn propagation_needs_a_shared_host_mount() {
    let host = FakeHost::new()
        .with_path("/private")
        .with_path("/slave")
        .with_propagation("/slave", HostPropagation::Slave);
    let mut m = cri("/mnt", "/private");
    m.propagation = MountPropagation::PropagationHostToContainer as i32;
    assert!(matches!(
        bind_mount(&m, &host),
        Err(SpecError::PropagationNotPossible {
            wanted: "shared or slave",
            ..
        })
    ));
    // A slave mount receives host events, but cannot send any back.
    m.host_path = "/slave".into();
    assert!(bind_mount(&m, &host).is_ok());
    m.propagation = MountPropagation::PropagationBidirectional as i32;
    assert!(matches!(
        bind_mount(&m, &host),
        Err(SpecError::PropagationNotPossible {
            wanted: "shared",
            ..
        })
    ));
}

#[test]
fn missing_host_path_is_an_error_naming_it() {
    let err = bind_mount(&cri("/mnt", "/nowhere"), &FakeHost::new()).unwrap_err();
    assert!(err.to_string().contains("/nowhere"), "{err}");
    assert!(matches!(err, SpecError::MountSource { .. }));
}

#[test]
fn symlinked_host_path_is_resolved() {
    let host = FakeHost::new().with_link("/link", "/real");
    let (mount, _) = bind_mount(&cri("/mnt", "/link"), &host).unwrap();
    assert_eq!(mount.source(), &Some(PathBuf::from("/real")));
}

#[test]
fn invalid_mounts_are_rejected() {
    let host = FakeHost::new().with_path("/data");
    let relative = bind_mount(&cri("mnt", "/data"), &host);
    assert!(matches!(
        relative,
        Err(SpecError::RelativeMountDestination(_))
    ));
    let mut unknown = cri("/mnt", "/data");
    unknown.propagation = 7;
    assert!(matches!(
        bind_mount(&unknown, &host),
        Err(SpecError::UnknownPropagation(7, _))
    ));
    let mut image = cri("/mnt", "");
    image.image = Some(ImageSpec::default());
    assert!(matches!(
        bind_mount(&image, &host),
        Err(SpecError::ImageVolumeUnresolved(_))
    ));
}

#[test]
fn a_mounts_own_mappings_must_be_the_pods() {
    use crate::userns::{IdRange, PodUserNamespace};
    use cri_api::v1::IdMapping;
    let range = IdRange {
        container_id: 0,
        host_id: 65536,
        length: 65536,
    };
    let pod = PodUserNamespace {
        uids: range,
        gids: range,
    };
    let kubelets = IdMapping {
        container_id: 0,
        host_id: 65536,
        length: 65536,
    };
    let mapped = |uids: Vec<IdMapping>, gids: Vec<IdMapping>| CriMount {
        uid_mappings: uids,
        gid_mappings: gids,
        ..cri("/mnt", "/data")
    };
    let plain = cri("/plain", "/data");
    // As kubelet sends them for a hostUsers: false pod.
    let as_kubelet = mapped(vec![kubelets], vec![kubelets]);
    assert!(check_mount_idmaps(&[plain.clone(), as_kubelet.clone()], Some(&pod)).is_ok());
    assert!(check_mount_idmaps(std::slice::from_ref(&plain), None).is_ok());

    let other = IdMapping {
        host_id: 131072,
        ..kubelets
    };
    for (case, mount, userns) in [
        ("no user namespace", as_kubelet, None),
        (
            "another range",
            mapped(vec![kubelets], vec![other]),
            Some(&pod),
        ),
        ("uids alone", mapped(vec![kubelets], vec![]), Some(&pod)),
        (
            "two",
            mapped(vec![kubelets, kubelets], vec![kubelets]),
            Some(&pod),
        ),
    ] {
        let err = check_mount_idmaps(&[plain.clone(), mount], userns).unwrap_err();
        assert!(
            matches!(&err, SpecError::IdMappedMount { destination, .. } if destination == "/mnt"),
            "{case}: {err:?}"
        );
        assert!(err.to_string().contains("uid_mappings"), "{case}: {err}");
    }
}

#[test]
fn selinux_relabel_is_ignored() {
    let host = FakeHost::new().with_path("/data");
    let mut m = cri("/mnt", "/data");
    m.selinux_relabel = true;
    assert!(bind_mount(&m, &host).is_ok());
}

#[test]
fn mounts_sort_parents_before_children_and_keep_defaults_first() {
    let host = FakeHost::new()
        .with_path("/a")
        .with_path("/b")
        .with_path("/c");
    let cri_mounts = [cri("/x/y/z", "/a"), cri("/x", "/b"), cri("/w/v", "/c")];
    let plan = container_mounts(vec![default_mount("/proc")], &cri_mounts, &[], &host).unwrap();
    assert_eq!(destinations(&plan), ["/proc", "/x", "/w/v", "/x/y/z"]);
    assert_eq!(plan.rootfs_propagation, None);
}

#[test]
fn cri_mounts_replace_defaults_and_extras() {
    let host = FakeHost::new()
        .with_path("/mine")
        .with_path("/sandbox/hosts");
    let defaults = vec![default_mount("/dev/shm"), default_mount("/proc")];
    let cri_mounts = [cri("/etc/hosts/", "/mine"), cri("/dev/shm", "/mine")];
    let extra = [cri("/etc/hosts", "/sandbox/hosts")];
    let plan = container_mounts(defaults, &cri_mounts, &extra, &host).unwrap();
    assert_eq!(destinations(&plan), ["/proc", "/etc/hosts/", "/dev/shm"]);
    let sources: Vec<_> = plan.mounts[1..]
        .iter()
        .map(|m| m.source().clone())
        .collect();
    assert_eq!(sources, [Some("/mine".into()), Some("/mine".into())]);
}

#[test]
fn mounting_dev_drops_every_default_below_it() {
    let host = FakeHost::new().with_path("/dev");
    let defaults = vec![
        default_mount("/dev"),
        default_mount("/dev/pts"),
        default_mount("/sys"),
    ];
    let plan = container_mounts(defaults, &[cri("/dev", "/dev")], &[], &host).unwrap();
    assert_eq!(destinations(&plan), ["/sys", "/dev"]);
}

#[test]
fn mounting_sys_fs_cgroup_drops_the_cgroup_v1_binds_below_it() {
    let host = FakeHost::new().with_path("/cg");
    let defaults = vec![
        default_mount("/sys"),
        default_mount("/sys/fs/cgroup"),
        default_mount("/sys/fs/cgroup/memory"),
        default_mount("/sys/fs/cgroupx"),
    ];
    let plan = container_mounts(defaults, &[cri("/sys/fs/cgroup", "/cg")], &[], &host).unwrap();
    assert_eq!(
        destinations(&plan),
        ["/sys", "/sys/fs/cgroupx", "/sys/fs/cgroup"]
    );
}

#[test]
fn root_propagation_takes_the_strongest_mode() {
    let host = FakeHost::new()
        .with_path("/s1")
        .with_path("/s2")
        .with_propagation("/s1", HostPropagation::Shared)
        .with_propagation("/s2", HostPropagation::Shared);
    let mut shared = cri("/a", "/s1");
    shared.propagation = MountPropagation::PropagationBidirectional as i32;
    let mut slave = cri("/b", "/s2");
    slave.propagation = MountPropagation::PropagationHostToContainer as i32;
    let plan = container_mounts(vec![], &[shared.clone(), slave.clone()], &[], &host).unwrap();
    assert_eq!(plan.rootfs_propagation.as_deref(), Some("shared"));
    let plan = container_mounts(vec![], &[slave], &[], &host).unwrap();
    assert_eq!(plan.rootfs_propagation.as_deref(), Some("slave"));
}

#[test]
fn clean_path_is_lexical() {
    assert_eq!(clean_path("/a//b/../c/"), "/a/c");
    assert_eq!(clean_path("/"), "/");
    assert_eq!(clean_path("/.."), "/");
    assert_eq!(depth("/"), 0);
    assert_eq!(depth("/a/b/"), 2);
}

#[test]
fn mounts_inside_proc_are_refused_but_lxcfs_files() {
    for destination in [
        "/proc",
        "/proc/sys",
        "//proc/./sys/",
        "/etc/../proc/sys/kernel",
        "/proc/self/attr",
        "/proc/sysrq-trigger",
    ] {
        let err = check_proc_safety(destination).unwrap_err();
        assert!(
            matches!(&err, SpecError::MountInsideProc(d, _) if d == destination),
            "{destination}: {err}"
        );
        assert!(err.to_string().contains("inside /proc"), "{err}");
    }
    for destination in [
        "/proc/meminfo",
        "/proc/./cpuinfo",
        "/proc/sys/kernel/ns_last_pid",
        "/procfs",
        "/data/proc/sys",
        "/",
    ] {
        assert!(check_proc_safety(destination).is_ok(), "{destination}");
    }
}
