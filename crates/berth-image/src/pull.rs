//! Pulling an image: resolve the reference through mirrors, fetch manifest
//! and config, then download and unpack every missing layer concurrently.
//!
//! A layer is unpacked as it arrives: the compressed bytes are hashed on
//! the way and never stored, so each layer is written to disk once and its
//! decompression overlaps its download (as CRI-O's storage does). Nothing
//! of it counts until its digest, size and diff id all check out.
//!
//! A layer of at least [`Ranged::threshold`] bytes comes down over several
//! connections at once when the registry serves ranges (see
//! [`crate::ranged`]); its bytes still reach the unpacker and the digest
//! check in order.
//!
//! Layers are deduplicated across pulls by diff id: two pulls of the same
//! image at once share one download and one unpack per layer.

use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use futures_util::StreamExt;
use oci_client::manifest::{
    OciDescriptor, OciImageManifest, OciManifest, IMAGE_MANIFEST_LIST_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::secrets::RegistryAuth;
use oci_client::Reference;
use oci_spec::image::ImageConfiguration;
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, OnceCell, Semaphore};

use crate::hosts::{Endpoint, RegistryHosts};
use crate::platform::Platform;
use crate::ranged::{self, ByteStream, Ranged};
use crate::reference::{self, InvalidReference};
use crate::registry_client::{BlobBody, RegistryClient};
use crate::store::{ImageRecord, ImageStore, LayerRecord, StoreError};
use crate::unpack::{self, Compression};

/// The largest manifest or index a pull accepts. Real ones are a few KiB;
/// the cap keeps a hostile registry from filling berthd's memory.
pub const MAX_MANIFEST_BYTES: u64 = 8 << 20;
/// The largest image config a pull accepts (configs carry history and
/// labels, so they may be larger than manifests).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// How long registry requests may take to connect, and may stay silent
/// (waiting for a response or for the next body bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistryTimeouts {
    pub connect: Duration,
    pub read: Duration,
}

impl Default for RegistryTimeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(30),
            read: Duration::from_secs(60),
        }
    }
}

/// Manifest media types a pull accepts.
const ACCEPTED_MANIFESTS: [&str; 4] = [
    OCI_IMAGE_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];

