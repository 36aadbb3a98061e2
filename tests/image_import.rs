//! `berthd images import`: tarballs made by skopeo from the local
//! registry's images, imported into a stopped berthd's store, then listed,
//! resolved by name and run.

use std::path::Path;
use std::process::Command;

use berth_tests::pods::{container_config, Harness};
use berth_tests::registry::{tiny_layer_tar, Layer, TestImage, TestRegistry};
use berth_tests::{Berthd, Sandbox};
use cri_api::v1::image_service_client::ImageServiceClient;
use cri_api::v1::NamespaceMode;
use cri_api::v1::{
    ContainerState, ImageSpec, ImageStatusRequest, ListImagesRequest, RemoveImageRequest,
};
use tonic::transport::Channel;

/// skopeo copies `source` (a docker:// reference on the plain-HTTP test
/// registry) to `destination` (`docker-archive:...`, `oci-archive:...`).
fn skopeo_copy(source: &str, destination: &str) {
    let output = Command::new("skopeo")
        .args(["copy", "--src-tls-verify=false", source, destination])
        .output()
        .expect("run skopeo (apt-get install skopeo)");
    assert!(
        output.status.success(),
        "skopeo copy {source} {destination}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn import(
    sandbox: &Sandbox,
    config: &Path,
    file: &Path,
    name: Option<&str>,
) -> std::process::Output {
    let file = file.display().to_string();
    let mut args = vec!["images", "import", file.as_str()];
    if let Some(name) = name {
        args.extend(["--name", name]);
    }
    sandbox.run_to_end(config, &args)
}

async fn image_id(images: &ImageServiceClient<Channel>, name: &str) -> Option<String> {
    images
        .clone()
        .image_status(ImageStatusRequest {
            image: Some(ImageSpec {
                image: name.to_string(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .expect("ImageStatus")
        .into_inner()
        .image
        .map(|image| image.id)
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_and_oci_archives_import_into_a_stopped_berthd() {
    let registry = TestRegistry::start();
    let docker_image = registry
        .push_image(
            "test/import-docker",
            &["v1"],
            &TestImage::new(vec![Layer::gzip(tiny_layer_tar("docker"))]),
        )
        .await;
    let oci_image = registry
        .push_image(
            "test/import-oci",
            &["v1"],
            &TestImage::new(vec![Layer::gzip(tiny_layer_tar("oci"))]),
        )
        .await;
    let work = tempfile::tempdir().expect("work");
    let docker_tar = work.path().join("docker.tar");
    let oci_tar = work.path().join("oci.tar");
    skopeo_copy(
        &format!("docker://{}", registry.reference("test/import-docker:v1")),
        &format!(
            "docker-archive:{}:airgap.berth-test.invalid/app:v1",
            docker_tar.display()
        ),
    );
    skopeo_copy(
        &format!("docker://{}", registry.reference("test/import-oci:v1")),
        &format!("oci-archive:{}:v1", oci_tar.display()),
    );
    drop(registry);

    let sandbox = Sandbox::new();
    let config = sandbox.write_config("");
    let output = import(&sandbox, &config, &docker_tar, None);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(docker_image.id()) && stdout.contains("airgap.berth-test.invalid/app:v1"),
        "{stdout}"
    );
    // A bare tag names nothing: the name is given.
    let output = import(
        &sandbox,
        &config,
        &oci_tar,
        Some("airgap.berth-test.invalid/oci:v1"),
    );
    assert!(output.status.success(), "{output:?}");
    // Not a tarball of either kind: an error naming the file.
    let junk = work.path().join("junk.tar");
    std::fs::write(&junk, b"not a tar").expect("junk");
    let output = import(&sandbox, &config, &junk, None);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains(&junk.display().to_string()));

    let berthd = Berthd::start_in(sandbox, &config);
    let images = berthd.image_client().await;
    assert_eq!(
        image_id(&images, "airgap.berth-test.invalid/app:v1")
            .await
            .as_deref(),
        Some(docker_image.id())
    );
    assert_eq!(
        image_id(&images, "airgap.berth-test.invalid/oci:v1")
            .await
            .as_deref(),
        Some(oci_image.id())
    );
    let listed = images
        .clone()
        .list_images(ListImagesRequest { filter: None })
        .await
        .expect("ListImages")
        .into_inner()
        .images;
    assert_eq!(listed.len(), 2, "{listed:?}");

    // While berthd runs on the root, import refuses and says why.
    let output = import(&berthd.sandbox, &config, &docker_tar, None);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("berthd is running"),
        "{output:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_imported_image_runs() {
    let mut harness = Harness::start().await;
    let work = tempfile::tempdir().expect("work");
    let tar = work.path().join("busybox.tar");
    let name = "airgap.berth-test.invalid/busybox:1";
    skopeo_copy(
        &format!("docker://{}", harness.image),
        &format!("docker-archive:{}:{name}", tar.display()),
    );
    // Nothing of the pulled image is left: the import must bring it all.
    let images = harness.berthd.image_client().await;
    images
        .clone()
        .remove_image(RemoveImageRequest {
            image: Some(ImageSpec {
                image: harness.image.clone(),
                ..Default::default()
            }),
        })
        .await
        .expect("RemoveImage");

    harness.berthd.stop_with(nix::sys::signal::Signal::SIGTERM);
    let sandbox = std::mem::take(&mut harness.berthd.sandbox);
    let config = sandbox.config_path();
    let output = import(&sandbox, &config, &tar, None);
    assert!(output.status.success(), "{output:?}");
    let restarted = Berthd::start_in(sandbox, &config);
    drop(std::mem::replace(&mut harness.berthd, restarted));

    let (pod, pod_config) = harness.run_pod("imported", NamespaceMode::Pod).await;
    let id = harness
        .create_ok(
            &pod,
            &pod_config,
            container_config("imported", name, &["sh", "-c", "test -x /bin/busybox"]),
        )
        .await;
    harness.start_container(&id).await;
    let status = harness
        .wait_state(&id, ContainerState::ContainerExited)
        .await;
    assert_eq!(status.exit_code, 0, "{status:?}");
    harness.remove_pod(&pod).await;
}
