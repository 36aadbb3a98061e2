//! The whole pipeline, with a fake host: each module's own tests cover the
//! details; these check that container_spec wires them together.

use super::*;
use crate::fixtures::*;
use cri_api::v1::{Capability as CriCapability, ContainerMetadata, ImageSpec, Int64Value};
use oci_spec::runtime::{Capability, LinuxNamespaceType, LinuxSeccompAction};

#[test]
fn a_plain_container_spec_is_complete() {
    let spec = build(&container_config(), &sandbox_config(false), &host()).unwrap();
    let process = spec.process().as_ref().unwrap();
    assert_eq!(
        process.args().as_deref(),
        Some(&["/bin/sh".to_string(), "-c".into(), "sleep 60".into()][..])
    );
    let env = process.env().clone().unwrap();
    assert_eq!(env, ["PATH=/bin:/usr/bin", "HOSTNAME=web-0", "MODE=test"]);
    assert_eq!(process.cwd(), Path::new("/srv"));
    assert_eq!((process.user().uid(), process.user().gid()), (33, 33));
    assert_eq!(process.user().additional_gids().clone().unwrap(), [29, 33]);
    assert_eq!(process.terminal(), Some(false));
    assert_eq!(process.oom_score_adj(), Some(0));
    assert_eq!(process.no_new_privileges(), None);
    assert!(process.rlimits().is_none());
    let caps = process.capabilities().clone().unwrap();
    assert!(caps
        .bounding()
        .as_ref()
        .unwrap()
        .contains(&Capability::Chown));
    assert!(!caps
        .bounding()
        .as_ref()
        .unwrap()
        .contains(&Capability::SysAdmin));

    let root = spec.root().as_ref().unwrap();
    assert_eq!(root.path(), Path::new("/var/lib/berth/c1/rootfs"));
    assert_eq!(root.readonly(), Some(false));
    assert_eq!(spec.hostname().as_deref(), Some("web-0"));
    assert_eq!(
        spec.annotations().as_ref().unwrap()[annotations::SANDBOX_ID],
        "s1"
    );

    let destinations = mount_destinations(&spec);
    for expected in [
        "/proc",
        "/dev",
        "/sys",
        "/etc/hostname",
        "/etc/hosts",
        "/etc/resolv.conf",
        "/dev/shm",
        "/data",
    ] {
        assert!(
            destinations.contains(&expected.to_string()),
            "{expected} in {destinations:?}"
        );
    }
    // The pod's /dev/shm replaces the default tmpfs: only one mount there.
    assert_eq!(destinations.iter().filter(|d| *d == "/dev/shm").count(), 1);

    let linux = spec.linux().as_ref().unwrap();
    assert_eq!(
        linux.cgroups_path().as_deref(),
        Some(Path::new("/kubepods/pod-u1/c1"))
    );
    let kinds: Vec<_> = linux
        .namespaces()
        .as_ref()
        .unwrap()
        .iter()
        .map(|n| n.typ())
        .collect();
    assert_eq!(
        kinds,
        [
            LinuxNamespaceType::Pid,
            LinuxNamespaceType::Network,
            LinuxNamespaceType::Ipc,
            LinuxNamespaceType::Uts,
            LinuxNamespaceType::Mount
        ]
    );
    assert_eq!(linux.devices().as_ref().unwrap().len(), 1);
    let resources = linux.resources().as_ref().unwrap();
    assert_eq!(resources.cpu().as_ref().unwrap().shares(), Some(512));
    assert_eq!(resources.memory().unwrap().limit(), Some(64 << 20));
    assert_eq!(resources.devices().as_ref().unwrap().len(), 2);
    assert_eq!(
        linux.masked_paths().as_deref(),
        Some(&["/proc/kcore".to_string()][..])
    );
    assert_eq!(
        linux.readonly_paths().as_deref(),
        Some(&["/proc/sys".to_string(), "/sys/fs/cgroup".into()][..])
    );
    assert_eq!(
        linux.seccomp().as_ref().unwrap().default_action(),
        LinuxSeccompAction::ScmpActErrno
    );
    assert_eq!(
        linux.sysctl().as_ref().unwrap()["net.ipv4.ip_unprivileged_port_start"],
        "0"
    );
}

