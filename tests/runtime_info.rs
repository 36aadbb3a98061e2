//! Version, Status and RuntimeConfig over gRPC against a real berthd.

use berth_tests::Berthd;
use cri_api::v1::{
    CgroupDriver, CheckpointContainerRequest, ImageFsInfoRequest, RuntimeConfigRequest,
    StatusRequest, VersionRequest,
};

#[tokio::test(flavor = "multi_thread")]
async fn version_names_berth_and_cri_v1() {
    let berthd = Berthd::start("");
    let version = berthd
        .runtime_client()
        .await
        .version(VersionRequest::default())
        .await
        .expect("Version")
        .into_inner();
    assert_eq!(version.runtime_name, "berth");
    assert_eq!(version.runtime_api_version, "v1");
    assert_eq!(version.runtime_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(version.version, "0.1.0");
}

#[tokio::test(flavor = "multi_thread")]
async fn runtime_config_reports_cgroupfs_when_configured() {
    let berthd = Berthd::start("cgroup_driver = \"cgroupfs\"");
    let config = berthd
        .runtime_client()
        .await
        .runtime_config(RuntimeConfigRequest::default())
        .await
        .expect("RuntimeConfig")
        .into_inner();
    let linux = config.linux.expect("linux config");
    assert_eq!(linux.cgroup_driver(), CgroupDriver::Cgroupfs);
}

#[tokio::test(flavor = "multi_thread")]
async fn runtime_config_auto_follows_the_host() {
    // This machine's PID 1 is not systemd, so `auto` means cgroupfs here; on
    // a systemd host the same test expects systemd.
    let expected = if berth_cgroups::systemd_booted() {
        CgroupDriver::Systemd
    } else {
        CgroupDriver::Cgroupfs
    };
    let berthd = Berthd::start("cgroup_driver = \"auto\"");
    let mut client = berthd.runtime_client().await;
    // Asked twice: the answer is settled at start-up and never changes.
    for _ in 0..2 {
        let config = client
            .runtime_config(RuntimeConfigRequest::default())
            .await
            .expect("RuntimeConfig")
            .into_inner();
        assert_eq!(config.linux.expect("linux").cgroup_driver(), expected);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn status_reports_both_conditions_and_follows_cni_config() {
    let berthd = Berthd::start("");
    let mut client = berthd.runtime_client().await;
    let condition = |status: &cri_api::v1::StatusResponse, kind: &str| {
        status
            .status
            .as_ref()
            .expect("status")
            .conditions
            .iter()
            .find(|c| c.r#type == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} condition"))
    };

    let status = client
        .status(StatusRequest::default())
        .await
        .expect("Status")
        .into_inner();
    let runtime = condition(&status, "RuntimeReady");
    assert!(runtime.status);
    assert!(!runtime.reason.is_empty() && !runtime.message.is_empty());
    let network = condition(&status, "NetworkReady");
    assert!(!network.status, "no CNI config yet: {network:?}");
    assert!(!network.reason.is_empty() && !network.message.is_empty());
    assert!(status.info.is_empty(), "info only with verbose");

    let conf_dir = berthd.sandbox.cni_conf_dir();
    std::fs::create_dir_all(&conf_dir).unwrap();
    std::fs::write(
        conf_dir.join("10-test.conflist"),
        r#"{"cniVersion":"1.0.0","name":"test","plugins":[{"type":"loopback"}]}"#,
    )
    .unwrap();
    let status = client
        .status(StatusRequest::default())
        .await
        .expect("Status")
        .into_inner();
    assert!(condition(&status, "NetworkReady").status);
}

/// `crictl info` after `systemctl reload berthd`: the config a reload
/// applied, not the one berthd started with.
#[tokio::test(flavor = "multi_thread")]
async fn verbose_status_shows_what_a_reload_applied() {
    let berthd = Berthd::start("");
    let config_of = |status: cri_api::v1::StatusResponse| -> serde_json::Value {
        serde_json::from_str(status.info.get("config").expect("config in info")).expect("JSON")
    };
    let mut client = berthd.runtime_client().await;
    let before = config_of(
        client
            .status(StatusRequest { verbose: true })
            .await
            .expect("Status")
            .into_inner(),
    );
    assert!(before["registry"]["mirrors"]["reload.example"].is_null());
    assert_eq!(before["log_level"], "info");

    berthd.sandbox.write_config(
        "log_level = \"warn\"\n[registry.mirrors.\"reload.example\"]\nendpoints = [\"http://127.0.0.1:5999\"]",
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(berthd.pid()),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !berthd.log_text().contains("config reloaded") {
        assert!(
            std::time::Instant::now() < deadline,
            "no reload: {}",
            berthd.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let after = config_of(
        client
            .status(StatusRequest { verbose: true })
            .await
            .expect("Status")
            .into_inner(),
    );
    assert_eq!(
        after["registry"]["mirrors"]["reload.example"]["endpoints"][0],
        "http://127.0.0.1:5999"
    );
    assert_eq!(after["log_level"], "warn");
}

#[tokio::test(flavor = "multi_thread")]
async fn verbose_status_carries_the_effective_config() {
    let berthd =
        Berthd::start("[registry.mirrors.\"docker.io\"]\nendpoints = [\"http://localhost:5000\"]");
    let status = berthd
        .runtime_client()
        .await
        .status(StatusRequest { verbose: true })
        .await
        .expect("Status")
        .into_inner();
    let config: serde_json::Value =
        serde_json::from_str(status.info.get("config").expect("config in info")).expect("JSON");
    let state = berthd.sandbox.state().display().to_string();
    assert_eq!(config["stateDir"], state.as_str(), "critest reads stateDir");
    assert_eq!(config["state_dir"], state.as_str());
    assert_eq!(
        config["registry"]["mirrors"]["docker.io"]["endpoints"][0],
        "http://localhost:5000"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn status_lists_the_default_handler_and_only_real_features() {
    let berthd = Berthd::start("");
    let status = berthd
        .runtime_client()
        .await
        .status(StatusRequest::default())
        .await
        .expect("Status")
        .into_inner();
    let default = status
        .runtime_handlers
        .iter()
        .find(|h| h.name.is_empty())
        .expect("default handler");
    let features = default.features.expect("handler features");
    // critest and kubelet trust these: only what works is advertised.
    // Recursive read-only mounts, user namespaces and the supplemental
    // groups policy work here (their critest specs pass): the kernel has
    // mount_setattr (5.12) and idmapped overlay layers (5.19).
    assert!(features.recursive_read_only_mounts);
    assert!(features.user_namespaces);
    let features = status.features.expect("features");
    assert!(features.supplemental_groups_policy);
    // KEP-5855: noexec, nodev and nosuid reach the bind (berth-spec).
    assert!(features.mount_options);
    // KEP-5607: hostUsers: false on the host network, where user
    // namespaces work (tests/user_namespaces.rs runs such a pod).
    assert!(features.user_namespaces_host_network);
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoint_without_a_container_id_is_invalid_and_names_the_field() {
    // CheckpointContainer is served (see tests/checkpoints.rs): an empty
    // request is the client's mistake, not a missing RPC.
    let berthd = Berthd::start("");
    let err = berthd
        .runtime_client()
        .await
        .checkpoint_container(CheckpointContainerRequest::default())
        .await
        .expect_err("empty request");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("container_id"), "{}", err.message());
}

#[tokio::test(flavor = "multi_thread")]
async fn image_fs_info_reports_the_store_directories() {
    // crictl and critest call ImageFsInfo to check the image API is there.
    let berthd = Berthd::start("");
    let info = berthd
        .image_client()
        .await
        .image_fs_info(ImageFsInfoRequest::default())
        .await
        .expect("ImageFsInfo")
        .into_inner();
    let root = berthd.sandbox.root();
    for (usage, dir) in [
        (&info.image_filesystems, "images"),
        (&info.container_filesystems, "containers"),
    ] {
        assert_eq!(usage.len(), 1);
        let usage = &usage[0];
        assert_eq!(
            usage.fs_id.as_ref().expect("fs id").mountpoint,
            root.join(dir).display().to_string()
        );
        assert!(usage.timestamp > 0);
        assert!(usage.inodes_used.expect("inodes").value >= 1);
        assert!(usage.used_bytes.is_some());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn configured_runtime_handlers_are_listed() {
    // `true features` prints nothing: a runtime whose features are unknown.
    let berthd = Berthd::start("[runtime_handlers.fast]\nruntime_path = \"/bin/true\"\n");
    let status = berthd
        .runtime_client()
        .await
        .status(StatusRequest::default())
        .await
        .expect("Status")
        .into_inner();
    let names: Vec<_> = status
        .runtime_handlers
        .iter()
        .map(|handler| handler.name.as_str())
        .collect();
    assert_eq!(names, ["", "fast"]);
    // What its runtime does not say it does is not advertised.
    let fast = status.runtime_handlers[1].features.expect("features");
    assert!(!fast.user_namespaces && !fast.recursive_read_only_mounts);
}
