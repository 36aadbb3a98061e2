//! The image service against a real registry: each test starts its own
//! docker-registry (tests/support/registry.rs) and its own berthd, pushes
//! content built byte for byte, and pulls it through CRI `PullImage`.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_tests::registry::{
    base64, digest_hex, free_port, malicious_layer_tars, pseudo_random_bytes, tar_with_files,
    tiny_layer_tar, EscapeTargets, Layer, RawTar, TestImage, TestRegistry, MEDIA_TYPE_INDEX,
    MEDIA_TYPE_MANIFEST,
};
use berth_tests::Berthd;
use cri_api::v1::image_service_client::ImageServiceClient;
use cri_api::v1::{
    AuthConfig, Image, ImageFilter, ImageFsInfoRequest, ImageSpec, ImageStatusRequest,
    ImageStatusResponse, ListImagesRequest, PullImageRequest, RemoveImageRequest,
};
use oci_client::secrets::RegistryAuth;
use tonic::transport::Channel;
use tonic::Status;

type Images = ImageServiceClient<Channel>;

/// Upper bound for one RPC: a hung pull fails the test instead of hanging it.
const RPC_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn spec(image: &str) -> Option<ImageSpec> {
    Some(ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

async fn within<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(RPC_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| panic!("{what} did not answer within {RPC_TIMEOUT:?}"))
}

async fn pull_with(
    images: &Images,
    reference: &str,
    auth: Option<AuthConfig>,
) -> Result<String, Status> {
    let request = PullImageRequest {
        image: spec(reference),
        auth,
        sandbox_config: None,
    };
    within(
        &format!("PullImage {reference}"),
        images.clone().pull_image(request),
    )
    .await
    .map(|r| r.into_inner().image_ref)
}

async fn pull(images: &Images, reference: &str) -> Result<String, Status> {
    pull_with(images, reference, None).await
}

/// Pulls and expects success.
async fn pull_ok(images: &Images, reference: &str) -> String {
    pull(images, reference)
        .await
        .unwrap_or_else(|err| panic!("PullImage {reference}: {err:?}"))
}

async fn status_response(images: &Images, reference: &str, verbose: bool) -> ImageStatusResponse {
    let request = ImageStatusRequest {
        image: spec(reference),
        verbose,
    };
    within(
        &format!("ImageStatus {reference}"),
        images.clone().image_status(request),
    )
    .await
    .unwrap_or_else(|err| panic!("ImageStatus {reference}: {err:?}"))
    .into_inner()
}

async fn status(images: &Images, reference: &str) -> Option<Image> {
    status_response(images, reference, false).await.image
}

async fn status_ok(images: &Images, reference: &str) -> Image {
    status(images, reference)
        .await
        .unwrap_or_else(|| panic!("ImageStatus {reference}: no image"))
}

async fn list(images: &Images, filter: Option<&str>) -> Vec<Image> {
    let request = ListImagesRequest {
        filter: filter.map(|f| ImageFilter { image: spec(f) }),
    };
    within("ListImages", images.clone().list_images(request))
        .await
        .unwrap_or_else(|err| panic!("ListImages {filter:?}: {err:?}"))
        .into_inner()
        .images
}

async fn remove(images: &Images, reference: &str) {
    let request = RemoveImageRequest {
        image: spec(reference),
    };
    within(
        &format!("RemoveImage {reference}"),
        images.clone().remove_image(request),
    )
    .await
    .unwrap_or_else(|err| panic!("RemoveImage {reference}: {err:?}"));
}

async fn image_fs_used(images: &Images) -> (u64, u64) {
    let info = within(
        "ImageFsInfo",
        images.clone().image_fs_info(ImageFsInfoRequest::default()),
    )
    .await
    .expect("ImageFsInfo")
    .into_inner();
    let usage = &info.image_filesystems[0];
    (
        usage.used_bytes.expect("used bytes").value,
        usage.inodes_used.expect("inodes used").value,
    )
}

/// A one-layer linux/amd64 image whose layer holds `marker`.
fn tiny_image(marker: &str) -> TestImage {
    TestImage::new(vec![Layer::gzip(tiny_layer_tar(marker))])
}

/// The platform PullImage must pick on this machine, as `os/arch[/variant]`.
fn this_platform() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "linux/amd64",
        "aarch64" => "linux/arm64/v8",
        other => panic!("no test image for architecture {other}"),
    }
}

/// Every regular file and symlink under `dir` (symlinks not followed).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => pending.push(path),
                Ok(_) => out.push(path),
                Err(_) => {}
            }
        }
    }
    out
}

/// Every path (files and directories) under `dir`.
fn paths_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                pending.push(path.clone());
            }
            out.push(path);
        }
    }
    out
}

