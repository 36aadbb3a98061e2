use super::*;
use cri_api::v1::UserNamespace;

fn mapping(container_id: u32, host_id: u32, length: u32) -> IdMapping {
    IdMapping {
        container_id,
        host_id,
        length,
    }
}

fn options(mode: NamespaceMode, uids: Vec<IdMapping>, gids: Vec<IdMapping>) -> NamespaceOption {
    NamespaceOption {
        userns_options: Some(UserNamespace {
            mode: mode as i32,
            uids,
            gids,
        }),
        ..Default::default()
    }
}

fn kubelet_pod() -> NamespaceOption {
    options(
        NamespaceMode::Pod,
        vec![mapping(0, 65536, 65536)],
        vec![mapping(0, 65536, 65536)],
    )
}

#[test]
fn no_options_and_node_mean_the_hosts_namespace() {
    assert_eq!(pod_user_namespace(None), Ok(None));
    assert_eq!(
        pod_user_namespace(Some(&NamespaceOption::default())),
        Ok(None)
    );
    let node = options(NamespaceMode::Node, vec![], vec![]);
    assert_eq!(pod_user_namespace(Some(&node)), Ok(None));
}

#[test]
fn pod_mode_takes_kubelets_single_mapping() {
    let userns = pod_user_namespace(Some(&kubelet_pod())).unwrap().unwrap();
    let expected = IdRange {
        container_id: 0,
        host_id: 65536,
        length: 65536,
    };
    assert_eq!(userns.uids, expected);
    assert_eq!(userns.gids, expected);
    assert_eq!(userns.host_root(), (65536, 65536));
    assert_eq!(userns.infra_id(), 65535);
    assert_eq!(expected.map_line(), "0 65536 65536");
    let oci = expected.to_oci();
    assert_eq!(
        (oci.container_id(), oci.host_id(), oci.size()),
        (0, 65536, 65536)
    );
}

#[test]
fn infra_id_stays_inside_short_ranges() {
    let short = options(
        NamespaceMode::Pod,
        vec![mapping(0, 1000, 1000)],
        vec![mapping(0, 1000, 500)],
    );
    let userns = pod_user_namespace(Some(&short)).unwrap().unwrap();
    assert_eq!(userns.infra_id(), 499);
}

#[test]
fn container_and_target_modes_are_refused() {
    for mode in [NamespaceMode::Container, NamespaceMode::Target] {
        let err = pod_user_namespace(Some(&options(mode, vec![], vec![]))).unwrap_err();
        assert_eq!(err, UsernsError::Mode(mode.as_str_name()));
        assert!(err.to_string().contains("userns_options.mode"));
    }
    let mut bogus = options(NamespaceMode::Pod, vec![], vec![]);
    if let Some(userns) = bogus.userns_options.as_mut() {
        userns.mode = 9;
    }
    assert_eq!(
        pod_user_namespace(Some(&bogus)),
        Err(UsernsError::UnknownMode(9))
    );
}

#[test]
fn node_mode_with_mappings_is_refused() {
    let node = options(NamespaceMode::Node, vec![mapping(0, 1000, 10)], vec![]);
    assert_eq!(
        pod_user_namespace(Some(&node)),
        Err(UsernsError::MappingsWithNode)
    );
}

#[test]
fn pod_mode_needs_exactly_one_mapping_of_each() {
    let none = options(NamespaceMode::Pod, vec![], vec![mapping(0, 1000, 10)]);
    assert_eq!(
        pod_user_namespace(Some(&none)),
        Err(UsernsError::MappingCount {
            field: "uids",
            count: 0
        })
    );
    let two = vec![mapping(0, 1000, 100000), mapping(0, 2000, 100000)];
    let err = pod_user_namespace(Some(&options(NamespaceMode::Pod, two.clone(), two)));
    assert_eq!(
        err,
        Err(UsernsError::MappingCount {
            field: "uids",
            count: 2
        })
    );
    let no_gids = options(NamespaceMode::Pod, vec![mapping(0, 1000, 10)], vec![]);
    assert!(matches!(
        pod_user_namespace(Some(&no_gids)),
        Err(UsernsError::MappingCount { field: "gids", .. })
    ));
}

#[test]
fn bad_ranges_are_refused_naming_the_field() {
    let cases = [
        (
            mapping(1, 1000, 100000),
            UsernsError::RootNotMapped {
                field: "gids",
                container_id: 1,
            },
        ),
        (
            mapping(0, 1000, 0),
            UsernsError::EmptyMapping { field: "gids" },
        ),
        (
            mapping(0, u32::MAX - 5, 10),
            UsernsError::MappingOverflow {
                field: "gids",
                host_id: u32::MAX - 5,
                length: 10,
            },
        ),
        (
            mapping(0, 0, 65536),
            UsernsError::HostRoot { field: "gids" },
        ),
    ];
    for (bad, expected) in cases {
        let request = options(NamespaceMode::Pod, vec![mapping(0, 1000, 10)], vec![bad]);
        let err = pod_user_namespace(Some(&request)).unwrap_err();
        assert_eq!(err, expected);
        assert!(err.to_string().contains("userns_options.gids"), "{err}");
    }
}

#[test]
fn pod_mode_needs_the_pods_own_ipc_and_pid_namespaces() {
    for (kind, set) in [
        (
            "ipc",
            (|o: &mut NamespaceOption| o.ipc = 2) as fn(&mut NamespaceOption),
        ),
        ("pid", |o: &mut NamespaceOption| o.pid = 2),
    ] {
        let mut request = kubelet_pod();
        set(&mut request);
        let err = pod_user_namespace(Some(&request)).unwrap_err();
        assert_eq!(err, UsernsError::HostNamespace { kind });
        assert!(
            err.to_string()
                .contains(&format!("namespace_options.{kind} is NODE")),
            "{err}"
        );
    }
}

#[test]
fn pod_mode_may_use_the_hosts_network() {
    // KEP-5607: what kubelet sends for hostNetwork with hostUsers: false.
    let mut request = kubelet_pod();
    request.network = NamespaceMode::Node as i32;
    request.pid = NamespaceMode::Container as i32;
    let userns = pod_user_namespace(Some(&request))
        .expect("host network with a user namespace")
        .expect("a user namespace");
    assert_eq!(
        userns.uids,
        IdRange {
            container_id: 0,
            host_id: 65536,
            length: 65536,
        }
    );
    assert_eq!(userns.gids, userns.uids);
}

#[test]
fn kernel_support_needs_user_namespaces_and_5_19() {
    assert!(kernel_supports_userns("6.18.44-fc-v669", Some("63379\n")));
    assert!(kernel_supports_userns("5.19.0", Some("10")));
    assert!(!kernel_supports_userns("5.18.19", Some("10")));
    assert!(!kernel_supports_userns("4.19.0-26-amd64", Some("10")));
    assert!(!kernel_supports_userns("6.1.0", Some("0")));
    assert!(!kernel_supports_userns("6.1.0", None));
    assert!(!kernel_supports_userns("garbage", Some("10")));
    assert!(kernel_supports_userns("6.0+", Some("10")));
}
