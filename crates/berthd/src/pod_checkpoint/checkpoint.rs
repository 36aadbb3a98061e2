//! CheckpointPod: every check first, then each container's archive into a
//! staging directory inside `output_path`, moved into place only when all
//! are there; a failure anywhere removes everything the call wrote.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::container::store::ContainerRecord;
use crate::container::ContainerManager;
use crate::sandbox::store::SandboxState;

use super::manifest::{self, Manifest, ManifestContainer};
use super::{real_dir, refuse_options, PodCheckpointError};

/// One CheckpointPod request, as the handler passes it on.
pub struct CheckpointPod<'a> {
    pub pod_sandbox_id: &'a str,
    pub output_path: &'a str,
    pub container_ids: &'a [String],
    pub options: &'a HashMap<String, String>,
    /// How long each container's dump may take (0: the container default).
    pub timeout: Duration,
}

/// Writes the pod checkpoint into `output_path`, which must be an empty
/// directory. The containers run on.
pub async fn checkpoint(
    containers: &ContainerManager,
    request: CheckpointPod<'_>,
) -> Result<(), PodCheckpointError> {
    refuse_options(request.options)?;
    let output = real_dir("output_path", request.output_path)?;
    let mut entries = std::fs::read_dir(&output).map_err(PodCheckpointError::io(format!(
        "reading output_path {}",
        output.display()
    )))?;
    if entries.next().is_some() {
        return Err(PodCheckpointError::Invalid {
            field: "output_path".into(),
            reason: format!("{} is not empty", output.display()),
        });
    }
    let (pod, records) = selected(containers, &request).await?;
    containers
        .criu_usable()
        .await
        .map_err(|reason| PodCheckpointError::CriuUnavailable {
            what: "checkpoint",
            pod: pod.id.clone(),
            reason,
        })?;

    // A name of ours inside the caller's directory (the call must not write
    // outside it): removed whole on failure.
    let staging = output.join(format!(".berth-partial-{}", crate::clock::now_nanos()));
    let made = async {
        std::fs::create_dir(&staging).map_err(PodCheckpointError::io("making the staging dir"))?;
        write_checkpoint(containers, &pod, &records, &staging, request.timeout).await?;
        publish(&staging, &output)
    }
    .await;
    if let Err(err) = std::fs::remove_dir_all(&staging) {
        if err.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %staging.display(), %err, "removing a pod checkpoint's staging dir");
        }
    }
    match &made {
        Ok(()) => {
            tracing::info!(sandbox = %pod.id, output = %output.display(), containers = records.len(), "pod checkpointed")
        }
        Err(err) => {
            tracing::warn!(sandbox = %pod.id, %err, "pod checkpoint failed; nothing of it is left")
        }
    }
    made
}

/// The pod, ready, and the requested containers: each once, of this pod,
/// running. Nothing is dumped unless all of them are.
async fn selected(
    containers: &ContainerManager,
    request: &CheckpointPod<'_>,
) -> Result<(crate::sandbox::store::SandboxRecord, Vec<ContainerRecord>), PodCheckpointError> {
    if request.pod_sandbox_id.is_empty() {
        return Err(PodCheckpointError::Invalid {
            field: "pod_sandbox_id".into(),
            reason: "is required".into(),
        });
    }
    if request.container_ids.is_empty() {
        return Err(PodCheckpointError::Invalid {
            field: "container_ids".into(),
            reason: "must name at least one container".into(),
        });
    }
    let pod = containers
        .sandboxes
        .find(request.pod_sandbox_id)?
        .ok_or_else(|| PodCheckpointError::PodNotFound {
            id: request.pod_sandbox_id.to_string(),
        })?;
    let pod = pod.lock().await.clone();
    if pod.effective_state() != SandboxState::Ready {
        return Err(PodCheckpointError::PodNotReady { id: pod.id });
    }
    let mut records: Vec<ContainerRecord> = Vec::new();
    for (i, id) in request.container_ids.iter().enumerate() {
        let invalid = |reason: String| PodCheckpointError::Invalid {
            field: format!("container_ids[{i}]"),
            reason,
        };
        if id.is_empty() {
            return Err(invalid("is empty".into()));
        }
        let record = containers
            .get(id)
            .await
            .map_err(|source| PodCheckpointError::Container {
                context: format!("container_ids[{i}]"),
                source: Box::new(source),
            })?;
        if records.iter().any(|r| r.id == record.id) {
            return Err(invalid(format!("{id} is named twice")));
        }
        if record.sandbox_id != pod.id {
            return Err(PodCheckpointError::NotInPod {
                container: record.id,
                pod: pod.id,
                owner: record.sandbox_id,
            });
        }
        if !containers.is_running(&record).await {
            return Err(PodCheckpointError::ContainerNotRunning {
                name: container_name(&record).to_string(),
                id: record.id,
            });
        }
        records.push(record);
    }
    Ok((pod, records))
}

