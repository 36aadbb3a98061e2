//! CheckpointContainer against a real berthd. This host's kernel is newer
//! than its CRIU understands (`criu check` fails on the vDSO), so here the
//! call must fail cleanly: FailedPrecondition naming the container and
//! quoting CRIU, the container untouched. The dump itself is checked in the
//! guest VM (`scripts/vm/in-guest/checkpoint-check.sh`).

use berth_tests::pods::{container_config, Harness};
use berth_tests::registry::tar_with_files;
use cri_api::v1::{CheckpointContainerRequest, ContainerState, ExecSyncRequest, NamespaceMode};

/// `criu check` on this host: Ok, or its output.
fn criu_check() -> Result<(), String> {
    match std::process::Command::new("criu").arg("check").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        Err(err) => Err(err.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoint_requests_are_checked_and_criu_failures_leave_the_container_running() {
    let harness = Harness::start().await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("ckpt", NamespaceMode::Container).await;
    let app = harness
        .create_ok(
            &pod,
            &pod_cfg,
            container_config("app", &image, &["/bin/sleep", "1000"]),
        )
        .await;
    let location = harness.log_dir("ckpt").join("app.tar");
    let checkpoint = |id: &str, location: &str| CheckpointContainerRequest {
        container_id: id.to_string(),
        location: location.to_string(),
        timeout: 30,
    };
    let mut client = harness.client().await;

    let err = client
        .checkpoint_container(checkpoint(&app, ""))
        .await
        .expect_err("no location");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("location"), "{}", err.message());
    let err = client
        .checkpoint_container(checkpoint(&app, "relative.tar"))
        .await
        .expect_err("relative location");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    let err = client
        .checkpoint_container(checkpoint("0123456789abcdef", &location.to_string_lossy()))
        .await
        .expect_err("no such container");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    assert!(
        err.message().contains("0123456789abcdef"),
        "{}",
        err.message()
    );
    let err = client
        .checkpoint_container(checkpoint(&app, &location.to_string_lossy()))
        .await
        .expect_err("created, not started");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("not running"), "{}", err.message());

    harness.start_container(&app).await;
    let criu = criu_check();
    for _ in 0..2 {
        let result = client
            .checkpoint_container(checkpoint(&app, &location.to_string_lossy()))
            .await;
        match &criu {
            Err(output) => {
                let err = result.expect_err("CRIU cannot run here");
                assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
                let message = err.message();
                assert!(message.contains(&app), "names the container: {message}");
                assert!(message.contains("CRIU cannot run"), "{message}");
                // CRIU's own first error line, quoted.
                let first = output
                    .lines()
                    .find(|l| l.starts_with("Error"))
                    .unwrap_or_else(|| output.lines().next().unwrap_or_default());
                assert!(message.contains(first.trim()), "{message} / {first}");
                assert!(!location.exists(), "no archive after a failure");
            }
            Ok(()) => {
                result.expect("CRIU works here: the checkpoint succeeds");
                assert!(location.is_file());
            }
        }
    }

    // Untouched: still running, and it answers an exec.
    let status = harness.status(&app).await;
    assert_eq!(
        status.state,
        ContainerState::ContainerRunning as i32,
        "{status:?}"
    );
    let exec = client
        .exec_sync(ExecSyncRequest {
            container_id: app.clone(),
            cmd: vec!["/bin/echo".into(), "still here".into()],
            timeout: 10,
        })
        .await
        .expect("exec after the checkpoint")
        .into_inner();
    assert_eq!(exec.exit_code, 0, "{exec:?}");
    assert_eq!(String::from_utf8_lossy(&exec.stdout), "still here\n");
    harness.remove_pod(&pod).await;
}

/// A checkpoint archive as CRI-O lays it out, made by hand: `config.dump`
/// naming `image`, CRIU's directory (with libcontainer's descriptors), a
/// rootfs diff adding `/restored-marker`, and `/bin/wget` deleted.
fn handmade_archive(dir: &std::path::Path, image: &str) -> std::path::PathBuf {
    let diff = tar_with_files(&[("restored-marker", b"from the archive\n")]);
    let config = serde_json::json!({
        "id": "0123abcd", "name": "app", "rootfsImageName": image,
        "createdTime": "2026-01-01T00:00:00Z", "checkpointedTime": "2026-01-01T00:00:01Z",
    })
    .to_string();
    let archive = tar_with_files(&[
        ("config.dump", config.as_bytes()),
        ("spec.dump", b"{}"),
        (
            "checkpoint/descriptors.json",
            br#"["/dev/null","pipe:[1]","pipe:[2]"]"#,
        ),
        ("checkpoint/inventory.img", b""),
        ("rootfs-diff.tar", &diff),
        ("deleted.files", br#"["/bin/wget"]"#),
    ]);
    let path = dir.join(format!("{}.tar", image.replace(['/', ':'], "_")));
    std::fs::write(&path, archive).expect("write");
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_from_a_checkpoint_archive_needs_its_image_and_fails_to_start_cleanly() {
    let harness = Harness::start().await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("restore", NamespaceMode::Container).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let from = |archive: &std::path::Path| {
        container_config("app", &archive.to_string_lossy(), &["/bin/sleep", "1000"])
    };

    let not_a_tar = dir.path().join("plain.txt");
    std::fs::write(&not_a_tar, "hello\n".repeat(200)).expect("write");
    let err = harness
        .create(&pod, &pod_cfg, from(&not_a_tar))
        .await
        .expect_err("not an archive");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("plain.txt"), "{}", err.message());

    let missing = handmade_archive(dir.path(), "localhost:1/not/here:v1");
    let err = harness
        .create(&pod, &pod_cfg, from(&missing))
        .await
        .expect_err("its image is not here");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    assert!(
        err.message().contains("localhost:1/not/here:v1"),
        "{}",
        err.message()
    );

    let archive = handmade_archive(dir.path(), &image);
    let id = harness
        .create(&pod, &pod_cfg, from(&archive))
        .await
        .expect("created from the archive");
    let status = harness.status(&id).await;
    assert_eq!(
        status.image.map(|i| i.image),
        Some(image.clone()),
        "its image"
    );
    assert_eq!(status.state, ContainerState::ContainerCreated as i32);
    if criu_check().is_err() {
        // CRIU cannot run here: the start says so and changes nothing.
        let err = harness
            .client()
            .await
            .start_container(cri_api::v1::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .expect_err("no CRIU here");
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
        assert!(
            err.message().contains(&id) && err.message().contains("criu restore"),
            "{}",
            err.message()
        );
        let status = harness.status(&id).await;
        assert_eq!(status.state, ContainerState::ContainerCreated as i32);
    }
    harness
        .client()
        .await
        .remove_container(cri_api::v1::RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .expect("remove");
    harness.remove_pod(&pod).await;
}
