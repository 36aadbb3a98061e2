//! A real image registry for the image tests: Debian's `docker-registry`
//! (distribution 2.8) on a free port of 127.0.0.1, with its storage, config
//! and log in a temporary directory, optionally behind htpasswd basic auth.
//!
//! ```ignore
//! let registry = TestRegistry::start();
//! let image = TestImage::new(vec![Layer::gzip(tiny_layer_tar("hello"))]).user("1002");
//! let pushed = registry.push_image("test/app", &["v1"], &image).await;
//! let reference = registry.reference("test/app:v1"); // 127.0.0.1:PORT/test/app:v1
//! // pushed.config_digest is the image id a runtime must report.
//! ```
//!
//! Content is built here byte for byte (tar, compression, config, manifest,
//! index), so every digest a test asserts is computed independently of the
//! code under test. Pushes go through oci-client over plain HTTP.
//!
//! Needs `docker-registry` (Debian package of the same name), `htpasswd`
//! (apache2-utils) for the auth variant and `zstd` for zstd layers.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::json;
use sha2::{Digest, Sha256};

/// How long the registry may take to answer on /v2/.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long it may take to stop on SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

pub const MEDIA_TYPE_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MEDIA_TYPE_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MEDIA_TYPE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// `sha256:<hex>` of `data`.
pub fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// The hex part of a `sha256:<hex>` digest.
pub fn digest_hex(digest: &str) -> &str {
    digest
        .strip_prefix("sha256:")
        .unwrap_or_else(|| panic!("not a sha256 digest: {digest}"))
}

/// Standard base64 with padding (for `AuthConfig.auth`).
pub fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A port on 127.0.0.1 that nothing listened on a moment ago. Also useful as
/// an endpoint that refuses connections.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local addr")
        .port()
}

/// Deterministic incompressible bytes (xorshift64*), for layers whose size
/// matters.
pub fn pseudo_random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

// ---------------------------------------------------------------------------
// Layers and tarballs
// ---------------------------------------------------------------------------

/// How a layer blob is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn media_type(self) -> &'static str {
        match self {
            Compression::None => "application/vnd.oci.image.layer.v1.tar",
            Compression::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
            Compression::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
        }
    }

    /// Compresses `tar`; the same input always gives the same bytes.
    pub fn compress(self, tar: &[u8]) -> Vec<u8> {
        match self {
            Compression::None => tar.to_vec(),
            Compression::Gzip => {
                // GzEncoder writes mtime 0 and no file name: deterministic.
                let mut encoder =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                encoder.write_all(tar).expect("gzip");
                encoder.finish().expect("gzip")
            }
            Compression::Zstd => zstd_compress(tar),
        }
    }
}

