//! Fixtures of the whole-pipeline tests: a pod, a container as kubelet
//! sends it, and a fake host that has what they name.

use std::path::Path;

use cri_api::v1::{
    ContainerConfig, ContainerMetadata, Device, ImageSpec, KeyValue, LinuxContainerConfig,
    LinuxContainerResources, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, Mount as CriMount, NamespaceMode, NamespaceOption,
    PodSandboxConfig, PodSandboxMetadata, SecurityProfile,
};
use oci_spec::runtime::Spec;

use crate::testing::{char_device, FakeHost};
use crate::{
    container_spec, AppArmorHost, CgroupFeatures, CgroupView, ContainerInputs, ImageConfigView,
    LsmHost, SandboxFiles, SandboxNamespaces, SpecError, V1Hierarchy,
};

pub const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33::/var/www:/bin/false\n";
pub const GROUP: &str = "root:x:0:\nwww-data:x:33:\naudio:x:29:www-data\n";

pub fn namespaces() -> SandboxNamespaces {
    SandboxNamespaces {
        network: Some("/run/berth/ns/s1/net".into()),
        ipc: Some("/run/berth/ns/s1/ipc".into()),
        uts: Some("/run/berth/ns/s1/uts".into()),
        pid: None,
        user: None,
        target_pid: None,
    }
}

pub fn files() -> SandboxFiles {
    SandboxFiles {
        hostname: Some("/run/berth/s1/hostname".into()),
        hosts: Some("/run/berth/s1/hosts".into()),
        resolv_conf: Some("/run/berth/s1/resolv.conf".into()),
        shm: Some("/run/berth/s1/shm".into()),
    }
}

pub fn host() -> FakeHost {
    FakeHost::new()
        .with_path("/run/berth/s1/hostname")
        .with_path("/run/berth/s1/hosts")
        .with_path("/run/berth/s1/resolv.conf")
        .with_path("/run/berth/s1/shm")
        .with_path("/srv/data")
        .with_char_device("/dev/fuse", 10, 229)
        .with_device_dir("/dev", vec![char_device("/dev/null", 1, 3)])
}

pub fn sandbox_config(privileged: bool) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: "web-0".into(),
            uid: "u1".into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: "web-0".into(),
        linux: Some(LinuxPodSandboxConfig {
            security_context: Some(LinuxSandboxSecurityContext {
                privileged,
                namespace_options: Some(NamespaceOption {
                    pid: NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sysctls: [(
                "net.ipv4.ip_unprivileged_port_start".to_string(),
                "0".to_string(),
            )]
            .into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A config as kubelet sends it for a plain container.
pub fn container_config() -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "app".into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: "busybox:1.29".into(),
            ..Default::default()
        }),
        args: vec!["-c".into(), "sleep 60".into()],
        envs: vec![KeyValue {
            key: "MODE".into(),
            value: "test".into(),
        }],
        mounts: vec![CriMount {
            container_path: "/data".into(),
            host_path: "/srv/data".into(),
            readonly: true,
            ..Default::default()
        }],
        devices: vec![Device {
            container_path: "/dev/fuse".into(),
            host_path: "/dev/fuse".into(),
            permissions: "rwm".into(),
        }],
        linux: Some(LinuxContainerConfig {
            resources: Some(LinuxContainerResources {
                cpu_shares: 512,
                memory_limit_in_bytes: 64 << 20,
                oom_score_adj: -998,
                ..Default::default()
            }),
            security_context: Some(LinuxContainerSecurityContext {
                run_as_username: "www-data".into(),
                namespace_options: Some(NamespaceOption {
                    pid: NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                seccomp: Some(SecurityProfile::default()),
                masked_paths: vec!["/proc/kcore".into()],
                readonly_paths: vec!["/proc/sys".into()],
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// A cgroup v1 host with two hierarchies, one of them co-mounted.
pub fn cgroup_view() -> CgroupView {
    CgroupView::V1(vec![
        V1Hierarchy {
            name: "memory".into(),
            dir: "/sys/fs/cgroup/memory/kubepods/pod-u1/c1".into(),
        },
        V1Hierarchy {
            name: "cpu,cpuacct".into(),
            dir: "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod-u1/c1".into(),
        },
    ])
}

pub fn image() -> ImageConfigView {
    ImageConfigView {
        entrypoint: vec!["/bin/sh".into()],
        cmd: vec!["-i".into()],
        env: vec!["PATH=/bin:/usr/bin".into()],
        working_dir: "/srv".into(),
        ..Default::default()
    }
}

/// A host without AppArmor or SELinux.
pub static NO_LSM: LsmHost = LsmHost {
    apparmor: AppArmorHost::Disabled,
    selinux: false,
};

pub fn build(
    config: &ContainerConfig,
    sandbox: &PodSandboxConfig,
    host: &FakeHost,
) -> Result<Spec, SpecError> {
    build_on(config, sandbox, host, &NO_LSM)
}

/// [`build`] on a host with the security modules `lsm`.
pub fn build_on(
    config: &ContainerConfig,
    sandbox: &PodSandboxConfig,
    host: &FakeHost,
    lsm: &LsmHost,
) -> Result<Spec, SpecError> {
    container_spec(&ContainerInputs {
        container_id: "c1",
        sandbox_id: "s1",
        config,
        sandbox_config: sandbox,
        image: &image(),
        rootfs: Path::new("/var/lib/berth/c1/rootfs"),
        namespaces: &namespaces(),
        cgroups_path: "/kubepods/pod-u1/c1",
        cgroup_view: cgroup_view(),
        etc_passwd: Some(PASSWD),
        etc_group: Some(GROUP),
        sandbox_files: files(),
        host_oom_score_adj_floor: 0,
        features: CgroupFeatures {
            v2: false,
            hugetlb: false,
            swap: true,
        },
        lsm,
        host,
    })
}

pub fn mount_destinations(spec: &Spec) -> Vec<String> {
    spec.mounts()
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.destination().display().to_string())
        .collect()
}