fn container_name(record: &ContainerRecord) -> &str {
    record
        .config
        .metadata
        .as_ref()
        .map(|m| m.name.as_str())
        .unwrap_or_default()
}

/// Each container's archive, the pod config, then the manifest, all in
/// `staging`.
async fn write_checkpoint(
    containers: &ContainerManager,
    pod: &crate::sandbox::store::SandboxRecord,
    records: &[ContainerRecord],
    staging: &Path,
    timeout: Duration,
) -> Result<(), PodCheckpointError> {
    std::fs::create_dir(staging.join(manifest::CONTAINERS_DIR))
        .map_err(PodCheckpointError::io("making the containers dir"))?;
    let mut entries = Vec::new();
    for record in records {
        let archive = manifest::archive_name(&record.id);
        let path = staging.join(&archive);
        containers
            .checkpoint(&record.id, &path, timeout)
            .await
            .map_err(|source| PodCheckpointError::Container {
                context: "pod checkpoint".into(),
                source: Box::new(source),
            })?;
        let sha256 = manifest::file_sha256(&path).map_err(PodCheckpointError::io(format!(
            "reading back {}",
            path.display()
        )))?;
        entries.push(ManifestContainer {
            name: container_name(record).to_string(),
            id: record.id.clone(),
            archive,
            sha256,
            config: record.config.clone(),
        });
    }
    let config = prost::Message::encode_to_vec(&pod.config);
    write_private(&staging.join(manifest::POD_CONFIG), &config)?;
    let manifest = Manifest {
        version: manifest::VERSION,
        runtime: manifest::RUNTIME.into(),
        runtime_handler: pod.runtime_handler.clone(),
        sandbox_id: pod.id.clone(),
        containers: entries,
    };
    let json = serde_json::to_vec_pretty(&manifest).map_err(|err| PodCheckpointError::Io {
        what: "encoding the manifest".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, err),
    })?;
    write_private(&staging.join(manifest::MANIFEST), &json)
}

/// Mode 0600: the configs may hold what the pod was given.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), PodCheckpointError> {
    berth_atomic_file::write_atomic(path, bytes, 0o600).map_err(PodCheckpointError::io(format!(
        "writing {}",
        path.display()
    )))
}

/// Moves the staged members into `output`, the manifest last (a directory
/// without it is no checkpoint); one that fails to move takes the moved
/// ones back out.
fn publish(staging: &Path, output: &Path) -> Result<(), PodCheckpointError> {
    let mut moved: Vec<PathBuf> = Vec::new();
    for name in [
        manifest::CONTAINERS_DIR,
        manifest::POD_CONFIG,
        manifest::MANIFEST,
    ] {
        let to = output.join(name);
        if let Err(err) = std::fs::rename(staging.join(name), &to) {
            for path in moved.iter().rev() {
                let _ = std::fs::remove_dir_all(path).or_else(|_| std::fs::remove_file(path));
            }
            return Err(PodCheckpointError::Io {
                what: format!("moving {name} into {}", output.display()),
                source: err,
            });
        }
        moved.push(to);
    }
    if let Ok(dir) = std::fs::File::open(output) {
        let _ = dir.sync_all();
    }
    Ok(())
}
