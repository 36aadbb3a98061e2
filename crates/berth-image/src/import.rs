//! Importing images from a tarball, for nodes without a registry: a
//! docker-archive (`docker save`, skopeo `docker-archive:`) or an OCI
//! archive (a tarred OCI image layout: skopeo `oci-archive:`, `docker save`
//! of Docker 25+, which carries both).
//!
//! The archive is read once; its regular files land in a temporary
//! directory of the store (links inside it are followed within the
//! archive only), then every image in it is stored as a pull stores one:
//! each layer unpacked and checked against the config's diff ids, the
//! config and manifest kept as blobs, and the record committed with the
//! names the archive gives. A docker-archive has no manifest: one is
//! written for it (OCI, uncompressed layers), as containerd does.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use oci_client::manifest::{
    ImageIndexEntry, OciImageIndex, OciImageManifest, IMAGE_MANIFEST_LIST_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE,
};
use oci_spec::image::ImageConfiguration;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::platform::Platform;
use crate::reference;
use crate::store::{ImageRecord, ImageStore, LayerRecord, StoreError};
use crate::unpack::{self, Compression};

/// Why an import failed; messages name the archive and the member.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{archive}: {message}")]
    Archive { archive: PathBuf, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The annotation containerd and skopeo name an OCI layout's images with.
const REF_NAME: &str = "org.opencontainers.image.ref.name";
const CONTAINERD_NAME: &str = "io.containerd.image.name";
/// Links followed in a row before the archive counts as broken.
const MAX_LINKS: usize = 16;

/// Imports every image of the archive at `path` into `store`. `name`, if
/// given, is the reference recorded for an archive holding one image
/// (needed when the archive names it with a bare tag or not at all).
pub fn import_archive(
    store: &ImageStore,
    path: &Path,
    name: Option<&str>,
    platform: &Platform,
) -> Result<Vec<ImageRecord>, ImportError> {
    let fail = |message: String| ImportError::Archive {
        archive: path.to_path_buf(),
        message,
    };
    let work = store.temp_dir()?;
    let archive = Archive::extract(path, work.path()).map_err(fail)?;
    let images = if archive.has("manifest.json") && !archive.has("index.json") {
        archive.docker_images().map_err(fail)?
    } else if archive.has("index.json") {
        archive.oci_images(platform).map_err(fail)?
    } else {
        return Err(fail(
            "neither manifest.json (docker-archive) nor index.json (OCI archive) in it".to_string(),
        ));
    };
    if images.is_empty() {
        return Err(fail("it holds no image".to_string()));
    }
    if name.is_some() && images.len() > 1 {
        return Err(fail(format!(
            "it holds {} images; a name can only be given to one",
            images.len()
        )));
    }
    let mut records = Vec::new();
    for image in images {
        let mut names = image.names.clone();
        if let Some(name) = name {
            names = vec![name.to_string()];
        }
        let record =
            store_image(store, &archive, image, &names, work.path()).map_err(|err| match err {
                StoreOr::Store(err) => ImportError::Store(err),
                StoreOr::Message(message) => fail(message),
            })?;
        records.push(record);
    }
    Ok(records)
}

enum StoreOr {
    Store(StoreError),
    Message(String),
}

impl From<StoreError> for StoreOr {
    fn from(err: StoreError) -> Self {
        StoreOr::Store(err)
    }
}

impl From<String> for StoreOr {
    fn from(message: String) -> Self {
        StoreOr::Message(message)
    }
}

/// One image found in an archive.
struct FoundImage {
    config: Vec<u8>,
    /// Member paths of the layer blobs, in order, with their media types.
    layers: Vec<(String, String)>,
    /// The manifest as stored, or None for a docker-archive.
    manifest: Option<Vec<u8>>,
    /// The container a checkpoint image was made from, by its manifest's
    /// annotation (a docker-archive has none).
    checkpoint_of: Option<String>,
    /// Names as written in the archive (`busybox:1`, full references).
    names: Vec<String>,
}

fn store_image(
    store: &ImageStore,
    archive: &Archive,
    image: FoundImage,
    names: &[String],
    work: &Path,
) -> Result<ImageRecord, StoreOr> {
    let config = ImageConfiguration::from_reader(image.config.as_slice())
        .map_err(|err| format!("image config: {err}"))?;
    let id = sha256_of(&image.config);
    let diff_ids = config.rootfs().diff_ids().clone();
    if diff_ids.len() != image.layers.len() {
        return Err(format!(
            "image {id}: {} layers but its config lists {} diff ids",
            image.layers.len(),
            diff_ids.len()
        )
        .into());
    }
    // Parse every name before storing anything.
    let mut references = Vec::new();
    for name in names {
        let parsed = reference::parse(name).map_err(|err| err.to_string())?;
        references.push(parsed);
    }
    let mut leased = vec![id.clone()];
    let mut layers = Vec::new();
    for ((member, media_type), diff_id) in image.layers.iter().zip(&diff_ids) {
        let file = archive.resolve(member)?;
        let blob_digest = sha256_of_file(&file)?;
        let size = std::fs::metadata(&file)
            .map_err(|err| format!("{member}: {err}"))?
            .len();
        let media_type = match media_type.as_str() {
            "" => sniff_media_type(&file)?,
            known => known.to_string(),
        };
        leased.push(blob_digest.clone());
        leased.push(diff_id.clone());
        layers.push(LayerRecord {
            blob_digest,
            diff_id: diff_id.clone(),
            media_type,
            size,
        });
    }
    let manifest = match image.manifest {
        Some(bytes) => bytes,
        None => synthesize_manifest(&id, image.config.len(), &layers)?,
    };
    let manifest_digest = sha256_of(&manifest);
    leased.push(manifest_digest.clone());
    let _lease = store.lease(leased);

    for (layer, (member, _)) in layers.iter().zip(&image.layers) {
        if store.has_layer(&layer.diff_id) {
            continue;
        }
        let file = archive.resolve(member)?;
        unpack_layer(store, &file, layer, work)?;
    }
    store.write_blob(&manifest_digest, &manifest)?;
    store.write_blob(&id, &image.config)?;
    let record = ImageRecord {
        id,
        repo_tags: Vec::new(),
        repo_digests: Vec::new(),
        size: image.config.len() as u64 + layers.iter().map(|layer| layer.size).sum::<u64>(),
        manifest_digest: manifest_digest.clone(),
        layers,
        user: config
            .config()
            .as_ref()
            .and_then(|config| config.user().clone())
            .unwrap_or_default(),
        pinned: false,
        checkpoint_of: image.checkpoint_of,
    };
    let mut record = store.commit(record, None, None)?;
    for reference in references {
        // A name with a digest pins that digest; only tags are recorded.
        let tag = reference::repo_tag(&reference).filter(|_| reference.digest().is_none());
        let digest = reference::repo_digest(&reference, &manifest_digest);
        record = store.commit(record, tag, Some(digest))?;
    }
    Ok(record)
}

/// Unpacks a layer file into the store, checking its diff id.
fn unpack_layer(
    store: &ImageStore,
    file: &Path,
    layer: &LayerRecord,
    work: &Path,
) -> Result<(), StoreOr> {
    let compression =
        Compression::from_media_type(&layer.media_type).map_err(|err| err.to_string())?;
    let staging = tempfile::tempdir_in(work).map_err(|err| err.to_string())?;
    let target = staging.path().join("layer");
    std::fs::create_dir(&target).map_err(|err| err.to_string())?;
    let blob = std::fs::File::open(file).map_err(|err| err.to_string())?;
    let unpacked = unpack::unpack_stream(blob, compression, &target, Path::new(&layer.blob_digest))
        .map_err(|err| format!("layer {}: {err}", layer.blob_digest))?;
    if unpacked.diff_id != layer.diff_id {
        return Err(format!(
            "layer {}: uncompressed digest {} does not match diff id {} in the image config",
            layer.blob_digest, unpacked.diff_id, layer.diff_id
        )
        .into());
    }
    let destination = store.layer_path(&layer.diff_id)?;
    store.install(&target, &destination)?;
    Ok(())
}

/// The OCI manifest a docker-archive image would have had.
fn synthesize_manifest(
    config_digest: &str,
    config_size: usize,
    layers: &[LayerRecord],
) -> Result<Vec<u8>, String> {
    let layers: Vec<_> = layers
        .iter()
        .map(|layer| {
            serde_json::json!({
                "mediaType": layer.media_type,
                "digest": layer.blob_digest,
                "size": layer.size,
            })
        })
        .collect();
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": layers,
    });
    serde_json::to_vec(&manifest).map_err(|err| err.to_string())
}

