//! Pulls of a large layer against a small registry served here, over real
//! HTTP on loopback: the registry answers ranges (or not), asks for basic
//! auth, can redirect blob GETs to an "object store" and can break a
//! ranged answer halfway. Each test checks which path the pull took (by
//! the requests the servers saw) and that the layer is byte-identical.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use berth_image::hosts::RegistryHosts;
use berth_image::pull::ImagePuller;
use berth_image::ranged::Ranged;
use berth_image::store::ImageStore;
use berth_image::RegistryAuth;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// base64("user:pass")
const BASIC: &str = "Basic dXNlcjpwYXNz";
const CHUNK: u64 = 256 << 10;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ranges,
    NoRanges,
    /// Layer GETs are redirected to the object store.
    Redirect,
    /// The first answer for the range at offset 2 chunks stops halfway.
    BreakOnce,
    /// One byte of the range at offset 3 chunks is wrong.
    Corrupt,
}

#[derive(Default)]
struct Seen {
    range_requests: AtomicUsize,
    whole_requests: AtomicUsize,
    object_range_requests: AtomicUsize,
    object_authorized: AtomicUsize,
    broken: AtomicUsize,
}

struct Image {
    manifest: Vec<u8>,
    config_digest: String,
    config: Vec<u8>,
    layer_digest: String,
    layer: Vec<u8>,
    content: Vec<u8>,
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// One layer (uncompressed tar) holding a 3 MiB file of fixed noise.
fn image() -> Image {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let content: Vec<u8> = (0..(3 << 20) + 1234)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(content.len() as u64);
    header.set_mode(0o644);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(1_700_000_000);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    builder
        .append_data(&mut header, "data", content.as_slice())
        .unwrap();
    let layer = builder.into_inner().unwrap();
    let layer_digest = digest(&layer);
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": arch,
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }))
    .unwrap();
    let config_digest = digest(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": layer.len(),
        }],
    }))
    .unwrap();
    Image {
        manifest,
        config_digest,
        config,
        layer_digest,
        layer,
        content,
    }
}

struct Request {
    path: String,
    range: Option<(u64, u64)>,
    authorization: Option<String>,
}

async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let mut lines = text.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_string();
    let mut range = None;
    let mut authorization = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("range") {
            let (start, last) = value.strip_prefix("bytes=")?.split_once('-')?;
            range = Some((start.parse().ok()?, last.parse().ok()?));
        } else if name.eq_ignore_ascii_case("authorization") {
            authorization = Some(value.to_string());
        }
    }
    Some(Request {
        path,
        range,
        authorization,
    })
}

async fn respond(stream: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8]) {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let _ = stream.shutdown().await;
}

/// Serves `blob` (or the requested range of it), breaking or corrupting
/// the range the mode says.
async fn serve_blob(
    stream: &mut TcpStream,
    blob: &[u8],
    request: &Request,
    mode: Mode,
    seen: &Seen,
) {
    let Some((start, last)) = request.range.filter(|_| mode != Mode::NoRanges) else {
        seen.whole_requests.fetch_add(1, Ordering::SeqCst);
        respond(stream, "200 OK", &[], blob).await;
        return;
    };
    let last = last.min(blob.len() as u64 - 1);
    let mut body = blob[start as usize..=last as usize].to_vec();
    let headers = [(
        "Content-Range",
        format!("bytes {start}-{last}/{}", blob.len()),
    )];
    if mode == Mode::BreakOnce
        && start == 2 * CHUNK
        && seen.broken.fetch_add(1, Ordering::SeqCst) == 0
    {
        // Claims the whole range, sends half, hangs up.
        let head = format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: {}\r\n\r\n",
            body.len(),
            headers[0].1
        );
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(&body[..body.len() / 2]).await;
        let _ = stream.shutdown().await;
        return;
    }
    if mode == Mode::Corrupt && start == 3 * CHUNK {
        body[100] ^= 0xff;
    }
    respond(stream, "206 Partial Content", &headers, &body).await;
}

struct Servers {
    registry: String,
    seen: Arc<Seen>,
}

