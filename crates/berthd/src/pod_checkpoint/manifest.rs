//! The pod checkpoint's layout in the caller's directory. The file names
//! and the manifest's common fields (`version`, `sandboxId`, and per
//! container `name`, `id`, `archive`) are those the open CRI-O and
//! containerd pull requests for KEP-5823 agree on; `runtime` and
//! `runtimeHandler` and the per-archive `sha256` follow CRI-O's:
//!
//! ```text
//! checkpoint-manifest.json   Manifest (JSON), written last
//! pod-config.pb              the pod's PodSandboxConfig (protobuf)
//! containers/<sha256 of the container id>.tar
//!                            each container's checkpoint archive, the
//!                            layout CheckpointContainer writes
//! ```
//!
//! berth keeps configs as protobuf (base64 in the manifest), as its state
//! records do: their JSON form is Go's and its field names are not in the
//! generated types.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use cri_api::v1::{ContainerConfig, PodSandboxConfig};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const MANIFEST: &str = "checkpoint-manifest.json";
pub const POD_CONFIG: &str = "pod-config.pb";
pub const CONTAINERS_DIR: &str = "containers";
/// What `runtime` says of checkpoints berth made; the only ones it restores.
pub const RUNTIME: &str = "berth";
pub const VERSION: u32 = 1;

/// A manifest larger than this is no berth manifest (1024 containers'
/// configs fit many times over).
const MAX_MANIFEST: u64 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub version: u32,
    pub runtime: String,
    #[serde(rename = "runtimeHandler")]
    pub runtime_handler: String,
    #[serde(rename = "sandboxId")]
    pub sandbox_id: String,
    pub containers: Vec<ManifestContainer>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestContainer {
    /// The CRI metadata name: RestorePod matches configs by it.
    pub name: String,
    pub id: String,
    /// The archive's path in the checkpoint directory.
    pub archive: String,
    /// Its SHA-256, hex: a changed archive is refused before anything is made.
    pub sha256: String,
    /// The ContainerConfig it was created with (what a restore compares).
    #[serde(with = "crate::state_store::proto_base64")]
    pub config: ContainerConfig,
}

/// A container's archive name, as CRI-O names it.
pub fn archive_name(container_id: &str) -> String {
    format!(
        "{CONTAINERS_DIR}/{}.tar",
        hex::encode(Sha256::digest(container_id.as_bytes()))
    )
}

/// The SHA-256 of a file, hex.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Why a directory is no pod checkpoint berth can restore.
#[derive(Debug, thiserror::Error)]
#[error("{path} is not a pod checkpoint berth can restore: {reason}")]
pub struct NotACheckpoint {
    pub path: PathBuf,
    pub reason: String,
}

/// Reads and checks the manifest and the pod config of the checkpoint in
/// `dir`: berth's format and version, and each archive a plain name below
/// `containers/` holding what its checksum says.
pub fn read(dir: &Path) -> Result<(Manifest, PodSandboxConfig), NotACheckpoint> {
    let refuse = |reason: String| NotACheckpoint {
        path: dir.to_path_buf(),
        reason,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(dir.join(MANIFEST))
        .and_then(|file| file.take(MAX_MANIFEST).read_to_end(&mut bytes))
        .map_err(|err| refuse(format!("{MANIFEST}: {err}")))?;
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|err| refuse(format!("{MANIFEST}: {err}")))?;
    if manifest.runtime != RUNTIME || manifest.version != VERSION {
        return Err(refuse(format!(
            "made by runtime {:?} in format {}; berth restores its own, format {VERSION}",
            manifest.runtime, manifest.version
        )));
    }
    if manifest.containers.is_empty() {
        return Err(refuse("it holds no container".into()));
    }
    for (i, container) in manifest.containers.iter().enumerate() {
        if container.name.is_empty()
            || manifest.containers[..i]
                .iter()
                .any(|c| c.name == container.name)
        {
            return Err(refuse(format!(
                "container name {:?} is empty or twice",
                container.name
            )));
        }
        let path = archive_path(dir, &container.archive).ok_or_else(|| {
            refuse(format!(
                "archive {:?} is not a file name in {CONTAINERS_DIR}/",
                container.archive
            ))
        })?;
        let sum =
            file_sha256(&path).map_err(|err| refuse(format!("{}: {err}", container.archive)))?;
        if sum != container.sha256 {
            return Err(refuse(format!(
                "{} has changed since the checkpoint (sha256 {sum}, manifest {})",
                container.archive, container.sha256
            )));
        }
    }
    let config = std::fs::read(dir.join(POD_CONFIG))
        .map_err(|err| refuse(format!("{POD_CONFIG}: {err}")))?;
    let config = <PodSandboxConfig as prost::Message>::decode(config.as_slice())
        .map_err(|err| refuse(format!("{POD_CONFIG}: {err}")))?;
    Ok((manifest, config))
}

/// `containers/<name>` under `dir`, only for exactly that shape: no `..`,
/// no deeper path, nothing absolute.
pub fn archive_path(dir: &Path, archive: &str) -> Option<PathBuf> {
    let components: Vec<Component> = Path::new(archive).components().collect();
    match components.as_slice() {
        [Component::Normal(first), Component::Normal(name)]
            if *first == CONTAINERS_DIR && !name.is_empty() =>
        {
            Some(dir.join(archive))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archives_are_plain_names_under_containers() {
        let dir = Path::new("/ckpt");
        assert_eq!(
            archive_path(dir, "containers/ab.tar"),
            Some(PathBuf::from("/ckpt/containers/ab.tar"))
        );
        for bad in [
            "../x.tar",
            "containers/../x.tar",
            "/containers/x.tar",
            "containers/a/b.tar",
            "x.tar",
            "containers",
        ] {
            assert_eq!(archive_path(dir, bad), None, "{bad}");
        }
        let name = archive_name("c0ffee");
        assert!(name.starts_with("containers/") && name.ends_with(".tar"));
        assert!(archive_path(dir, &name).is_some());
    }

    #[test]
    fn the_manifest_keeps_the_shared_field_names() {
        let manifest = Manifest {
            version: VERSION,
            runtime: RUNTIME.into(),
            runtime_handler: String::new(),
            sandbox_id: "pod".into(),
            containers: vec![ManifestContainer {
                name: "app".into(),
                id: "c1".into(),
                archive: archive_name("c1"),
                sha256: "00".into(),
                config: ContainerConfig::default(),
            }],
        };
        let json = serde_json::to_value(&manifest).expect("json");
        for key in [
            "version",
            "runtime",
            "runtimeHandler",
            "sandboxId",
            "containers",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
        for key in ["name", "id", "archive", "sha256", "config"] {
            assert!(json["containers"][0].get(key).is_some(), "{key}");
        }
        let back: Manifest = serde_json::from_value(json).expect("back");
        assert_eq!(back, manifest);
    }
}