/// zstd through the `zstd` command (the test crate has no zstd library).
fn zstd_compress(data: &[u8]) -> Vec<u8> {
    let mut child = Command::new("zstd")
        .args(["-q", "-c", "-3", "--no-progress"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run zstd (apt-get install zstd)");
    let mut stdin = child.stdin.take().expect("zstd stdin");
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("zstd output");
    writer.join().expect("zstd writer").expect("write to zstd");
    assert!(
        output.status.success(),
        "zstd failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// One image layer: an uncompressed tarball and how to compress it.
#[derive(Clone, Debug)]
pub struct Layer {
    pub tar: Vec<u8>,
    pub compression: Compression,
}

impl Layer {
    pub fn new(tar: Vec<u8>, compression: Compression) -> Self {
        Self { tar, compression }
    }
    pub fn gzip(tar: Vec<u8>) -> Self {
        Self::new(tar, Compression::Gzip)
    }
    pub fn zstd(tar: Vec<u8>) -> Self {
        Self::new(tar, Compression::Zstd)
    }
    pub fn uncompressed(tar: Vec<u8>) -> Self {
        Self::new(tar, Compression::None)
    }

    /// The blob as stored in the registry, with its digests.
    pub fn build(&self) -> BuiltLayer {
        let blob = self.compression.compress(&self.tar);
        BuiltLayer {
            digest: sha256_digest(&blob),
            diff_id: sha256_digest(&self.tar),
            media_type: self.compression.media_type(),
            size: blob.len() as u64,
            blob,
        }
    }
}

/// A layer ready to push.
#[derive(Clone, Debug)]
pub struct BuiltLayer {
    /// Digest of the (compressed) blob: what the manifest names.
    pub digest: String,
    /// Digest of the uncompressed tar: what the config's rootfs names.
    pub diff_id: String,
    pub media_type: &'static str,
    pub size: u64,
    pub blob: Vec<u8>,
}

/// A well-formed tarball of regular files (mode 0644, parents implied),
/// built with tar::Builder.
pub fn tar_with_files(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut header = tar::Header::new_ustar();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, path, *data)
            .expect("append to tar");
    }
    builder.into_inner().expect("finish tar")
}

/// A tiny layer without any binaries: a directory and two small files, one
/// holding `marker` (so tests can tell layers apart and find its bytes).
pub fn tiny_layer_tar(marker: &str) -> Vec<u8> {
    RawTar::new()
        .dir("etc/", 0o755)
        .file("etc/berth-test", format!("{marker}\n").as_bytes(), 0o644)
        .file("hello.txt", b"hello from a berth test layer\n", 0o644)
        .finish()
}

/// A tarball with hand-written headers, for entries that tar::Builder
/// refuses (`..` components, absolute paths, links pointing anywhere).
/// Names and link targets longer than 100 bytes get a PAX header.
pub struct RawTar {
    buf: Vec<u8>,
}

impl Default for RawTar {
    fn default() -> Self {
        Self::new()
    }
}

impl RawTar {
    pub fn new() -> Self {
        Self { buf: Vec::new() }
    }

    pub fn file(self, name: &str, data: &[u8], mode: u32) -> Self {
        self.entry(tar::EntryType::Regular, name, "", data, mode)
    }

    pub fn dir(self, name: &str, mode: u32) -> Self {
        self.entry(tar::EntryType::Directory, name, "", b"", mode)
    }

    pub fn symlink(self, name: &str, target: &str) -> Self {
        self.entry(tar::EntryType::Symlink, name, target, b"", 0o777)
    }

    pub fn hardlink(self, name: &str, target: &str) -> Self {
        self.entry(tar::EntryType::Link, name, target, b"", 0o644)
    }

    /// Any entry; `name` and `link` are written as given, byte for byte.
    pub fn entry(
        mut self,
        kind: tar::EntryType,
        name: &str,
        link: &str,
        data: &[u8],
        mode: u32,
    ) -> Self {
        let mut pax = Vec::new();
        if name.len() > 100 {
            pax.extend(pax_record("path", name));
        }
        if link.len() > 100 {
            pax.extend(pax_record("linkpath", link));
        }
        if !pax.is_empty() {
            self.push_header(tar::EntryType::XHeader, "PaxHeaders/entry", "", &pax, 0o644);
            self.push_data(&pax);
        }
        self.push_header(kind, name, link, data, mode);
        self.push_data(data);
        self
    }

    fn push_header(
        &mut self,
        kind: tar::EntryType,
        name: &str,
        link: &str,
        data: &[u8],
        mode: u32,
    ) {
        let mut header = tar::Header::new_ustar();
        {
            let raw = header.as_ustar_mut().expect("ustar header");
            let name = &name.as_bytes()[..name.len().min(100)];
            raw.name[..name.len()].copy_from_slice(name);
            let link = &link.as_bytes()[..link.len().min(100)];
            raw.linkname[..link.len()].copy_from_slice(link);
        }
        header.set_entry_type(kind);
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_cksum();
        self.buf.extend_from_slice(header.as_bytes());
    }

    fn push_data(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        let padding = (512 - data.len() % 512) % 512;
        self.buf.extend(std::iter::repeat_n(0u8, padding));
    }

    /// The tarball, with its two zero end blocks.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend(std::iter::repeat_n(0u8, 1024));
        self.buf
    }
}

/// One PAX record: "<len> <key>=<value>\n", where len counts itself.
fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    while format!("{len}").len() + body.len() != len {
        len = format!("{len}").len() + body.len();
    }
    format!("{len}{body}").into_bytes()
}

/// What [`malicious_layer_tar`] tries to create outside the layer; every
/// path is inside `outside`, which the test owns and checks afterwards.
pub struct EscapeTargets {
    /// Written through `../../..(many)/<outside>/dotdot-escape`.
    pub dotdot: PathBuf,
    /// Written as the absolute entry name `<outside>/absolute-escape`.
    pub absolute: PathBuf,
    /// Written through symlink `evil -> <outside>`, entry `evil/pwned`.
    pub via_absolute_symlink: PathBuf,
    /// Written through symlink `evil-rel -> ../../..(many)/<outside>`,
    /// entry `evil-rel/pwned-rel`.
    pub via_relative_symlink: PathBuf,
    /// A file the test creates beforehand; the layer hard-links `hard` to
    /// it and then writes through `hard`. Its content and link count must
    /// stay as they were.
    pub hardlink_victim: PathBuf,
}