async fn start(image: Arc<Image>, mode: Mode) -> Servers {
    let seen = Arc::new(Seen::default());
    let objects = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let objects_addr = objects.local_addr().unwrap();
    {
        let (image, seen) = (image.clone(), seen.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = objects.accept().await {
                let (image, seen) = (image.clone(), seen.clone());
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut stream).await else {
                        return;
                    };
                    if request.authorization.is_some() {
                        seen.object_authorized.fetch_add(1, Ordering::SeqCst);
                    }
                    if request.range.is_some() {
                        seen.object_range_requests.fetch_add(1, Ordering::SeqCst);
                    }
                    serve_blob(&mut stream, &image.layer, &request, Mode::Ranges, &seen).await;
                });
            }
        });
    }
    let registry = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let registry_addr = registry.local_addr().unwrap();
    {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = registry.accept().await {
                let (image, seen) = (image.clone(), seen.clone());
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut stream).await else {
                        return;
                    };
                    if request.authorization.as_deref() != Some(BASIC) {
                        let challenge = ("WWW-Authenticate", "Basic realm=\"test\"".to_string());
                        respond(&mut stream, "401 Unauthorized", &[challenge], b"").await;
                        return;
                    }
                    let layer_path = format!("/v2/test/big/blobs/{}", image.layer_digest);
                    if request.path == "/v2/test/big/manifests/latest" {
                        let kind = (
                            "Content-Type",
                            "application/vnd.oci.image.manifest.v1+json".to_string(),
                        );
                        respond(&mut stream, "200 OK", &[kind], &image.manifest).await;
                    } else if request.path == format!("/v2/test/big/blobs/{}", image.config_digest)
                    {
                        respond(&mut stream, "200 OK", &[], &image.config).await;
                    } else if request.path == layer_path {
                        if request.range.is_some() {
                            seen.range_requests.fetch_add(1, Ordering::SeqCst);
                        }
                        if mode == Mode::Redirect {
                            let location = (
                                "Location",
                                format!("http://{objects_addr}/objects/layer?signature=abc"),
                            );
                            respond(&mut stream, "307 Temporary Redirect", &[location], b"").await;
                        } else {
                            serve_blob(&mut stream, &image.layer, &request, mode, &seen).await;
                        }
                    } else {
                        respond(&mut stream, "404 Not Found", &[], b"{}").await;
                    }
                });
            }
        });
    }
    Servers {
        registry: registry_addr.to_string(),
        seen,
    }
}

struct Pulled {
    result: Result<(), String>,
    store: Arc<ImageStore>,
    _root: tempfile::TempDir,
}

async fn pull(servers: &Servers, connections: usize) -> Pulled {
    let root = tempfile::tempdir().unwrap();
    let store = Arc::new(ImageStore::open(root.path()).unwrap());
    let puller = ImagePuller::new(store.clone(), RegistryHosts::default()).with_ranged(Ranged {
        threshold: 1 << 20,
        chunk: CHUNK,
        connections,
    });
    let auth = RegistryAuth::Basic("user".into(), "pass".into());
    let image = format!("{}/test/big:latest", servers.registry);
    let result = puller
        .pull(&image, &auth)
        .await
        .map(|_| ())
        .map_err(|err| err.to_string());
    Pulled {
        result,
        store,
        _root: root,
    }
}

fn assert_layer_identical(pulled: &Pulled, image: &Image) {
    if let Err(error) = &pulled.result {
        panic!("pull failed: {error}");
    }
    let dir = pulled.store.layer_path(&image.layer_digest).unwrap();
    let data = std::fs::read(dir.join("data")).unwrap();
    assert!(data == image.content, "the unpacked file differs");
}

fn chunks(image: &Image) -> usize {
    (image.layer.len() as u64).div_ceil(CHUNK) as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_layer_comes_in_ranges_with_credentials() {
    let image = Arc::new(image());
    let servers = start(image.clone(), Mode::Ranges).await;
    let pulled = pull(&servers, 4).await;
    assert_layer_identical(&pulled, &image);
    // One request per chunk, each a range, none for the whole blob.
    assert_eq!(
        servers.seen.range_requests.load(Ordering::SeqCst),
        chunks(&image)
    );
    assert_eq!(servers.seen.whole_requests.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_without_ranges_gets_one_stream() {
    let image = Arc::new(image());
    let servers = start(image.clone(), Mode::NoRanges).await;
    let pulled = pull(&servers, 4).await;
    assert_layer_identical(&pulled, &image);
    // The probe was answered with the whole blob, which was used as is.
    assert_eq!(servers.seen.range_requests.load(Ordering::SeqCst), 1);
    assert_eq!(servers.seen.whole_requests.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_go_to_the_redirect_without_credentials() {
    let image = Arc::new(image());
    let servers = start(image.clone(), Mode::Redirect).await;
    let pulled = pull(&servers, 4).await;
    assert_layer_identical(&pulled, &image);
    let seen = &servers.seen;
    // The registry saw the probe only; the object store every range.
    assert_eq!(seen.range_requests.load(Ordering::SeqCst), 1);
    assert_eq!(
        seen.object_range_requests.load(Ordering::SeqCst),
        chunks(&image)
    );
    assert_eq!(seen.object_authorized.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_range_resumes_where_it_stopped() {
    let image = Arc::new(image());
    let servers = start(image.clone(), Mode::BreakOnce).await;
    let pulled = pull(&servers, 3).await;
    assert_layer_identical(&pulled, &image);
    assert_eq!(servers.seen.broken.load(Ordering::SeqCst), 1);
    // Every chunk once, and the rest of the broken one again.
    assert_eq!(
        servers.seen.range_requests.load(Ordering::SeqCst),
        chunks(&image) + 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_range_fails_the_pull_and_installs_nothing() {
    let image = Arc::new(image());
    let servers = start(image.clone(), Mode::Corrupt).await;
    let pulled = pull(&servers, 4).await;
    let error = pulled.result.as_ref().unwrap_err();
    assert!(error.contains("digest mismatch"), "{error}");
    assert!(!pulled.store.has_layer(&image.layer_digest));
    assert!(pulled.store.list().is_empty());
}
