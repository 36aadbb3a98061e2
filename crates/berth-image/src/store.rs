//! The image store on disk:
//!
//! ```text
//! <root>/index.json               image records: id, repo tags, repo digests, layers
//! <root>/blobs/sha256/<hex>       manifests, configs and layer blobs, by digest
//! <root>/layers/<diff-id hex>/    each layer unpacked once, an overlayfs lower dir
//! <root>/tmp/                     downloads and unpacks in progress
//! ```
//!
//! Everything appears atomically: blobs and layers are made in `tmp/` and
//! renamed into place, and the index is replaced by rename. An image is in
//! the index only once every blob and layer it names is in place, so a crash
//! mid-pull never shows a half image; the next start empties `tmp/` and
//! removes blobs and layers no image names.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::reference;

/// Errors of the store's own I/O.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("image store I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("image index {path} is corrupt: {message}")]
    CorruptIndex { path: PathBuf, message: String },
    #[error("{what} {digest:?} is not a sha256 digest")]
    BadDigest { what: &'static str, digest: String },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One image, as kept in the index and reported by ImageStatus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// The config digest: what CRI calls the image id.
    pub id: String,
    pub repo_tags: Vec<String>,
    pub repo_digests: Vec<String>,
    /// Bytes of the config and layer blobs, as the registry serves them.
    pub size: u64,
    /// The platform manifest the layers come from.
    pub manifest_digest: String,
    pub layers: Vec<LayerRecord>,
    /// `config.User` of the image config (`1000`, `www-data:staff`, ...).
    pub user: String,
    pub pinned: bool,
    /// For a checkpoint image (its manifest carries
    /// [`CHECKPOINT_ANNOTATION`]): the container it was made from. Kept
    /// here so that CreateContainer need not read the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_of: Option<String>,
}

/// The annotation a checkpoint image's manifest carries, naming the
/// container it was made from: CRI-O's, which `checkpointctl build` and
/// buildah set.
pub const CHECKPOINT_ANNOTATION: &str = "io.kubernetes.cri-o.annotations.checkpoint.name";

/// The checkpoint annotation's value among a manifest's annotations.
pub fn checkpoint_of(annotations: Option<&BTreeMap<String, String>>) -> Option<String> {
    annotations?.get(CHECKPOINT_ANNOTATION).cloned()
}

/// One layer of an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRecord {
    /// Digest of the blob as stored in the registry (maybe compressed).
    pub blob_digest: String,
    /// Digest of the uncompressed tar: names the unpacked directory.
    pub diff_id: String,
    pub media_type: String,
    pub size: u64,
}

/// The index's format. 1: records say whether the image is a checkpoint
/// (`checkpoint_of`); an index without a version (0) was written before,
/// and is upgraded once when the store opens.
const INDEX_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct ImageIndex {
    #[serde(default)]
    version: u32,
    /// Records by image id.
    images: BTreeMap<String, ImageRecord>,
}

impl Default for ImageIndex {
    fn default() -> Self {
        Self {
            version: INDEX_VERSION,
            images: BTreeMap::new(),
        }
    }
}

/// The store. Cheap to share: wrap it in an `Arc`.
#[derive(Debug)]
pub struct ImageStore {
    root: PathBuf,
    index: Mutex<ImageIndex>,
    /// Blobs and layers that pulls in progress rely on, with a count per
    /// pull: garbage collection leaves them alone.
    leases: Arc<Mutex<HashMap<String, usize>>>,
    /// Counts changes to what the store holds (see [`ImageStore::changes`]).
    changes: AtomicU64,
}