impl EscapeTargets {
    pub fn new(outside: &Path) -> Self {
        Self {
            dotdot: outside.join("dotdot-escape"),
            absolute: outside.join("absolute-escape"),
            via_absolute_symlink: outside.join("pwned"),
            via_relative_symlink: outside.join("pwned-rel"),
            hardlink_victim: outside.join("victim"),
        }
    }
}

/// Enough `..` to reach `/` from any directory a layer could be unpacked in.
fn to_root() -> String {
    "../".repeat(40)
}

/// Layers that each try one classic way out of the directory they are
/// unpacked in, by name. An unpacker that rejects the first bad entry of a
/// layer never sees the next one, so each way gets a layer of its own:
/// - `dotdot`: `../escape` (lands next to the layer dir);
/// - `dotdot-deep`: `../..(40)/<outside>/dotdot-escape` (reaches `outside`
///   through `/`);
/// - `absolute`: the absolute name `<outside>/absolute-escape`;
/// - `absolute-symlink`: symlink `evil -> <outside>`, then file `evil/pwned`;
/// - `relative-symlink`: symlink `evil-rel -> ../..(40)/<outside>`, then
///   file `evil-rel/pwned-rel`;
/// - `hardlink`: hard link `hard -> <outside>/victim`, then a regular file
///   `hard` (an unpacker that opens the existing path writes into victim).
///
/// Each starts with a harmless `ok.txt`, so a sane unpacker has something
/// to keep and tests can tell where the layer was unpacked.
/// `outside` must be absolute.
pub fn malicious_layer_tars(outside: &Path) -> Vec<(&'static str, Vec<u8>)> {
    assert!(
        outside.is_absolute(),
        "{} must be absolute",
        outside.display()
    );
    let targets = EscapeTargets::new(outside);
    let abs = |p: &Path| p.display().to_string();
    let through_root = |p: &Path| format!("{}{}", to_root(), abs(p).trim_start_matches('/'));
    let base = || RawTar::new().file("ok.txt", b"benign\n", 0o644);
    vec![
        (
            "dotdot",
            base()
                .file("../escape", b"escaped with ..\n", 0o644)
                .finish(),
        ),
        (
            "dotdot-deep",
            base()
                .file(&through_root(&targets.dotdot), b"escaped with ..\n", 0o644)
                .finish(),
        ),
        (
            "absolute",
            base()
                .file(
                    &abs(&targets.absolute),
                    b"escaped with an absolute name\n",
                    0o644,
                )
                .finish(),
        ),
        (
            "absolute-symlink",
            base()
                .symlink("evil", &abs(outside))
                .file("evil/pwned", b"escaped through a symlink\n", 0o644)
                .finish(),
        ),
        (
            "relative-symlink",
            base()
                .symlink("evil-rel", &through_root(outside))
                .file("evil-rel/pwned-rel", b"escaped through a symlink\n", 0o644)
                .finish(),
        ),
        (
            "hardlink",
            base()
                .hardlink("hard", &abs(&targets.hardlink_victim))
                .file("hard", b"written through a hard link\n", 0o644)
                .finish(),
        ),
    ]
}

/// All of [`malicious_layer_tars`] in one layer, in that order.
pub fn malicious_layer_tar(outside: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for (_, tar) in malicious_layer_tars(outside) {
        // Drop each part's two zero end blocks.
        all.extend_from_slice(&tar[..tar.len() - 1024]);
    }
    all.extend(std::iter::repeat_n(0u8, 1024));
    all
}

// ---------------------------------------------------------------------------
// Images
// ---------------------------------------------------------------------------

/// A single-platform image to build and push.
#[derive(Clone, Debug)]
pub struct TestImage {
    pub layers: Vec<Layer>,
    /// `config.User`.
    pub user: Option<String>,
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
    /// `config.Labels`.
    pub labels: BTreeMap<String, String>,
    /// The manifest's annotations.
    pub annotations: BTreeMap<String, String>,
}