/// An OCI media type for a layer file, by its first bytes.
fn sniff_media_type(file: &Path) -> Result<String, String> {
    let mut magic = [0u8; 4];
    let mut reader = std::fs::File::open(file).map_err(|err| err.to_string())?;
    let read = reader.read(&mut magic).map_err(|err| err.to_string())?;
    let media_type = match &magic[..read] {
        [0x1f, 0x8b, ..] => "application/vnd.oci.image.layer.v1.tar+gzip",
        [0x28, 0xb5, 0x2f, 0xfd] => "application/vnd.oci.image.layer.v1.tar+zstd",
        _ => "application/vnd.oci.image.layer.v1.tar",
    };
    Ok(media_type.to_string())
}

fn sha256_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn sha256_of_file(path: &Path) -> Result<String, String> {
    let mut file = std::fs::File::open(path).map_err(|err| err.to_string())?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|err| err.to_string())?;
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// The archive's members: regular files extracted under a work dir, links
/// kept as archive paths.
struct Archive {
    files: BTreeMap<String, PathBuf>,
    links: BTreeMap<String, String>,
}

/// A docker-archive's `manifest.json` entry.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

impl Archive {
    fn extract(path: &Path, work: &Path) -> Result<Self, String> {
        let file = std::fs::File::open(path).map_err(|err| err.to_string())?;
        let mut tar = tar::Archive::new(file);
        let mut archive = Archive {
            files: BTreeMap::new(),
            links: BTreeMap::new(),
        };
        let entries = tar.entries().map_err(|err| format!("not a tar: {err}"))?;
        for (n, entry) in entries.enumerate() {
            let mut entry = entry.map_err(|err| format!("not a tar: {err}"))?;
            let raw = entry.path().map_err(|err| err.to_string())?.into_owned();
            let Some(name) = normalize(Path::new(""), &raw) else {
                return Err(format!("member {} escapes the archive", raw.display()));
            };
            let kind = entry.header().entry_type();
            if kind.is_file() {
                let target = work.join(format!("member-{n}"));
                let mut out = std::fs::File::create(&target).map_err(|err| err.to_string())?;
                std::io::copy(&mut entry, &mut out)
                    .map_err(|err| format!("reading {name}: {err}"))?;
                archive.links.remove(&name);
                archive.files.insert(name, target);
            } else if kind.is_symlink() || kind.is_hard_link() {
                let link = entry
                    .link_name()
                    .map_err(|err| err.to_string())?
                    .ok_or_else(|| format!("link {name} has no target"))?
                    .into_owned();
                // Symlinks are relative to their directory; hard links
                // name an archive path.
                let base = if kind.is_symlink() {
                    Path::new(&name)
                        .parent()
                        .unwrap_or(Path::new(""))
                        .to_path_buf()
                } else {
                    PathBuf::new()
                };
                if let Some(target) = normalize(&base, &link) {
                    archive.files.remove(&name);
                    archive.links.insert(name, target);
                }
            }
        }
        Ok(archive)
    }