#[test]
fn the_spec_serializes_and_reads_back() {
    let spec = build(&container_config(), &sandbox_config(false), &host()).unwrap();
    let json = serde_json::to_string(&spec).unwrap();
    let back: Spec = serde_json::from_str(&json).unwrap();
    assert_eq!(back, spec);
    assert!(
        !json.contains("youki"),
        "no defaults of oci-spec leak in: {json}"
    );
}

#[test]
fn privileged_containers_get_everything() {
    let mut config = container_config();
    if let Some(sc) = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
    {
        sc.privileged = true;
        sc.capabilities = Some(CriCapability {
            drop_capabilities: vec!["ALL".into()],
            ..Default::default()
        });
    }
    let spec = build(&config, &sandbox_config(true), &host()).unwrap();
    let process = spec.process().as_ref().unwrap();
    let caps = process
        .capabilities()
        .clone()
        .unwrap()
        .bounding()
        .clone()
        .unwrap();
    assert_eq!(caps.len(), capabilities::ALL_CAPABILITIES.len());
    let linux = spec.linux().as_ref().unwrap();
    assert!(linux.seccomp().is_none());
    assert!(linux.masked_paths().as_ref().unwrap().is_empty());
    assert!(linux.readonly_paths().as_ref().unwrap().is_empty());
    let rules = linux
        .resources()
        .as_ref()
        .unwrap()
        .devices()
        .clone()
        .unwrap();
    assert!(rules.len() == 1 && rules[0].allow());
    let device_paths: Vec<_> = linux
        .devices()
        .as_ref()
        .unwrap()
        .iter()
        .map(|d| d.path().clone())
        .collect();
    assert_eq!(
        device_paths,
        [PathBuf::from("/dev/null"), PathBuf::from("/dev/fuse")]
    );
    let sys = spec
        .mounts()
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.destination() == Path::new("/sys"))
        .unwrap();
    assert!(sys.options().as_ref().unwrap().contains(&"rw".to_string()));
}

#[test]
fn no_new_privs_and_read_only_root() {
    let mut config = container_config();
    if let Some(sc) = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
    {
        sc.no_new_privs = true;
        sc.readonly_rootfs = true;
    }
    let spec = build(&config, &sandbox_config(false), &host()).unwrap();
    assert_eq!(
        spec.process().as_ref().unwrap().no_new_privileges(),
        Some(true)
    );
    assert_eq!(spec.root().as_ref().unwrap().readonly(), Some(true));
    let hosts = spec
        .mounts()
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.destination() == Path::new("/etc/hosts"))
        .unwrap();
    assert!(hosts
        .options()
        .as_ref()
        .unwrap()
        .contains(&"ro".to_string()));
}

#[test]
fn errors_of_every_stage_come_through() {
    let sandbox = sandbox_config(false);
    let mut config = container_config();
    if let Some(sc) = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
    {
        sc.run_as_username = "ghost".into();
    }
    assert!(matches!(
        build(&config, &sandbox, &host()),
        Err(SpecError::UserNotFound(_))
    ));

    let mut config = container_config();
    config.mounts[0].host_path = "/missing".into();
    assert!(matches!(
        build(&config, &sandbox, &host()),
        Err(SpecError::MountSource { .. })
    ));

    let mut config = container_config();
    if let Some(sc) = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
    {
        sc.run_as_username.clear();
        sc.run_as_group = Some(Int64Value { value: 5 });
    }
    assert!(matches!(
        build(&config, &sandbox, &host()),
        Err(SpecError::GroupWithoutUser(5))
    ));

    let mut config = container_config();
    if let Some(sc) = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
    {
        sc.privileged = true;
    }
    assert!(matches!(
        build(&config, &sandbox, &host()),
        Err(SpecError::PrivilegedInUnprivilegedSandbox)
    ));
}

#[test]
fn host_network_pod_has_no_pod_hostname_and_no_net_sysctls() {
    let mut sandbox = sandbox_config(false);
    sandbox.hostname.clear();
    let config = container_config();
    let spec = container_spec(&ContainerInputs {
        container_id: "c1",
        sandbox_id: "s1",
        config: &config,
        sandbox_config: &sandbox,
        image: &image(),
        rootfs: Path::new("/rootfs"),
        namespaces: &SandboxNamespaces {
            network: None,
            uts: None,
            ..namespaces()
        },
        cgroups_path: "/c1",
        cgroup_view: CgroupView::V2,
        etc_passwd: Some(PASSWD),
        etc_group: Some(GROUP),
        sandbox_files: files(),
        host_oom_score_adj_floor: 0,
        features: CgroupFeatures::default(),
        lsm: &NO_LSM,
        host: &host(),
    })
    .unwrap();
    assert_eq!(spec.hostname(), &None);
    let env = spec.process().as_ref().unwrap().env().clone().unwrap();
    assert!(env.contains(&"HOSTNAME=node-1".to_string()), "{env:?}");
    assert!(spec.linux().as_ref().unwrap().sysctl().is_none());
}