impl TestImage {
    /// A linux/amd64 image of these layers.
    pub fn new(layers: Vec<Layer>) -> Self {
        Self {
            layers,
            user: None,
            os: "linux".to_string(),
            architecture: "amd64".to_string(),
            variant: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }
    }

    pub fn user(mut self, user: &str) -> Self {
        self.user = Some(user.to_string());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    /// An annotation of the manifest.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.to_string(), value.to_string());
        self
    }

    pub fn platform(mut self, os: &str, architecture: &str, variant: Option<&str>) -> Self {
        self.os = os.to_string();
        self.architecture = architecture.to_string();
        self.variant = variant.map(str::to_string);
        self
    }

    /// `os/arch[/variant]`.
    pub fn platform_string(&self) -> String {
        match &self.variant {
            Some(v) => format!("{}/{}/{v}", self.os, self.architecture),
            None => format!("{}/{}", self.os, self.architecture),
        }
    }

    /// Config, manifest and layer blobs, with their digests.
    pub fn build(&self) -> BuiltImage {
        let layers: Vec<BuiltLayer> = self.layers.iter().map(Layer::build).collect();
        let mut image_config = serde_json::Map::new();
        image_config.insert(
            "Env".into(),
            json!(["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]),
        );
        image_config.insert("Cmd".into(), json!(["/hello"]));
        image_config.insert("WorkingDir".into(), json!("/"));
        if let Some(user) = &self.user {
            image_config.insert("User".into(), json!(user));
        }
        if !self.labels.is_empty() {
            image_config.insert("Labels".into(), json!(self.labels));
        }
        let mut config = json!({
            "created": "2024-01-01T00:00:00Z",
            "architecture": self.architecture,
            "os": self.os,
            "config": image_config,
            "rootfs": {
                "type": "layers",
                "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>(),
            },
            "history": layers.iter().map(|_| json!({
                "created": "2024-01-01T00:00:00Z",
                "created_by": "berth tests",
            })).collect::<Vec<_>>(),
        });
        if let Some(variant) = &self.variant {
            config["variant"] = json!(variant);
        }
        let config = serde_json::to_vec(&config).expect("config JSON");
        let config_digest = sha256_digest(&config);
        let mut manifest = json!({
            "schemaVersion": 2,
            "mediaType": MEDIA_TYPE_MANIFEST,
            "config": {
                "mediaType": MEDIA_TYPE_CONFIG,
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": layers.iter().map(|l| json!({
                "mediaType": l.media_type,
                "digest": l.digest,
                "size": l.size,
            })).collect::<Vec<_>>(),
        });
        if !self.annotations.is_empty() {
            manifest["annotations"] = json!(self.annotations);
        }
        let manifest = serde_json::to_vec(&manifest).expect("manifest JSON");
        BuiltImage {
            manifest_digest: sha256_digest(&manifest),
            manifest,
            config_digest,
            config,
            layers,
            platform: self.platform_string(),
        }
    }
}

/// A built (and, when returned by a push, pushed) image.
#[derive(Clone, Debug)]
pub struct BuiltImage {
    /// The manifest's digest: what `repo@digest` names.
    pub manifest_digest: String,
    pub manifest: Vec<u8>,
    /// The config's digest: the image id.
    pub config_digest: String,
    pub config: Vec<u8>,
    pub layers: Vec<BuiltLayer>,
    /// `os/arch[/variant]`.
    pub platform: String,
}

impl BuiltImage {
    /// The image id a runtime reports: the config digest.
    pub fn id(&self) -> &str {
        &self.config_digest
    }

    pub fn layer_digests(&self) -> Vec<String> {
        self.layers.iter().map(|l| l.digest.clone()).collect()
    }
}

/// A pushed image index.
#[derive(Clone, Debug)]
pub struct PushedIndex {
    pub digest: String,
    pub index: Vec<u8>,
    /// The images it lists, in index order.
    pub images: Vec<BuiltImage>,
}

impl PushedIndex {
    /// The image for `os/arch[/variant]`.
    pub fn image_for(&self, platform: &str) -> &BuiltImage {
        self.images
            .iter()
            .find(|i| i.platform == platform)
            .unwrap_or_else(|| panic!("no {platform} image in the index"))
    }
}

// ---------------------------------------------------------------------------
// The registry
// ---------------------------------------------------------------------------

/// A running docker-registry, killed (by pid) when dropped.
pub struct TestRegistry {
    dir: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
    auth: Option<(String, String)>,
}