impl ImageStore {
    /// Opens (creating if needed) the store at `root`, empties `tmp/` and
    /// removes whatever a crash left that no image names.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        for dir in [
            root.to_path_buf(),
            root.join("blobs/sha256"),
            root.join("layers"),
        ] {
            std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
        }
        // Unpacked layers keep their setuid binaries and their modes: other
        // host users must not reach them (as containerd's 0700 snapshots).
        for dir in [root.to_path_buf(), root.join("layers")] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io_error(&dir))?;
        }
        let tmp = root.join("tmp");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(io_error(&tmp))?;
        }
        std::fs::create_dir_all(&tmp).map_err(io_error(&tmp))?;
        // Each layer is unpacked in its own dir under tmp/: spread them
        // over the filesystem's block groups (see topdir).
        if let Err(err) = crate::topdir::mark(&tmp) {
            tracing::warn!(dir = %tmp.display(), %err, "cannot mark the layer staging dir as a top dir");
        }

        let index_path = root.join("index.json");
        let index = match std::fs::read(&index_path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|err| StoreError::CorruptIndex {
                    path: index_path.clone(),
                    message: err.to_string(),
                })?
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => ImageIndex::default(),
            Err(source) => {
                return Err(StoreError::Io {
                    path: index_path,
                    source,
                })
            }
        };
        let store = Self {
            root: root.to_path_buf(),
            index: Mutex::new(index),
            leases: Arc::default(),
            changes: AtomicU64::new(0),
        };
        let mut index = store.lock_index();
        if index.version < INDEX_VERSION {
            store.upgrade(&mut index);
        }
        store.collect_garbage(&index)?;
        drop(index);
        Ok(store)
    }

    /// Brings an index written by an older berth to [`INDEX_VERSION`]:
    /// reads each image's manifest once for the checkpoint annotation.
    /// A manifest that cannot be read marks no checkpoint (pull and import
    /// keep every manifest); an index that cannot be written is upgraded
    /// in memory and again at the next start.
    fn upgrade(&self, index: &mut ImageIndex) {
        for record in index.images.values_mut() {
            record.checkpoint_of = self.manifest_checkpoint_of(&record.manifest_digest);
        }
        index.version = INDEX_VERSION;
        if let Err(err) = self.persist(index) {
            tracing::warn!(%err, "writing the upgraded image index");
        }
    }

    fn manifest_checkpoint_of(&self, manifest_digest: &str) -> Option<String> {
        #[derive(Deserialize)]
        struct Annotated {
            annotations: Option<BTreeMap<String, String>>,
        }
        let bytes = std::fs::read(self.blob_path(manifest_digest).ok()?).ok()?;
        let manifest: Annotated = serde_json::from_slice(&bytes).ok()?;
        checkpoint_of(manifest.annotations.as_ref())
    }

    /// A number that moves whenever a blob, a layer or the index is
    /// written or removed: whoever measured the store can tell whether it
    /// must measure again (ImageFsInfo).
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lock_index(&self) -> MutexGuard<'_, ImageIndex> {
        // A panic while holding the lock cannot leave the map half-updated
        // (each change is one insert/remove), so a poisoned lock is usable.
        self.index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Where the blob `digest` is kept.
    pub fn blob_path(&self, digest: &str) -> Result<PathBuf, StoreError> {
        let hex = sha256_hex(digest, "blob digest")?;
        Ok(self.root.join("blobs/sha256").join(hex))
    }

    /// The unpacked directory of the layer whose diff id is `diff_id`.
    pub fn layer_path(&self, diff_id: &str) -> Result<PathBuf, StoreError> {
        let hex = sha256_hex(diff_id, "layer diff id")?;
        Ok(self.root.join("layers").join(hex))
    }

    pub fn has_blob(&self, digest: &str) -> bool {
        self.blob_path(digest).is_ok_and(|path| path.is_file())
    }

    pub fn has_layer(&self, diff_id: &str) -> bool {
        self.layer_path(diff_id).is_ok_and(|path| path.is_dir())
    }

    /// A fresh private directory under `tmp/`, removed when dropped.
    pub fn temp_dir(&self) -> Result<tempfile::TempDir, StoreError> {
        let tmp = self.root.join("tmp");
        tempfile::Builder::new()
            .prefix("work-")
            .tempdir_in(&tmp)
            .map_err(io_error(&tmp))
    }

    /// Stores `bytes` as blob `digest` atomically. The caller has verified
    /// the digest.
    pub fn write_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.blob_path(digest)?;
        if path.is_file() {
            return Ok(());
        }
        let tmp = self.root.join("tmp");
        let mut file = tempfile::NamedTempFile::new_in(&tmp).map_err(io_error(&tmp))?;
        file.write_all(bytes).map_err(io_error(file.path()))?;
        file.as_file().sync_all().map_err(io_error(&path))?;
        file.persist(&path).map_err(|err| StoreError::Io {
            path: path.clone(),
            source: err.error,
        })?;
        self.changed();
        Ok(())
    }

    /// Moves a finished file or directory from `tmp/` to its place.
    pub fn install(&self, from: &Path, to: &Path) -> Result<(), StoreError> {
        match std::fs::rename(from, to) {
            Ok(()) => {
                self.changed();
                Ok(())
            }
            // Another pull finished the same content first: keep theirs.
            Err(_) if to.exists() => Ok(()),
            Err(source) => Err(StoreError::Io {
                path: to.to_path_buf(),
                source,
            }),
        }
    }

    /// Marks blobs and layers as in use by a pull until the lease is dropped.
    pub fn lease(&self, keys: impl IntoIterator<Item = String>) -> Lease {
        let keys: Vec<String> = keys.into_iter().collect();
        let mut leases = lock(&self.leases);
        for key in &keys {
            *leases.entry(key.clone()).or_default() += 1;
        }
        Lease {
            keys,
            leases: self.leases.clone(),
        }
    }

    /// Records a pulled image: adds it (or merges its names into the
    /// existing record) and moves `repo_tag` away from any image that had it.
    pub fn commit(
        &self,
        mut record: ImageRecord,
        repo_tag: Option<String>,
        repo_digest: Option<String>,
    ) -> Result<ImageRecord, StoreError> {
        let mut index = self.lock_index();
        if let Some(tag) = &repo_tag {
            for other in index.images.values_mut() {
                other.repo_tags.retain(|existing| existing != tag);
            }
        }
        if let Some(existing) = index.images.get(&record.id) {
            record.repo_tags = existing.repo_tags.clone();
            record.repo_digests = existing.repo_digests.clone();
            record.pinned |= existing.pinned;
        }
        if let Some(tag) = repo_tag {
            push_unique(&mut record.repo_tags, tag);
        }
        if let Some(digest) = repo_digest {
            push_unique(&mut record.repo_digests, digest);
        }
        index.images.insert(record.id.clone(), record.clone());
        self.persist(&index)?;
        Ok(record)
    }

    /// The image `name` refers to: an image id (`sha256:<hex>` or the bare
    /// hex), a repo tag or a repo digest, in any form `reference::parse`
    /// normalizes (`busybox` finds `docker.io/library/busybox:latest`).
    pub fn resolve(&self, name: &str) -> Option<ImageRecord> {
        let index = self.lock_index();
        find(&index, name).cloned()
    }

    /// All images, in id order.
    pub fn list(&self) -> Vec<ImageRecord> {
        self.lock_index().images.values().cloned().collect()
    }

    /// Removes the image `name` refers to, with all its tags and digests,
    /// then the blobs and layers no other image uses. Returns the removed
    /// record, or `None` when no image matched.
    pub fn remove(&self, name: &str) -> Result<Option<ImageRecord>, StoreError> {
        let mut index = self.lock_index();
        let Some(id) = find(&index, name).map(|record| record.id.clone()) else {
            return Ok(None);
        };
        let removed = index.images.remove(&id);
        self.persist(&index)?;
        self.collect_garbage(&index)?;
        Ok(removed)
    }

    /// Removes blobs and layers no image names and no pull holds, e.g. what
    /// a failed pull fetched before it failed.
    pub fn discard_unreferenced(&self) -> Result<(), StoreError> {
        let index = self.lock_index();
        self.collect_garbage(&index)
    }

    /// Writes the index atomically: temp file, fsync, rename.
    fn persist(&self, index: &ImageIndex) -> Result<(), StoreError> {
        let path = self.root.join("index.json");
        let bytes = serde_json::to_vec_pretty(index).map_err(|err| StoreError::CorruptIndex {
            path: path.clone(),
            message: err.to_string(),
        })?;
        let mut file = tempfile::NamedTempFile::new_in(&self.root).map_err(io_error(&self.root))?;
        file.write_all(&bytes).map_err(io_error(&path))?;
        file.as_file().sync_all().map_err(io_error(&path))?;
        file.persist(&path).map_err(|err| StoreError::Io {
            path: path.clone(),
            source: err.error,
        })?;
        self.changed();
        Ok(())
    }

    /// Removes blobs and layers that no image names and no pull holds.
    fn collect_garbage(&self, index: &ImageIndex) -> Result<(), StoreError> {
        let removed = self.remove_unreferenced(index);
        // Counted even after a failure: some of it may be gone.
        self.changed();
        removed
    }

    fn remove_unreferenced(&self, index: &ImageIndex) -> Result<(), StoreError> {
        let mut keep: std::collections::HashSet<String> =
            lock(&self.leases).keys().cloned().collect();
        for record in index.images.values() {
            keep.insert(record.id.clone());
            keep.insert(record.manifest_digest.clone());
            for digest in &record.repo_digests {
                if let Some((_, digest)) = digest.rsplit_once('@') {
                    keep.insert(digest.to_string());
                }
            }
            for layer in &record.layers {
                keep.insert(layer.blob_digest.clone());
                keep.insert(layer.diff_id.clone());
            }
        }
        let blobs = self.root.join("blobs/sha256");
        for entry in std::fs::read_dir(&blobs).map_err(io_error(&blobs))? {
            let entry = entry.map_err(io_error(&blobs))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !keep.contains(&format!("sha256:{name}")) {
                remove_path(&entry.path())?;
            }
        }
        let layers = self.root.join("layers");
        for entry in std::fs::read_dir(&layers).map_err(io_error(&layers))? {
            let entry = entry.map_err(io_error(&layers))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !keep.contains(&format!("sha256:{name}")) {
                tracing::debug!(layer = %name, "removing unused layer");
                remove_path(&entry.path())?;
            }
        }
        Ok(())
    }
}