#[test]
fn minimal_config_from_crictl_works() {
    let config = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "c".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let spec = build(&config, &PodSandboxConfig::default(), &host()).unwrap();
    let process = spec.process().as_ref().unwrap();
    assert_eq!(
        process.args().as_deref(),
        Some(&["/bin/sh".to_string(), "-i".into()][..])
    );
    assert_eq!((process.user().uid(), process.user().gid()), (0, 0));
    assert!(spec.linux().as_ref().unwrap().seccomp().is_none());
    // No resources: 0 in the spec, never the shim's score by inheritance.
    assert_eq!(process.oom_score_adj(), Some(0));
}

#[test]
fn cgroup_v1_hosts_get_no_cgroup_mount_and_a_read_only_tmpfs() {
    let spec = build(&container_config(), &sandbox_config(false), &host()).unwrap();
    let mounts = spec.mounts().as_ref().unwrap();
    assert!(
        mounts.iter().all(|m| m.typ().as_deref() != Some("cgroup")),
        "{mounts:?}"
    );
    let destinations = mount_destinations(&spec);
    for expected in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/cpu,cpuacct",
        "/sys/fs/cgroup/cpu",
        "/sys/fs/cgroup/cpuacct",
    ] {
        assert!(
            destinations.contains(&expected.to_string()),
            "{expected}: {destinations:?}"
        );
    }
    let linux = spec.linux().as_ref().unwrap();
    let readonly = linux.readonly_paths().clone().unwrap();
    assert!(
        readonly.contains(&"/sys/fs/cgroup".to_string()),
        "{readonly:?}"
    );
}

#[test]
fn a_userns_pod_container_joins_its_user_namespace_with_its_mappings() {
    use cri_api::v1::{IdMapping, NamespaceOption, UserNamespace};
    let mut sandbox = sandbox_config(false);
    let mapping = vec![IdMapping {
        container_id: 0,
        host_id: 65536,
        length: 65536,
    }];
    if let Some(context) = sandbox
        .linux
        .as_mut()
        .and_then(|linux| linux.security_context.as_mut())
    {
        let options = context
            .namespace_options
            .get_or_insert_with(NamespaceOption::default);
        options.userns_options = Some(UserNamespace {
            mode: NamespaceMode::Pod as i32,
            uids: mapping.clone(),
            gids: mapping,
        });
    }
    let (config, image, host) = (container_config(), image(), host());
    let inputs = |namespaces| ContainerInputs {
        container_id: "c1",
        sandbox_id: "s1",
        config: &config,
        sandbox_config: &sandbox,
        image: &image,
        rootfs: Path::new("/rootfs"),
        namespaces,
        cgroups_path: "/c1",
        cgroup_view: CgroupView::V2,
        etc_passwd: Some(PASSWD),
        etc_group: Some(GROUP),
        sandbox_files: files(),
        host_oom_score_adj_floor: 0,
        features: CgroupFeatures::default(),
        lsm: &NO_LSM,
        host: &host,
    };
    let pinned = SandboxNamespaces {
        user: Some("/run/berth/ns/s1/user".into()),
        ..namespaces()
    };
    let spec = container_spec(&inputs(&pinned)).unwrap();
    let linux = spec.linux().as_ref().unwrap();
    let user = linux
        .namespaces()
        .as_ref()
        .unwrap()
        .iter()
        .find(|ns| ns.typ() == LinuxNamespaceType::User)
        .expect("a user namespace");
    assert_eq!(
        user.path().as_deref(),
        Some(Path::new("/run/berth/ns/s1/user"))
    );
    for mappings in [linux.uid_mappings(), linux.gid_mappings()] {
        let mapping = mappings.as_ref().unwrap()[0];
        assert_eq!(
            (mapping.container_id(), mapping.host_id(), mapping.size()),
            (0, 65536, 65536)
        );
    }
    // Without the pin (a pod made before berth had user namespaces) the
    // container cannot be made as asked.
    let err = container_spec(&inputs(&namespaces())).unwrap_err();
    assert!(matches!(err, SpecError::UserNamespaceNotPinned), "{err}");
}