impl TestRegistry {
    /// An open registry (no auth).
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// A registry that requires HTTP basic auth with these credentials
    /// (htpasswd, bcrypt), over plain HTTP.
    pub fn start_with_auth(user: &str, password: &str) -> Self {
        Self::start_with(Some((user.to_string(), password.to_string())))
    }

    fn start_with(auth: Option<(String, String)>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("berth-registry-")
            .tempdir()
            .expect("temp dir");
        if let Some((user, password)) = &auth {
            std::fs::write(dir.path().join("htpasswd"), htpasswd_entry(user, password))
                .expect("write htpasswd");
        }
        let mut registry = Self {
            dir,
            child: None,
            port: 0,
            auth,
        };
        // The port is free when picked, but another test may take it before
        // the registry binds it: then pick another.
        for _ in 0..5 {
            registry.port = free_port();
            match registry.spawn_and_wait() {
                Ok(()) => return registry,
                Err(log) if log.contains("address already in use") => continue,
                Err(log) => panic!("docker-registry did not start: {log}"),
            }
        }
        panic!("docker-registry found no free port in 5 tries");
    }

    /// Starts the process and waits until it answers on /v2/. Err carries
    /// the log when it exited.
    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let config = self.dir.path().join("config.yml");
        std::fs::write(&config, self.config_yaml()).expect("write registry config");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("registry log");
        let log_offset = log.metadata().map(|m| m.len()).unwrap_or(0) as usize;
        let child = spawn_docker_registry(&config, log);
        let port = self.port;
        let log_path = self.log_path();
        let child = self.child.insert(child);
        let waited = wait_listening(
            child,
            port,
            || {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                log.get(log_offset..).unwrap_or_default().to_string()
            },
            // Our own process must be the one listening, not whoever took
            // the port meanwhile.
            || v2_status_at(port).is_some(),
        );
        match waited {
            Ok(()) => Ok(()),
            Err(StartFailure::Exited(log)) => {
                self.child = None;
                Err(log)
            }
            Err(StartFailure::TimedOut(log)) => {
                self.stop();
                panic!("docker-registry did not answer on /v2/ in time: {log}");
            }
        }
    }

    fn config_yaml(&self) -> String {
        let auth = match &self.auth {
            Some(_) => format!(
                "auth:\n  htpasswd:\n    realm: berth-test\n    path: {}\n",
                self.dir.path().join("htpasswd").display()
            ),
            None => String::new(),
        };
        format!(
            "version: 0.1\n\
             log:\n  level: info\n  formatter: text\n  accesslog:\n    disabled: false\n\
             storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n  \
             maintenance:\n    uploadpurging:\n      enabled: false\n\
             http:\n  addr: 127.0.0.1:{port}\n  secret: berth-test-secret\n\
             health:\n  storagedriver:\n    enabled: false\n\
             {auth}",
            storage = self.storage().display(),
            port = self.port,
        )
    }

    /// HTTP status of GET /v2/ (200, or 401 behind auth), None if no answer.
    pub fn v2_status(&self) -> Option<u16> {
        v2_status_at(self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`, the registry part of references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT`, for mirror endpoints.
    pub fn url(&self) -> String {
        format!("http://{}", self.host())
    }

    /// `127.0.0.1:PORT/<name>`, e.g. `reference("test/app:v1")`.
    pub fn reference(&self, name: &str) -> String {
        format!("{}/{name}", self.host())
    }

    /// The registry's storage root (`rootdirectory`).
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("registry.log")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Access-log lines of requests with this method (`"GET"`) whose path
    /// (query string aside) ends with `path_suffix` (`"/blobs/sha256:..."`).
    pub fn requests(&self, method: &str, path_suffix: &str) -> Vec<String> {
        self.log_text()
            .lines()
            .filter(|line| {
                // 127.0.0.1 - - [date] "GET /v2/... HTTP/1.1" 200 ...
                let Some(request) = line.split('"').nth(1) else {
                    return false;
                };
                let mut parts = request.split(' ');
                let (Some(m), Some(path), Some(proto)) = (parts.next(), parts.next(), parts.next())
                else {
                    return false;
                };
                let path = path.split('?').next().unwrap_or(path);
                m == method
                    && proto.starts_with("HTTP/")
                    && path.starts_with("/v2/")
                    && path.ends_with(path_suffix)
            })
            .map(str::to_string)
            .collect()
    }

    /// How many times a blob was downloaded (GET, any status).
    pub fn blob_get_count(&self, digest: &str) -> usize {
        self.requests("GET", &format!("/blobs/{digest}")).len()
    }

    /// Where the registry keeps a blob's bytes.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest_hex(digest);
        self.storage()
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Replaces a stored blob's bytes, so the registry serves content that
    /// does not match its digest. Keep the length (the registry announces
    /// the stored file's size; a different one may fail as a size mismatch
    /// before any digest is checked).
    pub fn tamper_blob(&self, digest: &str, bytes: &[u8]) {
        let path = self.blob_path(digest);
        assert!(path.is_file(), "{} is not stored", path.display());
        std::fs::write(&path, bytes).expect("overwrite blob");
    }

    /// Credentials the fixture pushes with.
    pub fn registry_auth(&self) -> RegistryAuth {
        match &self.auth {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    /// An oci-client over plain HTTP, holding this registry's credentials.
    pub async fn client(&self) -> Client {
        self.client_with(&self.registry_auth()).await
    }

    /// An oci-client over plain HTTP with the given credentials.
    pub async fn client_with(&self, auth: &RegistryAuth) -> Client {
        let client = Client::new(ClientConfig {
            protocol: ClientProtocol::Http,
            ..Default::default()
        });
        client.store_auth_if_needed(&self.host(), auth).await;
        client
    }

    pub fn oci_reference(&self, repo: &str, tag: &str) -> Reference {
        Reference::with_tag(self.host(), repo.to_string(), tag.to_string())
    }

    pub fn oci_reference_by_digest(&self, repo: &str, digest: &str) -> Reference {
        Reference::with_digest(self.host(), repo.to_string(), digest.to_string())
    }

    /// Uploads a blob unless the repository has it.
    pub async fn push_blob(&self, client: &Client, repo: &str, data: &[u8], digest: &str) {
        let reference = self.oci_reference_by_digest(repo, digest);
        if client
            .blob_exists(&reference, digest)
            .await
            .unwrap_or(false)
        {
            return;
        }
        client
            .push_blob(&reference, data.to_vec(), digest)
            .await
            .unwrap_or_else(|err| panic!("push blob {digest} to {repo}: {err}"));
    }

    /// Uploads a manifest (or index) as these exact bytes, under `tag` or,
    /// when None, by its digest.
    pub async fn push_manifest_bytes(
        &self,
        client: &Client,
        repo: &str,
        tag: Option<&str>,
        bytes: &[u8],
        media_type: &str,
    ) {
        let reference = match tag {
            Some(tag) => self.oci_reference(repo, tag),
            None => self.oci_reference_by_digest(repo, &sha256_digest(bytes)),
        };
        client
            .push_manifest_raw(
                &reference,
                bytes.to_vec(),
                media_type.parse().expect("media type header"),
            )
            .await
            .unwrap_or_else(|err| panic!("push manifest {reference}: {err}"));
    }

    /// Pushes an already built image under each tag (by digest only when
    /// `tags` is empty).
    pub async fn push_built(&self, repo: &str, tags: &[&str], image: &BuiltImage) {
        let client = self.client().await;
        for layer in &image.layers {
            self.push_blob(&client, repo, &layer.blob, &layer.digest)
                .await;
        }
        self.push_blob(&client, repo, &image.config, &image.config_digest)
            .await;
        if tags.is_empty() {
            self.push_manifest_bytes(&client, repo, None, &image.manifest, MEDIA_TYPE_MANIFEST)
                .await;
        }
        for tag in tags {
            self.push_manifest_bytes(
                &client,
                repo,
                Some(tag),
                &image.manifest,
                MEDIA_TYPE_MANIFEST,
            )
            .await;
        }
    }

    /// Builds and pushes a single-platform image under each tag.
    pub async fn push_image(&self, repo: &str, tags: &[&str], image: &TestImage) -> BuiltImage {
        let built = image.build();
        self.push_built(repo, tags, &built).await;
        built
    }

    /// Pushes each image by digest, then an OCI index of them (platform
    /// from each image) under `tag`.
    pub async fn push_index(&self, repo: &str, tag: &str, images: &[TestImage]) -> PushedIndex {
        let built: Vec<BuiltImage> = images.iter().map(TestImage::build).collect();
        for image in &built {
            self.push_built(repo, &[], image).await;
        }
        let manifests: Vec<serde_json::Value> = images
            .iter()
            .zip(&built)
            .map(|(image, built)| {
                let mut platform = json!({
                    "architecture": image.architecture,
                    "os": image.os,
                });
                if let Some(variant) = &image.variant {
                    platform["variant"] = json!(variant);
                }
                json!({
                    "mediaType": MEDIA_TYPE_MANIFEST,
                    "digest": built.manifest_digest,
                    "size": built.manifest.len(),
                    "platform": platform,
                })
            })
            .collect();
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": MEDIA_TYPE_INDEX,
            "manifests": manifests,
        }))
        .expect("index JSON");
        let client = self.client().await;
        self.push_manifest_bytes(&client, repo, Some(tag), &index, MEDIA_TYPE_INDEX)
            .await;
        PushedIndex {
            digest: sha256_digest(&index),
            index,
            images: built,
        }
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child);
        }
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts Debian's `docker-registry serve CONFIG` with its output in `log`.
pub(crate) fn spawn_docker_registry(config: &Path, log: std::fs::File) -> Child {
    Command::new("docker-registry")
        .arg("serve")
        .arg(config)
        .stdin(Stdio::null())
        // Access log lines go to stdout, everything else to stderr.
        .stdout(log.try_clone().expect("dup log"))
        .stderr(log)
        .spawn()
        .expect("spawn docker-registry (apt-get install docker-registry)")
}