    fn has(&self, name: &str) -> bool {
        self.files.contains_key(name) || self.links.contains_key(name)
    }

    /// The extracted file of a member, following links inside the archive.
    fn resolve(&self, member: &str) -> Result<PathBuf, String> {
        let mut name = normalize(Path::new(""), Path::new(member))
            .ok_or_else(|| format!("{member:?} escapes the archive"))?;
        for _ in 0..MAX_LINKS {
            if let Some(file) = self.files.get(&name) {
                return Ok(file.clone());
            }
            match self.links.get(&name) {
                Some(target) => name = target.clone(),
                None => return Err(format!("{member} is not in the archive")),
            }
        }
        Err(format!("{member}: too many links"))
    }

    fn read(&self, member: &str, cap: u64) -> Result<Vec<u8>, String> {
        let file = self.resolve(member)?;
        let size = std::fs::metadata(&file)
            .map_err(|err| err.to_string())?
            .len();
        if size > cap {
            return Err(format!("{member} is {size} bytes; the cap is {cap}"));
        }
        std::fs::read(&file).map_err(|err| format!("{member}: {err}"))
    }

    fn docker_images(&self) -> Result<Vec<FoundImage>, String> {
        let manifest = self.read("manifest.json", crate::pull::MAX_MANIFEST_BYTES)?;
        let entries: Vec<DockerEntry> =
            serde_json::from_slice(&manifest).map_err(|err| format!("manifest.json: {err}"))?;
        entries
            .into_iter()
            .map(|entry| {
                Ok(FoundImage {
                    config: self.read(&entry.config, crate::pull::MAX_CONFIG_BYTES)?,
                    // The media type is read off the file: docker save
                    // writes plain tars, others may compress.
                    layers: entry
                        .layers
                        .into_iter()
                        .map(|l| (l, String::new()))
                        .collect(),
                    manifest: None,
                    checkpoint_of: None,
                    names: entry.repo_tags.unwrap_or_default(),
                })
            })
            .collect()
    }