#[test]
fn a_userns_pod_on_the_hosts_network_binds_the_hosts_sys_and_joins_no_netns() {
    use cri_api::v1::{IdMapping, NamespaceOption, UserNamespace};
    // What kubelet sends for hostNetwork: true with hostUsers: false.
    let mut sandbox = sandbox_config(false);
    sandbox.hostname.clear();
    let mapping = vec![IdMapping {
        container_id: 0,
        host_id: 65536,
        length: 65536,
    }];
    let userns = NamespaceOption {
        network: NamespaceMode::Node as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        userns_options: Some(UserNamespace {
            mode: NamespaceMode::Pod as i32,
            uids: mapping.clone(),
            gids: mapping,
        }),
        ..Default::default()
    };
    if let Some(context) = sandbox
        .linux
        .as_mut()
        .and_then(|linux| linux.security_context.as_mut())
    {
        context.namespace_options = Some(userns.clone());
    }
    let mut config = container_config();
    if let Some(context) = config
        .linux
        .as_mut()
        .and_then(|linux| linux.security_context.as_mut())
    {
        context.namespace_options = Some(userns);
        context.masked_paths = security::DEFAULT_MASKED_PATHS.map(String::from).to_vec();
    }
    let host = host();
    let spec = container_spec(&ContainerInputs {
        container_id: "c1",
        sandbox_id: "s1",
        config: &config,
        sandbox_config: &sandbox,
        image: &image(),
        rootfs: Path::new("/rootfs"),
        // What berth-pinns pins for such a pod: no net, no uts.
        namespaces: &SandboxNamespaces {
            network: None,
            uts: None,
            user: Some("/run/berth/ns/s1/user".into()),
            ..namespaces()
        },
        cgroups_path: "/c1",
        cgroup_view: CgroupView::V2,
        etc_passwd: Some(PASSWD),
        etc_group: Some(GROUP),
        sandbox_files: files(),
        host_oom_score_adj_floor: 0,
        features: CgroupFeatures::default(),
        lsm: &NO_LSM,
        host: &host,
    })
    .unwrap();
    let linux = spec.linux().as_ref().unwrap();
    let kinds: Vec<LinuxNamespaceType> = linux
        .namespaces()
        .as_ref()
        .unwrap()
        .iter()
        .map(|ns| ns.typ())
        .collect();
    assert!(kinds.contains(&LinuxNamespaceType::User), "{kinds:?}");
    assert!(kinds.contains(&LinuxNamespaceType::Pid), "{kinds:?}");
    for host_kind in [LinuxNamespaceType::Network, LinuxNamespaceType::Uts] {
        assert!(!kinds.contains(&host_kind), "{host_kind:?} in {kinds:?}");
    }
    for mappings in [linux.uid_mappings(), linux.gid_mappings()] {
        let mapping = mappings.as_ref().unwrap()[0];
        assert_eq!(
            (mapping.container_id(), mapping.host_id(), mapping.size()),
            (0, 65536, 65536)
        );
    }
    // /sys: the host's, bound read-only recursively, never a sysfs mount.
    let mounts = spec.mounts().as_ref().unwrap();
    let sys: Vec<_> = mounts
        .iter()
        .filter(|m| m.destination() == Path::new("/sys"))
        .collect();
    assert_eq!(sys.len(), 1, "{sys:?}");
    assert_eq!(sys[0].typ().as_deref(), Some("bind"));
    assert_eq!(sys[0].source().as_deref(), Some(Path::new("/sys")));
    let options = sys[0].options().clone().unwrap();
    for option in ["rbind", "rro", "nosuid", "nodev", "noexec"] {
        assert!(options.contains(&option.to_string()), "{options:?}");
    }
    assert!(mounts.iter().all(|m| m.typ().as_deref() != Some("sysfs")));
    // Still masked as a sysfs is, and no pod hostname (the node's).
    let masked = linux.masked_paths().clone().unwrap();
    assert!(masked.contains(&"/sys/firmware".to_string()), "{masked:?}");
    assert_eq!(spec.hostname(), &None);
}
