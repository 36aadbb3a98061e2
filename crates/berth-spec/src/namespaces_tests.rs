use super::*;
use cri_api::v1::{LinuxPodSandboxConfig, UserNamespace};
use std::path::Path;

fn pinned() -> SandboxNamespaces {
    SandboxNamespaces {
        network: Some("/run/berth/ns/s1/net".into()),
        ipc: Some("/run/berth/ns/s1/ipc".into()),
        uts: Some("/run/berth/ns/s1/uts".into()),
        pid: Some("/run/berth/ns/s1/pid".into()),
        user: None,
        target_pid: None,
    }
}

fn pid_option(mode: NamespaceMode) -> NamespaceOption {
    NamespaceOption {
        pid: mode as i32,
        ..Default::default()
    }
}

/// (type, path) pairs, for compact assertions.
fn summary(namespaces: &[LinuxNamespace]) -> Vec<(LinuxNamespaceType, Option<String>)> {
    namespaces
        .iter()
        .map(|ns| {
            (
                ns.typ(),
                ns.path().as_ref().map(|p| p.display().to_string()),
            )
        })
        .collect()
}

fn path_of(namespaces: &[LinuxNamespace], typ: LinuxNamespaceType) -> Option<Option<&Path>> {
    namespaces
        .iter()
        .find(|ns| ns.typ() == typ)
        .map(|ns| ns.path().as_deref())
}

#[test]
fn pod_modes_join_every_pinned_namespace() {
    let namespaces = container_namespaces(
        Some(&pid_option(NamespaceMode::Pod)),
        NamespaceMode::Pod,
        &pinned(),
        false,
    )
    .unwrap();
    assert_eq!(
        summary(&namespaces),
        [
            (LinuxNamespaceType::Pid, Some("/run/berth/ns/s1/pid".into())),
            (
                LinuxNamespaceType::Network,
                Some("/run/berth/ns/s1/net".into())
            ),
            (LinuxNamespaceType::Ipc, Some("/run/berth/ns/s1/ipc".into())),
            (LinuxNamespaceType::Uts, Some("/run/berth/ns/s1/uts".into())),
            (LinuxNamespaceType::Mount, None),
        ]
    );
}

#[test]
fn container_pid_gets_a_new_namespace() {
    let sandbox = SandboxNamespaces {
        pid: None,
        ..pinned()
    };
    let namespaces = container_namespaces(
        Some(&pid_option(NamespaceMode::Container)),
        NamespaceMode::Container,
        &sandbox,
        false,
    )
    .unwrap();
    assert_eq!(path_of(&namespaces, LinuxNamespaceType::Pid), Some(None));
}

#[test]
fn node_pid_stays_in_the_hosts() {
    let namespaces = container_namespaces(
        Some(&pid_option(NamespaceMode::Node)),
        NamespaceMode::Node,
        &pinned(),
        false,
    )
    .unwrap();
    assert_eq!(path_of(&namespaces, LinuxNamespaceType::Pid), None);
}

#[test]
fn pod_pid_without_a_pod_namespace_follows_the_pods_mode() {
    let sandbox = SandboxNamespaces {
        pid: None,
        ..pinned()
    };
    let option = pid_option(NamespaceMode::Pod);
    let own =
        container_namespaces(Some(&option), NamespaceMode::Container, &sandbox, false).unwrap();
    assert_eq!(path_of(&own, LinuxNamespaceType::Pid), Some(None));
    let host = container_namespaces(Some(&option), NamespaceMode::Node, &sandbox, false).unwrap();
    assert_eq!(path_of(&host, LinuxNamespaceType::Pid), None);
}

#[test]
fn target_pid_joins_the_targets_init() {
    let sandbox = SandboxNamespaces {
        target_pid: Some(4242),
        ..pinned()
    };
    let mut option = pid_option(NamespaceMode::Target);
    option.target_id = "app".into();
    let namespaces =
        container_namespaces(Some(&option), NamespaceMode::Pod, &sandbox, false).unwrap();
    assert_eq!(
        path_of(&namespaces, LinuxNamespaceType::Pid),
        Some(Some(Path::new("/proc/4242/ns/pid")))
    );
}

#[test]
fn target_without_pid_is_an_error_naming_the_target() {
    let mut option = pid_option(NamespaceMode::Target);
    option.target_id = "app".into();
    let err =
        container_namespaces(Some(&option), NamespaceMode::Pod, &pinned(), false).unwrap_err();
    assert!(matches!(&err, SpecError::MissingTargetPid(id) if id == "app"));
}

