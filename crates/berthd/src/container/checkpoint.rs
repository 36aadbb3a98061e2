//! CheckpointContainer (KEP-2008): CRIU dumps the running container through
//! its shim, leaving it running, and berthd writes the archive
//! ([`super::checkpoint_archive`]) at the location kubelet asked for.

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_image::store::ImageStore;
use berth_shim_api::protocol::{CheckpointRequest, ErrorCode, Request, Response};

use super::checkpoint_archive::{self as archive, ContainerFacts};
use super::host::CriuUnusable;
use super::rootfs::RootfsPaths;
use super::store::ContainerRecord;
use super::{shim_answer, shim_unreachable, ContainerError, ContainerManager};

/// How long the dump may take when the request sets no timeout: CRIU
/// copies every memory page of the container.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

impl ContainerManager {
    /// CheckpointContainer: writes the archive at `location` (absolute);
    /// `timeout` 0 means [`DEFAULT_TIMEOUT`]. The container runs on, also
    /// when the checkpoint fails.
    pub async fn checkpoint(
        &self,
        id: &str,
        location: &Path,
        timeout: Duration,
    ) -> Result<(), ContainerError> {
        let record = self.get(id).await?;
        if !self.is_running(&record).await {
            return Err(ContainerError::NotRunning { id: record.id });
        }
        // kubelet makes the directory; a missing one is found before the dump.
        let parent = location.parent().unwrap_or(Path::new("/"));
        if !parent.is_dir() {
            return Err(ContainerError::CheckpointLocation {
                id: record.id,
                location: location.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{} is not a directory", parent.display()),
                ),
            });
        }
        self.criu_usable()
            .await
            .map_err(|reason| ContainerError::CheckpointUnavailable {
                id: record.id.clone(),
                reason,
            })?;
        // One work dir per call: two checkpoints of one container must not
        // share it (the shim runs their dumps one after the other). One a
        // crash leaves goes with the container's layer dir.
        let work = record
            .layer_dir
            .join(format!("checkpoint-{}", crate::clock::now_nanos()));
        let mut result = self.dump_into(&record, &work, location, timeout).await;
        // The work dir goes; CRIU's account of a failed dump stays with
        // the shim's files until the container is removed.
        if let Err(ContainerError::CheckpointFailed { message, .. }) = &mut result {
            let kept = record.shim_dir.join(archive::DUMP_LOG);
            if std::fs::copy(work.join(archive::DUMP_LOG), &kept).is_ok() {
                message.push_str(&format!(" (CRIU's log: {})", kept.display()));
            }
        }
        if let Err(err) = std::fs::remove_dir_all(&work) {
            tracing::warn!(id = %record.id, %err, "removing the checkpoint's work dir");
        }
        result
    }

    /// `criu check`, run once: its answer does not change while berthd
    /// runs. A probe that timed out tells nothing and is asked again.
    pub(crate) async fn criu_usable(&self) -> Result<(), CriuUnusable> {
        let mut cached = self.criu_check.lock().await;
        if let Some(known) = cached.as_ref() {
            return known.clone();
        }
        let answer = self.criu.check().await;
        if !matches!(answer, Err(CriuUnusable::TimedOut(_))) {
            *cached = Some(answer.clone());
        }
        answer
    }

    async fn dump_into(
        &self,
        record: &ContainerRecord,
        work: &Path,
        location: &Path,
        timeout: Duration,
    ) -> Result<(), ContainerError> {
        let io = |what: &str| {
            let what = format!("checkpointing container {}: {what}", record.id);
            move |err| ContainerError::io(what, err)
        };
        std::fs::create_dir_all(work).map_err(io("creating the work dir"))?;
        let timeout = if timeout.is_zero() {
            DEFAULT_TIMEOUT
        } else {
            timeout
        };
        let request = Request::Checkpoint(CheckpointRequest {
            images_dir: work.join(archive::CHECKPOINT_DIR),
            work_dir: work.to_path_buf(),
        });
        match self.shims.call(&record.shim_dir, request, timeout).await {
            Ok(Response::Ok) => {}
            Ok(Response::Error {
                code: ErrorCode::NotRunning,
                ..
            }) => {
                return Err(ContainerError::NotRunning {
                    id: record.id.clone(),
                })
            }
            Ok(Response::Error { message, .. }) => {
                return Err(ContainerError::CheckpointFailed {
                    id: record.id.clone(),
                    message,
                })
            }
            Ok(other) => return Err(shim_answer(record, &other)),
            // The shim is still in CRIU; it unfreezes the container when
            // the dump fails on its removed work dir.
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ContainerError::CheckpointTimedOut {
                    id: record.id.clone(),
                    after: timeout,
                })
            }
            Err(err) => return Err(shim_unreachable(record, err)),
        }
        let spec =
            std::fs::read(record.bundle.join("config.json")).map_err(io("reading config.json"))?;
        let spec_dump = archive::spec_dump(&spec).map_err(|err| {
            io("config.json")(std::io::Error::new(std::io::ErrorKind::InvalidData, err))
        })?;
        std::fs::write(work.join(archive::SPEC_DUMP), spec_dump)
            .map_err(io("writing spec.dump"))?;
        let config = archive::config_dump(&self.facts(record));
        let config = archive::to_json_file(&config).map_err(|err| {
            io("config.dump")(std::io::Error::new(std::io::ErrorKind::InvalidData, err))
        })?;
        std::fs::write(work.join(archive::CONFIG_DUMP), config)
            .map_err(io("writing config.dump"))?;

        let upper = RootfsPaths::new(&record.layer_dir, &record.bundle).upper;
        let destinations = mount_destinations(&spec);
        let changes = archive::rootfs_changes(&upper, &archive::excluded_paths(&destinations))
            .map_err(io("reading the rootfs changes"))?;
        archive::write_rootfs_diff(&upper, &changes, &work.join(archive::ROOTFS_DIFF))
            .map_err(io("writing rootfs-diff.tar"))?;
        let deleted = archive::to_json_file(&changes.deleted).map_err(|err| {
            io("deleted.files")(std::io::Error::new(std::io::ErrorKind::InvalidData, err))
        })?;
        std::fs::write(work.join(archive::DELETED_FILES), deleted)
            .map_err(io("writing deleted.files"))?;
        archive::write_archive(work, location).map_err(|source| {
            ContainerError::CheckpointLocation {
                id: record.id.clone(),
                location: location.to_path_buf(),
                source,
            }
        })?;
        tracing::info!(id = %record.id, location = %location.display(), "checkpointed");
        Ok(())
    }

    /// What `config.dump` tells about the container.
    fn facts<'a>(&self, record: &'a ContainerRecord) -> ContainerFacts<'a> {
        let name = record
            .config
            .metadata
            .as_ref()
            .map(|m| m.name.as_str())
            .unwrap_or_default();
        // A restore looks the image up by this name: a tag of the image
        // when it has one, else what the client asked for.
        let image_name = self
            .images
            .resolve(&record.image_id)
            .and_then(|image| image.repo_tags.first().cloned())
            .unwrap_or_else(|| record.image_ref.clone());
        let secs = record.created_at.div_euclid(1_000_000_000);
        let nanos = u32::try_from(record.created_at.rem_euclid(1_000_000_000)).unwrap_or(0);
        ContainerFacts {
            id: &record.id,
            name,
            image: &record.image_ref,
            image_id: &record.image_id,
            image_name,
            created: berth_shim_api::timestamp::format_unix(secs, nanos),
            checkpointed: berth_shim_api::timestamp::now(),
        }
    }
}