/// Held by a pull for the blobs and layers it relies on.
#[derive(Debug)]
pub struct Lease {
    keys: Vec<String>,
    leases: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut leases = lock(&self.leases);
        for key in &self.keys {
            if let Some(count) = leases.get_mut(key) {
                *count -= 1;
                if *count == 0 {
                    leases.remove(key);
                }
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn find<'a>(index: &'a ImageIndex, name: &str) -> Option<&'a ImageRecord> {
    let as_id = if reference::is_sha256_hex(name) {
        format!("sha256:{name}")
    } else {
        name.to_string()
    };
    if let Some(record) = index.images.get(&as_id) {
        return Some(record);
    }
    // Normalize what the client wrote as kept in the index.
    let parsed = reference::parse(name).ok()?;
    let wanted_digest = parsed
        .digest()
        .map(|digest| reference::repo_digest(&parsed, digest));
    let wanted_tag = reference::repo_tag(&parsed);
    index.images.values().find(|record| match &wanted_digest {
        // `name:tag@digest` is found by its digest, as containerd does.
        Some(digest) => record.repo_digests.contains(digest),
        None => wanted_tag
            .as_ref()
            .is_some_and(|tag| record.repo_tags.contains(tag)),
    })
}

fn push_unique(names: &mut Vec<String>, name: String) {
    if !names.contains(&name) {
        names.push(name);
    }
}

fn sha256_hex<'a>(digest: &'a str, what: &'static str) -> Result<&'a str, StoreError> {
    match digest.strip_prefix("sha256:") {
        Some(hex) if reference::is_sha256_hex(hex) => Ok(hex),
        _ => Err(StoreError::BadDigest {
            what,
            digest: digest.to_string(),
        }),
    }
}

fn remove_path(path: &Path) -> Result<(), StoreError> {
    let result = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    };
    result.map_err(io_error(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(n: u8) -> String {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
    }

    fn record(id: u8, layers: &[u8]) -> ImageRecord {
        ImageRecord {
            id: digest(id),
            repo_tags: vec![],
            repo_digests: vec![],
            size: 10,
            manifest_digest: digest(id + 100),
            layers: layers
                .iter()
                .map(|n| LayerRecord {
                    blob_digest: digest(*n),
                    diff_id: digest(*n + 50),
                    media_type: "application/vnd.oci.image.layer.v1.tar".into(),
                    size: 5,
                })
                .collect(),
            user: String::new(),
            pinned: false,
            checkpoint_of: None,
        }
    }

    fn add_layer_files(store: &ImageStore, layers: &[u8]) {
        for n in layers {
            store.write_blob(&digest(*n), b"blob").unwrap();
            std::fs::create_dir_all(store.layer_path(&digest(*n + 50)).unwrap()).unwrap();
        }
    }

    #[test]
    fn the_store_and_its_layers_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("images");
        std::fs::create_dir_all(root.join("layers")).unwrap();
        std::fs::set_permissions(root.join("layers"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        ImageStore::open(&root).unwrap();
        for path in [root.clone(), root.join("layers")] {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o700, "{}", path.display());
        }
    }

    #[test]
    fn every_change_to_the_content_moves_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::open(dir.path()).unwrap();
        let mut last = store.changes();
        let mut moved = |what: &str| {
            let now = store.changes();
            assert!(now > last, "{what} did not move the count");
            last = now;
        };
        store.write_blob(&digest(9), b"{}").unwrap();
        moved("write_blob");
        let staged = store.temp_dir().unwrap().keep();
        store
            .install(&staged, &store.layer_path(&digest(51)).unwrap())
            .unwrap();
        moved("install");
        store
            .commit(record(1, &[1]), None, Some("example.com/app@x".into()))
            .unwrap();
        moved("commit");
        store.remove(&digest(1)).unwrap();
        moved("remove");
        assert_eq!(store.resolve(&digest(1)), None);
        let before = store.changes();
        let _ = store.list();
        assert_eq!(store.changes(), before, "reading moved the count");
    }

    #[test]
    fn commit_resolve_by_every_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::open(dir.path()).unwrap();
        add_layer_files(&store, &[1]);
        let committed = store
            .commit(
                record(1, &[1]),
                Some("docker.io/library/busybox:latest".into()),
                Some(format!("docker.io/library/busybox@{}", digest(200))),
            )
            .unwrap();
        for name in [
            digest(1),
            digest(1)[7..].to_string(),
            "busybox".to_string(),
            "docker.io/library/busybox:latest".to_string(),
            format!("busybox@{}", digest(200)),
            format!("busybox:other@{}", digest(200)),
        ] {
            assert_eq!(store.resolve(&name).as_ref(), Some(&committed), "{name}");
        }
        assert!(store.resolve("busybox:other").is_none());
        assert!(store.resolve("not a reference").is_none());
    }