/// Why a pull failed. Messages name the reference and the registry, and
/// carry the registry's own message.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    InvalidReference(#[from] InvalidReference),
    #[error("failed to resolve {reference}: {}", describe_failures(.failures))]
    Resolve {
        reference: String,
        /// Each endpoint tried, with its error.
        failures: Vec<(String, String)>,
        /// Every endpoint answered that the image does not exist.
        not_found: bool,
    },
    #[error("{reference}: no image for {platform} in index {digest}")]
    NoMatchingPlatform {
        reference: String,
        digest: String,
        platform: String,
    },
    #[error("{reference}: {what} from {registry}: {message}")]
    BadContent {
        reference: String,
        registry: String,
        what: String,
        message: String,
    },
    #[error("{reference}: fetching {digest} from {registry}: {message}")]
    Fetch {
        reference: String,
        registry: String,
        digest: String,
        message: String,
    },
    #[error("{reference}: unpacking layer {digest}: {message}")]
    Unpack {
        reference: String,
        digest: String,
        message: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn describe_failures(failures: &[(String, String)]) -> String {
    if failures.is_empty() {
        return "no registry endpoint is configured for it".to_string();
    }
    failures
        .iter()
        .map(|(host, error)| format!("{host}: {error}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Pulls images into an [`ImageStore`].
pub struct ImagePuller {
    store: Arc<ImageStore>,
    /// Replaced whole when the registry settings are reloaded; a pull
    /// keeps the settings it started with.
    hosts: std::sync::RwLock<Arc<RegistryHosts>>,
    platform: Platform,
    timeouts: RegistryTimeouts,
    /// Layer fetches in progress, by diff id.
    in_flight: Mutex<HashMap<String, Arc<OnceCell<()>>>>,
    /// Bounds the layers fetched at once, over all pulls.
    layer_slots: Semaphore,
    /// How large layers are split into ranges.
    ranged: Ranged,
    /// Connections ranged downloads may open beyond one per layer, over
    /// all pulls: with [`CONCURRENT_LAYERS`], the most blob connections
    /// berthd holds at once.
    extra_connections: Arc<Semaphore>,
}

/// Layers fetched at once, as containerd's `max_concurrent_downloads`:
/// more only splits the same bandwidth and cores further.
const CONCURRENT_LAYERS: usize = 3;

/// Connections beyond one per layer that ranged downloads share: three
/// layers fetched at once use at most 3 + 5 connections.
const EXTRA_CONNECTIONS: usize = 5;

/// What the registry said about a reference, before any layer is fetched.
struct Resolved {
    /// The endpoint that answered, for the blobs.
    client: Arc<RegistryClient>,
    registry: String,
    /// Digest of what the reference names (an index or a manifest).
    top_digest: String,
    manifest: OciImageManifest,
    manifest_digest: String,
    manifest_bytes: Vec<u8>,
    config_bytes: Vec<u8>,
    config: ImageConfiguration,
}

impl ImagePuller {
    pub fn new(store: Arc<ImageStore>, hosts: RegistryHosts) -> Self {
        Self {
            store,
            hosts: std::sync::RwLock::new(Arc::new(hosts)),
            platform: Platform::host(),
            timeouts: RegistryTimeouts::default(),
            in_flight: Mutex::default(),
            layer_slots: Semaphore::new(CONCURRENT_LAYERS),
            ranged: Ranged::default(),
            extra_connections: Arc::new(Semaphore::new(EXTRA_CONNECTIONS)),
        }
    }

    /// Splits large layers as `ranged` says (tests use small chunks).
    pub fn with_ranged(mut self, ranged: Ranged) -> Self {
        self.ranged = ranged;
        self
    }

    pub fn with_timeouts(mut self, timeouts: RegistryTimeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    pub fn store(&self) -> &Arc<ImageStore> {
        &self.store
    }

    /// Uses `hosts` for pulls that start from now on.
    pub fn set_hosts(&self, hosts: RegistryHosts) {
        *self
            .hosts
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(hosts);
    }

    /// The registry settings pulls use now.
    pub fn hosts(&self) -> Arc<RegistryHosts> {
        self.hosts
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Pulls `image` and returns its record.
    pub async fn pull(&self, image: &str, auth: &RegistryAuth) -> Result<ImageRecord, PullError> {
        let started = Instant::now();
        let reference = reference::parse(image)?;
        let resolved = self.resolve(&reference, auth).await?;
        let record = self.fetch(&reference, resolved).await?;
        tracing::info!(
            image = %reference,
            id = %record.id,
            layers = record.layers.len(),
            bytes = record.size,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "image pulled"
        );
        Ok(record)
    }

    /// Tries each endpoint in order until one serves the manifest and config.
    async fn resolve(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
    ) -> Result<Resolved, PullError> {
        let mut failures = Vec::new();
        let mut not_found = true;
        let endpoints = self.hosts().endpoints(reference.registry());
        for endpoint in endpoints {
            match self.resolve_at(reference, &endpoint, auth).await {
                Ok(resolved) => return Ok(resolved),
                Err((error, is_not_found)) => {
                    not_found &= is_not_found;
                    let kind = if endpoint.is_mirror { "mirror " } else { "" };
                    tracing::warn!(image = %reference, endpoint = %endpoint.name(), %error, "resolve failed");
                    failures.push((format!("{kind}{}", endpoint.name()), error));
                }
            }
        }
        Err(PullError::Resolve {
            reference: reference.whole(),
            not_found: not_found && !failures.is_empty(),
            failures,
        })
    }

    /// Resolves at one endpoint. Errors are the message and whether the
    /// registry said the image does not exist.
    async fn resolve_at(
        &self,
        reference: &Reference,
        endpoint: &Endpoint,
        auth: &RegistryAuth,
    ) -> Result<Resolved, (String, bool)> {
        let client = Arc::new(RegistryClient::new(
            endpoint,
            reference.repository(),
            auth,
            self.timeouts,
        )?);
        // The digest pins the content; the tag is only recorded.
        let top_reference = reference.digest().or(reference.tag()).unwrap_or("latest");
        let (top_bytes, top_digest) =
            fetch_manifest(&client, top_reference, reference.digest()).await?;

        let (manifest_bytes, manifest_digest) = match parse_manifest(&top_bytes)? {
            OciManifest::Image(_) => (top_bytes.clone(), top_digest.clone()),
            OciManifest::ImageIndex(index) => {
                let entry = self.platform.select(&index.manifests).ok_or_else(|| {
                    (
                        format!(
                            "no image for linux/{} in index {top_digest}",
                            self.platform.architecture
                        ),
                        false,
                    )
                })?;
                if entry.size < 0 || entry.size as u64 > MAX_MANIFEST_BYTES {
                    return Err((
                        format!(
                            "manifest {} in index {top_digest} declares {} bytes; the cap is {MAX_MANIFEST_BYTES}",
                            entry.digest, entry.size
                        ),
                        false,
                    ));
                }
                fetch_manifest(&client, &entry.digest, Some(&entry.digest)).await?
            }
        };
        let OciManifest::Image(manifest) = parse_manifest(&manifest_bytes)? else {
            return Err((
                format!("{manifest_digest} is an index inside an index"),
                false,
            ));
        };

        let config_bytes = fetch_config(&client, &manifest.config).await?;
        let config = ImageConfiguration::from_reader(config_bytes.as_slice()).map_err(|err| {
            (
                format!(
                    "config {} is not an image config: {err}",
                    manifest.config.digest
                ),
                false,
            )
        })?;
        if config.rootfs().diff_ids().len() != manifest.layers.len() {
            return Err((
                format!(
                    "manifest {manifest_digest} has {} layers but its config lists {} diff ids",
                    manifest.layers.len(),
                    config.rootfs().diff_ids().len()
                ),
                false,
            ));
        }
        Ok(Resolved {
            client,
            registry: endpoint.name(),
            top_digest,
            manifest,
            manifest_digest,
            manifest_bytes,
            config_bytes,
            config,
        })
    }

    /// Fetches what is missing and records the image.
    async fn fetch(
        &self,
        reference: &Reference,
        resolved: Resolved,
    ) -> Result<ImageRecord, PullError> {
        let id = resolved.manifest.config.digest.clone();
        let diff_ids = resolved.config.rootfs().diff_ids().clone();
        let layers: Vec<LayerRecord> = resolved
            .manifest
            .layers
            .iter()
            .zip(&diff_ids)
            .map(|(descriptor, diff_id)| LayerRecord {
                blob_digest: descriptor.digest.clone(),
                diff_id: diff_id.clone(),
                media_type: descriptor.media_type.clone(),
                size: u64::try_from(descriptor.size).unwrap_or_default(),
            })
            .collect();

        let mut leased = vec![
            id.clone(),
            resolved.manifest_digest.clone(),
            resolved.top_digest.clone(),
        ];
        for layer in &layers {
            leased.push(layer.blob_digest.clone());
            leased.push(layer.diff_id.clone());
        }
        let lease = self.store.lease(leased);

        // Every layer's work is awaited, even after one fails, so nothing is
        // still writing when the failure is cleaned up below.
        let fetches = resolved
            .manifest
            .layers
            .iter()
            .zip(&layers)
            .map(|(descriptor, layer)| self.ensure_layer(reference, &resolved, descriptor, layer));
        let failure = join_all(fetches).await.into_iter().find_map(Result::err);
        if let Some(err) = failure {
            // A failed pull leaves nothing behind: content it fetched that no
            // image names (and no other pull holds) goes.
            drop(lease);
            if let Err(cleanup) = self.store.discard_unreferenced() {
                tracing::warn!(image = %reference, error = %cleanup, "cleanup after failed pull");
            }
            return Err(err);
        }

        self.store
            .write_blob(&resolved.manifest_digest, &resolved.manifest_bytes)?;
        self.store.write_blob(&id, &resolved.config_bytes)?;

        let config_size = u64::try_from(resolved.manifest.config.size).unwrap_or_default();
        let record = ImageRecord {
            id,
            repo_tags: Vec::new(),
            repo_digests: Vec::new(),
            size: config_size + layers.iter().map(|layer| layer.size).sum::<u64>(),
            manifest_digest: resolved.manifest_digest.clone(),
            layers,
            user: resolved
                .config
                .config()
                .as_ref()
                .and_then(|config| config.user().clone())
                .unwrap_or_default(),
            pinned: false,
            checkpoint_of: crate::store::checkpoint_of(resolved.manifest.annotations.as_ref()),
        };
        // `name:tag@digest` pins the digest; the tag may name other content
        // in the registry, so it is not recorded (as containerd does).
        let repo_tag = match reference.digest() {
            Some(_) => None,
            None => reference::repo_tag(reference),
        };
        let repo_digest = reference::repo_digest(reference, &resolved.top_digest);
        Ok(self.store.commit(record, repo_tag, Some(repo_digest))?)
    }

    /// Makes sure the layer is unpacked, sharing the work with any other
    /// pull that needs the same layer at the same time.
    async fn ensure_layer(
        &self,
        reference: &Reference,
        resolved: &Resolved,
        descriptor: &OciDescriptor,
        layer: &LayerRecord,
    ) -> Result<(), PullError> {
        if self.store.has_layer(&layer.diff_id) {
            return Ok(());
        }
        let cell = {
            let mut in_flight = self
                .in_flight
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            in_flight.entry(layer.diff_id.clone()).or_default().clone()
        };
        // If the pull doing the work fails or is dropped, a waiter takes over.
        let result = cell
            .get_or_try_init(|| async {
                // Taken by the pull doing the work only: waiters hold none.
                let _slot = self.layer_slots.acquire().await;
                if self.store.has_layer(&layer.diff_id) {
                    return Ok(());
                }
                // A blob an earlier version of the store kept is used as is.
                let stored = self.store.blob_path(&descriptor.digest)?;
                if stored.is_file() {
                    return self.unpack(reference, stored, layer).await;
                }
                self.stream_layer(reference, resolved, descriptor, layer)
                    .await
            })
            .await
            .map(|_| ());
        if result.is_ok() {
            let mut in_flight = self
                .in_flight
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            in_flight.remove(&layer.diff_id);
        }
        result
    }

    /// Downloads a layer and unpacks it as it arrives (see the module doc),
    /// checking size and digest of what came and the diff id of what was
    /// unpacked before installing the layer.
    async fn stream_layer(
        &self,
        reference: &Reference,
        resolved: &Resolved,
        descriptor: &OciDescriptor,
        layer: &LayerRecord,
    ) -> Result<(), PullError> {
        let fetch_error = |message: String| PullError::Fetch {
            reference: reference.whole(),
            registry: resolved.registry.clone(),
            digest: descriptor.digest.clone(),
            message,
        };
        let started = Instant::now();
        let declared = declared_size(descriptor).map_err(fetch_error)?;
        let (chunks, received_chunks) = mpsc::channel(CHUNKS_IN_FLIGHT);
        let feed = async {
            let stream = self.open_blob(resolved, descriptor, declared).await;
            match download_into(stream, descriptor, declared, chunks).await {
                Err(message) => Err(fetch_error(message)),
                Ok(Download::Stopped) => Ok(false),
                Ok(Download::Complete { received }) => {
                    if received != declared {
                        return Err(fetch_error(format!(
                            "size mismatch: expected {declared} bytes, received {received}"
                        )));
                    }
                    Ok(true)
                }
            }
        };
        let blob = ChunkReader::new(received_chunks);
        self.unpack_and_install(reference, layer, blob, feed)
            .await?;
        tracing::info!(
            image = %reference,
            blob = %descriptor.digest,
            bytes = declared,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "layer downloaded and unpacked"
        );
        Ok(())
    }

    /// Opens a layer blob's body: over several connections when it is large
    /// and the registry serves ranges, else one plain GET.
    async fn open_blob(
        &self,
        resolved: &Resolved,
        descriptor: &OciDescriptor,
        declared: u64,
    ) -> Result<ByteStream, String> {
        let client = &resolved.client;
        let digest = &descriptor.digest;
        let settings = self.ranged;
        if declared < settings.threshold.max(1) || declared <= settings.chunk {
            return Ok(Box::pin(client.blob(digest).await.map_err(|(err, _)| err)?));
        }
        // More connections only when the daemon's budget has them now; a
        // layer that gets none still uses ranges for resuming.
        let mut permits = Vec::new();
        while permits.len() + 1 < settings.connections {
            match self.extra_connections.clone().try_acquire_owned() {
                Ok(permit) => permits.push(permit),
                Err(_) => break,
            }
        }
        let first = 0..settings.chunk;
        let (target, first) = match client
            .blob_ranged(digest, first, declared)
            .await
            .map_err(|(err, _)| err)?
        {
            BlobBody::Whole(stream) => return Ok(stream),
            BlobBody::Ranged { target, first } => (target, first),
        };
        let connections = permits.len() + 1;
        tracing::debug!(blob = %digest, bytes = declared, connections, "ranged download");
        let fetch: ranged::FetchRange = {
            let client = client.clone();
            let digest = digest.clone();
            Arc::new(move |range| {
                let client = client.clone();
                let target = target.clone();
                let digest = digest.clone();
                Box::pin(async move { client.blob_range(&target, &digest, range, declared).await })
            })
        };
        Ok(ranged::download(
            declared,
            settings,
            connections,
            first,
            fetch,
            permits,
        ))
    }

    /// Unpacks a stored blob into its layer directory, checking the diff id.
    async fn unpack(
        &self,
        reference: &Reference,
        blob: PathBuf,
        layer: &LayerRecord,
    ) -> Result<(), PullError> {
        let file = std::fs::File::open(&blob).map_err(|err| PullError::Unpack {
            reference: reference.whole(),
            digest: layer.blob_digest.clone(),
            message: format!("opening layer blob {}: {err}", blob.display()),
        })?;
        self.unpack_and_install(reference, layer, file, async { Ok(true) })
            .await
    }

    /// Unpacks the compressed layer read from `blob` into a staging dir (a
    /// blocking task) while `feed` supplies it, and installs the layer once
    /// `feed` has checked what it supplied (true; false: it stopped because
    /// the unpacker stopped reading) and the diff id matches.
    async fn unpack_and_install(
        &self,
        reference: &Reference,
        layer: &LayerRecord,
        blob: impl Read + Send + 'static,
        feed: impl std::future::Future<Output = Result<bool, PullError>>,
    ) -> Result<(), PullError> {
        let unpack_error = |message: String| PullError::Unpack {
            reference: reference.whole(),
            digest: layer.blob_digest.clone(),
            message,
        };
        let compression = Compression::from_media_type(&layer.media_type)
            .map_err(|err| unpack_error(err.to_string()))?;
        let target = self.store.layer_path(&layer.diff_id)?;
        let work = self.store.temp_dir()?;
        let staging = work.path().join("layer");
        std::fs::create_dir(&staging).map_err(|err| unpack_error(err.to_string()))?;
        let unpack_into = staging.clone();
        let name = PathBuf::from(&layer.blob_digest);
        // Unpacking is blocking file I/O: off the async workers.
        let unpacking = tokio::task::spawn_blocking(move || {
            unpack::unpack_stream(blob, compression, &unpack_into, &name)
        });
        let fed = feed.await;
        let unpacked = unpacking
            .await
            .map_err(|err| unpack_error(format!("unpack task failed: {err}")));
        // A failed feed also fails the unpack (its stream ends early): the
        // feed's error is the cause. An unpack that stopped reading ends
        // the feed early: then the unpack's error is.
        if !fed? {
            unpacked?.map_err(|err| unpack_error(err.to_string()))?;
            return Err(unpack_error("the unpacker stopped reading".to_string()));
        }
        let unpacked = unpacked?.map_err(|err| unpack_error(err.to_string()))?;
        check_diff_id(&unpacked, layer).map_err(unpack_error)?;
        self.store.install(&staging, &target)?;
        Ok(())
    }
}

/// Compressed chunks buffered between a layer's download and its unpacker
/// (a chunk is what one read of the connection returned, a few KiB).
const CHUNKS_IN_FLIGHT: usize = 64;

/// How a layer's download ended.
enum Download {
    /// The registry sent it all, and it matched its digest: its size.
    Complete { received: u64 },
    /// The unpacker stopped taking chunks (its error says why).
    Stopped,
}

/// Streams a blob's body into `chunks`, cutting it off past its declared
/// size; errors are messages for [`PullError::Fetch`].
///
/// The digest is checked here, on the chunks as they pass; whoever
/// consumes them installs nothing until this returns
/// [`Download::Complete`].
async fn download_into(
    stream: Result<ByteStream, String>,
    descriptor: &OciDescriptor,
    declared: u64,
    chunks: mpsc::Sender<bytes::Bytes>,
) -> Result<Download, String> {
    let mut stream = stream?;
    let mut received: u64 = 0;
    let mut hasher = Sha256::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        received += chunk.len() as u64;
        hasher.update(&chunk);
        // Cut off before passing it on: an endless blob never fills the disk.
        if received > declared {
            return Err(format!(
                "the registry sent more than the declared size of {declared} bytes"
            ));
        }
        if chunks.send(chunk).await.is_err() {
            return Ok(Download::Stopped);
        }
    }
    let digest = format!("sha256:{}", hex::encode(hasher.finalize()));
    if received == declared && digest != descriptor.digest {
        return Err(format!(
            "digest mismatch: the registry sent content with digest {digest}"
        ));
    }
    Ok(Download::Complete { received })
}

/// The unpacked layer's digest must be the diff id the image config names.
fn check_diff_id(unpacked: &unpack::UnpackedLayer, layer: &LayerRecord) -> Result<(), String> {
    if unpacked.diff_id == layer.diff_id {
        return Ok(());
    }
    Err(format!(
        "uncompressed digest {} does not match diff id {} in the image config",
        unpacked.diff_id, layer.diff_id
    ))
}

/// The chunks of a download as a blocking reader, for the unpacker: the
/// end of the channel (the download finished or failed) is the end of the
/// stream.
struct ChunkReader {
    chunks: mpsc::Receiver<bytes::Bytes>,
    current: bytes::Bytes,
}

impl ChunkReader {
    fn new(chunks: mpsc::Receiver<bytes::Bytes>) -> Self {
        Self {
            chunks,
            current: bytes::Bytes::new(),
        }
    }
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// A descriptor's size; negative is a broken descriptor.
fn declared_size(descriptor: &OciDescriptor) -> Result<u64, String> {
    u64::try_from(descriptor.size).map_err(|_| {
        format!(
            "descriptor of {} declares a negative size ({})",
            descriptor.digest, descriptor.size
        )
    })
}

/// Fetches an image config, refusing one larger than its descriptor says
/// or than [`MAX_CONFIG_BYTES`], and checks its digest.
async fn fetch_config(
    client: &RegistryClient,
    descriptor: &OciDescriptor,
) -> Result<Vec<u8>, (String, bool)> {
    let fail = |message: String| (format!("config {}: {message}", descriptor.digest), false);
    let declared = declared_size(descriptor).map_err(|err| (err, false))?;
    if declared > MAX_CONFIG_BYTES {
        return Err(fail(format!(
            "declares {declared} bytes; the cap for an image config is {MAX_CONFIG_BYTES}"
        )));
    }
    let stream = client
        .blob(&descriptor.digest)
        .await
        .map_err(|(err, not_found)| (fail(err).0, not_found))?;
    let mut stream = std::pin::pin!(stream);
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(fail)?;
        if (bytes.len() + chunk.len()) as u64 > declared {
            return Err(fail(format!(
                "the registry sent more than the declared size of {declared} bytes"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
    if digest != descriptor.digest {
        return Err(fail(format!(
            "digest mismatch: the registry sent content with digest {digest}"
        )));
    }
    Ok(bytes)
}

/// Fetches a manifest (capped at [`MAX_MANIFEST_BYTES`] before and while
/// it is read) and checks its digest when one was asked for.
async fn fetch_manifest(
    client: &RegistryClient,
    reference: &str,
    expected_digest: Option<&str>,
) -> Result<(Vec<u8>, String), (String, bool)> {
    let bytes = client
        .manifest(reference, &ACCEPTED_MANIFESTS, MAX_MANIFEST_BYTES)
        .await?;
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
    if let Some(expected) = expected_digest {
        if expected != digest {
            return Err((
                format!("manifest digest mismatch: asked for {expected}, got content with digest {digest}"),
                false,
            ));
        }
    }
    Ok((bytes, digest))
}

fn parse_manifest(bytes: &[u8]) -> Result<OciManifest, (String, bool)> {
    serde_json::from_slice(bytes).map_err(|err| (format!("unsupported manifest: {err}"), false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_errors_name_every_endpoint() {
        let err = PullError::Resolve {
            reference: "docker.io/library/busybox:latest".into(),
            failures: vec![
                ("mirror localhost:5000".into(), "connection refused".into()),
                ("mirror m.example".into(), "401".into()),
            ],
            not_found: false,
        };
        let text = err.to_string();
        assert!(text.contains("docker.io/library/busybox:latest"), "{text}");
        assert!(
            text.contains("mirror localhost:5000: connection refused"),
            "{text}"
        );
        assert!(text.contains("mirror m.example: 401"), "{text}");
    }
}