/// Why a docker-registry did not come up; each carries its log.
pub(crate) enum StartFailure {
    /// It exited (e.g. the port was taken meanwhile).
    Exited(String),
    /// It did not answer within START_TIMEOUT.
    TimedOut(String),
}

/// Waits until `child` logs that it listens on 127.0.0.1:`port` and
/// `answers()` holds.
pub(crate) fn wait_listening(
    child: &mut Child,
    port: u16,
    log: impl Fn() -> String,
    answers: impl Fn() -> bool,
) -> Result<(), StartFailure> {
    let listening = format!("listening on 127.0.0.1:{port}");
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let log = log();
        if child.try_wait().expect("wait registry").is_some() {
            return Err(StartFailure::Exited(log));
        }
        if log.contains(&listening) && answers() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(StartFailure::TimedOut(log));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM by pid, then SIGKILL when it has not exited in STOP_TIMEOUT.
pub(crate) fn stop_child(child: &mut Child) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// HTTP status of GET /v2/ on 127.0.0.1:`port` (200, or 401 behind auth),
/// None if no answer.
fn v2_status_at(port: u16) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET /v2/ HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response
        .strip_prefix("HTTP/1.")?
        .get(2..5)?
        .parse()
        .ok()
        .filter(|s| *s == 200 || *s == 401)
}