    #[test]
    fn a_tag_moves_to_the_newer_image() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::open(dir.path()).unwrap();
        let tag = "example.com/app:v1".to_string();
        store
            .commit(
                record(1, &[]),
                Some(tag.clone()),
                Some("example.com/app@x".into()),
            )
            .unwrap();
        store
            .commit(
                record(2, &[]),
                Some(tag.clone()),
                Some("example.com/app@y".into()),
            )
            .unwrap();
        assert_eq!(store.resolve(&tag).unwrap().id, digest(2));
        assert!(store.resolve(&digest(1)).unwrap().repo_tags.is_empty());
    }

    #[test]
    fn remove_drops_all_names_and_only_unshared_content() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::open(dir.path()).unwrap();
        add_layer_files(&store, &[1, 2, 3]);
        store
            .commit(
                record(1, &[1, 2]),
                Some("a.io/x:1".into()),
                Some("a.io/x@d".into()),
            )
            .unwrap();
        store
            .commit(
                record(1, &[1, 2]),
                Some("b.io/x:2".into()),
                Some("b.io/x@d".into()),
            )
            .unwrap();
        store
            .commit(
                record(9, &[2, 3]),
                Some("a.io/y:1".into()),
                Some("a.io/y@e".into()),
            )
            .unwrap();

        let removed = store.remove("b.io/x:2").unwrap().unwrap();
        assert_eq!(removed.repo_tags, ["a.io/x:1", "b.io/x:2"]);
        assert!(store.resolve("a.io/x:1").is_none());
        assert!(!store.has_blob(&digest(1)) && !store.has_layer(&digest(51)));
        assert!(store.has_layer(&digest(52)) && store.has_layer(&digest(53)));
        assert!(store.remove("a.io/x:1").unwrap().is_none(), "already gone");
    }

    #[test]
    fn leases_protect_content_from_garbage_collection() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::open(dir.path()).unwrap();
        add_layer_files(&store, &[1, 4]);
        store
            .commit(record(1, &[1]), None, Some("a.io/x@d".into()))
            .unwrap();
        let lease = store.lease([digest(4), digest(54)]);
        store.remove(&digest(1)).unwrap();
        assert!(store.has_layer(&digest(54)), "leased layer kept");
        assert!(!store.has_layer(&digest(51)));
        drop(lease);
        store
            .commit(record(2, &[]), None, Some("a.io/z@f".into()))
            .unwrap();
        store.remove(&digest(2)).unwrap();
        assert!(!store.has_layer(&digest(54)), "collected once released");
    }

    #[test]
    fn reopen_keeps_images_and_clears_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = ImageStore::open(dir.path()).unwrap();
            add_layer_files(&store, &[1, 7]);
            store
                .commit(
                    record(1, &[1]),
                    Some("a.io/x:1".into()),
                    Some("a.io/x@d".into()),
                )
                .unwrap();
            std::fs::write(dir.path().join("tmp/half-download"), b"x").unwrap();
        }
        let store = ImageStore::open(dir.path()).unwrap();
        assert!(store.resolve("a.io/x:1").is_some());
        assert!(store.has_layer(&digest(51)));
        assert!(
            !store.has_layer(&digest(57)),
            "layer of no image removed at start"
        );
        assert!(!dir.path().join("tmp/half-download").exists());
    }

    #[test]
    fn corrupt_index_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.json"), b"{not json").unwrap();
        let err = ImageStore::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("index.json"), "{err}");
    }

    #[test]
    fn an_index_from_before_checkpoint_marks_is_upgraded_once() {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = serde_json::json!({
            "schemaVersion": 2,
            "annotations": { CHECKPOINT_ANNOTATION: "counter" },
        });
        let plain = serde_json::json!({"schemaVersion": 2, "annotations": {"org.example": "x"}});
        std::fs::create_dir_all(dir.path().join("blobs/sha256")).unwrap();
        let blob = |n: u8| {
            dir.path()
                .join("blobs/sha256")
                .join(format!("{n:02x}").repeat(32))
        };
        std::fs::write(blob(101), checkpoint.to_string()).unwrap();
        std::fs::write(blob(102), plain.to_string()).unwrap();
        // As an older berth wrote it: no version, no `checkpoint_of`.
        let mut old = serde_json::json!({"images": {
            digest(1): serde_json::to_value(record(1, &[])).unwrap(),
            digest(2): serde_json::to_value(record(2, &[])).unwrap(),
        }});
        assert!(old["images"][digest(1)].get("checkpoint_of").is_none());
        old["images"][digest(1)]["repo_tags"] = serde_json::json!(["a.io/cp:1"]);
        std::fs::write(dir.path().join("index.json"), old.to_string()).unwrap();

        let store = ImageStore::open(dir.path()).unwrap();
        let marked = store.resolve("a.io/cp:1").unwrap();
        assert_eq!(marked.checkpoint_of.as_deref(), Some("counter"));
        assert_eq!(store.resolve(&digest(2)).unwrap().checkpoint_of, None);
        let written: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("index.json")).unwrap()).unwrap();
        assert_eq!(written["version"], INDEX_VERSION);
        drop(store);

        // Upgraded once: the next start takes the record's word.
        std::fs::write(blob(101), plain.to_string()).unwrap();
        let store = ImageStore::open(dir.path()).unwrap();
        assert_eq!(
            store.resolve("a.io/cp:1").unwrap().checkpoint_of.as_deref(),
            Some("counter")
        );
    }

    #[test]
    fn the_checkpoint_mark_comes_from_the_annotation() {
        let mut annotations = BTreeMap::new();
        assert_eq!(checkpoint_of(None), None);
        assert_eq!(checkpoint_of(Some(&annotations)), None);
        annotations.insert(CHECKPOINT_ANNOTATION.to_string(), "main".to_string());
        assert_eq!(checkpoint_of(Some(&annotations)).as_deref(), Some("main"));
    }
}
