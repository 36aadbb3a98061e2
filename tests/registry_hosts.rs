//! Pulls through a containerd host directory (`registry.config_path`):
//! a mirror on TLS with a private CA (`ca`), a required client certificate
//! (`client`) and an API under a path prefix, written both as a plain
//! prefix (`/mirror` → `/mirror/v2`) and with `override_path`.

use std::path::Path;
use std::time::Duration;

use berth_tests::registry::{tiny_layer_tar, Layer, TestImage, TestRegistry};
use berth_tests::tls_registry::{Pki, TlsRegistry};
use berth_tests::{Berthd, Sandbox};
use cri_api::v1::image_service_client::ImageServiceClient;
use cri_api::v1::{ImageSpec, ImageStatusRequest, PullImageRequest};
use tonic::transport::Channel;
use tonic::Status;

const RPC_TIMEOUT: Duration = Duration::from_secs(120);
/// The registry the references name: nothing answers for it, so a pull
/// that works went through the mirror.
const UPSTREAM: &str = "registry.berth-test.invalid";

async fn pull(images: &ImageServiceClient<Channel>, reference: &str) -> Result<String, Status> {
    let request = PullImageRequest {
        image: Some(ImageSpec {
            image: reference.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    };
    tokio::time::timeout(RPC_TIMEOUT, images.clone().pull_image(request))
        .await
        .unwrap_or_else(|_| panic!("PullImage {reference} did not answer in time"))
        .map(|response| response.into_inner().image_ref)
}

async fn image_id(images: &ImageServiceClient<Channel>, reference: &str) -> Option<String> {
    let request = ImageStatusRequest {
        image: Some(ImageSpec {
            image: reference.to_string(),
            ..Default::default()
        }),
        verbose: false,
    };
    images
        .clone()
        .image_status(request)
        .await
        .expect("ImageStatus")
        .into_inner()
        .image
        .map(|image| image.id)
}

/// `<dir>/<UPSTREAM>/hosts.toml` with `body`; certificate paths relative
/// to the host dir, as operators write them, after copying the PKI there.
fn write_hosts_toml(root: &Path, pki: &Pki, body: &str) {
    let dir = root.join(UPSTREAM);
    std::fs::create_dir_all(&dir).expect("host dir");
    for name in ["ca.crt", "client.cert", "client.key"] {
        std::fs::copy(pki.path(name), dir.join(name)).expect("copy pki");
    }
    std::fs::write(dir.join("hosts.toml"), body).expect("write hosts.toml");
}

/// A registry with one image, and its TLS front under `/mirror/`.
async fn mirror_setup(repo: &str) -> (TestRegistry, Pki, TlsRegistry, String) {
    let registry = TestRegistry::start();
    let pushed = registry
        .push_image(
            repo,
            &["v1"],
            &TestImage::new(vec![Layer::gzip(tiny_layer_tar(repo))]),
        )
        .await;
    let pki = Pki::new();
    let front = TlsRegistry::start(&registry.storage(), &pki, "/mirror/");
    (registry, pki, front, pushed.id().to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn pulls_through_a_tls_mirror_with_ca_client_certificate_and_override_path() {
    let (_registry, pki, front, id) = mirror_setup("test/tls-override").await;
    let certs = tempfile::tempdir().expect("certs.d");
    write_hosts_toml(
        certs.path(),
        &pki,
        &format!(
            "server = \"https://{UPSTREAM}\"\n\n\
             [host.\"https://{}/mirror/v2\"]\n  capabilities = [\"pull\", \"resolve\"]\n  \
             ca = \"ca.crt\"\n  client = [[\"client.cert\", \"client.key\"]]\n  override_path = true\n",
            front.host()
        ),
    );
    let berthd = Berthd::start(&format!(
        "[registry]\nconfig_path = \"{}\"\n",
        certs.path().display()
    ));
    let images = berthd.image_client().await;
    let reference = format!("{UPSTREAM}/test/tls-override:v1");
    let pulled = pull(&images, &reference)
        .await
        .expect("pull through the TLS mirror");
    assert_eq!(pulled, id);
    assert_eq!(
        image_id(&images, &reference).await.as_deref(),
        Some(id.as_str())
    );
    assert!(
        front.gets_under("/mirror/v2/test/tls-override/manifests/v1") > 0,
        "the mirror served the manifest under its prefix: {}",
        front.log_text()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_url_path_is_its_prefix_and_the_client_certificate_is_required() {
    let (_registry, pki, front, id) = mirror_setup("test/tls-prefix").await;
    let certs = tempfile::tempdir().expect("certs.d");
    let host = front.host();
    // No client certificate: the mirror refuses the handshake, and the
    // upstream (tried last) does not exist, so the pull fails naming both.
    write_hosts_toml(
        certs.path(),
        &pki,
        &format!("[host.\"https://{host}/mirror\"]\n  ca = \"ca.crt\"\n"),
    );
    let config = format!("[registry]\nconfig_path = \"{}\"\n", certs.path().display());
    let berthd = Berthd::start(&config);
    let images = berthd.image_client().await;
    let reference = format!("{UPSTREAM}/test/tls-prefix:v1");
    let err = pull(&images, &reference)
        .await
        .expect_err("no client certificate");
    assert!(
        err.message().contains(&format!("{host}/mirror/v2")),
        "names the mirror with its prefix: {err:?}"
    );
    assert!(
        err.message().contains(UPSTREAM),
        "names the upstream: {err:?}"
    );
    drop(berthd);

    // With the client certificate (one file holding certificate and key).
    let dir = certs.path().join(UPSTREAM);
    let combined = [
        std::fs::read(dir.join("client.cert")).expect("cert"),
        std::fs::read(dir.join("client.key")).expect("key"),
    ]
    .concat();
    std::fs::write(dir.join("client.pem"), combined).expect("client.pem");
    std::fs::write(
        dir.join("hosts.toml"),
        format!("[host.\"https://{host}/mirror\"]\n  ca = \"ca.crt\"\n  client = \"client.pem\"\n"),
    )
    .expect("hosts.toml");
    let berthd = Berthd::start(&config);
    let images = berthd.image_client().await;
    assert_eq!(pull(&images, &reference).await.expect("pull"), id);
    assert!(
        front.gets_under("/mirror/v2/test/tls-prefix/blobs/") > 0,
        "blobs came from the mirror under its prefix: {}",
        front.log_text()
    );
}

#[test]
fn a_malformed_hosts_toml_stops_start_up_naming_file_and_key() {
    let certs = tempfile::tempdir().expect("certs.d");
    let dir = certs.path().join("docker.io");
    std::fs::create_dir(&dir).expect("host dir");
    std::fs::write(
        dir.join("hosts.toml"),
        "[host.\"https://mirror.lan\"]\n  capabilities = [\"pull\", \"resolv\"]\n",
    )
    .expect("hosts.toml");
    let sandbox = Sandbox::new();
    let config = sandbox.write_config(&format!(
        "[registry]\nconfig_path = \"{}\"\n",
        certs.path().display()
    ));
    let output = sandbox.run_to_end(&config, &[]);
    assert!(!output.status.success(), "berthd started: {output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&dir.join("hosts.toml").display().to_string())
            && stderr.contains("host.\"https://mirror.lan\".capabilities"),
        "{stderr}"
    );
}
