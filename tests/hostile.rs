//! Hostile input (issue #14): registries that stall or never stop sending,
//! images whose `/etc/passwd` is a FIFO or huge, timeouts near `i64::MAX`,
//! the shim's own OOM score, and who may read what berthd writes. Each test
//! ends by checking that berthd still answers.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use berth_tests::bad_registry::{BadRegistry, Misbehaviour};
use berth_tests::pods::{container_config, Harness, SETTLE};
use berth_tests::registry::{tiny_layer_tar, Layer, RawTar, TestImage, TestRegistry};
use berth_tests::Berthd;
use cri_api::v1::image_service_client::ImageServiceClient;
use cri_api::v1::{
    ContainerConfig, ContainerState, ExecSyncRequest, ImageSpec, Int64Value, LinuxContainerConfig,
    LinuxContainerResources, LinuxContainerSecurityContext, ListImagesRequest, NamespaceMode,
    PullImageRequest, StopContainerRequest, VersionRequest,
};
use tonic::transport::Channel;
use tonic::Code;

/// What a test berthd allows a silent registry, in seconds.
const REGISTRY_TIMEOUT_S: u64 = 2;

fn berthd_with_short_registry_timeouts() -> Berthd {
    Berthd::start(&format!(
        "[registry]\nconnect_timeout_seconds = {REGISTRY_TIMEOUT_S}\nread_timeout_seconds = {REGISTRY_TIMEOUT_S}\n"
    ))
}

async fn pull(
    images: &ImageServiceClient<Channel>,
    reference: &str,
) -> Result<String, tonic::Status> {
    let request = PullImageRequest {
        image: Some(ImageSpec {
            image: reference.to_string(),
            ..Default::default()
        }),
        auth: None,
        sandbox_config: None,
    };
    tokio::time::timeout(Duration::from_secs(120), images.clone().pull_image(request))
        .await
        .unwrap_or_else(|_| panic!("PullImage {reference} did not answer within 120 s"))
        .map(|response| response.into_inner().image_ref)
}

async fn still_answers(images: &ImageServiceClient<Channel>) {
    tokio::time::timeout(
        Duration::from_secs(5),
        images
            .clone()
            .list_images(ListImagesRequest { filter: None }),
    )
    .await
    .expect("ListImages answers within 5 s")
    .expect("ListImages");
}

/// Every entry under `dir`, recursively (files and directories).
fn entries_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            found.push(entry.path().display().to_string());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                found.extend(entries_under(&entry.path()));
            }
        }
    }
    found
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