/// `user:<bcrypt hash>` as `htpasswd -Bbn` writes it (distribution only
/// accepts bcrypt).
fn htpasswd_entry(user: &str, password: &str) -> String {
    let output = Command::new("htpasswd")
        .args(["-Bbn", user, password])
        .output()
        .expect("run htpasswd (apt-get install apache2-utils)");
    assert!(
        output.status.success(),
        "htpasswd failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let entry = String::from_utf8(output.stdout).expect("htpasswd output");
    format!("{}\n", entry.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_known_values() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
    }

    #[test]
    fn pax_record_counts_its_own_length() {
        let record = pax_record("path", "a");
        assert_eq!(record, b"9 path=a\n");
        let long = "x".repeat(95);
        let record = pax_record("path", &long);
        let text = String::from_utf8(record.clone()).unwrap();
        let len: usize = text.split(' ').next().unwrap().parse().unwrap();
        assert_eq!(len, record.len());
    }

    #[test]
    fn raw_tar_keeps_hostile_names() {
        let outside = Path::new("/tmp/some/outside/dir");
        let tar = malicious_layer_tar(outside);
        let mut archive = tar::Archive::new(&tar[..]);
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                String::from_utf8_lossy(&e.path_bytes()).into_owned()
            })
            .collect();
        assert!(names.contains(&"../escape".to_string()), "{names:?}");
        assert!(names.contains(&"/tmp/some/outside/dir/absolute-escape".to_string()));
        assert!(names.contains(&"evil/pwned".to_string()));
        assert!(names
            .iter()
            .any(|n| n.starts_with("../../") && n.ends_with("tmp/some/outside/dir/dotdot-escape")));
    }
}
