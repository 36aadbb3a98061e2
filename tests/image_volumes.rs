//! Image volumes (KEP-4639) against a real berthd: a pulled image mounted
//! read-only into a container, whole or by `image_sub_path`, held while the
//! container exists, and unmounted with it.

use berth_tests::host::mounts_under;
use berth_tests::pods::{container_config, pids_mentioning, Harness};
use berth_tests::registry::{Layer, RawTar, TestImage};
use cri_api::v1::{
    ContainerConfig, ContainerState, ExecSyncRequest, ExecSyncResponse, ImageSpec, Mount,
    NamespaceMode, RemoveImageRequest,
};

/// Pushes and pulls an image of two layers: `data/` with a file from each
/// (the overlay shows both), and symlinks that point out of the image.
async fn pull_volume_image(harness: &Harness) -> String {
    let lower = RawTar::new()
        .dir("data/", 0o755)
        .file("data/hello.txt", b"hello from the image\n", 0o644)
        .dir("etc/", 0o755)
        .file("etc/marker", b"image etc\n", 0o644)
        .finish();
    let upper = RawTar::new()
        .dir("data/", 0o755)
        .file("data/second.txt", b"upper layer\n", 0o644)
        .symlink("data/out", "../../../../etc")
        .finish();
    let image = TestImage::new(vec![Layer::gzip(lower), Layer::gzip(upper)]);
    harness.push_and_pull("test/volume", &image).await
}

/// `container_config` with an image volume at `/vol`, as kubelet sends it:
/// the image by the ref PullImage returned.
fn with_volume(name: &str, busybox: &str, image: &str, sub_path: &str) -> ContainerConfig {
    let mut config = container_config(name, busybox, &["/bin/sleep", "1000"]);
    config.mounts.push(Mount {
        container_path: "/vol".into(),
        image: Some(ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        image_sub_path: sub_path.into(),
        readonly: true,
        ..Default::default()
    });
    config
}

async fn exec(harness: &Harness, id: &str, cmd: &[&str]) -> ExecSyncResponse {
    harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|part| part.to_string()).collect(),
            timeout: 10,
        })
        .await
        .unwrap_or_else(|status| panic!("ExecSync {cmd:?}: {status:?}"))
        .into_inner()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_volume_with_a_sub_path_is_mounted_read_only() {
    let harness = Harness::start().await;
    let busybox = harness.image.clone();
    let volume_image = pull_volume_image(&harness).await;
    let (pod, pod_cfg) = harness.run_pod("imgvol", NamespaceMode::Container).await;

    // Missing image, missing sub path, a sub path leaving the image.
    let status = harness
        .create(
            &pod,
            &pod_cfg,
            with_volume("nope", &busybox, "registry.invalid/none:1", ""),
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    assert!(
        status.message().contains("registry.invalid/none:1"),
        "{status:?}"
    );
    for (sub_path, says) in [("nothing-here", "does not exist"), ("../etc", "relative")] {
        let status = harness
            .create(
                &pod,
                &pod_cfg,
                with_volume("bad", &busybox, &volume_image, sub_path),
            )
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains(sub_path) && status.message().contains(says),
            "{sub_path}: {status:?}"
        );
    }

    let app = harness
        .create_ok(
            &pod,
            &pod_cfg,
            with_volume("app", &busybox, &volume_image, "data"),
        )
        .await;
    // A sub path through a symlink out of the image stays in the image.
    let linked = harness
        .create_ok(
            &pod,
            &pod_cfg,
            with_volume("linked", &busybox, &volume_image, "data/out"),
        )
        .await;
    for id in [&app, &linked] {
        harness.start_container(id).await;
        harness
            .wait_state(id, ContainerState::ContainerRunning)
            .await;
    }

    // RemoveImage while the container runs: its layers stay.
    harness
        .berthd
        .image_client()
        .await
        .remove_image(RemoveImageRequest {
            image: Some(ImageSpec {
                image: volume_image.clone(),
                ..Default::default()
            }),
        })
        .await
        .expect("RemoveImage");

    let hello = exec(
        &harness,
        &app,
        &["/bin/cat", "/vol/hello.txt", "/vol/second.txt"],
    )
    .await;
    assert_eq!(hello.exit_code, 0, "{hello:?}");
    assert_eq!(
        String::from_utf8_lossy(&hello.stdout),
        "hello from the image\nupper layer\n"
    );
    let marker = exec(&harness, &linked, &["/bin/cat", "/vol/marker"]).await;
    assert_eq!(
        String::from_utf8_lossy(&marker.stdout),
        "image etc\n",
        "{marker:?}"
    );
    let write = exec(&harness, &app, &["/bin/sh", "-c", "echo x > /vol/new"]).await;
    assert_ne!(write.exit_code, 0, "{write:?}");
    assert!(
        String::from_utf8_lossy(&write.stderr).contains("Read-only file system"),
        "{write:?}"
    );

    harness.remove_pod(&pod).await;
    let mounts = mounts_under(harness.berthd.sandbox.dir.path());
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    let shims = pids_mentioning(&harness.berthd.sandbox.dir.path().display().to_string());
    assert!(shims.is_empty(), "shims left running: {shims:?}");
}