/// Regular files under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|path| {
            std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
                && std::fs::read(path)
                    .is_ok_and(|data| data.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

/// berthd's image store.
fn image_store(berthd: &Berthd) -> PathBuf {
    berthd.sandbox.root().join("images")
}

/// Polls `check` until it returns true or `timeout` passes.
async fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Searches a JSON value for an object member `key` equal to `value`.
fn json_has(value: &serde_json::Value, key: &str, expected: &str) -> bool {
    match value {
        serde_json::Value::Object(map) => map
            .iter()
            .any(|(k, v)| (k == key && v == expected) || json_has(v, key, expected)),
        serde_json::Value::Array(items) => items.iter().any(|v| json_has(v, key, expected)),
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// The fixture itself (independent of berthd's image service)
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn registry_fixture_serves_what_it_pushed() {
    let registry = TestRegistry::start();
    let image = TestImage::new(vec![
        Layer::gzip(tiny_layer_tar("fixture-gzip")),
        Layer::zstd(tiny_layer_tar("fixture-zstd")),
        Layer::uncompressed(tiny_layer_tar("fixture-none")),
    ])
    .user("1002");
    let pushed = registry.push_image("test/app", &["v1"], &image).await;
    assert_eq!(
        &pushed.layers[1].blob[..4],
        &[0x28, 0xb5, 0x2f, 0xfd],
        "zstd magic"
    );
    assert_eq!(&pushed.layers[0].blob[..2], &[0x1f, 0x8b], "gzip magic");

    let client = registry.client().await;
    let auth = RegistryAuth::Anonymous;
    let (manifest, digest) = client
        .pull_manifest_raw(
            &registry.oci_reference("test/app", "v1"),
            &auth,
            &[MEDIA_TYPE_MANIFEST],
        )
        .await
        .expect("pull manifest");
    assert_eq!(manifest.as_ref(), pushed.manifest.as_slice());
    assert_eq!(digest, pushed.manifest_digest);

    let config: serde_json::Value = serde_json::from_slice(&pushed.config).unwrap();
    assert_eq!(config["config"]["User"], "1002");
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(config["os"], "linux");
    assert_eq!(config["rootfs"]["diff_ids"].as_array().unwrap().len(), 3);

    let reference = registry.oci_reference("test/app", "v1");
    let mut blob = Vec::new();
    client
        .pull_blob(&reference, pushed.config_digest.as_str(), &mut blob)
        .await
        .expect("pull config");
    assert_eq!(blob, pushed.config);
    for layer in &pushed.layers {
        let mut blob = Vec::new();
        client
            .pull_blob(&reference, layer.digest.as_str(), &mut blob)
            .await
            .expect("pull layer");
        assert_eq!(blob, layer.blob);
        assert_eq!(
            registry.blob_get_count(&layer.digest),
            1,
            "{}",
            registry.log_text()
        );
    }

    // An index of three platforms; its children are fetchable by digest.
    let index = registry
        .push_index(
            "test/multi",
            "v1",
            &[
                tiny_image("arm64").platform("linux", "arm64", Some("v8")),
                tiny_image("amd64"),
                tiny_image("armv7").platform("linux", "arm", Some("v7")),
            ],
        )
        .await;
    let (bytes, digest) = client
        .pull_manifest_raw(
            &registry.oci_reference("test/multi", "v1"),
            &auth,
            &[MEDIA_TYPE_INDEX],
        )
        .await
        .expect("pull index");
    assert_eq!(bytes.as_ref(), index.index.as_slice());
    assert_eq!(digest, index.digest);
    let ids: HashSet<&str> = index.images.iter().map(|i| i.id()).collect();
    assert_eq!(ids.len(), 3, "each platform is a distinct image");
    let arm64 = index.image_for("linux/arm64/v8");
    let (bytes, _) = client
        .pull_manifest_raw(
            &registry.oci_reference_by_digest("test/multi", &arm64.manifest_digest),
            &auth,
            &[MEDIA_TYPE_MANIFEST],
        )
        .await
        .expect("pull child manifest");
    assert_eq!(bytes.as_ref(), arm64.manifest.as_slice());

    // A tampered blob is served, and no longer matches its digest.
    let layer = &pushed.layers[2];
    let mut tampered = layer.blob.clone();
    let at = tampered
        .windows(4)
        .position(|w| w == b"none")
        .expect("marker");
    tampered[at..at + 4].copy_from_slice(b"NONE");
    registry.tamper_blob(&layer.digest, &tampered);
    let mut blob = Vec::new();
    let err = client
        .pull_blob(&reference, layer.digest.as_str(), &mut blob)
        .await
        .expect_err("tampered blob must not verify");
    assert!(err.to_string().to_lowercase().contains("digest"), "{err}");
    assert_eq!(registry.blob_get_count(&layer.digest), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn registry_fixture_enforces_basic_auth_over_plain_http() {
    let registry = TestRegistry::start_with_auth("berth", "s3cret");
    assert_eq!(registry.v2_status(), Some(401));
    let pushed = registry
        .push_image("test/app", &["v1"], &tiny_image("auth"))
        .await;
    let reference = registry.oci_reference("test/app", "v1");
    for auth in [
        RegistryAuth::Anonymous,
        RegistryAuth::Basic("berth".into(), "wrong".into()),
    ] {
        let client = registry.client_with(&auth).await;
        client
            .pull_manifest_raw(&reference, &auth, &[MEDIA_TYPE_MANIFEST])
            .await
            .expect_err("pull without the right credentials");
    }
    let auth = RegistryAuth::Basic("berth".into(), "s3cret".into());
    let client = registry.client_with(&auth).await;
    let (_, digest) = client
        .pull_manifest_raw(&reference, &auth, &[MEDIA_TYPE_MANIFEST])
        .await
        .expect("pull with the right credentials");
    assert_eq!(digest, pushed.manifest_digest);
}

// ---------------------------------------------------------------------------
// PullImage, ImageStatus, ListImages
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn pull_by_tag_reports_id_tags_digest_size_and_uid() {
    let registry = TestRegistry::start();
    // One layer per compression berth must read.
    let image = TestImage::new(vec![
        Layer::gzip(tiny_layer_tar("tag-gzip")),
        Layer::zstd(tiny_layer_tar("tag-zstd")),
        Layer::uncompressed(tiny_layer_tar("tag-none")),
    ])
    .user("1002");
    let pushed = registry.push_image("test/app", &["v1"], &image).await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let reference = registry.reference("test/app:v1");
    let repo_digest = registry.reference(&format!("test/app@{}", pushed.manifest_digest));

    assert_eq!(pull_ok(&images, &reference).await, pushed.id());

    for name in [reference.as_str(), pushed.id(), repo_digest.as_str()] {
        let image = status_ok(&images, name).await;
        assert_eq!(image.id, pushed.id(), "ImageStatus {name}");
        assert_eq!(
            image.repo_tags,
            vec![reference.clone()],
            "ImageStatus {name}"
        );
        assert_eq!(
            image.repo_digests,
            vec![repo_digest.clone()],
            "ImageStatus {name}"
        );
        assert!(image.size > 0, "ImageStatus {name}: size {}", image.size);
        assert_eq!(image.uid.map(|u| u.value), Some(1002), "ImageStatus {name}");
        assert_eq!(image.username, "", "ImageStatus {name}");
    }

    let all = list(&images, None).await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].id, pushed.id());
    assert_eq!(all[0].repo_tags, vec![reference.clone()]);
    assert_eq!(all[0].repo_digests, vec![repo_digest.clone()]);
    assert_eq!(all[0].uid.map(|u| u.value), Some(1002));

    let filtered = list(&images, Some(&reference)).await;
    assert_eq!(
        filtered.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        vec![pushed.id()]
    );
    let unknown = registry.reference("test/app:nope");
    assert!(list(&images, Some(&unknown)).await.is_empty());
}

/// The annotation that makes an image a checkpoint image (CRI-O's).
const CHECKPOINT_ANNOTATION: &str = "io.kubernetes.cri-o.annotations.checkpoint.name";

#[tokio::test(flavor = "multi_thread")]
async fn a_pulled_checkpoint_image_is_recorded_as_one_and_another_is_not() {
    let registry = TestRegistry::start();
    let checkpoint = tiny_image("checkpoint").annotation(CHECKPOINT_ANNOTATION, "counter");
    let plain = tiny_image("plain").annotation("org.example", "x");
    let checkpoint = registry.push_image("test/cp", &["v1"], &checkpoint).await;
    let plain = registry.push_image("test/plain", &["v1"], &plain).await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    pull_ok(&images, &registry.reference("test/cp:v1")).await;
    pull_ok(&images, &registry.reference("test/plain:v1")).await;

    // What CreateContainer reads instead of the manifest.
    let index = berthd.sandbox.root().join("images/index.json");
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index).expect("index.json")).expect("JSON");
    assert_eq!(
        index["images"][checkpoint.id()]["checkpoint_of"],
        "counter",
        "{index}"
    );
    assert!(
        index["images"][plain.id()].get("checkpoint_of").is_none(),
        "{index}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_by_digest_and_by_tag_and_digest() {
    let registry = TestRegistry::start();
    let x = registry
        .push_image("test/app", &["v1"], &tiny_image("digest-x"))
        .await;
    let y = registry
        .push_image("test/app", &["v2"], &tiny_image("digest-y"))
        .await;
    assert_ne!(x.id(), y.id());
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let by_digest = registry.reference(&format!("test/app@{}", x.manifest_digest));

    assert_eq!(pull_ok(&images, &by_digest).await, x.id());
    let image = status_ok(&images, &by_digest).await;
    assert_eq!(image.id, x.id());
    assert_eq!(image.repo_digests, vec![by_digest.clone()]);
    assert!(
        image.repo_tags.is_empty(),
        "pulled by digest only: {image:?}"
    );
    assert_eq!(status_ok(&images, x.id()).await.id, x.id());

    // The digest wins over the tag, which names another image (y).
    let tag_and_digest = registry.reference(&format!("test/app:v2@{}", x.manifest_digest));
    assert_eq!(pull_ok(&images, &tag_and_digest).await, x.id());
    assert_eq!(status_ok(&images, &by_digest).await.id, x.id());
    assert!(
        status(&images, &registry.reference("test/app:v2"))
            .await
            .is_none(),
        "tag v2 names {} in the registry, so it must not name {}",
        y.id(),
        x.id()
    );
    assert!(status(&images, y.id()).await.is_none());
    let all = list(&images, None).await;
    assert_eq!(
        all.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        vec![x.id()]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn image_status_reports_a_user_name_and_verbose_config() {
    let registry = TestRegistry::start();
    let image = tiny_image("named-user")
        .user("www-data")
        .label("org.berth.test", "verbose-marker-7f3a");
    let pushed = registry.push_image("test/app", &["v1"], &image).await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let reference = registry.reference("test/app:v1");
    assert_eq!(pull_ok(&images, &reference).await, pushed.id());

    let plain = status_response(&images, &reference, false).await;
    let image = plain.image.expect("image");
    assert_eq!(image.username, "www-data");
    assert_eq!(image.uid, None, "a user name is not a uid");
    assert!(
        plain.info.is_empty(),
        "info only with verbose: {:?}",
        plain.info
    );

    let verbose = status_response(&images, &reference, true).await;
    assert_eq!(verbose.image.expect("image").id, pushed.id());
    let info = verbose.info.get("info").expect("info[\"info\"]");
    let info: serde_json::Value = serde_json::from_str(info).expect("info is JSON");
    assert!(
        json_has(&info, "org.berth.test", "verbose-marker-7f3a"),
        "{info}"
    );
    assert!(json_has(&info, "User", "www-data"), "{info}");
}

#[tokio::test(flavor = "multi_thread")]
async fn image_status_of_an_unknown_image_is_empty_not_an_error() {
    let registry = TestRegistry::start();
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let unknown_id = format!("sha256:{}", "0".repeat(64));
    for name in [
        registry.reference("test/app:v1").as_str(),
        "busybox",
        "docker.io/library/busybox:latest",
        unknown_id.as_str(),
    ] {
        let response = status_response(&images, name, false).await;
        assert!(response.image.is_none(), "ImageStatus {name}: {response:?}");
    }
    assert!(list(&images, None).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn pulling_an_unknown_tag_or_repository_is_not_found() {
    let registry = TestRegistry::start();
    registry
        .push_image("test/app", &["v1"], &tiny_image("known"))
        .await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    for name in ["test/app:nope", "test/nothing-here:v1"] {
        let reference = registry.reference(name);
        let err = pull(&images, &reference)
            .await
            .expect_err("nothing to pull");
        assert_eq!(err.code(), tonic::Code::NotFound, "{reference}: {err:?}");
        assert!(err.message().contains(&reference), "{err:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn multi_arch_index_resolves_to_this_platform() {
    let registry = TestRegistry::start();
    // Windows first and arm before amd64, so "first entry" or "first
    // matching architecture" both pick the wrong image.
    let index = registry
        .push_index(
            "test/multi",
            "v1",
            &[
                tiny_image("windows-amd64").platform("windows", "amd64", None),
                tiny_image("arm64").platform("linux", "arm64", Some("v8")),
                tiny_image("amd64"),
                tiny_image("armv7").platform("linux", "arm", Some("v7")),
            ],
        )
        .await;
    let expected = index.image_for(this_platform());
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let reference = registry.reference("test/multi:v1");

    assert_eq!(pull_ok(&images, &reference).await, expected.id());
    let image = status_ok(&images, &reference).await;
    assert_eq!(image.id, expected.id());
    assert_eq!(image.repo_tags, vec![reference.clone()]);
    // The repo digest is what the tag resolves to: the index.
    let repo_digest = registry.reference(&format!("test/multi@{}", index.digest));
    assert_eq!(image.repo_digests, vec![repo_digest.clone()]);
    assert_eq!(status_ok(&images, &repo_digest).await.id, expected.id());
    for other in index.images.iter().filter(|i| i.id() != expected.id()) {
        assert!(
            status(&images, other.id()).await.is_none(),
            "{} stored",
            other.platform
        );
    }
    assert_eq!(list(&images, None).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn short_names_normalize_through_a_docker_io_mirror() {
    let registry = TestRegistry::start();
    let pushed = registry
        .push_image("library/busybox", &["latest"], &tiny_image("busybox"))
        .await;
    let berthd = Berthd::start(&format!(
        "[registry.mirrors.\"docker.io\"]\nendpoints = [\"{}\"]\n",
        registry.url()
    ));
    let images = berthd.image_client().await;

    assert_eq!(pull_ok(&images, "busybox").await, pushed.id());
    let image = status_ok(&images, "busybox").await;
    assert_eq!(image.id, pushed.id());
    assert_eq!(
        image.repo_tags,
        vec!["docker.io/library/busybox:latest".to_string()]
    );
    assert_eq!(
        image.repo_digests,
        vec![format!(
            "docker.io/library/busybox@{}",
            pushed.manifest_digest
        )]
    );
    for name in [
        "busybox:latest",
        "library/busybox",
        "docker.io/library/busybox:latest",
    ] {
        assert_eq!(
            status_ok(&images, name).await.id,
            pushed.id(),
            "ImageStatus {name}"
        );
    }
    assert!(
        !registry
            .requests("GET", "/v2/library/busybox/manifests/latest")
            .is_empty()
            || !registry
                .requests("HEAD", "/v2/library/busybox/manifests/latest")
                .is_empty(),
        "the mirror was asked for library/busybox:latest: {}",
        registry.log_text()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_mirror_fails_closed() {
    let dead_port = free_port();
    let berthd = Berthd::start(&format!(
        "[registry.mirrors.\"example.invalid\"]\nendpoints = [\"http://127.0.0.1:{dead_port}\"]\nfallback_to_upstream = false\n"
    ));
    let images = berthd.image_client().await;
    let reference = "example.invalid/test/app:v1";
    let err = pull(&images, reference)
        .await
        .expect_err("no usable endpoint");
    assert_ne!(err.code(), tonic::Code::Unimplemented, "{err:?}");
    assert!(
        err.message().contains(reference),
        "names the reference: {err:?}"
    );
    assert!(
        err.message().contains(&format!("127.0.0.1:{dead_port}")),
        "names the mirror: {err:?}"
    );
    assert!(status(&images, reference).await.is_none());
    assert!(list(&images, None).await.is_empty());
}

// ---------------------------------------------------------------------------
// Credentials
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn basic_auth_registry_needs_the_right_credentials() {
    let registry = TestRegistry::start_with_auth("berth", "s3cret");
    let pushed = registry
        .push_image("test/private", &["v1"], &tiny_image("private"))
        .await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let reference = registry.reference("test/private:v1");

    let wrong = AuthConfig {
        username: "berth".into(),
        password: "wrong".into(),
        ..Default::default()
    };
    for auth in [None, Some(wrong)] {
        let what = if auth.is_some() {
            "wrong password"
        } else {
            "no credentials"
        };
        let err = pull_with(&images, &reference, auth).await.expect_err(what);
        assert_ne!(err.code(), tonic::Code::Unimplemented, "{what}: {err:?}");
        assert!(err.message().contains(&reference), "{what}: {err:?}");
        assert!(status(&images, &reference).await.is_none(), "{what}");
        assert!(list(&images, None).await.is_empty(), "{what}");
    }

    let right = AuthConfig {
        username: "berth".into(),
        password: "s3cret".into(),
        ..Default::default()
    };
    let id = pull_with(&images, &reference, Some(right))
        .await
        .unwrap_or_else(|err| panic!("pull with the right credentials: {err:?}"));
    assert_eq!(id, pushed.id());
    assert_eq!(status_ok(&images, &reference).await.id, pushed.id());
}

#[tokio::test(flavor = "multi_thread")]
async fn basic_auth_accepts_the_auth_field() {
    let registry = TestRegistry::start_with_auth("berth", "s3cret");
    let pushed = registry
        .push_image("test/private", &["v1"], &tiny_image("auth-field"))
        .await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let reference = registry.reference("test/private:v1");

    let wrong = AuthConfig {
        auth: base64(b"berth:wrong"),
        ..Default::default()
    };
    pull_with(&images, &reference, Some(wrong))
        .await
        .expect_err("wrong password in auth");
    assert!(list(&images, None).await.is_empty());

    let right = AuthConfig {
        auth: base64(b"berth:s3cret"),
        ..Default::default()
    };
    let id = pull_with(&images, &reference, Some(right))
        .await
        .unwrap_or_else(|err| panic!("pull with auth = base64(user:password): {err:?}"));
    assert_eq!(id, pushed.id());
}

// ---------------------------------------------------------------------------
// Integrity and safety
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_layer_that_does_not_match_its_digest_fails_and_leaves_nothing() {
    let registry = TestRegistry::start();
    // Uncompressed, so the tampered blob is still a valid tar of the same
    // size: only the digest check can catch it.
    let original = b"berth-tamper-marker-ORIGINAL";
    let evil = b"berth-tamper-marker-TAMPERED";
    let good = Layer::gzip(tiny_layer_tar("tamper-good"));
    let victim = Layer::uncompressed(tar_with_files(&[("data.txt", original)]));
    let pushed = registry
        .push_image("test/app", &["v1"], &TestImage::new(vec![good, victim]))
        .await;
    let layer = pushed.layers[1].clone();
    let tampered = tar_with_files(&[("data.txt", evil)]);
    assert_eq!(tampered.len(), layer.blob.len());
    registry.tamper_blob(&layer.digest, &tampered);

    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let reference = registry.reference("test/app:v1");
    let err = pull(&images, &reference)
        .await
        .expect_err("digest mismatch");
    assert_ne!(err.code(), tonic::Code::Unimplemented, "{err:?}");
    assert!(err.message().to_lowercase().contains("digest"), "{err:?}");
    assert!(
        err.message().contains(&reference),
        "names the reference: {err:?}"
    );
    assert!(
        registry.blob_get_count(&layer.digest) >= 1,
        "berthd fetched the tampered layer"
    );

    assert!(status(&images, &reference).await.is_none());
    assert!(status(&images, pushed.id()).await.is_none());
    assert!(list(&images, None).await.is_empty());

    // The pull failed, so nothing of the image stays: no blob (not even the
    // good layer's, which may have been in flight), no unpacked file, no
    // path named after any of its digests. Empty directories may remain.
    // Clean-up may finish just after the error is returned: poll a little.
    let store = image_store(&berthd);
    let tampered_diff_id = berth_tests::registry::sha256_digest(&tampered);
    let mut digests = vec![
        pushed.manifest_digest.clone(),
        pushed.config_digest.clone(),
        tampered_diff_id,
    ];
    for layer in &pushed.layers {
        digests.extend([layer.digest.clone(), layer.diff_id.clone()]);
    }
    let leftovers = || {
        let mut found: Vec<PathBuf> = paths_under(&store)
            .into_iter()
            .filter(|p| {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                digests.iter().any(|d| name.contains(digest_hex(d)))
            })
            .collect();
        for needle in [&original[..], &evil[..], b"tamper-good"] {
            found.extend(files_containing(&store, needle));
        }
        found
    };
    let clean = eventually(Duration::from_secs(5), || leftovers().is_empty()).await;
    assert!(clean, "left behind after a failed pull: {:?}", leftovers());
}

#[tokio::test(flavor = "multi_thread")]
async fn malicious_layers_write_nothing_outside_their_directory() {
    let registry = TestRegistry::start();
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    // `outside` sits next to berthd's root; the layers aim at it.
    let sandbox = berthd.sandbox.dir.path().to_path_buf();
    let outside = sandbox.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let targets = EscapeTargets::new(&outside);
    std::fs::write(&targets.hardlink_victim, b"victim\n").unwrap();

    // One image per way out, so refusing one entry does not skip the rest.
    for (way, tar) in malicious_layer_tars(&outside) {
        let image = TestImage::new(vec![
            Layer::gzip(tiny_layer_tar(&format!("malicious-base-{way}"))),
            Layer::gzip(tar),
        ]);
        let repo = format!("test/evil-{way}");
        let pushed = registry.push_image(&repo, &["v1"], &image).await;
        let reference = registry.reference(&format!("{repo}:v1"));
        // Refusing the layer and unpacking it safely are both fine.
        match pull(&images, &reference).await {
            Ok(id) => assert_eq!(id, pushed.id(), "{way}"),
            Err(err) => {
                assert_ne!(err.code(), tonic::Code::Unimplemented, "{way}: {err:?}");
                assert!(status(&images, &reference).await.is_none(), "{way}");
            }
        }
        assert!(
            registry.blob_get_count(&pushed.layers[1].digest) >= 1,
            "{way}: berthd fetched the malicious layer"
        );
    }

    let mut left: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        vec!["victim".to_string()],
        "written outside: {left:?}"
    );
    let victim = std::fs::metadata(&targets.hardlink_victim).unwrap();
    assert_eq!(victim.nlink(), 1, "the victim was hard-linked into a layer");
    assert_eq!(
        std::fs::read(&targets.hardlink_victim).unwrap(),
        b"victim\n"
    );

    // What a layer wrote stays in the directory it was unpacked in: every
    // file with one of its names lies under a directory holding an ok.txt.
    let escape_names = [
        "escape",
        "dotdot-escape",
        "absolute-escape",
        "pwned",
        "pwned-rel",
    ];
    for path in files_under(&sandbox) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !escape_names.contains(&name.as_str()) || path.starts_with(&outside) {
            continue;
        }
        let in_layer = path
            .ancestors()
            .skip(1)
            .take_while(|dir| dir.starts_with(&sandbox) && *dir != sandbox)
            .any(|dir| dir.join("ok.txt").is_file());
        assert!(
            in_layer,
            "{} is outside the layer directory",
            path.display()
        );
    }
}

// ---------------------------------------------------------------------------
// Sharing work
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_pulls_of_one_image_download_each_layer_once() {
    let registry = TestRegistry::start();
    // Big enough that the pulls overlap.
    let image = TestImage::new(vec![
        Layer::gzip(tar_with_files(&[(
            "a.bin",
            &pseudo_random_bytes(1, 4 << 20),
        )])),
        Layer::zstd(tar_with_files(&[(
            "b.bin",
            &pseudo_random_bytes(2, 4 << 20),
        )])),
        Layer::gzip(tiny_layer_tar("concurrent")),
    ]);
    let pushed = registry.push_image("test/big", &["v1"], &image).await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let reference = registry.reference("test/big:v1");

    let pulls: Vec<_> = (0..8)
        .map(|_| {
            let images = images.clone();
            let reference = reference.clone();
            tokio::spawn(async move { pull(&images, &reference).await })
        })
        .collect();
    for (i, task) in pulls.into_iter().enumerate() {
        let id = task
            .await
            .expect("pull task")
            .unwrap_or_else(|err| panic!("pull {i}: {err:?}"));
        assert_eq!(id, pushed.id(), "pull {i}");
    }
    for layer in &pushed.layers {
        assert_eq!(
            registry.blob_get_count(&layer.digest),
            1,
            "layer {} downloaded once: {:#?}",
            layer.digest,
            registry.requests("GET", &format!("/blobs/{}", layer.digest))
        );
    }
    let all = list(&images, None).await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].repo_tags, vec![reference]);
}

// ---------------------------------------------------------------------------
// RemoveImage
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn remove_by_one_tag_removes_every_tag() {
    let registry = TestRegistry::start();
    let image = tiny_image("two-tags");
    let pushed = registry.push_image("test/app", &["v1", "v2"], &image).await;
    registry.push_image("test/other", &["v3"], &image).await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let tags = [
        registry.reference("test/app:v1"),
        registry.reference("test/app:v2"),
        registry.reference("test/other:v3"),
    ];
    for tag in &tags {
        assert_eq!(pull_ok(&images, tag).await, pushed.id());
    }
    let image = status_ok(&images, pushed.id()).await;
    let mut repo_tags = image.repo_tags.clone();
    repo_tags.sort();
    assert_eq!(repo_tags, tags.to_vec(), "one image, three tags");
    assert_eq!(list(&images, None).await.len(), 1);

    remove(&images, &tags[0]).await;
    for name in tags.iter().map(String::as_str).chain([pushed.id()]) {
        assert!(status(&images, name).await.is_none(), "{name} still there");
    }
    assert!(list(&images, None).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn remove_by_id_and_by_repo_digest() {
    let registry = TestRegistry::start();
    let a = registry
        .push_image("test/a", &["v1"], &tiny_image("remove-a"))
        .await;
    let b = registry
        .push_image("test/b", &["v1"], &tiny_image("remove-b"))
        .await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let (ref_a, ref_b) = (
        registry.reference("test/a:v1"),
        registry.reference("test/b:v1"),
    );
    pull_ok(&images, &ref_a).await;
    pull_ok(&images, &ref_b).await;

    remove(&images, a.id()).await;
    assert!(status(&images, &ref_a).await.is_none());
    assert!(status(&images, a.id()).await.is_none());
    assert_eq!(status_ok(&images, &ref_b).await.id, b.id());
    let left = list(&images, None).await;
    assert_eq!(
        left.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        vec![b.id()]
    );

    let digest_b = registry.reference(&format!("test/b@{}", b.manifest_digest));
    remove(&images, &digest_b).await;
    assert!(status(&images, &ref_b).await.is_none());
    assert!(status(&images, b.id()).await.is_none());
    assert!(list(&images, None).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_an_unknown_image_succeeds() {
    let registry = TestRegistry::start();
    registry
        .push_image("test/app", &["v1"], &tiny_image("idempotent"))
        .await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    remove(&images, &registry.reference("test/never:v1")).await;
    remove(&images, &format!("sha256:{}", "1".repeat(64))).await;
    remove(&images, "busybox").await;

    let reference = registry.reference("test/app:v1");
    pull_ok(&images, &reference).await;
    remove(&images, &reference).await;
    remove(&images, &reference).await;
    assert!(list(&images, None).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_an_image_keeps_the_layers_another_image_uses() {
    let registry = TestRegistry::start();
    // Uncompressed layers: each marker shows up in its blob and unpacked files.
    let layer = |marker: &str| {
        Layer::uncompressed(
            RawTar::new()
                .file(&format!("{marker}.txt"), marker.as_bytes(), 0o644)
                .finish(),
        )
    };
    let (shared, only_a, only_b) = (
        "berth-shared-layer-5e1",
        "berth-only-a-layer-9c2",
        "berth-only-b-layer-4d7",
    );
    let a = registry
        .push_image(
            "test/a",
            &["v1"],
            &TestImage::new(vec![layer(shared), layer(only_a)]),
        )
        .await;
    let b = registry
        .push_image(
            "test/b",
            &["v1"],
            &TestImage::new(vec![layer(shared), layer(only_b)]),
        )
        .await;
    assert_eq!(a.layers[0].digest, b.layers[0].digest);
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let (ref_a, ref_b) = (
        registry.reference("test/a:v1"),
        registry.reference("test/b:v1"),
    );
    assert_eq!(pull_ok(&images, &ref_a).await, a.id());
    assert_eq!(pull_ok(&images, &ref_b).await, b.id());
    let store = image_store(&berthd);
    assert!(
        !files_containing(&store, only_a.as_bytes()).is_empty(),
        "A's layer is stored"
    );

    remove(&images, &ref_a).await;
    assert!(status(&images, &ref_a).await.is_none());
    let image_b = status_ok(&images, &ref_b).await;
    assert_eq!(image_b.id, b.id());
    assert_eq!(image_b.repo_tags, vec![ref_b.clone()]);
    for marker in [shared, only_b] {
        assert!(
            !files_containing(&store, marker.as_bytes()).is_empty(),
            "{marker} was deleted with A"
        );
    }
    let gone = eventually(Duration::from_secs(10), || {
        files_containing(&store, only_a.as_bytes()).is_empty()
    })
    .await;
    assert!(
        gone,
        "the layer only A used is still stored: {:?}",
        files_containing(&store, only_a.as_bytes())
    );

    assert_eq!(pull_ok(&images, &ref_a).await, a.id());
    assert_eq!(status_ok(&images, &ref_a).await.id, a.id());
    assert_eq!(status_ok(&images, &ref_b).await.id, b.id());
    assert_eq!(list(&images, None).await.len(), 2);
}

// ---------------------------------------------------------------------------
// ImageFsInfo
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn image_fs_info_grows_after_a_pull() {
    let registry = TestRegistry::start();
    let payload = 2 << 20;
    let image = TestImage::new(vec![Layer::gzip(tar_with_files(&[(
        "payload.bin",
        &pseudo_random_bytes(7, payload),
    )]))]);
    let pushed = registry.push_image("test/fs", &["v1"], &image).await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let (bytes_before, inodes_before) = image_fs_used(&images).await;

    assert_eq!(
        pull_ok(&images, &registry.reference("test/fs:v1")).await,
        pushed.id()
    );
    let (bytes_after, inodes_after) = image_fs_used(&images).await;
    assert!(
        bytes_after >= bytes_before + payload as u64,
        "used bytes {bytes_before} -> {bytes_after}, pulled {payload} bytes of payload"
    );
    assert!(
        inodes_after > inodes_before,
        "inodes {inodes_before} -> {inodes_after}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stream_images_gives_what_list_images_gives() {
    let registry = TestRegistry::start();
    for name in ["one", "two"] {
        registry
            .push_image(&format!("test/{name}"), &["v1"], &tiny_image(name))
            .await;
    }
    let berthd = Berthd::start("");
    let mut images = berthd.image_client().await;
    for name in ["one", "two"] {
        pull_ok(&images, &registry.reference(&format!("test/{name}:v1"))).await;
    }
    let mut streamed = Vec::new();
    let mut stream = within(
        "StreamImages",
        images.stream_images(cri_api::v1::StreamImagesRequest::default()),
    )
    .await
    .expect("StreamImages")
    .into_inner();
    while let Some(message) = stream.message().await.expect("stream message") {
        streamed.extend(message.images);
    }
    let listed = list(&images, None).await;
    assert_eq!(streamed.len(), 2);
    assert_eq!(streamed, listed);

    let filtered = within(
        "StreamImages",
        images.stream_images(cri_api::v1::StreamImagesRequest {
            filter: Some(cri_api::v1::ImageFilter {
                image: spec(&registry.reference("test/two:v1")),
            }),
        }),
    )
    .await
    .expect("StreamImages")
    .into_inner()
    .message()
    .await
    .expect("message")
    .expect("one message");
    assert_eq!(filtered.images.len(), 1);
    assert_eq!(
        filtered.images[0].repo_tags,
        [registry.reference("test/two:v1")]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_an_image_while_a_pull_uses_its_layers_keeps_them() {
    // B shares a layer with A. While B is being pulled (its own large layer
    // still downloading), A is removed: the shared layer is in use by B's
    // pull and must survive, so B ends up complete.
    let registry = TestRegistry::start();
    let shared = "berth-shared-in-use-7f3";
    let shared_layer = || {
        Layer::uncompressed(
            RawTar::new()
                .file("shared.txt", shared.as_bytes(), 0o644)
                .finish(),
        )
    };
    let a = registry
        .push_image(
            "test/a",
            &["v1"],
            &TestImage::new(vec![shared_layer(), Layer::gzip(tiny_layer_tar("only-a"))]),
        )
        .await;
    let big = tar_with_files(&[("big.bin", &pseudo_random_bytes(11, 48 << 20))]);
    let b = registry
        .push_image(
            "test/b",
            &["v1"],
            &TestImage::new(vec![shared_layer(), Layer::uncompressed(big)]),
        )
        .await;
    let berthd = Berthd::start("");
    let images = berthd.image_client().await;
    let (ref_a, ref_b) = (
        registry.reference("test/a:v1"),
        registry.reference("test/b:v1"),
    );
    assert_eq!(pull_ok(&images, &ref_a).await, a.id());

    let pulling_b = {
        let images = images.clone();
        let ref_b = ref_b.clone();
        tokio::spawn(async move { pull_ok(&images, &ref_b).await })
    };
    // Remove A only once B's pull is downloading (its work dir exists), so
    // B has already found the shared layer present.
    let tmp = image_store(&berthd).join("tmp");
    let downloading = eventually(Duration::from_secs(30), || {
        std::fs::read_dir(&tmp).is_ok_and(|mut entries| entries.next().is_some())
    })
    .await;
    assert!(downloading, "B's pull never started downloading");
    remove(&images, &ref_a).await;
    assert_eq!(pulling_b.await.expect("pull task"), b.id());

    assert!(status(&images, &ref_a).await.is_none());
    assert_eq!(status_ok(&images, &ref_b).await.id, b.id());
    let store = image_store(&berthd);
    assert!(
        !files_containing(&store.join("layers"), shared.as_bytes()).is_empty(),
        "the layer B's pull was using was deleted with A"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn images_named_in_pinned_images_are_reported_pinned() {
    let registry = TestRegistry::start();
    let kept = registry
        .push_image("test/kept", &["v1"], &tiny_image("pinned"))
        .await;
    let other = registry
        .push_image("test/other", &["v1"], &tiny_image("not-pinned"))
        .await;
    let kept_ref = registry.reference("test/kept:v1");
    let other_ref = registry.reference("test/other:v1");
    // One name that is pulled, one that never is (it pins nothing).
    let never = registry.reference("test/never:v1");
    let berthd = Berthd::start(&format!("pinned_images = [{kept_ref:?}, {never:?}]"));
    let images = berthd.image_client().await;
    pull_ok(&images, &kept_ref).await;
    pull_ok(&images, &other_ref).await;

    // By every name of the image: the pin follows the image, not the name.
    for name in [kept_ref.as_str(), kept.id()] {
        assert!(status_ok(&images, name).await.pinned, "ImageStatus {name}");
    }
    assert!(!status_ok(&images, &other_ref).await.pinned);
    let all = list(&images, None).await;
    let pinned: Vec<&str> = all
        .iter()
        .filter(|image| image.pinned)
        .map(|image| image.id.as_str())
        .collect();
    assert_eq!(pinned, [kept.id()], "{all:?}");
    assert!(all
        .iter()
        .any(|image| image.id == other.id() && !image.pinned));
}