    fn oci_images(&self, platform: &Platform) -> Result<Vec<FoundImage>, String> {
        let index = self.read("index.json", crate::pull::MAX_MANIFEST_BYTES)?;
        let index: OciImageIndex =
            serde_json::from_slice(&index).map_err(|err| format!("index.json: {err}"))?;
        let mut images = Vec::new();
        for entry in &index.manifests {
            let names = entry_names(entry);
            let manifest = self.select_manifest(entry, platform, 0)?;
            let Some((manifest_bytes, manifest)) = manifest else {
                continue;
            };
            let config = self.read(
                &blob_member(&manifest.config.digest)?,
                crate::pull::MAX_CONFIG_BYTES,
            )?;
            if sha256_of(&config) != manifest.config.digest {
                return Err(format!(
                    "config {} does not match its digest",
                    manifest.config.digest
                ));
            }
            let mut layers = Vec::new();
            for layer in &manifest.layers {
                let member = blob_member(&layer.digest)?;
                let file = self.resolve(&member)?;
                if sha256_of_file(&file)? != layer.digest {
                    return Err(format!("layer {} does not match its digest", layer.digest));
                }
                layers.push((member, layer.media_type.clone()));
            }
            images.push(FoundImage {
                config,
                layers,
                manifest: Some(manifest_bytes),
                checkpoint_of: crate::store::checkpoint_of(manifest.annotations.as_ref()),
                names,
            });
        }
        Ok(images)
    }

    /// The image manifest an index entry leads to for `platform` (through
    /// nested indexes); None when an index has nothing for it.
    fn select_manifest(
        &self,
        entry: &ImageIndexEntry,
        platform: &Platform,
        depth: usize,
    ) -> Result<Option<(Vec<u8>, OciImageManifest)>, String> {
        if depth > 4 {
            return Err("indexes nested too deep".to_string());
        }
        let bytes = self.read(
            &blob_member(&entry.digest)?,
            crate::pull::MAX_MANIFEST_BYTES,
        )?;
        if sha256_of(&bytes) != entry.digest {
            return Err(format!("{} does not match its digest", entry.digest));
        }
        if entry.media_type == OCI_IMAGE_INDEX_MEDIA_TYPE
            || entry.media_type == IMAGE_MANIFEST_LIST_MEDIA_TYPE
        {
            let index: OciImageIndex = serde_json::from_slice(&bytes)
                .map_err(|err| format!("index {}: {err}", entry.digest))?;
            return match platform.select(&index.manifests) {
                Some(chosen) => self.select_manifest(chosen, platform, depth + 1),
                None => Ok(None),
            };
        }
        let manifest: OciImageManifest = serde_json::from_slice(&bytes)
            .map_err(|err| format!("manifest {}: {err}", entry.digest))?;
        Ok(Some((bytes, manifest)))
    }
}

/// The names an OCI index entry gives its image: containerd's annotation,
/// else `ref.name` when it is a whole reference (skopeo writes a bare tag
/// when given one; that names nothing and `--name` is needed).
fn entry_names(entry: &ImageIndexEntry) -> Vec<String> {
    let annotations = entry.annotations.clone().unwrap_or_default();
    if let Some(name) = annotations.get(CONTAINERD_NAME) {
        return vec![name.clone()];
    }
    match annotations.get(REF_NAME) {
        Some(name) if name.contains('/') || name.contains(':') => vec![name.clone()],
        _ => Vec::new(),
    }
}

