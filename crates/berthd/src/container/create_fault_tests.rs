//! CreateContainer under fault injection: each step that can fail after
//! the first thing was made fails in turn, and nothing of the container
//! is left: no record, bundle, layer or shim dir, no rootfs mount, no
//! shim, no cgroup, no hold on the image's layers, and its name is free.

use cri_api::v1::{
    CdiDevice, ContainerConfig, ImageSpec, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PodSandboxConfig, UserNamespace,
};

use super::lifecycle_tests::{assert_no_trace, container, fixture, Fixture, IMAGE};
use crate::sandbox::lifecycle_tests::pod;

/// How a step is made to fail.
enum Fault {
    /// A fake's step, by its journal name.
    Step(&'static str),
    /// A cgroup manager call.
    Cgroup(&'static str),
    /// The image's config blob is not JSON.
    ImageConfig,
    /// The request asks for what cannot be given (the step fails by itself).
    Request,
}

struct Case {
    what: &'static str,
    fault: Fault,
    pod: fn() -> PodSandboxConfig,
    config: fn() -> ContainerConfig,
}

fn plain_pod() -> PodSandboxConfig {
    pod("web")
}

fn plain() -> ContainerConfig {
    container("app")
}

/// An image volume (of the container's own image) at `/vol`.
fn image_volume() -> ContainerConfig {
    let mut config = container("app");
    config.mounts.push(cri_api::v1::Mount {
        container_path: "/vol".into(),
        image: Some(ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

/// A CDI device no spec on the node names.
fn unknown_cdi_device() -> ContainerConfig {
    let mut config = container("app");
    config.cdi_devices = vec![CdiDevice {
        name: "vendor.example/gpu=none".into(),
    }];
    config
}

/// PID TARGET of a container that does not exist.
fn missing_target() -> ContainerConfig {
    let mut config = container("app");
    config.linux = Some(cri_api::v1::LinuxContainerConfig {
        security_context: Some(LinuxContainerSecurityContext {
            namespace_options: Some(NamespaceOption {
                pid: NamespaceMode::Target as i32,
                target_id: "no-such-container".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

/// A pod with its own user namespace: its containers' binds are idmapped.
fn userns_pod() -> PodSandboxConfig {
    let mapping = vec![cri_api::v1::IdMapping {
        container_id: 0,
        host_id: 1_200_000,
        length: 65536,
    }];
    let mut config = pod("web");
    config.linux = Some(LinuxPodSandboxConfig {
        security_context: Some(LinuxSandboxSecurityContext {
            namespace_options: Some(NamespaceOption {
                userns_options: Some(UserNamespace {
                    mode: NamespaceMode::Pod as i32,
                    uids: mapping.clone(),
                    gids: mapping,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

/// Every step of a create, in the order it runs, that fails once the
/// container's dirs exist.
fn cases() -> Vec<Case> {
    let case = |what, fault, pod, config| Case {
        what,
        fault,
        pod,
        config,
    };
    vec![
        case(
            "rootfs mount",
            Fault::Step("mount rootfs"),
            plain_pod,
            plain,
        ),
        (case(
            "image volume mount",
            Fault::Step("mount image volume"),
            plain_pod,
            image_volume,
        )),
        case("PID target", Fault::Request, plain_pod, missing_target),
        case("image config", Fault::ImageConfig, plain_pod, plain),
        case("CDI device", Fault::Request, plain_pod, unknown_cdi_device),
        case(
            "idmapped bind",
            Fault::Step("idmap bind"),
            userns_pod,
            plain,
        ),
        case("shim launch", Fault::Step("launch shim"), plain_pod, plain),
        case(
            "device filter",
            Fault::Cgroup("restrict_devices"),
            plain_pod,
            plain,
        ),
    ]
}

/// Nothing of a failed create is left, beyond what `assert_no_trace` sees.
fn assert_nothing_left(f: &Fixture, what: &str, cgroups_before: &[String]) {
    assert_no_trace(f, what);
    let entries = f.journal.entries();
    // Every rootfs mount made (image volumes and idmapped views are under
    // it) was unmounted.
    let mounted =
        entries.iter().any(|entry| entry == "mount rootfs") && !matches!(what, "rootfs mount");
    assert_eq!(
        entries.iter().any(|entry| entry == "unmount rootfs"),
        mounted,
        "{what}: {entries:?}"
    );
    for launch in f
        .fake_shims
        .launches
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .iter()
    {
        let dir = f.manager.shims_dir.join(&launch.id[..12]);
        assert!(!f.manager.shims.is_alive(&dir), "{what}: shim left");
    }
    assert_eq!(f.pods.cgroups.cgroups(), cgroups_before, "{what}: cgroups");
    assert!(
        f.manager
            .layer_leases
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_empty(),
        "{what}: layers still held"
    );
}

#[tokio::test]
async fn a_create_failing_at_any_step_leaves_nothing() {
    for case in cases() {
        let f = fixture().await;
        let pod_id = f
            .pods
            .manager
            .run((case.pod)(), "")
            .await
            .unwrap_or_else(|err| panic!("{}: pod: {err}", case.what));
        let cgroups_before = f.pods.cgroups.cgroups();
        let blob = f
            .manager
            .images
            .blob_path(&format!("sha256:{}", "a".repeat(64)))
            .expect("path");
        let good_blob = std::fs::read(&blob).expect("blob");
        match case.fault {
            Fault::Step(step) => f.journal.fail(step),
            Fault::Cgroup(op) => f.pods.cgroups.fail(op),
            Fault::ImageConfig => std::fs::write(&blob, b"not json").expect("corrupt"),
            Fault::Request => {}
        }
        f.journal.clear();
        let err = f
            .manager
            .create(&pod_id, (case.config)(), None)
            .await
            .expect_err(case.what);
        assert!(
            !matches!(err, super::ContainerError::NameReserved { .. }),
            "{}: {err}",
            case.what
        );
        assert_nothing_left(&f, case.what, &cgroups_before);
        // The name is free again: the same create works once nothing fails.
        if matches!(case.fault, Fault::Request) {
            continue;
        }
        f.journal.heal();
        f.pods.cgroups.heal();
        std::fs::write(&blob, good_blob).expect("blob");
        f.manager
            .create(&pod_id, (case.config)(), None)
            .await
            .unwrap_or_else(|err| panic!("{}: again: {err}", case.what));
    }
}

#[tokio::test]
async fn a_failed_create_whose_shim_hangs_leaves_nothing() {
    let f = fixture().await;
    let pod_id = f.pods.manager.run(plain_pod(), "").await.expect("pod");
    let cgroups_before = f.pods.cgroups.cgroups();
    // The create fails after the shim made the container, and the shim
    // answers neither the kill nor the shutdown of the undo.
    f.pods.cgroups.fail("restrict_devices");
    f.journal.fail("shim hangs at shutdown");
    f.journal.clear();
    f.manager
        .create(&pod_id, plain(), None)
        .await
        .expect_err("restrict_devices fails");
    let entries = f.journal.entries();
    assert!(
        entries.iter().any(|entry| entry == "kill unrecorded shim"),
        "the hung shim is killed: {entries:?}"
    );
    assert_nothing_left(&f, "a hung shim", &cgroups_before);
}