#[test]
fn host_network_and_ipc_have_no_namespace_entries() {
    let sandbox = SandboxNamespaces {
        network: None,
        ipc: None,
        uts: None,
        ..pinned()
    };
    let namespaces = container_namespaces(None, NamespaceMode::Pod, &sandbox, false).unwrap();
    for typ in [
        LinuxNamespaceType::Network,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Uts,
    ] {
        assert_eq!(path_of(&namespaces, typ), None, "{typ:?}");
    }
    assert_eq!(path_of(&namespaces, LinuxNamespaceType::Mount), Some(None));
}

#[test]
fn cgroup_namespace_only_when_asked() {
    let with = container_namespaces(None, NamespaceMode::Pod, &pinned(), true).unwrap();
    assert_eq!(path_of(&with, LinuxNamespaceType::Cgroup), Some(None));
    let without = container_namespaces(None, NamespaceMode::Pod, &pinned(), false).unwrap();
    assert_eq!(path_of(&without, LinuxNamespaceType::Cgroup), None);
}

fn with_userns_mode(mode: i32) -> NamespaceOption {
    NamespaceOption {
        userns_options: Some(UserNamespace {
            mode,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn container_and_target_user_namespaces_are_refused() {
    let node = with_userns_mode(NamespaceMode::Node as i32);
    assert!(container_namespaces(Some(&node), NamespaceMode::Pod, &pinned(), false).is_ok());
    for mode in [NamespaceMode::Container, NamespaceMode::Target] {
        let option = with_userns_mode(mode as i32);
        let err =
            container_namespaces(Some(&option), NamespaceMode::Pod, &pinned(), false).unwrap_err();
        assert!(matches!(err, SpecError::UserNamespace(name) if name == mode.as_str_name()));
    }
    let bogus = with_userns_mode(9);
    let err = container_namespaces(Some(&bogus), NamespaceMode::Pod, &pinned(), false).unwrap_err();
    assert!(matches!(
        err,
        SpecError::NamespaceMode {
            kind: "user",
            mode: 9
        }
    ));
}

#[test]
fn containers_join_the_pods_user_namespace() {
    let sandbox = SandboxNamespaces {
        user: Some("/run/berth/ns/s1/user".into()),
        ..pinned()
    };
    for option in [None, Some(with_userns_mode(NamespaceMode::Pod as i32))] {
        let namespaces =
            container_namespaces(option.as_ref(), NamespaceMode::Pod, &sandbox, false).unwrap();
        assert_eq!(
            path_of(&namespaces, LinuxNamespaceType::User),
            Some(Some(Path::new("/run/berth/ns/s1/user")))
        );
    }
    // No container leaves its pod's user namespace, nor asks for one its
    // pod does not have.
    let node = with_userns_mode(NamespaceMode::Node as i32);
    let err = container_namespaces(Some(&node), NamespaceMode::Pod, &sandbox, false).unwrap_err();
    assert!(matches!(
        err,
        SpecError::UserNamespaceOfPod {
            container: "NODE",
            pod: "POD"
        }
    ));
    let pod = with_userns_mode(NamespaceMode::Pod as i32);
    let err = container_namespaces(Some(&pod), NamespaceMode::Pod, &pinned(), false).unwrap_err();
    assert!(matches!(err, SpecError::UserNamespaceOfPod { .. }));
    let without = container_namespaces(None, NamespaceMode::Pod, &pinned(), false).unwrap();
    assert_eq!(path_of(&without, LinuxNamespaceType::User), None);
}

#[test]
fn unknown_pid_mode_is_an_error() {
    let option = NamespaceOption {
        pid: 17,
        ..Default::default()
    };
    let err =
        container_namespaces(Some(&option), NamespaceMode::Pod, &pinned(), false).unwrap_err();
    assert!(matches!(
        err,
        SpecError::NamespaceMode {
            kind: "pid",
            mode: 17
        }
    ));
}

fn sandbox_with_sysctls(pairs: &[(&str, &str)]) -> PodSandboxConfig {
    PodSandboxConfig {
        linux: Some(LinuxPodSandboxConfig {
            sysctls: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn sysctls_of_shared_namespaces_are_kept() {
    let config = sandbox_with_sysctls(&[
        ("net.ipv4.ip_forward", "1"),
        ("kernel.shm_rmid_forced", "1"),
        ("fs.mqueue.msg_max", "20"),
        ("vm.swappiness", "10"),
    ]);
    let sysctls = container_sysctls(&config, &pinned());
    let mut keys: Vec<_> = sysctls.keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "fs.mqueue.msg_max",
            "kernel.shm_rmid_forced",
            "net.ipv4.ip_forward"
        ]
    );
}

#[test]
fn sysctls_of_host_namespaces_are_dropped() {
    let config = sandbox_with_sysctls(&[("net.ipv4.ip_forward", "1"), ("kernel.shmmax", "1")]);
    let host = SandboxNamespaces::default();
    assert!(container_sysctls(&config, &host).is_empty());
    assert!(container_sysctls(&PodSandboxConfig::default(), &pinned()).is_empty());
}