/// `blobs/sha256/<hex>` of a digest.
fn blob_member(digest: &str) -> Result<String, String> {
    if !reference::is_sha256_digest(digest) {
        return Err(format!("unsupported digest {digest:?}"));
    }
    Ok(format!("blobs/sha256/{}", &digest[7..]))
}

/// `base/path` made relative and free of `.`/`..`; None if it climbs out.
fn normalize(base: &Path, path: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    for component in joined.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_paths_stay_inside_the_archive() {
        assert_eq!(
            normalize(Path::new(""), Path::new("./a/b")).as_deref(),
            Some("a/b")
        );
        assert_eq!(
            normalize(Path::new("x"), Path::new("../y/layer.tar")).as_deref(),
            Some("y/layer.tar")
        );
        assert_eq!(normalize(Path::new(""), Path::new("../etc")), None);
        assert_eq!(
            normalize(Path::new(""), Path::new("/etc/shadow")).as_deref(),
            Some("etc/shadow")
        );
    }

    #[test]
    fn bare_tags_name_nothing() {
        let entry = |key: &str, value: &str| ImageIndexEntry {
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            size: 1,
            platform: None,
            artifact_type: None,
            annotations: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        };
        assert!(entry_names(&entry(REF_NAME, "v1")).is_empty());
        assert_eq!(entry_names(&entry(REF_NAME, "busybox:v1")), ["busybox:v1"]);
        assert_eq!(
            entry_names(&entry(CONTAINERD_NAME, "docker.io/library/a:1")),
            ["docker.io/library/a:1"]
        );
    }

    /// A regular file's header, owned by root.
    fn tar_header(size: usize) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_size(size as u64);
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header
    }

    /// An OCI archive of one image named `localhost/cp:1`: one layer, its
    /// manifest carrying `annotations`.
    fn oci_archive(dir: &Path, annotations: serde_json::Value) -> PathBuf {
        let mut members: Vec<(String, Vec<u8>)> = Vec::new();
        let mut blob = |bytes: Vec<u8>| {
            let digest = sha256_of(&bytes);
            let size = bytes.len();
            members.push((blob_member(&digest).expect("digest"), bytes));
            (digest, size)
        };
        let mut layer = tar::Builder::new(Vec::new());
        let mut header = tar_header(1);
        layer
            .append_data(&mut header, "marker", &b"x"[..])
            .expect("layer entry");
        let (layer, layer_size) = blob(layer.into_inner().expect("layer tar"));
        let config = serde_json::json!({
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [layer]},
        });
        let (config, config_size) = blob(config.to_string().into_bytes());
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config,
                "size": config_size,
            },
            "layers": [{
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer,
                "size": layer_size,
            }],
            "annotations": annotations,
        });
        let (manifest, manifest_size) = blob(manifest.to_string().into_bytes());
        let index = serde_json::json!({
            "schemaVersion": 2,
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest,
                "size": manifest_size,
                "annotations": { CONTAINERD_NAME: "localhost/cp:1" },
            }],
        });
        members.push(("index.json".into(), index.to_string().into_bytes()));
        members.push((
            "oci-layout".into(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ));
        let path = dir.join("archive.tar");
        let mut tar = tar::Builder::new(std::fs::File::create(&path).expect("archive"));
        for (name, bytes) in members {
            let mut header = tar_header(bytes.len());
            tar.append_data(&mut header, name, bytes.as_slice())
                .expect("archive entry");
        }
        tar.finish().expect("archive written");
        path
    }

    #[test]
    fn an_imported_checkpoint_image_is_marked_and_another_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = ImageStore::open(&dir.path().join("images")).expect("store");
        for (annotations, expected) in [
            (
                serde_json::json!({ crate::store::CHECKPOINT_ANNOTATION: "counter" }),
                Some("counter"),
            ),
            (serde_json::json!({"org.example": "x"}), None),
        ] {
            let archive = oci_archive(dir.path(), annotations);
            let records =
                import_archive(&store, &archive, None, &Platform::host()).expect("import");
            assert_eq!(records.len(), 1);
            assert_eq!(records[0].checkpoint_of.as_deref(), expected);
            let stored = store.resolve("localhost/cp:1").expect("stored");
            assert_eq!(stored.checkpoint_of.as_deref(), expected);
        }
    }
}