/// The spec's mount destinations (unreadable entries are skipped: they
/// only narrow what the diff leaves out).
fn mount_destinations(spec: &[u8]) -> Vec<String> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(spec) else {
        return Vec::new();
    };
    value["mounts"]
        .as_array()
        .map(|mounts| {
            mounts
                .iter()
                .filter_map(|m| m["destination"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The request's image, when it is a checkpoint: an archive (an absolute
/// path to a regular file, as CRI-O takes it) or a checkpoint image (one
/// layer holding an unpacked archive, its manifest annotated with
/// [`berth_image::store::CHECKPOINT_ANNOTATION`], as kubelet can name it: the image store
/// records the annotation at pull and import). Returns the
/// archive or the image's layer dir, and the image the checkpoint was
/// made from, which must be here already. Checkpoint images need
/// `allow_images`: CRIU restores the processes' credentials and seccomp
/// state from the checkpoint, so whoever can push one would choose them.
pub fn restore_source(
    image: &str,
    images: &ImageStore,
    allow_images: bool,
) -> Result<Option<(PathBuf, String)>, ContainerError> {
    let path = Path::new(image);
    let (source, config) = if path.is_absolute() && path.is_file() {
        (path.to_path_buf(), archive::read_config_dump(path)?)
    } else {
        let Some(record) = images.resolve(image) else {
            return Ok(None);
        };
        let Some(container) = record.checkpoint_of.clone() else {
            return Ok(None);
        };
        if !allow_images {
            return Err(ContainerError::CheckpointImageRefused {
                image: image.to_string(),
                container,
            });
        }
        let [layer] = record.layers.as_slice() else {
            return Err(archive::ArchiveError::not_a_checkpoint(
                Path::new(image),
                format!(
                    "a checkpoint image has one layer, this one {}",
                    record.layers.len()
                ),
            )
            .into());
        };
        let dir = images.layer_path(&layer.diff_id)?;
        let config = archive::read_config_dump_in(&dir)?;
        (dir, config)
    };
    let origin = archive::source_image(&config)
        .ok_or_else(|| {
            archive::ArchiveError::not_a_checkpoint(
                &source,
                format!("{} names no image", archive::CONFIG_DUMP),
            )
        })?
        .to_string();
    Ok(Some((source, origin)))
}

/// Unpacks the archive into `<layer_dir>/restore` (the shim restores from
/// there; it goes with the container) and applies its rootfs changes to
/// the mounted rootfs. Returns the unpacked dir. Its `config.dump` is not
/// read again: [`restore_source`] read it.
pub async fn prepare_restore(
    id: &str,
    archive_path: &Path,
    layer_dir: &Path,
    rootfs: &Path,
) -> Result<PathBuf, ContainerError> {
    let dir = layer_dir.join("restore");
    let (archive_path, rootfs, target) = (
        archive_path.to_path_buf(),
        rootfs.to_path_buf(),
        dir.clone(),
    );
    tokio::task::spawn_blocking(move || {
        // A checkpoint image's layer is unpacked already, and shared.
        let unpacked = if archive_path.is_dir() {
            archive::copy_unpacked(&archive_path, &target)?;
            archive::load_unpacked(&target, &archive_path)?
        } else {
            archive::unpack(&archive_path, &target)?
        };
        archive::apply_rootfs_changes(&unpacked, &rootfs)
    })
    .await
    .map_err(|source| ContainerError::Task {
        what: "unpacking a checkpoint",
        source,
    })??;
    tracing::info!(id, dir = %dir.display(), "checkpoint unpacked for the restore");
    Ok(dir)
}

/// `location` as the archive's path: absolute, not a directory.
pub fn archive_path(location: &str) -> Option<PathBuf> {
    let path = PathBuf::from(location);
    (path.is_absolute() && path.file_name().is_some() && !location.ends_with('/')).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::lifecycle_tests::{digest, image_record};
    use berth_image::store::ImageRecord;

    #[test]
    fn the_location_must_be_an_absolute_file_path() {
        assert_eq!(
            archive_path("/tmp/x.tar"),
            Some(PathBuf::from("/tmp/x.tar"))
        );
        assert_eq!(archive_path("x.tar"), None);
        assert_eq!(archive_path("/tmp/"), None);
        assert_eq!(archive_path("/"), None);
        assert_eq!(archive_path("/tmp/.."), None);
    }

    /// A store with one image of `layers` layers, marked a checkpoint of
    /// `checkpoint_of` as pull and import mark one, its first layer
    /// holding a `config.dump` that names busybox: as `checkpointctl build`
    /// makes a checkpoint image.
    fn store_with(dir: &Path, checkpoint_of: Option<&str>, layers: usize) -> ImageStore {
        let store = ImageStore::open(&dir.join("images")).expect("store");
        let layer = store.layer_path(&digest('d')).expect("layer path");
        std::fs::create_dir_all(layer.join("checkpoint")).expect("layer");
        std::fs::write(
            layer.join(archive::CONFIG_DUMP),
            br#"{"id":"x","name":"main","createdTime":"2026-11-26T00:00:00Z","checkpointedTime":"2026-11-26T00:00:00Z","rootfsImageName":"docker.io/library/busybox:1.36"}"#,
        )
        .expect("config.dump");
        let record = ImageRecord {
            checkpoint_of: checkpoint_of.map(String::from),
            ..image_record(&[('d', 'd'), ('e', 'e')][..layers])
        };
        store
            .commit(record, Some("localhost/counter-checkpoint:1".into()), None)
            .expect("commit");
        store
    }

    #[test]
    fn a_checkpoint_image_restores_from_its_layer_when_allowed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store_with(dir.path(), Some("main"), 1);
        let (source, image) = restore_source("localhost/counter-checkpoint:1", &store, true)
            .expect("restore source")
            .expect("a checkpoint");
        assert_eq!(source, store.layer_path(&digest('d')).expect("layer"));
        assert_eq!(image, "docker.io/library/busybox:1.36");
    }

    #[test]
    fn a_checkpoint_image_is_refused_naming_the_setting_unless_allowed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store_with(dir.path(), Some("main"), 1);
        let err =
            restore_source("localhost/counter-checkpoint:1", &store, false).expect_err("refused");
        assert!(
            matches!(err, ContainerError::CheckpointImageRefused { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("allow_checkpoint_images"), "{err}");
    }

    #[test]
    fn other_images_and_unknown_names_are_no_checkpoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store_with(dir.path(), None, 1);
        for name in [
            "localhost/counter-checkpoint:1",
            "busybox",
            "relative/path.tar",
        ] {
            assert!(
                restore_source(name, &store, true)
                    .expect("no error")
                    .is_none(),
                "{name}"
            );
        }
    }

    #[test]
    fn a_checkpoint_image_of_two_layers_is_not_a_checkpoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store_with(dir.path(), Some("main"), 2);
        let err =
            restore_source("localhost/counter-checkpoint:1", &store, true).expect_err("two layers");
        assert!(err.to_string().contains("one layer"), "{err}");
    }

    #[test]
    fn mount_destinations_come_from_the_spec() {
        let spec = br#"{"mounts":[{"destination":"/proc"},{"destination":"/etc/hosts","source":"/x"},{}]}"#;
        assert_eq!(mount_destinations(spec), ["/proc", "/etc/hosts"]);
        assert!(mount_destinations(b"nope").is_empty());
    }
}