// ---------------------------------------------------------------------------
// Registries
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_stalled_registry_fails_the_pull_in_time_and_holds_no_layer() {
    let berthd = berthd_with_short_registry_timeouts();
    let images = berthd.image_client().await;
    let image = TestImage::new(vec![Layer::gzip(tiny_layer_tar("stalled"))]);
    let built = image.build();

    // A registry that never answers at all: the read timeout ends it.
    let silent = BadRegistry::start(&built, "test/app", "v1", Misbehaviour::StallEverything);
    let started = Instant::now();
    let err = pull(&images, &silent.reference("test/app:v1"))
        .await
        .expect_err("a silent registry cannot serve a pull");
    assert!(
        started.elapsed() < Duration::from_secs(REGISTRY_TIMEOUT_S * 5),
        "took {:?}: {err:?}",
        started.elapsed()
    );
    assert!(err.message().contains("test/app:v1"), "{err:?}");
    still_answers(&images).await;

    // A registry that stalls inside a layer, while a good registry serves
    // the same layer: the second pull shares the first one's download of
    // it, and must get it once the stalled download times out.
    let stalling = BadRegistry::start(&built, "test/app", "v1", Misbehaviour::StallLayers);
    let good = TestRegistry::start();
    good.push_image("test/app", &["v1"], &image).await;
    let stalled_pull = {
        let images = images.clone();
        let reference = stalling.reference("test/app:v1");
        tokio::spawn(async move {
            let started = Instant::now();
            (pull(&images, &reference).await, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let id = pull(&images, &good.reference("test/app:v1"))
        .await
        .unwrap_or_else(|err| panic!("pull from the good registry: {err:?}"));
    assert_eq!(id, built.config_digest);
    let (stalled, elapsed) = stalled_pull.await.expect("stalled pull task");
    let err = stalled.expect_err("a stalled layer cannot complete a pull");
    assert!(
        elapsed < Duration::from_secs(REGISTRY_TIMEOUT_S * 10),
        "took {elapsed:?}: {err:?}"
    );
    assert!(err.message().contains(&built.layers[0].digest), "{err:?}");
    still_answers(&images).await;
}

/// Pulls a one-layer image (its file named `name`) from a registry that
/// misbehaves `how`; the pull must fail. The image and the error.
async fn failed_pull(
    images: &ImageServiceClient<Channel>,
    name: &str,
    how: Misbehaviour,
) -> (berth_tests::registry::BuiltImage, tonic::Status) {
    let built = TestImage::new(vec![Layer::gzip(tiny_layer_tar(name))]).build();
    let registry = BadRegistry::start(&built, "test/app", "v1", how);
    let err = pull(images, &registry.reference("test/app:v1"))
        .await
        .expect_err("a misbehaving registry cannot complete a pull");
    (built, err)
}

#[tokio::test]
async fn an_endless_blob_is_cut_off_at_its_declared_size() {
    let berthd = berthd_with_short_registry_timeouts();
    let images = berthd.image_client().await;
    let (built, err) = failed_pull(&images, "endless", Misbehaviour::EndlessLayers).await;
    assert!(err.message().contains("declared size"), "{err:?}");
    assert!(err.message().contains(&built.layers[0].digest), "{err:?}");

    let store = berthd.sandbox.root().join("images");
    let tmp = entries_under(&store.join("tmp"));
    assert!(tmp.is_empty(), "temp files left: {tmp:?}");
    let layers = entries_under(&store.join("layers"));
    assert!(layers.is_empty(), "layers left: {layers:?}");
    let blobs = entries_under(&store.join("blobs"));
    assert!(
        blobs.iter().all(|blob| blob.ends_with("sha256")),
        "blobs left: {blobs:?}"
    );
    still_answers(&images).await;
}

/// berthd's peak resident memory (VmHWM), in KiB.
fn peak_rss_kib(berthd: &Berthd) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", berthd.pid())).expect("berthd's status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

#[tokio::test]
async fn an_endless_manifest_is_cut_off_at_the_cap() {
    let berthd = berthd_with_short_registry_timeouts();
    let images = berthd.image_client().await;
    still_answers(&images).await;
    let before = peak_rss_kib(&berthd);
    let (_, err) = failed_pull(&images, "manifest", Misbehaviour::EndlessManifest).await;
    assert!(err.message().contains("cap"), "{err:?}");
    // The cap is 8 MiB; reading on to the end of the read timeout would
    // take gigabytes over loopback.
    let grown = peak_rss_kib(&berthd).saturating_sub(before);
    assert!(grown < 64 << 10, "berthd's peak RSS grew by {grown} KiB");
    still_answers(&images).await;
}

// ---------------------------------------------------------------------------
// Files of the image
// ---------------------------------------------------------------------------

/// Pushes busybox plus `top` (a layer over it) and pulls it into berthd.
async fn pull_busybox_with(harness: &Harness, name: &str, top: Vec<u8>) -> String {
    let image = TestImage::new(vec![
        Layer::gzip(berth_tests::pods::busybox_layer_tar()),
        Layer::gzip(top),
    ]);
    harness.registry.push_image(name, &["1"], &image).await;
    let reference = harness.registry.reference(&format!("{name}:1"));
    pull(&harness.berthd.image_client().await, &reference)
        .await
        .unwrap_or_else(|err| panic!("pull {reference}: {err:?}"));
    reference
}

fn as_user(mut config: ContainerConfig, user: &str) -> ContainerConfig {
    let context = LinuxContainerSecurityContext {
        run_as_username: user.to_string(),
        ..Default::default()
    };
    config.linux = Some(LinuxContainerConfig {
        security_context: Some(context),
        ..Default::default()
    });
    config
}

#[tokio::test]
async fn a_fifo_or_huge_etc_passwd_fails_the_create_promptly() {
    let harness = Harness::start().await;
    let (pod, pod_config) = harness.run_pod("hostile-passwd", NamespaceMode::Pod).await;

    let fifo = RawTar::new()
        .dir("etc/", 0o755)
        .entry(tar::EntryType::Fifo, "etc/passwd", "", b"", 0o644)
        .finish();
    let fifo_image = pull_busybox_with(&harness, "test/fifo-passwd", fifo).await;
    let started = Instant::now();
    let err = harness
        .create(
            &pod,
            &pod_config,
            as_user(
                container_config("fifo", &fifo_image, &["sleep", "100"]),
                "nobody",
            ),
        )
        .await
        .expect_err("a FIFO /etc/passwd resolves no user");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(err.message().contains("nobody"), "{err:?}");

    // 100 MiB of passwd: refused by its size, not read into memory.
    let mut huge = b"root:x:0:0:root:/root:/bin/sh\n".to_vec();
    huge.resize(100 << 20, b'\n');
    let huge = RawTar::new()
        .dir("etc/", 0o755)
        .file("etc/passwd", &huge, 0o644)
        .finish();
    let huge_image = pull_busybox_with(&harness, "test/huge-passwd", huge).await;
    let started = Instant::now();
    let err = harness
        .create(
            &pod,
            &pod_config,
            container_config("huge", &huge_image, &["sleep", "100"]),
        )
        .await
        .expect_err("a 100 MiB /etc/passwd is refused");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("/etc/passwd"), "{err:?}");

    harness
        .client()
        .await
        .version(VersionRequest::default())
        .await
        .expect("berthd still answers");
    harness.remove_pod(&pod).await;
}

// ---------------------------------------------------------------------------
// Durations
// ---------------------------------------------------------------------------

#[tokio::test]
async fn timeouts_near_i64_max_are_clamped() {
    let harness = Harness::start().await;
    let (pod, pod_config) = harness
        .run_pod("hostile-timeouts", NamespaceMode::Pod)
        .await;
    // Exits on SIGTERM (as PID 1 it would ignore an unhandled one).
    let id = harness
        .create_ok(
            &pod,
            &pod_config,
            container_config(
                "term",
                &harness.image,
                &[
                    "sh",
                    "-c",
                    "trap 'exit 0' TERM; while true; do sleep 0.1; done",
                ],
            ),
        )
        .await;
    harness.start_container(&id).await;

    let exec = tokio::time::timeout(
        SETTLE,
        harness.client().await.exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["echo".to_string(), "quick".to_string()],
            timeout: i64::MAX,
        }),
    )
    .await
    .expect("ExecSync answers")
    .unwrap_or_else(|status| panic!("ExecSync with timeout i64::MAX: {status:?}"))
    .into_inner();
    assert_eq!(exec.exit_code, 0, "{exec:?}");
    assert_eq!(String::from_utf8_lossy(&exec.stdout), "quick\n");

    tokio::time::timeout(
        SETTLE,
        harness.client().await.stop_container(StopContainerRequest {
            container_id: id.clone(),
            timeout: i64::MAX,
        }),
    )
    .await
    .expect("StopContainer answers once the container exits")
    .unwrap_or_else(|status| panic!("StopContainer with timeout i64::MAX: {status:?}"));
    let status = harness
        .wait_state(&id, ContainerState::ContainerExited)
        .await;
    assert_eq!(status.exit_code, 0, "{status:?}");

    harness
        .client()
        .await
        .version(VersionRequest::default())
        .await
        .expect("berthd still answers");
    harness.remove_pod(&pod).await;
}

// ---------------------------------------------------------------------------
// The shim's OOM score
// ---------------------------------------------------------------------------

fn oom_score_adj(pid: &str) -> String {
    std::fs::read_to_string(format!("/proc/{}/oom_score_adj", pid.trim()))
        .unwrap_or_else(|err| panic!("oom_score_adj of {pid}: {err}"))
        .trim()
        .to_string()
}

#[tokio::test]
async fn a_best_effort_container_does_not_make_its_shim_the_oom_victim() {
    let harness = Harness::start().await;
    let (pod, pod_config) = harness.run_pod("hostile-oom", NamespaceMode::Pod).await;
    let mut config = container_config("besteffort", &harness.image, &["sleep", "1000"]);
    config.linux = Some(LinuxContainerConfig {
        resources: Some(LinuxContainerResources {
            oom_score_adj: 1000,
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = harness.create_ok(&pod, &pod_config, config).await;
    harness.start_container(&id).await;
    // an exec goes through libcontainer too
    harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["true".to_string()],
            timeout: 10,
        })
        .await
        .unwrap_or_else(|status| panic!("ExecSync: {status:?}"));

    let shim_dir = harness.berthd.sandbox.state().join("shims").join(&id[..12]);
    let init = std::fs::read_to_string(shim_dir.join("pid")).expect("init pid file");
    let shim = std::fs::read_to_string(shim_dir.join("shim.pid")).expect("shim pid file");
    assert_eq!(oom_score_adj(&init), "1000");
    let berthd = oom_score_adj(&harness.berthd.pid().to_string());
    assert_eq!(
        oom_score_adj(&shim),
        berthd,
        "the shim keeps berthd's score"
    );
    harness.remove_pod(&pod).await;
}

// ---------------------------------------------------------------------------
// Permissions
// ---------------------------------------------------------------------------

#[tokio::test]
async fn container_files_are_for_root_only_and_a_non_root_container_still_runs() {
    let harness = Harness::start().await;
    let (pod, pod_config) = harness.run_pod("hostile-modes", NamespaceMode::Pod).await;
    let mut config = container_config(
        "uid1000",
        &harness.image,
        &[
            "sh",
            "-c",
            "busybox id -u; echo written > /tmp/f && cat /tmp/f",
        ],
    );
    config.linux = Some(LinuxContainerConfig {
        security_context: Some(LinuxContainerSecurityContext {
            run_as_user: Some(Int64Value { value: 1000 }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = harness.create_ok(&pod, &pod_config, config).await;

    let root = harness.berthd.sandbox.root();
    let bundle = harness.berthd.sandbox.state().join("containers").join(&id);
    let layer = root.join("containers").join(&id);
    assert_eq!(mode(&bundle), 0o700, "bundle {}", bundle.display());
    assert_eq!(mode(&bundle.join("config.json")), 0o600, "config.json");
    assert_eq!(mode(&layer), 0o700, "layer dir {}", layer.display());
    assert_eq!(mode(&root.join("images")), 0o700, "image store");
    assert_eq!(mode(&root.join("images/layers")), 0o700, "unpacked layers");

    harness.start_container(&id).await;
    let status = harness
        .wait_state(&id, ContainerState::ContainerExited)
        .await;
    assert_eq!(status.exit_code, 0, "{status:?}");
    let log = std::fs::read_to_string(&status.log_path).expect("container log");
    assert!(log.contains(" 1000\n"), "{log}");
    assert!(log.contains(" written\n"), "{log}");
    harness.remove_pod(&pod).await;
}

// ---------------------------------------------------------------------------
// Huge values the kernel refuses
// ---------------------------------------------------------------------------

/// A sysctl value of 256 KiB: the kernel refuses it while libcontainer
/// sets up the container, and libcontainer's error quotes it. That error
/// once went to the container's stderr pipe, which nobody reads before
/// create returns, so the create hung once 64 KiB of it were written.
#[tokio::test]
async fn a_huge_sysctl_value_fails_the_create_promptly() {
    let harness = Harness::start().await;
    let (pod, mut pod_config) = harness.run_pod("hostile-sysctl", NamespaceMode::Pod).await;
    pod_config
        .linux
        .get_or_insert_with(Default::default)
        .sysctls
        .insert("net.ipv4.ip_forward".into(), "1".repeat(256 << 10));
    let config = container_config("sysctl", &harness.image, &["true"]);
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        harness.create(&pod, &pod_config, config),
    )
    .await
    .expect("CreateContainer answers within 30 s");
    let err = answer.expect_err("the kernel refuses the value");
    assert!(
        !matches!(err.code(), Code::Unknown | Code::Internal),
        "{:?} {:.300}",
        err.code(),
        err.message()
    );
    assert!(
        err.message().contains("net.ipv4.ip_forward"),
        "the error names the sysctl: {:.300}",
        err.message()
    );
    still_answers(&harness.berthd.image_client().await).await;
    harness.remove_pod(&pod).await;
}
